/*
 * Tests for common/wmsg.c and common/taskdesc.c: every worker message and
 * task descriptor decodes to what was encoded, and a message of the wrong
 * length or with a field out of range is refused with a reason.
 */
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include <event2/buffer.h>
#include <jansson.h>

#include "frame.h"
#include "protocol.h"
#include "suites.h"
#include "taskdesc.h"
#include "wmsg.h"

/* Encode m, check its size, decode it and compare. */
static void
wmsg_round_trip(const struct wmsg *m, size_t size)
{
	unsigned char	 buf[WMSG_MAX_SIZE + 4];
	struct wmsg	 got;
	const char	*err = NULL;

	ck_assert_uint_eq(wmsg_put(buf, m), size);
	ck_assert_uint_eq(wmsg_size(m->type), size);
	ck_assert_int_eq(be32_get(buf), m->type);
	ck_assert_int_eq(wmsg_get(buf, size, &got, &err), 0);
	ck_assert_int_eq(got.type, m->type);
	ck_assert_int_eq(got.records, m->records);
	ck_assert_int_eq(got.length, m->length);
	/* One byte less is short, one more is not at the end. */
	ck_assert_int_eq(wmsg_get(buf, size - 1, &got, &err), -1);
	ck_assert_str_eq(err, "message too short");
	ck_assert_int_eq(wmsg_get(buf, size + 1, &got, &err), -1);
	ck_assert_str_eq(err, "not at end");
}

START_TEST(test_wmsg_round_trip)
{
	struct wmsg	batch = { EMBER_RECORD_BATCH, 7, 1234 };
	struct wmsg	timing = { EMBER_TIMING_DATA, 0, EMBER_METRIC_COUNT };
	struct wmsg	error = { EMBER_EXCEPTION_THROWN, 0, 5 };
	struct wmsg	eod = { EMBER_END_OF_DATA_SECTION, 0, 0 };
	struct wmsg	eos = { EMBER_END_OF_STREAM, 0, 0 };
	struct wmsg	done = { EMBER_TASKS_DONE, 3, EMBER_METRIC_COUNT };

	wmsg_round_trip(&batch, 12);
	wmsg_round_trip(&done, 12);
	ck_assert_uint_eq(wmsg_done_entry(&done), 4 + 8 * EMBER_METRIC_COUNT);
	ck_assert_uint_eq(wmsg_payload(&done),
	    3 * (4 + 8 * EMBER_METRIC_COUNT));
	wmsg_round_trip(&timing, 8);
	wmsg_round_trip(&error, 8);
	wmsg_round_trip(&eod, 4);
	wmsg_round_trip(&eos, 4);
	ck_assert_uint_eq(wmsg_payload(&batch), 1234);
	ck_assert_uint_eq(wmsg_payload(&timing), 8 * EMBER_METRIC_COUNT);
	ck_assert_uint_eq(wmsg_payload(&error), 5);
	ck_assert_uint_eq(wmsg_payload(&eos), 0);
}
END_TEST

START_TEST(test_wmsg_names)
{
	ck_assert_str_eq(wmsg_type_name(EMBER_RECORD_BATCH), "RECORD_BATCH");
	ck_assert_str_eq(wmsg_type_name(EMBER_TIMING_DATA), "TIMING_DATA");
	ck_assert_str_eq(wmsg_type_name(EMBER_EXCEPTION_THROWN),
	    "EXCEPTION_THROWN");
	ck_assert_str_eq(wmsg_type_name(EMBER_END_OF_DATA_SECTION),
	    "END_OF_DATA_SECTION");
	ck_assert_str_eq(wmsg_type_name(EMBER_END_OF_STREAM), "END_OF_STREAM");
	ck_assert_str_eq(wmsg_type_name(EMBER_TASKS_DONE), "TASKS_DONE");
	ck_assert_str_eq(wmsg_type_name(EMBER_NULL), "unknown");
	ck_assert_str_eq(wmsg_type_name(42), "unknown");
}
END_TEST

/* Decode a header built by hand; return the error, NULL if it decoded. */
static const char *
wmsg_decode3(int32_t type, int32_t a, int32_t b, size_t len)
{
	unsigned char	 buf[12];
	struct wmsg	 m;
	const char	*err = NULL;

	be32_put(buf, type);
	be32_put(buf + 4, a);
	be32_put(buf + 8, b);
	if (wmsg_get(buf, len, &m, &err) == 0)
		return (NULL);
	return (err);
}

START_TEST(test_wmsg_refused)
{
	ck_assert_ptr_null(wmsg_decode3(EMBER_RECORD_BATCH, 0, 0, 12));
	ck_assert_str_eq(wmsg_decode3(EMBER_RECORD_BATCH, -1, 0, 12),
	    "bad record batch");
	ck_assert_str_eq(wmsg_decode3(EMBER_RECORD_BATCH, 1, -1, 12),
	    "bad record batch");
	ck_assert_str_eq(wmsg_decode3(EMBER_RECORD_BATCH, 1,
	    EMBER_MAX_BATCH + 1, 12), "bad record batch");
	ck_assert_ptr_null(wmsg_decode3(EMBER_RECORD_BATCH, 1,
	    EMBER_MAX_BATCH, 12));
	ck_assert_str_eq(wmsg_decode3(EMBER_TIMING_DATA, -1, 0, 8),
	    "bad metrics count");
	ck_assert_str_eq(wmsg_decode3(EMBER_TIMING_DATA, WMSG_MAX_METRICS + 1,
	    0, 8), "bad metrics count");
	ck_assert_ptr_null(wmsg_decode3(EMBER_TIMING_DATA, WMSG_MAX_METRICS,
	    0, 8));
	ck_assert_str_eq(wmsg_decode3(EMBER_EXCEPTION_THROWN,
	    EMBER_MAX_ERROR_FRAME + 1, 0, 8), "bad error frame");
	ck_assert_str_eq(wmsg_decode3(EMBER_EXCEPTION_THROWN, -1, 0, 8),
	    "bad error frame");
	/* Task ends: one at least, no more than a batch holds. */
	ck_assert_ptr_null(wmsg_decode3(EMBER_TASKS_DONE, 1, 0, 12));
	ck_assert_ptr_null(wmsg_decode3(EMBER_TASKS_DONE,
	    EMBER_MAX_TASK_BATCH, WMSG_MAX_METRICS, 12));
	ck_assert_str_eq(wmsg_decode3(EMBER_TASKS_DONE, 0, 5, 12),
	    "bad task ends");
	ck_assert_str_eq(wmsg_decode3(EMBER_TASKS_DONE,
	    EMBER_MAX_TASK_BATCH + 1, 5, 12), "bad task ends");
	ck_assert_str_eq(wmsg_decode3(EMBER_TASKS_DONE, 1, -1, 12),
	    "bad task ends");
	ck_assert_str_eq(wmsg_decode3(EMBER_TASKS_DONE, 1,
	    WMSG_MAX_METRICS + 1, 12), "bad task ends");
	ck_assert_str_eq(wmsg_decode3(EMBER_NULL, 0, 0, 4), "unknown message");
	ck_assert_str_eq(wmsg_decode3(7, 0, 0, 4), "unknown message");
	ck_assert_str_eq(wmsg_decode3(EMBER_END_OF_STREAM, 0, 0, 3),
	    "message too short");
	ck_assert_str_eq(wmsg_decode3(EMBER_END_OF_STREAM, 0, 0, 0),
	    "message too short");
}
END_TEST

START_TEST(test_wmsg_metrics)
{
	const int64_t	 in[3] = { 1, -2, INT64_MAX };
	int64_t		 out[EMBER_METRIC_COUNT], small[2];
	unsigned char	 buf[3 * WMSG_METRIC_SIZE + 1];
	const char	*err;

	ck_assert_uint_eq(wmsg_put_metrics(buf, in, 3), 24);
	memset(out, 0x55, sizeof out);
	ck_assert_int_eq(wmsg_get_metrics(buf, 24, 3, out, EMBER_METRIC_COUNT,
	    &err), 0);
	ck_assert_int_eq(out[0], 1);
	ck_assert_int_eq(out[1], -2);
	ck_assert_int_eq(out[2], INT64_MAX);
	/* The ones not sent stay as they were. */
	ck_assert_int_eq(out[3], 0x5555555555555555LL);
	/* Those past what the reader knows are skipped. */
	ck_assert_int_eq(wmsg_get_metrics(buf, 24, 3, small, 2, &err), 0);
	ck_assert_int_eq(small[1], -2);
	ck_assert_int_eq(wmsg_get_metrics(buf, 23, 3, out, 5, &err), -1);
	ck_assert_str_eq(err, "message too short");
	ck_assert_int_eq(wmsg_get_metrics(buf, 25, 3, out, 5, &err), -1);
	ck_assert_str_eq(err, "not at end");
	ck_assert_int_eq(wmsg_get_metrics(buf, 0, -1, out, 5, &err), -1);
	ck_assert_str_eq(err, "bad metrics count");
}
END_TEST

/* Encode d, take the frame off and decode it into got. */
static void
taskdesc_round_trip(const struct taskdesc *d,
    const struct taskdesc_broadcast *b, size_t nb, const char *plan,
    struct taskdesc *got)
{
	struct evbuffer	*out = evbuffer_new();
	unsigned char	*data;
	size_t		 len;
	char		*err = NULL;

	taskdesc_encode(out, d, b, nb, plan);
	len = evbuffer_get_length(out);
	ck_assert_uint_ge(len, 4);
	data = evbuffer_pullup(out, -1);
	ck_assert_uint_eq((size_t)be32_get(data), len - 4);
	if (taskdesc_decode((char *)data + 4, len - 4, got, &err) != 0)
		ck_abort_msg("decode: %s", err);
	evbuffer_free(out);
	ck_assert_str_eq(got->operation, d->operation);
	ck_assert_int_eq(got->partition, d->partition);
	ck_assert_int_eq(got->partitions, d->partitions);
	ck_assert_int_eq(got->mode, d->mode);
}

START_TEST(test_taskdesc_modes)
{
	struct taskdesc	d = { .operation = "op-1", .partition = 2,
			    .partitions = 3 };
	struct taskdesc	got;
	int		mode, fn;

	for (mode = MODE_RECORDS; mode <= MODE_COUNT_BY_VALUE; mode++) {
		d.mode = (enum taskdesc_mode)mode;
		taskdesc_round_trip(&d, NULL, 0, NULL, &got);
		ck_assert_ptr_null(got.plan);
		ck_assert_uint_eq(got.nbroadcasts, 0);
		taskdesc_clear(&got);
	}
	/* A map task of a stage, and a task reading a shuffle. */
	d.mode = MODE_SHUFFLE;
	d.shuffle_dir = "0b697aef-9a9d-44bf-a3db-6f881122a3e3";
	d.shuffle_stage = 2;
	d.shuffle_buckets = 7;
	d.shuffle_memory = 1 << 20;
	d.shuffle_op_text = "{\"distinct\":{\"partitions\":7}}";
	taskdesc_round_trip(&d, NULL, 0, NULL, &got);
	ck_assert_str_eq(got.shuffle_dir, d.shuffle_dir);
	ck_assert_int_eq(got.shuffle_stage, 2);
	ck_assert_int_eq(got.shuffle_buckets, 7);
	ck_assert_int_eq(got.shuffle_memory, 1 << 20);
	ck_assert_ptr_nonnull(json_object_get(got.shuffle_op, "distinct"));
	ck_assert_int_eq(got.shuffle_dir_passed, 0);
	taskdesc_clear(&got);
	d.mode = MODE_RECORDS;
	taskdesc_round_trip(&d, NULL, 0, NULL, &got);
	ck_assert_str_eq(got.shuffle_dir, d.shuffle_dir);
	ck_assert_ptr_null(got.shuffle_op);
	/* A reduce side sorts and groups in that memory too. */
	ck_assert_int_eq(got.shuffle_memory, 1 << 20);
	taskdesc_clear(&got);
	d.shuffle_dir = NULL;

	/* A recompute: records skips its first records, only records. */
	d.mode = MODE_RECORDS;
	d.skip = 12345678901LL;
	taskdesc_round_trip(&d, NULL, 0, NULL, &got);
	ck_assert_int_eq(got.skip, 12345678901LL);
	taskdesc_clear(&got);
	d.mode = MODE_COUNT;
	taskdesc_round_trip(&d, NULL, 0, NULL, &got);
	ck_assert_int_eq(got.skip, 0);
	taskdesc_clear(&got);
	d.skip = 0;
	d.mode = MODE_REDUCE;
	for (fn = REDUCE_SUM; fn <= REDUCE_MAX; fn++) {
		d.fn = (enum reduce_fn)fn;
		taskdesc_round_trip(&d, NULL, 0, NULL, &got);
		ck_assert_int_eq(got.fn, fn);
		taskdesc_clear(&got);
	}
	/* A checkpoint task says which directory descriptors ride with it;
	 * until the worker takes them, it holds none. */
	d.mode = MODE_CHECKPOINT;
	d.ckpt_dir = "/base/1001/0b697aef-9a9d-44bf-a3db-6f881122a3e3";
	d.ckpt_dir_passed = 1;
	d.source_dir_passed = 1;
	taskdesc_round_trip(&d, NULL, 0, NULL, &got);
	ck_assert_str_eq(got.ckpt_dir, d.ckpt_dir);
	ck_assert(got.ckpt_dir_passed && got.source_dir_passed);
	ck_assert_int_eq(got.ckpt_dirfd, -1);
	ck_assert_int_eq(got.source_dirfd, -1);
	taskdesc_clear(&got);
	d.ckpt_dir_passed = d.source_dir_passed = 0;
	taskdesc_round_trip(&d, NULL, 0, NULL, &got);
	ck_assert(!got.ckpt_dir_passed && !got.source_dir_passed);
	taskdesc_clear(&got);
}
END_TEST

START_TEST(test_taskdesc_save_plan_broadcasts)
{
	struct taskdesc			d = { .operation = "op-\"2\"",
					    .partition = 0, .partitions = 1,
					    .mode = MODE_SAVE,
					    .save_dir = "/out/dir \"q\"\\",
					    .save_attempt = 7 };
	struct taskdesc_broadcast	b[2] = {
		{ 5, 1, 7, 1234, 8, 4096 },
		{ 3, 0, -1, 0, -1, 0 },
	};
	struct taskdesc			got;
	json_t				*plan = json_pack("{s:{s:{s:i,s:i}}}",
					    "source", "range", "start", 0,
					    "end", 10);
	json_t				*files = json_pack("[{s:s,s:i}]",
					    "path", "/a", "size", 7);
	char				*members, *text;

	members = taskdesc_encode_plan(plan, files, NULL);
	taskdesc_round_trip(&d, b, 2, members, &got);
	ck_assert_str_eq(got.save_dir, d.save_dir);
	ck_assert_int_eq(got.save_attempt, 7);
	ck_assert(json_equal(got.plan, plan));
	ck_assert_uint_eq(json_array_size(got.files), 1);
	ck_assert_uint_eq(got.nbroadcasts, 2);
	ck_assert_int_eq(got.broadcasts[0].id, 5);
	ck_assert_int_eq(got.broadcasts[0].add, 1);
	/* The descriptor rides on the frame, not in its text. */
	ck_assert_int_eq(got.broadcasts[0].fd, -1);
	ck_assert_int_eq(got.broadcasts[0].size, 1234);
	/* Its index's size, its descriptor riding right after. */
	ck_assert_int_eq(got.broadcasts[0].index, 4096);
	ck_assert_int_eq(got.broadcasts[0].index_fd, -1);
	/* A removal of broadcast 3: written -3-1, read back as 3. */
	ck_assert_int_eq(got.broadcasts[1].id, 3);
	ck_assert_int_eq(got.broadcasts[1].add, 0);
	text = json_dumps(got.root, JSON_COMPACT);
	ck_assert_ptr_nonnull(strstr(text, "{\"id\":-4}"));
	free(text);
	taskdesc_clear(&got);
	free(members);
	json_decref(plan);
}
END_TEST

/* A descriptor's header, as docs/protocol.md draws it. */
struct header {
	int32_t		 partition, partitions, mode, fn, flags;
	int64_t		 skip;
	int32_t		 oplen;		/* -1: strlen(op) */
	const char	*op;
	int32_t		 nbatch;
	const int32_t	*batch;		/* nbatch of them, if not NULL */
};

/* The header of a task of partition 0 of 1 of operation "o", counted. */
#define HEADER	{ 0, 1, MODE_COUNT, 0, 0, 0, -1, "o", 0, NULL }

/* Write h, then members (may be NULL), at buf; returns the length. */
static size_t
taskdesc_bytes(unsigned char *buf, const struct header *h,
    const char *members)
{
	/* A length past the bound is written, not its bytes. */
	size_t	oplen = h->oplen >= 0 && h->oplen <= 128 ? (size_t)h->oplen :
		    strlen(h->op);
	size_t	n = 0, i;

	be32_put(buf, h->partition);
	be32_put(buf + 4, h->partitions);
	be32_put(buf + 8, h->mode);
	be32_put(buf + 12, h->fn);
	be32_put(buf + 16, h->flags);
	be64_put(buf + 20, h->skip);
	be32_put(buf + 28, h->oplen >= 0 ? h->oplen : (int32_t)oplen);
	n = 32;
	memcpy(buf + n, h->op, oplen);
	n += oplen;
	be32_put(buf + n, h->nbatch);
	n += 4;
	for (i = 0; h->batch != NULL && i < (size_t)h->nbatch; i++, n += 4)
		be32_put(buf + n, h->batch[i]);
	if (members != NULL) {
		memcpy(buf + n, members, strlen(members));
		n += strlen(members);
	}
	return (n);
}

/* Decode len bytes; return the error, NULL if they decoded. */
static char *
taskdesc_error_bytes(const unsigned char *buf, size_t len)
{
	struct taskdesc	 d;
	char		*err = NULL;
	int		 rc;

	rc = taskdesc_decode((const char *)buf, len, &d, &err);
	taskdesc_clear(&d);
	if (rc == 0)
		return (NULL);
	ck_assert_ptr_nonnull(err);
	return (err);
}

/* Decode header h and members; return the error, NULL if it decoded. */
static char *
taskdesc_error(const struct header *h, const char *members)
{
	unsigned char	buf[4096];

	return (taskdesc_error_bytes(buf, taskdesc_bytes(buf, h, members)));
}

/* Check that header h and members are refused with want. */
static void
taskdesc_refused(const struct header *h, const char *members,
    const char *want)
{
	char	*err = taskdesc_error(h, members);

	if (err == NULL)
		ck_abort_msg("%s: decoded", members != NULL ? members : "-");
	ck_assert_str_eq(err, want);
	free(err);
}

START_TEST(test_taskdesc_refused)
{
	struct header	 h = HEADER;
	unsigned char	 buf[4096];
	int32_t		 batch[2] = { 1, 3 };
	size_t		 len, i;
	char		*err;

	ck_assert_ptr_null(taskdesc_error(&h, NULL));
	ck_assert_ptr_null(taskdesc_error(&h, "{}"));
	/* Every length short of the header is short. */
	len = taskdesc_bytes(buf, &h, NULL);
	for (i = 0; i < len; i++) {
		err = taskdesc_error_bytes(buf, i);
		if (err == NULL)
			ck_abort_msg("%zu bytes of %zu decoded", i, len);
		free(err);
	}
	err = taskdesc_error_bytes(buf, 31);
	ck_assert_str_eq(err, "header: 31 bytes, short of 32");
	free(err);
	err = taskdesc_error_bytes(buf, len - 1);
	ck_assert_str_eq(err, "batch: missing");
	free(err);
	h.partition = 1;
	taskdesc_refused(&h, NULL, "partition: must be from 0 to 0");
	h.partition = -1;
	taskdesc_refused(&h, NULL, "partition: must be from 0 to 0");
	h.partition = 0;
	h.partitions = 0;
	taskdesc_refused(&h, NULL, "partitions: must be from 1 to 1000000");
	h.partitions = 1000001;
	taskdesc_refused(&h, NULL, "partitions: must be from 1 to 1000000");
	h.partitions = 1;
	h.mode = MODE_SHUFFLE + 1;
	taskdesc_refused(&h, NULL, "mode: unknown mode 7");
	h.mode = -1;
	taskdesc_refused(&h, NULL, "mode: unknown mode -1");
	h.mode = MODE_REDUCE;
	h.fn = 3;
	taskdesc_refused(&h, NULL, "fn: unknown function 3");
	h.mode = MODE_COUNT;
	h.fn = REDUCE_MAX;
	taskdesc_refused(&h, NULL, "fn: unknown function 2");
	h.fn = 0;
	h.flags = 8;
	taskdesc_refused(&h, NULL, "flags: unknown flags 0x8");
	h.flags = 0;
	h.skip = 1;
	taskdesc_refused(&h, NULL, "skip: must not be negative, nor set but "
	    "in records mode");
	h.mode = MODE_RECORDS;
	h.skip = -1;
	taskdesc_refused(&h, NULL, "skip: must not be negative, nor set but "
	    "in records mode");
	h.skip = 0;
	h.mode = MODE_COUNT;
	/* The operation's id: 1 to 128 bytes, no NUL, inside the frame. */
	h.oplen = 0;
	taskdesc_refused(&h, NULL, "operation: length 0: expected 1 to 128 "
	    "in the 4 bytes left");
	h.op = "a\0b";
	h.oplen = 3;
	taskdesc_refused(&h, NULL, "operation: holds a NUL");
	h.op = "o";
	h.oplen = 1000;
	taskdesc_refused(&h, NULL, "operation: length 1000: expected 1 to 128 "
	    "in the 5 bytes left");
	h.oplen = -1;
	h.op = "0123456789012345678901234567890123456789012345678901234567890"
	    "12345678901234567890123456789012345678901234567890123456789012345"
	    "6789";
	taskdesc_refused(&h, NULL, "operation: length 130: expected 1 to 128 "
	    "in the 134 bytes left");
	h.op = "o";
	/* The batch: counted, in the frame, each a partition. */
	h.partitions = 3;
	h.nbatch = 2;
	h.batch = batch;
	taskdesc_refused(&h, NULL,
	    "batch: element 1: expected a partition from 0 to 2");
	h.batch = NULL;
	taskdesc_refused(&h, NULL, "batch: 2 partitions in 0 bytes");
	h.nbatch = -1;
	taskdesc_refused(&h, NULL, "batch: -1 partitions: expected 0 to 255");
	h.nbatch = EMBER_MAX_TASK_BATCH;
	taskdesc_refused(&h, NULL, "batch: 256 partitions: expected 0 to 255");
	h.nbatch = 0;
	h.partitions = 1;
	/* The members: a JSON object, or nothing. */
	taskdesc_refused(&h, "[1]", "members: not a JSON object");
	taskdesc_refused(&h, "{", "members: not JSON: string or '}' expected "
	    "near end of file");
	taskdesc_refused(&h, "{}x", "members: not JSON: end of file expected "
	    "near 'x'");
	h.mode = MODE_SAVE;
	taskdesc_refused(&h, NULL, "save: missing");
	taskdesc_refused(&h, "{\"save\":{\"dir\":\"/d\",\"attempt\":-1}}",
	    "save.attempt: must not be negative");
	taskdesc_refused(&h, "{\"save\":{\"dir\":\"d\",\"attempt\":1}}",
	    "save.dir: is not an absolute path");
	h.mode = MODE_CHECKPOINT;
	taskdesc_refused(&h, NULL, "checkpoint: missing");
	h.mode = MODE_SHUFFLE;
	taskdesc_refused(&h, NULL, "shuffle: missing");
}
END_TEST

/* A task of a plan the worker holds, counted, is a header alone: no JSON
 * for the worker to parse, the numbers where docs/protocol.md puts them. */
START_TEST(test_taskdesc_header_alone)
{
	int		 batch[2] = { 6, 5 };
	struct taskdesc	 d = { .operation = "op-7", .partition = 4,
			    .partitions = 9, .mode = MODE_COUNT,
			    .reuse_plan = 1, .batch = batch, .nbatch = 2 };
	struct taskdesc	 got;
	struct evbuffer	*out = evbuffer_new();
	unsigned char	*p;

	taskdesc_encode(out, &d, NULL, 0, NULL);
	ck_assert_uint_eq(evbuffer_get_length(out), 4 + 32 + 4 + 4 + 8);
	p = evbuffer_pullup(out, -1);
	ck_assert_int_eq(be32_get(p), 32 + 4 + 4 + 8);
	ck_assert_int_eq(be32_get(p + 4), 4);
	ck_assert_int_eq(be32_get(p + 8), 9);
	ck_assert_int_eq(be32_get(p + 12), MODE_COUNT);
	ck_assert_int_eq(be32_get(p + 16), 0);
	ck_assert_int_eq(be32_get(p + 20), TASKDESC_REUSE_PLAN);
	ck_assert_int_eq(be64_get(p + 24), 0);
	ck_assert_int_eq(be32_get(p + 32), 4);
	ck_assert_int_eq(memcmp(p + 36, "op-7", 4), 0);
	ck_assert_int_eq(be32_get(p + 40), 2);
	ck_assert_int_eq(be32_get(p + 44), 6);
	ck_assert_int_eq(be32_get(p + 48), 5);
	ck_assert_int_eq(taskdesc_decode((char *)p + 4, 48, &got, NULL), 0);
	ck_assert_ptr_null(got.root);
	ck_assert_str_eq(got.operation, "op-7");
	ck_assert_int_eq(got.reuse_plan, 1);
	ck_assert_uint_eq(got.nbatch, 2);
	ck_assert_int_eq(got.batch[1], 5);
	taskdesc_clear(&got);
	evbuffer_free(out);
}
END_TEST

/* Encode d with n changes b and decode it: taskdesc_decode's answer. */
static int
taskdesc_decode_encoded(const struct taskdesc *d,
    const struct taskdesc_broadcast *b, size_t n, struct taskdesc *got,
    char **err)
{
	struct evbuffer	*out = evbuffer_new();
	unsigned char	*p;
	int		 rc;

	taskdesc_encode(out, d, b, n, NULL);
	p = evbuffer_pullup(out, -1);
	rc = taskdesc_decode((char *)p + 4, evbuffer_get_length(out) - 4, got,
	    err);
	evbuffer_free(out);
	return (rc);
}

/* A descriptor that only lets go of broadcasts: removals and nothing
 * else; one with an add, a batch, a plan to reuse or no removal is
 * refused. */
START_TEST(test_taskdesc_held_only)
{
	int				 batch[1] = { 0 };
	struct taskdesc_broadcast	 rm = { .id = 7, .fd = -1,
					    .index_fd = -1 };
	struct taskdesc_broadcast	 add = { .id = 8, .add = 1, .fd = -1,
					    .size = 2, .index_fd = -1 };
	struct taskdesc			 d = { .operation = "held",
					    .partitions = 1, .mode = MODE_COUNT,
					    .held_only = 1 };
	struct taskdesc			 got;
	char				*err = NULL;

	taskdesc_round_trip(&d, &rm, 1, NULL, &got);
	ck_assert_int_eq(got.held_only, 1);
	ck_assert_uint_eq(got.nbroadcasts, 1);
	ck_assert_int_eq(got.broadcasts[0].add, 0);
	ck_assert_int_eq(got.broadcasts[0].id, 7);
	taskdesc_clear(&got);

	ck_assert_int_eq(taskdesc_decode_encoded(&d, &add, 1, &got, &err), -1);
	ck_assert_str_eq(err, "held_only: with an add");
	free(err);
	taskdesc_clear(&got);
	ck_assert_int_eq(taskdesc_decode_encoded(&d, NULL, 0, &got, &err), -1);
	ck_assert_str_eq(err, "held_only: without broadcasts");
	free(err);
	taskdesc_clear(&got);
	d.batch = batch;
	d.nbatch = 1;
	ck_assert_int_eq(taskdesc_decode_encoded(&d, &rm, 1, &got, &err), -1);
	ck_assert_str_eq(err, "held_only: with a task's members");
	free(err);
	taskdesc_clear(&got);
	d.nbatch = 0;
	d.reuse_plan = 1;
	ck_assert_int_eq(taskdesc_decode_encoded(&d, &rm, 1, &got, &err), -1);
	ck_assert_str_eq(err, "held_only: with a task's members");
	free(err);
	taskdesc_clear(&got);
}
END_TEST

/* A descriptor for several tasks: the partitions after the first, in
 * order; no more than a batch holds. */
/* Equal plans give the same plan members, whether dumped or remembered;
 * a file of another size, a plan of another value, other ones. */
START_TEST(test_taskdesc_plan_members_remembered)
{
	json_t	*p1 = json_pack("{s:{s:{s:[s]}}}", "source", "text", "paths",
		    "/a");
	json_t	*p2 = json_deep_copy(p1);
	json_t	*p3 = json_pack("{s:{s:{s:[s]}}}", "source", "text", "paths",
		    "/b");
	char	*a, *b, *c, *e, *f, *g;

	a = taskdesc_encode_plan(p1, json_pack("[{s:s,s:i}]", "path", "/a",
	    "size", 7), NULL);
	b = taskdesc_encode_plan(p2, json_pack("[{s:s,s:i}]", "path", "/a",
	    "size", 7), NULL);
	ck_assert_str_eq(a, b);
	c = taskdesc_encode_plan(p2, json_pack("[{s:s,s:i}]", "path", "/a",
	    "size", 8), NULL);
	ck_assert_ptr_nonnull(strstr(c, "\"size\":8"));
	e = taskdesc_encode_plan(p2, NULL, NULL);
	ck_assert_ptr_null(strstr(e, "files"));
	f = taskdesc_encode_plan(p2, NULL, "/ck/0/x");
	ck_assert_ptr_nonnull(strstr(f, "/ck/0/x"));
	g = taskdesc_encode_plan(p3, NULL, "/ck/0/x");
	ck_assert_ptr_nonnull(strstr(g, "/b"));
	free(a);
	free(b);
	free(c);
	free(e);
	free(f);
	free(g);
	json_decref(p1);
	json_decref(p2);
	json_decref(p3);
}
END_TEST

/* reuse_plan: written only without plan members, read back; refused
 * beside any. */
START_TEST(test_taskdesc_reuse_plan)
{
	struct taskdesc	d = { .operation = "op-2", .partition = 0,
			    .partitions = 1, .mode = MODE_COUNT,
			    .reuse_plan = 1 };
	struct taskdesc	got;
	struct header	h = HEADER;

	taskdesc_round_trip(&d, NULL, 0, NULL, &got);
	ck_assert_int_eq(got.reuse_plan, 1);
	ck_assert_ptr_null(got.plan);
	taskdesc_clear(&got);
	taskdesc_round_trip(&d, NULL, 0, "\"plan\":{}", &got);
	ck_assert_int_eq(got.reuse_plan, 0);
	ck_assert_ptr_nonnull(got.plan);
	taskdesc_clear(&got);
	d.reuse_plan = 0;
	taskdesc_round_trip(&d, NULL, 0, NULL, &got);
	ck_assert_int_eq(got.reuse_plan, 0);
	taskdesc_clear(&got);
	h.flags = TASKDESC_REUSE_PLAN;
	taskdesc_refused(&h, "{\"plan\":{}}", "reuse_plan: with plan members");
	taskdesc_refused(&h, "{\"files\":[]}",
	    "reuse_plan: with plan members");
	taskdesc_refused(&h, "{\"checkpoint_dir\":\"/c\"}",
	    "reuse_plan: with plan members");
}
END_TEST

START_TEST(test_taskdesc_batch)
{
	struct taskdesc	 d = { .operation = "op-1", .partition = 4,
			    .partitions = 1000, .mode = MODE_COUNT };
	struct taskdesc	 got;
	int		 batch[EMBER_MAX_TASK_BATCH], i;

	for (i = 0; i < EMBER_MAX_TASK_BATCH; i++)
		batch[i] = 999 - i;
	d.batch = batch;
	d.nbatch = 3;
	taskdesc_round_trip(&d, NULL, 0, NULL, &got);
	ck_assert_uint_eq(got.nbatch, 3);
	ck_assert_int_eq(got.batch[0], 999);
	ck_assert_int_eq(got.batch[2], 997);
	taskdesc_clear(&got);
	d.nbatch = EMBER_MAX_TASK_BATCH - 1;
	taskdesc_round_trip(&d, NULL, 0, NULL, &got);
	ck_assert_uint_eq(got.nbatch, EMBER_MAX_TASK_BATCH - 1);
	taskdesc_clear(&got);
	/* One more is more than a TASKS_DONE may answer: refused (see
	 * test_taskdesc_refused), never encoded. */
	/* None: no member. */
	d.nbatch = 0;
	taskdesc_round_trip(&d, NULL, 0, NULL, &got);
	ck_assert_uint_eq(got.nbatch, 0);
	ck_assert_ptr_null(got.batch);
	taskdesc_clear(&got);
}
END_TEST

START_TEST(test_taskdesc_names)
{
	enum taskdesc_mode	mode;
	enum reduce_fn		fn;

	ck_assert_int_eq(taskdesc_mode_from_string("count_by_value", &mode),
	    0);
	ck_assert_int_eq(mode, MODE_COUNT_BY_VALUE);
	ck_assert_str_eq(taskdesc_mode_name(MODE_SAVE), "save");
	ck_assert_int_eq(taskdesc_mode_from_string("iterate", &mode), -1);
	ck_assert_int_eq(reduce_fn_from_string("min", &fn), 0);
	ck_assert_int_eq(fn, REDUCE_MIN);
	ck_assert_str_eq(reduce_fn_name(REDUCE_MAX), "max");
	ck_assert_int_eq(reduce_fn_from_string("Sum", &fn), -1);
}
END_TEST

/* Check a batch of records frames in len bytes, fed in pieces of step. */
static int
batch_check(const unsigned char *p, size_t len, int32_t records, size_t step,
    const char **err)
{
	struct wmsg		m = { EMBER_RECORD_BATCH, records, (int32_t)len };
	struct wmsg_batch	b;
	size_t			off, n;

	wmsg_batch_begin(&b, &m);
	for (off = 0; off < len; off += n) {
		n = len - off < step ? len - off : step;
		if (wmsg_batch_feed(&b, p + off, n, err) == -1)
			return (-1);
	}
	return (wmsg_batch_end(&b, err));
}

START_TEST(test_wmsg_batch_exact)
{
	unsigned char	 buf[64];
	const char	*err = NULL;
	size_t		 n = 0, step;

	/* "abc", an empty record, NULL, "z": whole in every cut. */
	be32_put(buf + n, 3);
	memcpy(buf + n + 4, "abc", 3);
	n += 7;
	be32_put(buf + n, 0);
	n += 4;
	be32_put(buf + n, EMBER_NULL);
	n += 4;
	be32_put(buf + n, 1);
	buf[n + 4] = 'z';
	n += 5;
	for (step = 1; step <= n; step++) {
		ck_assert_int_eq(batch_check(buf, n, 4, step, &err), 0);
		ck_assert_int_eq(batch_check(buf, n, 5, step, &err), -1);
		ck_assert_str_eq(err, "a record batch with fewer records than "
		    "it says");
		ck_assert_int_eq(batch_check(buf, n, 3, step, &err), -1);
		ck_assert_str_eq(err, "a record batch with more records than "
		    "it says");
		/* The last record cut short. */
		ck_assert_int_eq(batch_check(buf, n - 1, 4, step, &err), -1);
	}
	ck_assert_int_eq(batch_check(buf, 0, 0, 1, &err), 0);
}
END_TEST

START_TEST(test_wmsg_batch_lies)
{
	unsigned char		 buf[16] = { 0 };
	struct wmsg		 m = { EMBER_RECORD_BATCH, 1, 4 };
	struct wmsg_batch	 b;
	const char		*err = NULL;

	/* One record of 100 bytes, none of them there. */
	be32_put(buf, 100);
	ck_assert_int_eq(batch_check(buf, 4, 1, 4, &err), -1);
	ck_assert_str_eq(err, "a record batch with fewer records than it says");
	/* Ten records in no bytes. */
	ck_assert_int_eq(batch_check(buf, 0, 10, 1, &err), -1);
	/* A negative length that is no special one. */
	be32_put(buf, -9);
	ck_assert_int_eq(batch_check(buf, 8, 1, 3, &err), -1);
	ck_assert_str_eq(err, "a record of a negative length");
	be32_put(buf, EMBER_END_OF_DATA_SECTION);
	ck_assert_int_eq(batch_check(buf, 4, 1, 4, &err), -1);
	/* More bytes fed than the header gave. */
	be32_put(buf, 0);
	wmsg_batch_begin(&b, &m);
	ck_assert_int_eq(wmsg_batch_feed(&b, buf, 8, &err), -1);
	ck_assert_str_eq(err, "a record batch longer than it says");
	/* Fewer. */
	wmsg_batch_begin(&b, &m);
	ck_assert_int_eq(wmsg_batch_feed(&b, buf, 2, &err), 0);
	ck_assert_int_eq(wmsg_batch_end(&b, &err), -1);
	ck_assert_str_eq(err, "a record batch shorter than it says");
}
END_TEST

/* Put a frame (len < 0: that special length alone) at p; its size. */
static size_t
batch_put(unsigned char *p, int32_t len, const char *body)
{
	be32_put(p, len);
	if (len > 0)
		memcpy(p + 4, body, (size_t)len);
	return (4 + (len > 0 ? (size_t)len : 0));
}

START_TEST(test_wmsg_batch_keyed)
{
	unsigned char	 buf[128];
	const char	*err = NULL;
	size_t		 n = 0, step, cut;

	/* A pair ("k", "v"), a pair ("", null), a group ("g", ["a", null]),
	 * an empty group, a plain record: five records in every cut. */
	n += batch_put(buf + n, EMBER_PAIR, NULL);
	n += batch_put(buf + n, 1, "k");
	n += batch_put(buf + n, 1, "v");
	n += batch_put(buf + n, EMBER_PAIR, NULL);
	n += batch_put(buf + n, 0, NULL);
	n += batch_put(buf + n, EMBER_NULL, NULL);
	n += batch_put(buf + n, EMBER_GROUP, NULL);
	n += batch_put(buf + n, 1, "g");
	be32_put(buf + n, 2);
	n += 4;
	n += batch_put(buf + n, 1, "a");
	n += batch_put(buf + n, EMBER_NULL, NULL);
	n += batch_put(buf + n, EMBER_GROUP, NULL);
	n += batch_put(buf + n, 2, "gg");
	be32_put(buf + n, 0);
	n += 4;
	n += batch_put(buf + n, 3, "abc");
	for (step = 1; step <= n; step++) {
		ck_assert_int_eq(batch_check(buf, n, 5, step, &err), 0);
		ck_assert_int_eq(batch_check(buf, n, 6, step, &err), -1);
		ck_assert_int_eq(batch_check(buf, n, 4, step, &err), -1);
		/* Cut anywhere inside, the batch is not whole. */
		for (cut = 1; cut < n; cut++)
			if (cut != n - 7)	/* before the plain record */
				ck_assert_int_eq(batch_check(buf, cut, 5, step,
				    &err), -1);
	}
}
END_TEST

START_TEST(test_wmsg_batch_keyed_lies)
{
	unsigned char	 buf[64];
	const char	*err = NULL;
	size_t		 n;

	/* A pair whose key is null. */
	n = batch_put(buf, EMBER_PAIR, NULL);
	n += batch_put(buf + n, EMBER_NULL, NULL);
	n += batch_put(buf + n, 1, "v");
	ck_assert_int_eq(batch_check(buf, n, 1, 4, &err), -1);
	ck_assert_str_eq(err, "a keyed record with a bad key");
	/* A pair whose key is a pair. */
	n = batch_put(buf, EMBER_PAIR, NULL);
	n += batch_put(buf + n, EMBER_PAIR, NULL);
	n += batch_put(buf + n, 1, "v");
	ck_assert_int_eq(batch_check(buf, n, 1, 1, &err), -1);
	ck_assert_str_eq(err, "a keyed record with a bad key");
	/* A pair whose value is a group marker. */
	n = batch_put(buf, EMBER_PAIR, NULL);
	n += batch_put(buf + n, 1, "k");
	n += batch_put(buf + n, EMBER_GROUP, NULL);
	ck_assert_int_eq(batch_check(buf, n, 1, 5, &err), -1);
	ck_assert_str_eq(err, "a keyed record with a bad value");
	/* A group of a negative count. */
	n = batch_put(buf, EMBER_GROUP, NULL);
	n += batch_put(buf + n, 1, "k");
	be32_put(buf + n, -1);
	n += 4;
	ck_assert_int_eq(batch_check(buf, n, 1, 2, &err), -1);
	ck_assert_str_eq(err, "a group of a negative count");
	/* A group that says two values and has one. */
	n = batch_put(buf, EMBER_GROUP, NULL);
	n += batch_put(buf + n, 1, "k");
	be32_put(buf + n, 2);
	n += 4;
	n += batch_put(buf + n, 1, "a");
	ck_assert_int_eq(batch_check(buf, n, 1, 3, &err), -1);
	ck_assert_str_eq(err, "a record batch with fewer records than it says");
	/* A pair alone at the end of a batch: its frames are owed. */
	n = batch_put(buf, EMBER_PAIR, NULL);
	ck_assert_int_eq(batch_check(buf, n, 1, 4, &err), -1);
	ck_assert_str_eq(err, "a record batch with fewer records than it says");
}
END_TEST

Suite *
wmsg_suite(void)
{
	Suite	*s = suite_create("wmsg");
	TCase	*tc;

	tc = tcase_create("worker messages");
	tcase_add_test(tc, test_wmsg_round_trip);
	tcase_add_test(tc, test_wmsg_names);
	tcase_add_test(tc, test_wmsg_refused);
	tcase_add_test(tc, test_wmsg_metrics);
	tcase_add_test(tc, test_wmsg_batch_exact);
	tcase_add_test(tc, test_wmsg_batch_lies);
	tcase_add_test(tc, test_wmsg_batch_keyed);
	tcase_add_test(tc, test_wmsg_batch_keyed_lies);
	suite_add_tcase(s, tc);

	tc = tcase_create("task descriptors");
	tcase_add_test(tc, test_taskdesc_modes);
	tcase_add_test(tc, test_taskdesc_save_plan_broadcasts);
	tcase_add_test(tc, test_taskdesc_refused);
	tcase_add_test(tc, test_taskdesc_header_alone);
	tcase_add_test(tc, test_taskdesc_held_only);
	tcase_add_test(tc, test_taskdesc_batch);
	tcase_add_test(tc, test_taskdesc_reuse_plan);
	tcase_add_test(tc, test_taskdesc_plan_members_remembered);
	tcase_add_test(tc, test_taskdesc_names);
	suite_add_tcase(s, tc);
	return (s);
}
