/*
 * Tests for worker/ops.c and worker/task.c: every op through the real
 * chain, into a sink that keeps what reaches it; the task modes through
 * task_run, their output read back from a file as emberd would read it.
 */
#include <sys/mman.h>
#include <sys/stat.h>

#include <errno.h>
#include <fcntl.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#include "bindex.h"
#include "frame.h"
#include "hash.h"
#include "held.h"
#include "ops.h"
#include "output.h"
#include "pieces.h"
#include "plan.h"
#include "protocol.h"
#include "source.h"
#include "suites.h"
#include "taskdesc.h"
#include "run.h"
#include "wmsg.h"
#include "xmalloc.h"

/* What reached the sink: the records' bytes end to end, and each one's
 * place. */
struct capture {
	struct op	 op;
	char		*data;
	size_t		 used, size;
	struct {
		size_t	 off, len;
		int	 null;
	}		*recs;
	size_t		 n, cap;
	int		 finished;
};

/* Keep a record. */
static int
capture_push_cb(struct op *op, const struct record *r)
{
	struct capture	*c = (struct capture *)op;

	/* Plain tests: every ck_assert is a write to the test runner. */
	if (c->n == c->cap) {
		c->cap = c->cap == 0 ? 64 : c->cap * 2;
		if ((c->recs = realloc(c->recs, c->cap * sizeof *c->recs)) ==
		    NULL)
			ck_abort_msg("out of memory");
	}
	if (c->used + r->len > c->size) {
		c->size = (c->used + r->len) * 2;
		if ((c->data = realloc(c->data, c->size)) == NULL)
			ck_abort_msg("out of memory");
	}
	if (r->null && r->len != 0)
		ck_abort_msg("a null record of %zu bytes", r->len);
	if (r->len != 0)
		memcpy(c->data + c->used, r->data, r->len);
	c->recs[c->n].off = c->used;
	c->recs[c->n].len = r->len;
	c->recs[c->n].null = r->null;
	c->used += r->len;
	c->n++;
	return (OP_OK);
}

/* Note that finish() reached the sink. */
static int
capture_finish_cb(struct op *op)
{
	((struct capture *)op)->finished++;
	return (OP_OK);
}

/* Nothing: the test owns the capture. */
static void
capture_free_cb(__attribute__((unused)) struct op *op)
{
}

/* Start a capture. */
static void
capture_init(struct capture *c)
{
	memset(c, 0, sizeof *c);
	c->op.push = capture_push_cb;
	c->op.finish = capture_finish_cb;
	c->op.free = capture_free_cb;
}

/* Free what a capture holds. */
static void
capture_clear(struct capture *c)
{
	free(c->data);
	free(c->recs);
	memset(c, 0, sizeof *c);
}

/* Expect record i to be the len bytes at want (NULL: a null record). */
static void
capture_expect(const struct capture *c, size_t i, const char *want,
    size_t len)
{
	ck_assert_msg(i < c->n, "record %zu of %zu", i, c->n);
	if (want == NULL) {
		ck_assert_msg(c->recs[i].null, "record %zu is not null", i);
		return;
	}
	ck_assert_msg(!c->recs[i].null, "record %zu is null", i);
	ck_assert_msg(c->recs[i].len == len, "record %zu: %zu bytes, want %zu "
	    "(%.*s)", i, c->recs[i].len, len, (int)c->recs[i].len,
	    c->data + c->recs[i].off);
	if (len == 0)
		return;		/* c->data may still be NULL */
	ck_assert_msg(memcmp(c->data + c->recs[i].off, want, len) == 0,
	    "record %zu: %.*s, want %.*s", i, (int)len,
	    c->data + c->recs[i].off, (int)len, want);
}

/* Expect record i to be a C string. */
static void
capture_expect_str(const struct capture *c, size_t i, const char *want)
{
	capture_expect(c, i, want, want == NULL ? 0 : strlen(want));
}

/* Parse a plan, expecting success. */
static struct plan *
ops_plan(const char *text)
{
	struct plan	*plan;
	json_t		*j;
	char		*err = NULL;

	j = json_loads(text, JSON_ALLOW_NUL, NULL);
	ck_assert_msg(j != NULL, "not JSON: %s", text);
	ck_assert_msg(plan_parse(j, &plan, &err) == 0, "%s: %s", text, err);
	json_decref(j);
	return (plan);
}

/* A plan over a few records with the given ops (JSON text). */
static struct plan *
ops_plan_with(const char *ops)
{
	char		*text;
	struct plan	*plan;

	ck_assert_int_ne(asprintf(&text, "{\"source\": {\"parallelize\": "
	    "{\"records\": []}}, \"ops\": [%s]}", ops), -1);
	plan = ops_plan(text);
	free(text);
	plan->partitions = 1;
	return (plan);
}

/* Push records (a null data with len 0 and null set) through ops. */
static int64_t
ops_run(const char *ops, int partition, const struct record *in, size_t n,
    struct capture *c)
{
	struct plan	*plan = ops_plan_with(ops);
	struct chain	*chain;
	char		*err = NULL;
	size_t		 i;
	int64_t		 dropped;
	int		 rc = OP_OK;

	capture_init(c);
	chain = chain_create(plan, partition, NULL, &c->op, &err);
	ck_assert_msg(chain != NULL, "%s: %s", ops, err);
	for (i = 0; i < n && rc == OP_OK; i++)
		rc = chain_push(chain, &in[i]);
	ck_assert_int_ne(rc, OP_FAIL);
	ck_assert_int_eq(chain_finish(chain), OP_OK);
	ck_assert_int_eq(c->finished, 1);
	dropped = chain_dropped(chain);
	chain_free(chain);
	plan_free(plan);
	return (dropped);
}

#define REC(s)		{ s, sizeof s - 1, 0, 0, NULL, 0 }
#define NUL_REC		{ NULL, 0, 1, 0, NULL, 0 }

START_TEST(test_ops_none)
{
	static const struct record in[] = { REC("a"), NUL_REC, REC(""),
	    REC("x\0y") };
	struct capture	c;

	ops_run("", 0, in, 4, &c);
	ck_assert_uint_eq(c.n, 4);
	capture_expect_str(&c, 0, "a");
	capture_expect(&c, 1, NULL, 0);
	capture_expect_str(&c, 2, "");
	capture_expect(&c, 3, "x\0y", 3);
	capture_clear(&c);
}
END_TEST

START_TEST(test_ops_filter_contains)
{
	static const struct record in[] = { REC("a\0b"), NUL_REC, REC(""),
	    REC("ab"), REC("xa\0bx"), REC("a\0") };
	struct capture	c;

	/* Bytes, NUL included; a null holds nothing. */
	ops_run("{\"filter\": {\"contains\": \"a\\u0000b\"}}", 0, in, 6, &c);
	ck_assert_uint_eq(c.n, 2);
	capture_expect(&c, 0, "a\0b", 3);
	capture_expect(&c, 1, "xa\0bx", 5);
	capture_clear(&c);

	/* One byte takes another path. */
	ops_run("{\"filter\": {\"contains\": \"b\"}}", 0, in, 6, &c);
	ck_assert_uint_eq(c.n, 3);
	capture_clear(&c);

	/* The empty string is in every record, but not in a null. */
	ops_run("{\"filter\": {\"contains\": \"\"}}", 0, in, 6, &c);
	ck_assert_uint_eq(c.n, 5);
	capture_clear(&c);
}
END_TEST

START_TEST(test_ops_filter_regex)
{
	static const struct record in[] = { REC("abbbc"), REC("ac"),
	    NUL_REC, REC(""), REC("xx abc yy"), REC("a\0c"), REC("\xff\xfe") };
	struct capture	c;
	struct record	big;
	char		*data;
	size_t		 len = 4 * 1024 * 1024;

	ops_run("{\"filter\": {\"regex\": \"ab+c\"}}", 0, in, 7, &c);
	ck_assert_uint_eq(c.n, 2);
	capture_expect_str(&c, 0, "abbbc");
	capture_expect_str(&c, 1, "xx abc yy");
	capture_clear(&c);

	/* Anchors hold for the whole record; NUL is a byte like any. */
	ops_run("{\"filter\": {\"regex\": \"^a.c$\"}}", 0, in, 7, &c);
	ck_assert_uint_eq(c.n, 1);
	capture_expect(&c, 0, "a\0c", 3);
	capture_clear(&c);

	/* The empty pattern matches every record, never a null. */
	ops_run("{\"filter\": {\"regex\": \"\"}}", 0, in, 7, &c);
	ck_assert_uint_eq(c.n, 6);
	capture_clear(&c);

	/* A UTF-8 pattern on bytes that are not UTF-8: no match, no error. */
	ops_run("{\"filter\": {\"regex\": \"(*UTF)^.$\"}}", 0, in, 7, &c);
	ck_assert_uint_eq(c.n, 0);
	capture_clear(&c);

	/* A long record, its match at the end. */
	data = malloc(len);
	memset(data, 'x', len);
	memcpy(data + len - 3, "END", 3);
	big.data = data;
	big.len = len;
	big.null = 0;
	ops_run("{\"filter\": {\"regex\": \"x+E[N]D$\"}}", 0, &big, 1, &c);
	ck_assert_uint_eq(c.n, 1);
	ck_assert_uint_eq(c.recs[0].len, len);
	capture_clear(&c);
	free(data);
}
END_TEST

START_TEST(test_ops_maps)
{
	static const struct record in[] = { REC(" Mixed\tCase\0\xe9 "),
	    NUL_REC, REC(""), REC(" \t\r\n ") };
	struct capture	c;

	ops_run("{\"map\": \"upper\"}", 0, in, 4, &c);
	ck_assert_uint_eq(c.n, 4);
	capture_expect(&c, 0, " MIXED\tCASE\0\xe9 ", 14);
	capture_expect(&c, 1, NULL, 0);
	capture_expect_str(&c, 2, "");
	capture_clear(&c);

	ops_run("{\"map\": \"lower\"}", 0, in, 4, &c);
	capture_expect(&c, 0, " mixed\tcase\0\xe9 ", 14);
	capture_clear(&c);

	ops_run("{\"map\": \"trim\"}", 0, in, 4, &c);
	capture_expect(&c, 0, "Mixed\tCase\0\xe9", 12);
	capture_expect(&c, 1, NULL, 0);
	capture_expect_str(&c, 2, "");
	capture_expect_str(&c, 3, "");
	capture_clear(&c);
}
END_TEST

START_TEST(test_ops_map_field)
{
	static const struct record in[] = { REC("a,b,,d"), REC(""),
	    REC("only"), NUL_REC, REC(",x\0y,") };
	struct capture	c;

	ops_run("{\"map\": {\"field\": {\"sep\": \",\", \"index\": 1}}}", 0,
	    in, 5, &c);
	ck_assert_uint_eq(c.n, 5);
	capture_expect_str(&c, 0, "b");
	capture_expect_str(&c, 1, "");		/* missing: empty */
	capture_expect_str(&c, 2, "");
	capture_expect(&c, 3, NULL, 0);		/* a null stays null */
	capture_expect(&c, 4, "x\0y", 3);
	capture_clear(&c);

	ops_run("{\"map\": {\"field\": {\"sep\": \",\", \"index\": 0}}}", 0,
	    in, 5, &c);
	capture_expect_str(&c, 0, "a");
	capture_expect_str(&c, 2, "only");
	capture_expect_str(&c, 4, "");
	capture_clear(&c);

	/* From the end. */
	ops_run("{\"map\": {\"field\": {\"sep\": \",\", \"index\": -1}}}", 0,
	    in, 5, &c);
	capture_expect_str(&c, 0, "d");
	capture_expect_str(&c, 2, "only");
	capture_expect_str(&c, 4, "");
	capture_clear(&c);
	ops_run("{\"map\": {\"field\": {\"sep\": \",\", \"index\": -4}}}", 0,
	    in, 5, &c);
	capture_expect_str(&c, 0, "a");
	capture_expect_str(&c, 2, "");
	capture_clear(&c);
	ops_run("{\"map\": {\"field\": {\"sep\": \",\", \"index\": 9}}}", 0,
	    in, 5, &c);
	capture_expect_str(&c, 0, "");
	capture_clear(&c);

	/* A separator of several bytes. */
	ops_run("{\"map\": {\"field\": {\"sep\": \"::\", \"index\": 2}}}", 0,
	    (const struct record[]){ REC("a::b:c::d") }, 1, &c);
	capture_expect_str(&c, 0, "d");
	capture_clear(&c);
}
END_TEST

START_TEST(test_ops_map_json)
{
	static const struct record in[] = {
		REC("{\"a\": {\"b\": \"text\\u0000x\"}}"),
		REC("{\"a\": {\"b\": 12.5}}"),
		REC("{\"a\": {\"b\": {\"c\": [1, 2], \"d\": true}}}"),
		REC("{\"a\": {\"b\": null}}"),
		REC("{\"a\": {\"c\": 1}}"),		/* no path: dropped */
		REC("not json"),			/* dropped */
		REC(""),				/* dropped */
		NUL_REC,				/* passes */
		REC("[1, 2]"),				/* dropped */
		REC("{\"a\": 5}"),			/* dropped */
	};
	struct capture	c;
	int64_t		dropped;

	dropped = ops_run("{\"map\": {\"json\": \"a.b\"}}", 0, in, 10, &c);
	ck_assert_int_eq(dropped, 5);
	ck_assert_uint_eq(c.n, 5);
	capture_expect(&c, 0, "text\0x", 6);
	capture_expect_str(&c, 1, "12.5");
	capture_expect_str(&c, 2, "{\"c\":[1,2],\"d\":true}");
	capture_expect(&c, 3, NULL, 0);
	capture_expect(&c, 4, NULL, 0);
	capture_clear(&c);

	/* A numeric name indexes an array. */
	dropped = ops_run("{\"map\": {\"json\": \"a.b.c.1\"}}", 0, in, 10, &c);
	ck_assert_int_eq(dropped, 8);
	capture_expect_str(&c, 0, "2");
	capture_clear(&c);
}
END_TEST

START_TEST(test_ops_flat_map_split)
{
	static const struct record in[] = { REC("a  b"), REC(""), NUL_REC,
	    REC(" x\0y "), REC("nosep") };
	struct capture	c;
	struct record	big;
	char		*data;
	size_t		 i, len = 2 * 1024 * 1024;

	/* Like Python's str.split(" "): empty pieces are kept. */
	ops_run("{\"flat_map\": {\"split\": \" \"}}", 0, in, 5, &c);
	ck_assert_uint_eq(c.n, 9);
	capture_expect_str(&c, 0, "a");
	capture_expect_str(&c, 1, "");
	capture_expect_str(&c, 2, "b");
	capture_expect_str(&c, 3, "");		/* "" gives one empty piece */
	capture_expect(&c, 4, NULL, 0);		/* a null passes */
	capture_expect_str(&c, 5, "");
	capture_expect(&c, 6, "x\0y", 3);
	capture_expect_str(&c, 7, "");
	capture_expect_str(&c, 8, "nosep");
	capture_clear(&c);

	ops_run("{\"flat_map\": {\"split\": \"ab\"}}", 0,
	    (const struct record[]){ REC("xabyabab") }, 1, &c);
	ck_assert_uint_eq(c.n, 4);
	capture_expect_str(&c, 0, "x");
	capture_expect_str(&c, 1, "y");
	capture_expect_str(&c, 2, "");
	capture_expect_str(&c, 3, "");
	capture_clear(&c);

	/* A long record of a million words. */
	data = malloc(len);
	for (i = 0; i < len; i += 2) {
		data[i] = (char)('a' + (i / 2) % 26);
		data[i + 1] = ' ';
	}
	big.data = data;
	big.len = len - 1;
	big.null = 0;
	ops_run("{\"flat_map\": {\"split\": \" \"}}", 0, &big, 1, &c);
	ck_assert_uint_eq(c.n, len / 2);
	capture_expect_str(&c, 27, "b");
	capture_clear(&c);
	free(data);
}
END_TEST

/* The records a sample keeps of range(0, n), as a bitmap string. */
static char *
ops_sample_keeps(const char *ops, int partition, size_t n)
{
	struct record	*in;
	struct capture	 c;
	char		*keeps, (*num)[16];
	size_t		 i;

	in = calloc(n, sizeof *in);
	num = calloc(n, sizeof *num);
	keeps = calloc(n + 1, 1);
	for (i = 0; i < n; i++) {
		in[i].len = (size_t)snprintf(num[i], sizeof num[i], "%zu", i);
		in[i].data = num[i];
		keeps[i] = '.';
	}
	ops_run(ops, partition, in, n, &c);
	for (i = 0; i < c.n; i++) {
		char	v[16];

		ck_assert_uint_lt(c.recs[i].len, sizeof v);
		memcpy(v, c.data + c.recs[i].off, c.recs[i].len);
		v[c.recs[i].len] = '\0';
		keeps[strtoul(v, NULL, 10)] = 'x';
	}
	capture_clear(&c);
	free(num);
	free(in);
	return (keeps);
}

START_TEST(test_ops_sample)
{
	const char	*ops = "{\"sample\": {\"fraction\": 0.3, \"seed\": 7}}";
	char		*a, *b, *other, *seed;
	size_t		 i, kept = 0, n = 100000;

	/* The same seed and partition keep the same records. */
	a = ops_sample_keeps(ops, 3, n);
	b = ops_sample_keeps(ops, 3, n);
	ck_assert_str_eq(a, b);
	for (i = 0; i < n; i++)
		kept += a[i] == 'x';
	/* About 30%: 0.3 * 100000 with a standard deviation of 145. */
	ck_assert_msg(kept > 29000 && kept < 31000, "kept %zu", kept);
	/* Another partition, or another seed, keeps others. */
	other = ops_sample_keeps(ops, 4, n);
	ck_assert_str_ne(a, other);
	seed = ops_sample_keeps("{\"sample\": {\"fraction\": 0.3, "
	    "\"seed\": 8}}", 3, n);
	ck_assert_str_ne(a, seed);
	free(a);
	free(b);
	free(other);
	free(seed);

	a = ops_sample_keeps("{\"sample\": {\"fraction\": 0}}", 0, 1000);
	ck_assert_ptr_null(strchr(a, 'x'));
	free(a);
	a = ops_sample_keeps("{\"sample\": {\"fraction\": 1}}", 0, 1000);
	ck_assert_ptr_null(strchr(a, '.'));
	free(a);
}
END_TEST

/* Run a range partition through ops; return the records read. */
static int64_t
ops_run_range(const char *text, int partition, struct capture *c)
{
	struct plan	*plan = ops_plan(text);
	struct chain	*chain;
	int64_t		 in = 0;
	char		*err = NULL;

	plan_set_partitions(plan, 1);
	capture_init(c);
	chain = chain_create(plan, partition, NULL, &c->op, &err);
	ck_assert_ptr_nonnull(chain);
	ck_assert_int_eq(source_run(plan, partition, -1, chain, &in, &err), OP_OK);
	ck_assert_int_eq(chain_finish(chain), OP_OK);
	chain_free(chain);
	plan_free(plan);
	return (in);
}

START_TEST(test_ops_limit)
{
	struct capture	c;
	int64_t		in;

	/* The source stops as soon as the limit is reached. */
	in = ops_run_range("{\"source\": {\"range\": {\"end\": 1000000}}, "
	    "\"ops\": [{\"limit\": 5}]}", 0, &c);
	ck_assert_int_eq(in, 5);
	ck_assert_uint_eq(c.n, 5);
	capture_expect_str(&c, 4, "4");
	ck_assert_int_eq(c.finished, 1);
	capture_clear(&c);

	/* Per partition. */
	in = ops_run_range("{\"source\": {\"range\": {\"end\": 1000}}, "
	    "\"partitions\": 4, \"ops\": [{\"limit\": 3}]}", 2, &c);
	ck_assert_uint_eq(c.n, 3);
	capture_expect_str(&c, 0, "500");
	capture_clear(&c);

	/* limit 0: nothing passes, and the source stops at once. */
	in = ops_run_range("{\"source\": {\"range\": {\"end\": 1000000}}, "
	    "\"ops\": [{\"limit\": 0}]}", 0, &c);
	ck_assert_int_le(in, 1);
	ck_assert_uint_eq(c.n, 0);
	ck_assert_int_eq(c.finished, 1);
	capture_clear(&c);

	/* After a flat_map: the stop comes back through it. */
	in = ops_run_range("{\"source\": {\"range\": {\"start\": 100, "
	    "\"end\": 1000000}}, \"ops\": [{\"flat_map\": {\"split\": \"0\"}}, "
	    "{\"limit\": 4}]}", 0, &c);
	ck_assert_int_eq(in, 2);	/* "100" gives 1, "", "" */
	ck_assert_uint_eq(c.n, 4);
	capture_expect_str(&c, 3, "1");
	capture_clear(&c);

	/* More than there is. */
	in = ops_run_range("{\"source\": {\"range\": {\"end\": 10}}, "
	    "\"ops\": [{\"limit\": 50}]}", 0, &c);
	ck_assert_int_eq(in, 10);
	ck_assert_uint_eq(c.n, 10);
	capture_clear(&c);
}
END_TEST

START_TEST(test_ops_long_records)
{
	struct capture	 c;
	struct record	 big;
	char		*data;
	size_t		 i, len = 8 * 1024 * 1024;

	data = malloc(len);
	for (i = 0; i < len; i++)
		data[i] = (char)(i % 251);
	big.data = data;
	big.len = len;
	big.null = 0;
	ops_run("{\"map\": \"upper\"}, {\"map\": \"lower\"}, "
	    "{\"filter\": {\"contains\": \"\\u0000\\u0001\"}}", 0, &big, 1, &c);
	ck_assert_uint_eq(c.n, 1);
	ck_assert_uint_eq(c.recs[0].len, len);
	for (i = 0; i < len; i++) {
		char want = (char)(i % 251);

		if (want >= 'A' && want <= 'Z')
			want = want - 'A' + 'a';
		if (c.data[i] != want)
			ck_abort_msg("byte %zu: %d, want %d", i, c.data[i],
			    want);
	}
	capture_clear(&c);
	free(data);
}
END_TEST

START_TEST(test_ops_missing_broadcast)
{
	struct plan	*plan;
	struct capture	 c;
	char		*err = NULL;

	/* The worker does not hold broadcast 12345: the chain is not made,
	 * and the sink given to it is freed (here: its free is a no-op). */
	plan = ops_plan_with("{\"map\": \"upper\"}, "
	    "{\"filter\": {\"in_broadcast\": 12345}}");
	capture_init(&c);
	ck_assert_ptr_null(chain_create(plan, 0, NULL, &c.op, &err));
	ck_assert_ptr_nonnull(err);
	free(err);
	plan_free(plan);
}
END_TEST

/* A memfd holding len bytes. */
static int
ops_memfd(const void *data, size_t len)
{
	int	fd;

	fd = memfd_create("check_ops", MFD_CLOEXEC);
	ck_assert_int_ne(fd, -1);
	ck_assert_int_eq(write(fd, data, len), (ssize_t)len);
	return (fd);
}

/*
 * A filter on a broadcast whose index came with slots past its bytes (the
 * user changed it before emberd sealed it): the lookup that meets one
 * fails the task with a message that says so, and reads nothing there.
 */
START_TEST(test_ops_broadcast_corrupt_index)
{
	static const char		 bytes[] = "a\nb\nc\n";
	static const struct record	 in[] = { REC("zz"), REC("b") };
	struct taskdesc_broadcast	 add;
	struct bindex_stats		 st;
	struct plan			*plan;
	struct chain			*chain;
	struct capture			 c;
	uint64_t			*slots;
	size_t				 size, lines, i;
	char				*err = NULL;
	void				*ix;

	size = bindex_size(bytes, sizeof bytes - 1, &lines);
	ix = xcalloc(1, size);
	bindex_build(bytes, sizeof bytes - 1, lines, ix, size, &st);
	slots = (uint64_t *)((char *)ix + BINDEX_HEADER);
	for (i = 0; i < (size - BINDEX_HEADER) / 8; i++) {
		if (slots[i] != 0)
			slots[i] |= UINT64_C(0xffff000000000000);
	}
	memset(&add, 0, sizeof add);
	add.id = 7;
	add.add = 1;
	add.size = sizeof bytes - 1;
	add.fd = ops_memfd(bytes, sizeof bytes - 1);
	add.index = (int64_t)size;
	add.index_fd = ops_memfd(ix, size);
	free(ix);
	ck_assert_int_eq(held_apply(&add, 1, &err), 0);

	plan = ops_plan_with("{\"filter\": {\"in_broadcast\": 7}}");
	capture_init(&c);
	chain = chain_create(plan, 0, NULL, &c.op, &err);
	ck_assert_msg(chain != NULL, "%s", err);
	ck_assert_int_eq(chain_push(chain, &in[0]), OP_OK);
	ck_assert_int_eq(chain_push(chain, &in[1]), OP_FAIL);
	ck_assert_str_eq(chain_error(chain), "filter in_broadcast 7: its "
	    "index is corrupt: a slot points past its bytes");
	chain_free(chain);
	plan_free(plan);
	capture_clear(&c);
	held_clear();
}
END_TEST

/* What a task sent, read back from its output file. */
struct sent {
	struct capture	 c;
	int64_t		 metrics[EMBER_METRIC_COUNT];
	int32_t		 batches;
	int		 pairs_split;	/* a batch ended inside a pair */
	char		*error;
};

/* Read the task output in a file: batches, then the end or an error. */
static void
sent_read(int fd, struct sent *s)
{
	struct stat	 st;
	unsigned char	*buf, *p, *end, *batch_end;
	int32_t		 n, i, count;
	struct record	 r;

	memset(s, 0, sizeof *s);
	capture_init(&s->c);
	ck_assert_int_eq(fstat(fd, &st), 0);
	buf = malloc((size_t)st.st_size + 1);
	ck_assert_int_eq(pread(fd, buf, (size_t)st.st_size, 0), st.st_size);
	p = buf;
	end = buf + st.st_size;
	while (p < end) {
		n = be32_get(p);
		p += 4;
		if (n == EMBER_RECORD_BATCH) {
			count = be32_get(p);
			batch_end = p + 8 + be32_get(p + 4);
			p += 8;
			for (i = 0; i < count; i++) {
				n = be32_get(p);
				p += 4;
				r.null = n == EMBER_NULL;
				r.len = r.null ? 0 : (size_t)n;
				r.data = (const char *)p;
				p += r.len;
				capture_push_cb(&s->c.op, &r);
			}
			if (p != batch_end)
				ck_abort_msg("a batch's records overrun it");
			s->pairs_split |= count % 2 != 0;
			s->batches++;
		} else if (n == EMBER_END_OF_DATA_SECTION) {
			ck_assert_int_eq(be32_get(p), EMBER_TIMING_DATA);
			n = be32_get(p + 4);
			p += 8;
			for (i = 0; i < n; i++, p += 8)
				if (i < EMBER_METRIC_COUNT)
					s->metrics[i] = be64_get(p);
			ck_assert_int_eq(be32_get(p), EMBER_END_OF_STREAM);
			p += 4;
		} else if (n == EMBER_EXCEPTION_THROWN) {
			n = be32_get(p);
			s->error = strndup((char *)p + 4, (size_t)n);
			p += 4 + n;
		} else
			ck_abort_msg("unexpected %d in the task output", n);
	}
	free(buf);
}

/* Run a task of a parallelize plan (records: a JSON array) into a file;
 * 0 or -1 as task_run. */
static int
ops_task(const char *records, int partitions, int partition,
    struct run *t, struct sent *s)
{
	struct output	*out;
	struct plan	*plan;
	char		*text, *err = NULL, path[] = "/tmp/ember-check-ops-XXXXXX";
	int64_t		 metrics[EMBER_METRIC_COUNT];
	int		 fd, rc;

	ck_assert_int_ne(asprintf(&text, "{\"source\": {\"parallelize\": "
	    "{\"records\": %s}}, \"partitions\": %d}", records, partitions),
	    -1);
	plan = ops_plan(text);
	free(text);
	ck_assert_int_ne(fd = mkstemp(path), -1);
	unlink(path);
	out = output_create(fd);
	t->plan = plan;
	t->partition = partition;
	output_reset(out);
	rc = run_execute(t, out, metrics, &err);
	if (rc == 0)
		ck_assert_int_eq(output_finish(out, metrics,
		    EMBER_METRIC_COUNT, 0, &err), 0);
	else
		ck_assert_int_eq(output_fail(out, err), 0);
	free(err);
	output_free(out);
	sent_read(fd, s);
	close(fd);
	plan_free(plan);
	return (rc);
}

/* Run a reduce and expect its one record (or error). */
static void
ops_reduce(const char *records, enum reduce_fn fn, const char *want,
    const char *want_error)
{
	struct run	t = { .mode = MODE_REDUCE, .fn = fn };
	struct sent	s;
	int		rc;

	rc = ops_task(records, 1, 0, &t, &s);
	if (want_error != NULL) {
		ck_assert_int_eq(rc, -1);
		ck_assert_str_eq(s.error, want_error);
	} else {
		ck_assert_msg(rc == 0, "%s: %s", records, s.error);
		ck_assert_uint_eq(s.c.n, 1);
		capture_expect_str(&s.c, 0, want);
	}
	free(s.error);
	capture_clear(&s.c);
}

START_TEST(test_ops_reduce)
{
	ops_reduce("[\"1\", \"2\", \"-3\", \"+10\"]", REDUCE_SUM,
	    "{\"count\":4,\"int\":10}", NULL);
	ops_reduce("[\"1\", \"2\", \"-3\", \"+10\"]", REDUCE_MIN,
	    "{\"count\":4,\"int\":-3}", NULL);
	ops_reduce("[\"1\", \"2\", \"-3\", \"+10\"]", REDUCE_MAX,
	    "{\"count\":4,\"int\":10}", NULL);
	ops_reduce("[]", REDUCE_SUM, "{\"count\":0}", NULL);
	/* Exact at the edges of an int64. */
	ops_reduce("[\"9223372036854775806\", \"1\"]", REDUCE_SUM,
	    "{\"count\":2,\"int\":9223372036854775807}", NULL);
	ops_reduce("[\"-9223372036854775808\", \"5\"]", REDUCE_MIN,
	    "{\"count\":2,\"int\":-9223372036854775808}", NULL);
	/* Overflow goes on as a real. */
	ops_reduce("[\"9223372036854775807\", \"1\"]", REDUCE_SUM,
	    "{\"count\":2,\"real\":9.2233720368547758e+18}", NULL);
	ops_reduce("[\"99999999999999999999\"]", REDUCE_MAX,
	    "{\"count\":1,\"real\":1e+20}", NULL);
	/* Reals. */
	ops_reduce("[\"0.5\", \"1\", \"2.25\"]", REDUCE_SUM,
	    "{\"count\":3,\"real\":3.75}", NULL);
	ops_reduce("[\"3\", \"-1e3\", \"2\"]", REDUCE_MIN,
	    "{\"count\":3,\"real\":-1000}", NULL);
	ops_reduce("[\"0.1\"]", REDUCE_MAX,
	    "{\"count\":1,\"real\":0.10000000000000001}", NULL);
	/* Not numbers. */
	ops_reduce("[\"1\", \"two\"]", REDUCE_SUM, NULL,
	    "reduce: record \"two\" is not a number");
	ops_reduce("[\" 1\"]", REDUCE_SUM, NULL,
	    "reduce: record \" 1\" is not a number");
	ops_reduce("[\"1 \"]", REDUCE_SUM, NULL,
	    "reduce: record \"1 \" is not a number");
	ops_reduce("[\"\"]", REDUCE_SUM, NULL,
	    "reduce: record \"\" is not a number");
	ops_reduce("[\"inf\"]", REDUCE_SUM, NULL,
	    "reduce: record \"inf\" is not a number");
	ops_reduce("[\"1e999\"]", REDUCE_SUM, NULL,
	    "reduce: record \"1e999\" is not a number");
	ops_reduce("[\"0x10\"]", REDUCE_SUM, NULL,
	    "reduce: record \"0x10\" is not a number");
	ops_reduce("[\"a\\\"b\\u0000\\n\"]", REDUCE_SUM, NULL,
	    "reduce: record \"a\\\"b\\x00\\x0a\" is not a number");
	ops_reduce("[\"1\", null]", REDUCE_SUM, NULL,
	    "reduce: record null is not a number");
	ops_reduce("[\"1e308\", \"1e308\"]", REDUCE_SUM, NULL,
	    "reduce: the sum is out of range");
	/* Only the first 64 bytes are shown. */
	ops_reduce("[\"xxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxx"
	    "xxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxx\"]", REDUCE_SUM, NULL,
	    "reduce: record \"xxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxx"
	    "xxxxxxxxxxxxxx...\" is not a number");
}
END_TEST

/* The count a count_by_value pair gives. */
static int64_t
ops_pair_count(const struct capture *c, size_t i)
{
	ck_assert_uint_eq(c->recs[i].len, 8);
	return (be64_get((unsigned char *)c->data + c->recs[i].off));
}

/* A JSON array of n strings, prefix then i % distinct, as text. */
static char *
ops_keys_json(const char *prefix, size_t n, size_t distinct)
{
	json_t	*records = json_array();
	char	 key[32], *text;
	size_t	 i;

	for (i = 0; i < n; i++) {
		snprintf(key, sizeof key, "%s%zu", prefix, i % distinct);
		json_array_append_new(records, json_string(key));
	}
	text = json_dumps(records, JSON_COMPACT);
	json_decref(records);
	return (text);
}

START_TEST(test_ops_count_by_value)
{
	struct run	 t = { .mode = MODE_COUNT_BY_VALUE };
	struct sent	 s;
	char		*text, key[32];
	int64_t		 total = 0, seen[1000];
	size_t		 i;
	int		 nulls = 0, empty = 0, nul = 0, a = 0;

	ck_assert_int_eq(ops_task("[\"a\", null, \"\", \"a\\u0000b\", \"a\", "
	    "null, \"\", \"a\", \"a\\u0000b\"]", 1, 0, &t, &s), 0);
	ck_assert_uint_eq(s.c.n, 8);
	for (i = 0; i < s.c.n; i += 2) {
		if (s.c.recs[i].null)
			nulls = (int)ops_pair_count(&s.c, i + 1);
		else if (s.c.recs[i].len == 0)
			empty = (int)ops_pair_count(&s.c, i + 1);
		else if (s.c.recs[i].len == 3 &&
		    memcmp(s.c.data + s.c.recs[i].off, "a\0b", 3) == 0)
			nul = (int)ops_pair_count(&s.c, i + 1);
		else {
			capture_expect_str(&s.c, i, "a");
			a = (int)ops_pair_count(&s.c, i + 1);
		}
	}
	ck_assert_int_eq(nulls, 2);
	ck_assert_int_eq(empty, 2);
	ck_assert_int_eq(nul, 2);
	ck_assert_int_eq(a, 3);
	ck_assert_int_eq(s.metrics[EMBER_METRIC_RECORDS_IN], 9);
	ck_assert_int_eq(s.metrics[EMBER_METRIC_RECORDS_OUT], 9);
	capture_clear(&s.c);

	/* Many distinct records: the table grows, batches fill, and no
	 * pair is ever cut between two batches. */
	text = ops_keys_json("key-", 200000, 1000);
	ck_assert_int_eq(ops_task(text, 1, 0, &t, &s), 0);
	free(text);
	ck_assert_uint_eq(s.c.n, 2000);
	ck_assert(!s.pairs_split);
	memset(seen, 0, sizeof seen);
	for (i = 0; i < s.c.n; i += 2) {
		ck_assert_uint_eq(memcmp(s.c.data + s.c.recs[i].off, "key-", 4),
		    0);
		memcpy(key, s.c.data + s.c.recs[i].off, s.c.recs[i].len);
		key[s.c.recs[i].len] = '\0';
		seen[strtoul(key + 4, NULL, 10)] += ops_pair_count(&s.c, i + 1);
		total += ops_pair_count(&s.c, i + 1);
	}
	ck_assert_int_eq(total, 200000);
	for (i = 0; i < 1000; i++)
		ck_assert_int_eq(seen[i], 200);
	capture_clear(&s.c);
}
END_TEST

START_TEST(test_ops_count_by_value_after_another)
{
	struct run	 t = { .mode = MODE_COUNT_BY_VALUE };
	struct sent	 s;
	char		*text;
	size_t		 i;
	int		 round;

	/* A task whose table grows to the sparse size (records one at a
	 * time: no settling, which only the block path does), then small
	 * ones: each counts its own records alone, in slot arrays
	 * the tasks before gave back. */
	text = ops_keys_json("w-", 200000, 15000);
	ck_assert_int_eq(ops_task(text, 1, 0, &t, &s), 0);
	free(text);
	ck_assert_uint_eq(s.c.n, 2 * 15000);
	capture_clear(&s.c);
	for (round = 0; round < 3; round++) {
		ck_assert_int_eq(ops_task("[\"b\", \"w-7\", \"b\"]", 1, 0,
		    &t, &s), 0);
		ck_assert_uint_eq(s.c.n, 4);
		for (i = 0; i < s.c.n; i += 2) {
			if (s.c.recs[i].len == 1) {
				capture_expect_str(&s.c, i, "b");
				ck_assert_int_eq(ops_pair_count(&s.c, i + 1),
				    2);
			} else {
				capture_expect_str(&s.c, i, "w-7");
				ck_assert_int_eq(ops_pair_count(&s.c, i + 1),
				    1);
			}
		}
		capture_clear(&s.c);
	}
}
END_TEST

START_TEST(test_ops_count_by_value_wide)
{
	struct run	 t = { .mode = MODE_COUNT_BY_VALUE };
	struct sent	 s;
	json_t		*records;
	char		*text, key[32];
	size_t		 i, n = 100000;

	/* All distinct, over several batches. */
	records = json_array();
	for (i = 0; i < n; i++) {
		snprintf(key, sizeof key, "%zu", i * 7919);
		json_array_append_new(records, json_string(key));
	}
	text = json_dumps(records, JSON_COMPACT);
	json_decref(records);
	ck_assert_int_eq(ops_task(text, 1, 0, &t, &s), 0);
	free(text);
	ck_assert_uint_eq(s.c.n, 2 * n);
	ck_assert_int_gt(s.batches, 1);
	ck_assert(!s.pairs_split);
	for (i = 1; i < s.c.n; i += 2) {
		if (s.c.recs[i].len != 8 || be64_get((unsigned char *)s.c.data +
		    s.c.recs[i].off) != 1)
			ck_abort_msg("pair %zu: not a count of 1", i / 2);
	}
	capture_clear(&s.c);
}
END_TEST

START_TEST(test_ops_save)
{
	struct run	 t = { .mode = MODE_SAVE, .save_attempt = 4 };
	struct sent	 s;
	char		 dir[] = "/tmp/ember-check-save-XXXXXX", path[128], buf[64];
	int		 fd;
	ssize_t		 n;

	ck_assert_ptr_nonnull(mkdtemp(dir));
	t.save_dir = dir;
	ck_assert_int_eq(ops_task("[\"a\", null, \"\", \"b\\u0000c\", \"x\", "
	    "\"y\"]", 2, 1, &t, &s), 0);
	ck_assert_int_eq(s.metrics[EMBER_METRIC_RECORDS_OUT], 3);
	ck_assert_uint_eq(s.c.n, 0);
	capture_clear(&s.c);
	snprintf(path, sizeof path, "%s/part-00001", dir);
	ck_assert_int_ne(fd = open(path, O_RDONLY), -1);
	n = read(fd, buf, sizeof buf);
	close(fd);
	ck_assert_int_eq(n, 8);
	ck_assert_mem_eq(buf, "b\0c\nx\ny\n", 8);
	snprintf(path, sizeof path, "%s/.part-00001.4.tmp", dir);
	ck_assert_int_eq(access(path, F_OK), -1);

	/* A null and an empty record are both empty lines. */
	ck_assert_int_eq(ops_task("[\"a\", null, \"\", \"b\"]", 1, 0, &t,
	    &s), 0);
	capture_clear(&s.c);
	snprintf(path, sizeof path, "%s/part-00000", dir);
	ck_assert_int_ne(fd = open(path, O_RDONLY), -1);
	n = read(fd, buf, sizeof buf);
	close(fd);
	ck_assert_int_eq(n, 6);
	ck_assert_mem_eq(buf, "a\n\n\nb\n", 6);
	unlink(path);
	snprintf(path, sizeof path, "%s/part-00001", dir);
	unlink(path);

	/* A task that fails leaves nothing behind. */
	ck_assert_int_eq(rmdir(dir), 0);
	ck_assert_int_eq(ops_task("[\"a\"]", 3, 2, &t, &s), -1);
	snprintf(path, sizeof path, "save: %s: %s", dir, strerror(ENOENT));
	ck_assert_str_eq(s.error, path);
	free(s.error);
	capture_clear(&s.c);
}
END_TEST

START_TEST(test_ops_save_fails_midway)
{
	struct run	 t = { .mode = MODE_SAVE, .save_attempt = 1,
			     .fn = REDUCE_SUM };
	struct plan	*plan;
	struct output	*out;
	char		 dir[] = "/tmp/ember-check-save-XXXXXX", path[128];
	char		*err = NULL;
	int64_t		 metrics[EMBER_METRIC_COUNT];

	/* A pipe that fails: the temporary file is removed, the part file
	 * never appears. */
	ck_assert_ptr_nonnull(mkdtemp(dir));
	t.save_dir = dir;
	plan = ops_plan("{\"source\": {\"range\": {\"end\": 100}}, \"ops\": "
	    "[{\"pipe\": {\"command\": \"head -3; exit 3\"}}]}");
	plan_set_partitions(plan, 1);
	t.plan = plan;
	out = output_create(open("/dev/null", O_WRONLY | O_CLOEXEC));
	ck_assert_int_eq(run_execute(&t, out, metrics, &err), -1);
	ck_assert_ptr_nonnull(err);
	free(err);
	snprintf(path, sizeof path, "%s/part-00000", dir);
	ck_assert_int_eq(access(path, F_OK), -1);
	snprintf(path, sizeof path, "%s/.part-00000.1.tmp", dir);
	ck_assert_int_eq(access(path, F_OK), -1);
	ck_assert_int_eq(rmdir(dir), 0);
	output_free(out);
	plan_free(plan);
}
END_TEST

/* A stop check that says stop at once. */
static int
ops_stop_now_cb(void *arg)
{
	(*(int *)arg)++;
	return (1);
}

START_TEST(test_output_sends_stale_records)
{
	char		 path[] = "/tmp/ember-check-ops-XXXXXX", *err = NULL;
	struct timespec	 ms30 = { 0, 30 * 1000 * 1000 };
	struct output	*out;
	struct stat	 st;
	int		 fd;

	ck_assert_int_ne(fd = mkstemp(path), -1);
	unlink(path);
	out = output_create(fd);
	ck_assert_int_eq(output_record(out, "777777", 6, 0, &err), 0);
	ck_assert_int_eq(output_tick(out, &err), 0);
	ck_assert_int_eq(fstat(fd, &st), 0);
	ck_assert_int_eq(st.st_size, 0);	/* fresh: it waits for more */
	nanosleep(&ms30, NULL);
	ck_assert_int_eq(output_tick(out, &err), 0);
	ck_assert_int_eq(fstat(fd, &st), 0);
	ck_assert_int_eq(st.st_size, WMSG_BATCH_SIZE + 4 + 6);
	output_free(out);
	close(fd);
}
END_TEST

/* The guard's answer, for test_output_guard_holds_big_records. */
static int	ops_guard_cut;

static int
ops_guard_cb(void)
{
	return (ops_guard_cut);
}

/*
 * Under a guard a record larger than the buffer is copied, not written
 * from the caller's memory (a mapped file, which a cut turns to zeros
 * after the check), and nothing is written while the guard says cut.
 */
START_TEST(test_output_guard_holds_big_records)
{
	char		 path[] = "/tmp/ember-check-ops-XXXXXX", *err = NULL;
	size_t		 len = 300 * 1024;
	char		*big = xmalloc(len);
	struct output	*out;
	struct stat	 st;
	int		 fd;

	memset(big, 'x', len);
	ck_assert_int_ne(fd = mkstemp(path), -1);
	unlink(path);
	out = output_create(fd);
	output_set_guard(out, ops_guard_cb);
	ops_guard_cut = 0;
	ck_assert_int_eq(output_record(out, big, len, 0, &err), 0);
	memset(big, 0, len);	/* the cut, after the record was taken */
	ck_assert_int_eq(fstat(fd, &st), 0);
	ck_assert_int_eq(st.st_size, 0);	/* held */
	ck_assert_int_eq(output_flush(out, &err), 0);
	ck_assert_int_eq(fstat(fd, &st), 0);
	ck_assert_int_eq(st.st_size, WMSG_BATCH_SIZE + 4 + len);
	ck_assert_int_eq(pread(fd, big, 1, WMSG_BATCH_SIZE + 4 + len - 1), 1);
	ck_assert_int_eq(big[0], 'x');	/* the bytes taken, not the zeros */

	ops_guard_cut = 1;
	ck_assert_int_eq(output_record(out, big, len, 0, &err), 0);
	ck_assert_int_eq(output_flush(out, &err), -1);
	ck_assert_str_eq(err, "the file shrank while it was read");
	free(err);
	ck_assert_int_eq(fstat(fd, &st), 0);
	ck_assert_int_eq(st.st_size, WMSG_BATCH_SIZE + 4 + len);
	output_discard(out);
	output_set_guard(out, NULL);
	output_free(out);
	close(fd);
	free(big);
}
END_TEST

START_TEST(test_output_stop_halts_the_task)
{
	struct run	 t = { .mode = MODE_RECORDS };
	struct output	*out;
	struct plan	*plan;
	int64_t		 metrics[EMBER_METRIC_COUNT];
	char		*err = NULL;
	int		 fd, asked = 0;

	t.plan = plan = ops_plan("{\"source\": {\"range\": {\"start\": 0, "
	    "\"end\": 1000000}}, \"partitions\": 1}");
	ck_assert_int_ne(fd = open("/dev/null", O_WRONLY | O_CLOEXEC), -1);
	out = output_create(fd);
	output_set_stop_check(out, ops_stop_now_cb, &asked);
	ck_assert_int_eq(run_execute(&t, out, metrics, &err), 0);
	ck_assert_int_eq(asked, 1);
	/* Stopped at the first look, a tick's worth of records in. */
	ck_assert_int_lt(metrics[EMBER_METRIC_RECORDS_IN], 1000000);
	ck_assert_int_eq(metrics[EMBER_METRIC_RECORDS_OUT],
	    metrics[EMBER_METRIC_RECORDS_IN] - 1);
	output_free(out);
	close(fd);
	plan_free(plan);
}
END_TEST

/* Write a text file of lines of words, some empty, some with two spaces
 * between words; with or without a final newline.  Its path. */
static char *
ops_words_file(uint64_t seed, int lines, int final_newline)
{
	static const char *const words[] = { "", "a", "qu", "quick", "quack",
	    "abbc", "cab", "caba", "seven77", "eight888", "fifteen15151515",
	    "sixteen161616166", "seventeen17171717", "aquick", "ab", "b",
	    "a-word-of-forty-bytes-that-is-long-xxxxx", "qu k", "abbbbbbc" };
	char	 path[] = "/tmp/ember-check-blocks-XXXXXX";
	FILE	*fp;
	int	 fd, line, i, n;

	ck_assert_int_ne(fd = mkstemp(path), -1);
	ck_assert_ptr_nonnull(fp = fdopen(fd, "w"));
	for (line = 0; line < lines; line++) {
		seed = seed * 6364136223846793005ULL + 1442695040888963407ULL;
		n = (int)((seed >> 33) % 12);
		for (i = 0; i < n; i++) {
			seed = seed * 6364136223846793005ULL +
			    1442695040888963407ULL;
			if (i > 0)
				fputs((seed >> 60) == 0 ? "  " : " ", fp);
			fputs(words[(seed >> 33) %
			    (sizeof words / sizeof *words)], fp);
		}
		if (line + 1 < lines || final_newline)
			fputc('\n', fp);
	}
	ck_assert_int_eq(fclose(fp), 0);
	return (strdup(path));
}

/* A text plan over path, with its size as the job saw it. */
static struct plan *
ops_text_plan(const char *path, const char *ops, int partitions)
{
	struct plan	*plan;
	struct stat	 st;
	char		*text;

	ck_assert_int_ne(asprintf(&text, "{\"source\": {\"text\": {\"paths\": "
	    "[\"%s\"]}}, \"partitions\": %d, \"ops\": [%s]}", path,
	    partitions, ops), -1);
	plan = ops_plan(text);
	free(text);
	ck_assert_int_eq(stat(path, &st), 0);
	plan->files[0].size = st.st_size;
	return (plan);
}

/* Run a partition of plan in mode, the first skip records left out, and
 * read what it sent into s. */
static void
ops_text_run(struct plan *plan, int partition, enum taskdesc_mode mode,
    int64_t skip, struct sent *s)
{
	struct run	 t = { .mode = mode };
	struct output	*o;
	char		*err = NULL;
	char		 tmp[] = "/tmp/ember-check-out-XXXXXX";
	int64_t		 metrics[EMBER_METRIC_COUNT];
	int		 fd;

	ck_assert_int_ne(fd = mkstemp(tmp), -1);
	unlink(tmp);
	o = output_create(fd);
	t.plan = plan;
	t.partition = partition;
	t.skip = skip;
	output_reset(o);
	ck_assert_msg(run_execute(&t, o, metrics, &err) == 0, "%s", err);
	ck_assert_int_eq(output_finish(o, metrics, EMBER_METRIC_COUNT, 0,
	    &err), 0);
	output_free(o);
	sent_read(fd, s);
	close(fd);
}

/* Run every partition of a text plan over path in mode; sum the records
 * in and out, and the pairs' counts (count_by_value) into a JSON object
 * (nulls under "null"). */
static void
ops_text_task(const char *path, const char *ops, int partitions,
    enum taskdesc_mode mode, int64_t *in, int64_t *out, json_t *pairs)
{
	struct sent	 s;
	struct plan	*plan;
	char		*key;
	int64_t		 n;
	size_t		 i;
	int		 p;

	plan = ops_text_plan(path, ops, partitions);
	*in = *out = 0;
	for (p = 0; p < partitions; p++) {
		ops_text_run(plan, p, mode, 0, &s);
		*in += s.metrics[EMBER_METRIC_RECORDS_IN];
		*out += s.metrics[EMBER_METRIC_RECORDS_OUT];
		for (i = 0; pairs != NULL && i < s.c.n; i += 2) {
			key = s.c.recs[i].null ? strdup("null") :
			    strndup(s.c.data + s.c.recs[i].off,
			    s.c.recs[i].len);
			n = json_integer_value(json_object_get(pairs, key));
			json_object_set_new(pairs, key,
			    json_integer(n + ops_pair_count(&s.c, i + 1)));
			free(key);
		}
		capture_clear(&s.c);
	}
	plan_free(plan);
}

/*
 * Count the words of path in partitions, in blocks and a record at a time
 * (a filter after the split takes them one by one), and check that both
 * read and count the same: the counts, which the caller frees; *in, the
 * lines read.
 */
static json_t *
ops_word_counts_agree(const char *path, int partitions, int64_t *in)
{
	json_t	*fast = json_object(), *slow = json_object();
	int64_t	 out, in2, out2;

	ops_text_task(path, "{\"flat_map\": {\"split\": \" \"}}",
	    partitions, MODE_COUNT_BY_VALUE, in, &out, fast);
	ops_text_task(path, "{\"flat_map\": {\"split\": \" \"}}, "
	    "{\"filter\": {\"contains\": \"\"}}", partitions,
	    MODE_COUNT_BY_VALUE, &in2, &out2, slow);
	ck_assert_int_eq(*in, in2);
	ck_assert_int_eq(out, out2);
	ck_assert_msg(json_equal(fast, slow), "the counts differ: %s, want %s",
	    json_dumps(fast, 0), json_dumps(slow, 0));
	json_decref(slow);
	return (fast);
}

START_TEST(test_ops_text_blocks)
{
	/* Each pattern with a literal before it, and the same pattern that
	 * shows none (a group first), which is matched a line at a time. */
	static const char *const patterns[][2] = {
		{ "ab+c", "(?:ab+c)" },
		{ "\\\\bqu[a-z]+k\\\\b", "(?:\\\\bqu[a-z]+k\\\\b)" },
		{ "^quick", "(?:^quick)" },
		{ "caba?", "(?:caba?)" },
		{ "qu k", "(?:qu k)" },
		{ "b{2}", "(?:b{2})" },
		{ "seven77 e", "(?:seven77 e)" },
		{ "x", "(?:x)" },
	};
	json_t		*fast;
	char		*path, *ops;
	int64_t		 in, out, in2, out2;
	size_t		 i;
	int		 final, partitions;

	for (final = 0; final < 2; final++) {
		path = ops_words_file(42 + (uint64_t)final, 3000, final);
		for (partitions = 1; partitions <= 7; partitions += 3) {
			for (i = 0; i < sizeof patterns / sizeof *patterns;
			    i++) {
				ck_assert_int_ne(asprintf(&ops, "{\"filter\": "
				    "{\"regex\": \"%s\"}}", patterns[i][0]),
				    -1);
				ops_text_task(path, ops, partitions, MODE_COUNT,
				    &in, &out, NULL);
				free(ops);
				ck_assert_int_ne(asprintf(&ops, "{\"filter\": "
				    "{\"regex\": \"%s\"}}", patterns[i][1]),
				    -1);
				ops_text_task(path, ops, partitions, MODE_COUNT,
				    &in2, &out2, NULL);
				free(ops);
				ck_assert_int_eq(in, 3000);
				ck_assert_int_eq(in2, 3000);
				ck_assert_msg(out == out2, "%s: %lld lines, "
				    "want %lld", patterns[i][0],
				    (long long)out, (long long)out2);
			}

			/* A word count in blocks, and a record at a time. */
			fast = ops_word_counts_agree(path, partitions, &in);
			ck_assert_int_gt(json_object_size(fast), 15);
			json_decref(fast);
		}
		unlink(path);
		free(path);
	}
}
END_TEST

/* Append a line of n bytes of words without a space (longer than a block
 * of the text source) and lines of words after it. */
static void
ops_words_long_line(const char *path, size_t n)
{
	FILE	*fp;
	size_t	 i;

	ck_assert_ptr_nonnull(fp = fopen(path, "a"));
	for (i = 0; i < n; i++)
		fputc("quickab"[i % 7], fp);
	fputs("\nquick ab\n\nab quick\n", fp);
	ck_assert_int_eq(fclose(fp), 0);
}

START_TEST(test_ops_text_blocks_large)
{
	json_t		*fast;
	char		*path;
	int64_t		 in;
	int		 partitions;

	/* Blocks of the mapped file end inside it, and a line is longer
	 * than a block. */
	path = ops_words_file(7, 60000, 1);
	ops_words_long_line(path, 700 * 1024);
	for (partitions = 1; partitions <= 9; partitions += 4) {
		fast = ops_word_counts_agree(path, partitions, &in);
		ck_assert_int_eq(in, 60004);
		json_decref(fast);
	}
	unlink(path);
	free(path);
}
END_TEST

/* Send every partition of a text plan over path as records, the first
 * skip of each left out (a recompute's), into all, in order. */
static void
ops_text_sent(const char *path, const char *ops, int partitions,
    int64_t skip, struct capture *all, int64_t *in)
{
	struct sent	 s;
	struct plan	*plan;
	struct record	 r = { NULL, 0, 0, 0, NULL, 0 };
	size_t		 i;
	int		 p;

	plan = ops_text_plan(path, ops, partitions);
	capture_init(all);
	*in = 0;
	for (p = 0; p < partitions; p++) {
		ops_text_run(plan, p, MODE_RECORDS, skip, &s);
		*in += s.metrics[EMBER_METRIC_RECORDS_IN];
		ck_assert_int_eq(s.metrics[EMBER_METRIC_RECORDS_OUT],
		    (int64_t)s.c.n);
		for (i = 0; i < s.c.n; i++) {
			r.data = s.c.data + s.c.recs[i].off;
			r.len = s.c.recs[i].len;
			r.null = s.c.recs[i].null;
			capture_push_cb(&all->op, &r);
		}
		capture_clear(&s.c);
	}
	plan_free(plan);
}

/* The records of path sent from blocks of lines (no ops: the output takes
 * them) and a record at a time (a filter that takes them so) are the
 * same, and so are the records read; *n says how many were sent. */
static void
ops_text_sent_agree(const char *path, int partitions, int64_t skip,
    size_t *n)
{
	struct capture	fast, slow;
	int64_t		in, in2;
	size_t		i;

	ops_text_sent(path, "", partitions, skip, &fast, &in);
	ops_text_sent(path, "{\"filter\": {\"contains\": \"\"}}", partitions,
	    skip, &slow, &in2);
	ck_assert_int_eq(in, in2);
	ck_assert_uint_eq(fast.n, slow.n);
	for (i = 0; i < fast.n; i++) {
		ck_assert_msg(fast.recs[i].len == slow.recs[i].len &&
		    fast.recs[i].null == slow.recs[i].null &&
		    memcmp(fast.data + fast.recs[i].off,
		    slow.data + slow.recs[i].off, fast.recs[i].len) == 0,
		    "record %zu differs (%zu bytes, want %zu)", i,
		    fast.recs[i].len, slow.recs[i].len);
	}
	*n = fast.n;
	capture_clear(&fast);
	capture_clear(&slow);
}

START_TEST(test_ops_text_lines_sent)
{
	char	*path, tmp[] = "/tmp/ember-check-short-XXXXXX";
	FILE	*fp;
	size_t	 n;
	int	 final, partitions, fd, i;

	/* Empty lines, with and without a final newline. */
	for (final = 0; final < 2; final++) {
		path = ops_words_file(3 + (uint64_t)final, 3000, final);
		for (partitions = 1; partitions <= 7; partitions += 3) {
			ops_text_sent_agree(path, partitions, 0, &n);
			ck_assert_uint_eq(n, 3000);
			ops_text_sent_agree(path, partitions, 100, &n);
			ck_assert_uint_eq(n, 3000 - 100 * (size_t)partitions);
		}
		unlink(path);
		free(path);
	}
	/* A line longer than a batch, and blocks in a mapped file. */
	path = ops_words_file(7, 60000, 1);
	ops_words_long_line(path, 700 * 1024);
	for (partitions = 1; partitions <= 9; partitions += 4) {
		ops_text_sent_agree(path, partitions, 0, &n);
		ck_assert_uint_eq(n, 60004);
	}
	ops_text_sent_agree(path, 1, 59999, &n);
	ck_assert_uint_eq(n, 5);
	unlink(path);
	free(path);
	/* Lines of a byte: a block's records take more than the buffer. */
	ck_assert_int_ne(fd = mkstemp(tmp), -1);
	ck_assert_ptr_nonnull(fp = fdopen(fd, "w"));
	for (i = 0; i < 400000; i++)
		fputs(i % 3 == 0 ? "\n" : "a\n", fp);
	ck_assert_int_eq(fclose(fp), 0);
	for (partitions = 1; partitions <= 3; partitions += 2) {
		ops_text_sent_agree(tmp, partitions, 0, &n);
		ck_assert_uint_eq(n, 400000);
	}
	unlink(tmp);
}
END_TEST

START_TEST(test_ops_text_blocks_wide)
{
	char		 path[] = "/tmp/ember-check-wide-XXXXXX";
	json_t		*fast;
	FILE		*fp;
	uint64_t	 seed = 9;
	int64_t		 in;
	int		 fd, line, i, kind;

	/*
	 * The table grows past its sparse size and settles while blocks are
	 * counted: 40,000 distinct words of 2 to 17 bytes, some lines with
	 * empty pieces; then short words of a few, between which every new
	 * key is long (and grows the table at its turn), so that the short
	 * ones after a growth must be looked up in the new table.
	 */
	for (kind = 0; kind < 2; kind++) {
		memcpy(path + sizeof path - 7, "XXXXXX", 6);
		ck_assert_int_ne(fd = mkstemp(path), -1);
		ck_assert_ptr_nonnull(fp = fdopen(fd, "w"));
		for (line = 0; line < 20000; line++) {
			for (i = 0; i < 8; i++) {
				seed = seed * 6364136223846793005ULL +
				    1442695040888963407ULL;
				if (kind == 1 && i == 4)
					fprintf(fp, " a-long-piece-no-%d", line);
				else if (kind == 1)
					fprintf(fp, i == 0 ? "%s" : " %s",
					    (seed >> 61) % 3 == 0 ? "ab" :
					    (seed >> 61) % 3 == 1 ? "cd" : "e");
				else
					fprintf(fp, i == 0 ? "%.*s%u" :
					    (seed >> 62) == 0 ? "  %.*s%u" :
					    " %.*s%u", (int)((seed >> 40) % 13),
					    "abcdefghijklm",
					    (unsigned)((seed >> 20) % 40000));
			}
			fputc('\n', fp);
		}
		ck_assert_int_eq(fclose(fp), 0);
		fast = ops_word_counts_agree(path, 2, &in);
		ck_assert_int_eq(in, 20000);
		ck_assert_int_gt(json_object_size(fast), kind == 0 ? 30000 :
		    19000);
		json_decref(fast);
		unlink(path);
	}
}
END_TEST

#ifdef PIECES_SSE2
/* Find the delimiters of p[0, 64) with AVX2, built for it here. */
__attribute__((target("avx2"))) static uint64_t
ops_delims_avx2(const char *p, char sep)
{
	return (pieces_delims_avx2(p, sep));
}
#endif

START_TEST(test_ops_pieces_delims)
{
#ifdef PIECES_SSE2
	char		 buf[64];
	uint64_t	 seed = 11, want;
	int		 round, i;

	if (!__builtin_cpu_supports("avx2"))
		return;
	/* Both ways of finding the separators and newlines agree, over
	 * every byte value in every position. */
	for (round = 0; round < 4096; round++) {
		for (i = 0; i < 64; i++) {
			seed = seed * 6364136223846793005ULL +
			    1442695040888963407ULL;
			buf[i] = round % 3 == 0 ? (char)(seed >> 56) :
			    " \nab"[(seed >> 60) % 4];
		}
		want = pieces_delims(buf, _mm_set1_epi8(' '),
		    _mm_set1_epi8('\n'));
		ck_assert_uint_eq(ops_delims_avx2(buf, ' '), want);
		want = pieces_delims(buf, _mm_set1_epi8((char)0xff),
		    _mm_set1_epi8('\n'));
		ck_assert_uint_eq(ops_delims_avx2(buf, (char)0xff), want);
	}
#endif
}
END_TEST

START_TEST(test_ops_count_byte)
{
	static const size_t	lens[] = { 0, 1, 15, 16, 17, 31, 32, 33, 63,
	    64, 65, 255 * 16, 255 * 32 - 1, 255 * 32, 255 * 32 + 1,
	    255 * 32 + 47, 3 * 255 * 32 + 5, 100000 };
	char			*buf;
	uint64_t		 seed = 3;
	size_t			 i, j, k, x, want, size = 100000 + 64;

	/* Every length across the counters' 255-step sums and the tails,
	 * at every alignment of a 32-byte load, mostly the byte counted
	 * (each byte counter fills up) or never. */
	buf = xmalloc(size);
	for (k = 0; k < 3; k++) {
		for (i = 0; i < size; i++) {
			seed = seed * 6364136223846793005ULL +
			    1442695040888963407ULL;
			buf[i] = k == 0 ? '\n' : k == 1 ? (char)(seed >> 56) :
			    "a\n"[(seed >> 60) & 1];
		}
		for (i = 0; i < sizeof lens / sizeof *lens; i++)
			for (j = 0; j < 33; j += 7) {
				want = 0;
				for (x = 0; x < lens[i]; x++)
					want += buf[j + x] == '\n';
				ck_assert_uint_eq(ops_count_byte(buf + j, lens[i],
				    '\n'), want);
			}
	}
	free(buf);
}
END_TEST

/* hash_mix as a plain 128-bit product: what the worker's hash must give
 * (the shuffle's partitions depend on it), however it is computed. */
static uint64_t
ops_mix_plain(uint64_t a, uint64_t b)
{
	__uint128_t	r = (__uint128_t)a * b;

	return ((uint64_t)r ^ (uint64_t)(r >> 64));
}

START_TEST(test_ops_hash_mix)
{
	static const uint64_t	edges[] = { 0, 1, 2, 0xff, 0xffffffffULL,
	    0x100000000ULL, 0x8000000000000000ULL, ~0ULL, ~0ULL - 1 };
	uint64_t		seed = 5, a, b;
	size_t			i, j;
	int			round;

	for (i = 0; i < sizeof edges / sizeof *edges; i++)
		for (j = 0; j < sizeof edges / sizeof *edges; j++)
			ck_assert_uint_eq(hash_mix(edges[i], edges[j]),
			    ops_mix_plain(edges[i], edges[j]));
	for (round = 0; round < 100000; round++) {
		seed = seed * 6364136223846793005ULL + 1442695040888963407ULL;
		a = seed;
		seed = seed * 6364136223846793005ULL + 1442695040888963407ULL;
		b = seed;
		ck_assert_uint_eq(hash_mix(a, b), ops_mix_plain(a, b));
	}
	/* A value fixed before the product was computed in place. */
	ck_assert_uint_eq(hash_short(0x6b63697571ULL, 0, 5),
	    ops_mix_plain(0x6b63697571ULL ^ 0xa0761d6478bd642fULL,
	    0xe7037ed1a0b428dbULL ^ 5));
}
END_TEST

/* Build the ops suite. */
Suite *
ops_suite(void)
{
	Suite	*s = suite_create("ops");
	TCase	*tc;

	tc = tcase_create("ops");
	tcase_set_timeout(tc, 30);
	tcase_add_test(tc, test_ops_none);
	tcase_add_test(tc, test_ops_filter_contains);
	tcase_add_test(tc, test_ops_filter_regex);
	tcase_add_test(tc, test_ops_maps);
	tcase_add_test(tc, test_ops_map_field);
	tcase_add_test(tc, test_ops_map_json);
	tcase_add_test(tc, test_ops_flat_map_split);
	tcase_add_test(tc, test_ops_sample);
	tcase_add_test(tc, test_ops_limit);
	tcase_add_test(tc, test_ops_long_records);
	tcase_add_test(tc, test_ops_missing_broadcast);
	tcase_add_test(tc, test_ops_broadcast_corrupt_index);
	suite_add_tcase(s, tc);

	tc = tcase_create("modes");
	tcase_set_timeout(tc, 30);
	tcase_add_test(tc, test_ops_reduce);
	tcase_add_test(tc, test_ops_count_by_value);
	tcase_add_test(tc, test_ops_count_by_value_wide);
	tcase_add_test(tc, test_ops_count_by_value_after_another);
	tcase_add_test(tc, test_ops_text_blocks);
	tcase_add_test(tc, test_ops_text_blocks_large);
	tcase_add_test(tc, test_ops_text_lines_sent);
	tcase_add_test(tc, test_ops_text_blocks_wide);
	tcase_add_test(tc, test_ops_pieces_delims);
	tcase_add_test(tc, test_ops_hash_mix);
	tcase_add_test(tc, test_ops_count_byte);
	tcase_add_test(tc, test_ops_save);
	tcase_add_test(tc, test_ops_save_fails_midway);
	suite_add_tcase(s, tc);

	tc = tcase_create("output");
	tcase_set_timeout(tc, 30);
	tcase_add_test(tc, test_output_sends_stale_records);
	tcase_add_test(tc, test_output_guard_holds_big_records);
	tcase_add_test(tc, test_output_stop_halts_the_task);
	suite_add_tcase(s, tc);

	return (s);
}
