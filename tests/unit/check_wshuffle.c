/*
 * Tests for worker/shuffle.c, worker/kvfold.c and worker/kvtable.c: map
 * tasks of a stage
 * (mode shuffle) write their shuffle files in a directory as emberd
 * would pass it, and the next stage's tasks read them back through a
 * shuffle source, each wide op's reduce side held to what plain code
 * computes; a lost map file fails the task with SHUFFLE_LOST.
 */
#include <sys/stat.h>

#include <fcntl.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "frame.h"
#include "keyed.h"
#include "kvfold.h"
#include "kvtable.h"
#include "ops.h"
#include "output.h"
#include "plan.h"
#include "protocol.h"
#include "run.h"
#include "suites.h"

/* The records a task sent, each rendered as text: "r", "~" (null),
 * "k=v", "k:[a,~]"; joined by spaces.  Or its error. */
struct wsh_out {
	char	*text;
	size_t	 used, size;
	int64_t	 records, bytes_out;
	char	*error;
	int	 n;		/* records rendered */
};

/* Append bytes to the rendering. */
static void
wsh_add(struct wsh_out *o, const char *p, size_t len)
{
	if (o->used + len + 1 > o->size) {
		o->size = (o->used + len + 1) * 2;
		ck_assert_ptr_nonnull(o->text = realloc(o->text, o->size));
	}
	memcpy(o->text + o->used, p, len);
	o->used += len;
	o->text[o->used] = '\0';
}

/* Render one decoded record. */
static void
wsh_render(struct wsh_out *o, const struct record *r)
{
	const char	*p = r->data, *v;
	size_t		 vlen;
	int		 vnull, first = 1;

	if (o->n++ > 0)
		wsh_add(o, " ", 1);
	if (r->kind == PLAN_KIND_RECORD) {
		if (r->null)
			wsh_add(o, "~", 1);
		else
			wsh_add(o, r->data, r->len);
		return;
	}
	wsh_add(o, r->key, r->klen);
	if (r->kind == PLAN_KIND_PAIR) {
		wsh_add(o, "=", 1);
		wsh_add(o, r->null ? "~" : r->data, r->null ? 1 : r->len);
		return;
	}
	wsh_add(o, ":[", 2);
	while (keyed_value_next(&p, r->data + r->len, &v, &vlen, &vnull)) {
		if (!first)
			wsh_add(o, ",", 1);
		first = 0;
		wsh_add(o, vnull ? "~" : v, vnull ? 1 : vlen);
	}
	wsh_add(o, "]", 1);
}

/* Read a task's output back from fd. */
static void
wsh_read(int fd, struct wsh_out *o)
{
	struct stat	 st;
	char		*buf, *p, *end;
	struct record	 r;
	size_t		 used;
	int32_t		 n, i, count;

	ck_assert_int_eq(fstat(fd, &st), 0);
	ck_assert_ptr_nonnull(buf = malloc((size_t)st.st_size + 1));
	ck_assert_int_eq(pread(fd, buf, (size_t)st.st_size, 0), st.st_size);
	p = buf;
	end = buf + st.st_size;
	wsh_add(o, "", 0);
	while (p < end) {
		n = be32_get((unsigned char *)p);
		p += 4;
		if (n == EMBER_RECORD_BATCH) {
			count = be32_get((unsigned char *)p);
			p += 8;
			for (i = 0; i < count; i++) {
				ck_assert_int_eq(keyed_get(p, (size_t)(end - p),
				    EMBER_MAX_BATCH, &r, &used), 1);
				wsh_render(o, &r);
				p += used;
			}
		} else if (n == EMBER_EXCEPTION_THROWN) {
			n = be32_get((unsigned char *)p);
			o->error = strndup(p + 4, (size_t)n);
			p += 4 + n;
		} else
			break;
	}
	free(buf);
}

/* A task of plan (stage JSON) with partitions, as a worker runs it. */
static int
wsh_task(int dirfd, const char *planj, int partitions, int partition,
    enum taskdesc_mode mode, int stage, int buckets, const char *opj,
    size_t memory, struct wsh_out *o)
{
	struct run	 t;
	struct output	*out;
	struct plan	*plan;
	json_t		*j, *op = NULL;
	char		 path[] = "/tmp/check-wshuffle-out-XXXXXX";
	char		*err = NULL;
	int64_t		 metrics[EMBER_METRIC_COUNT];
	struct stat	 st;
	size_t		 i;
	int		 fd, rc;

	memset(o, 0, sizeof *o);
	ck_assert_ptr_nonnull(j = json_loads(planj, 0, NULL));
	ck_assert_msg(plan_parse_stage(j, &plan, &err) == 0, "%s", err);
	json_decref(j);
	plan_set_partitions(plan, partitions);
	plan->partitions = partitions;
	/* A text source's files, as emberd would expand them. */
	for (i = 0; plan->source == PLAN_SOURCE_TEXT && i < plan->nfiles;
	    i++) {
		ck_assert_int_eq(stat(plan->files[i].path, &st), 0);
		plan->files[i].size = st.st_size;
	}
	if (opj != NULL)
		ck_assert_ptr_nonnull(op = json_loads(opj, 0, NULL));
	memset(&t, 0, sizeof t);
	t.plan = plan;
	t.partition = partition;
	t.mode = mode;
	t.source_dirfd = t.ckpt_dirfd = -1;
	t.shuffle_dir = "op1";
	t.shuffle_dirfd = dirfd;
	t.shuffle_stage = stage;
	t.shuffle_buckets = buckets;
	t.shuffle_op = op;
	t.shuffle_memory = (int64_t)memory;
	ck_assert_int_ne(fd = mkstemp(path), -1);
	unlink(path);
	out = output_create(fd);
	output_reset(out);
	rc = run_execute(&t, out, metrics, &err);
	if (rc == 0)
		output_flush(out, NULL);
	else
		output_fail(out, err);
	free(err);
	output_free(out);
	wsh_read(fd, o);
	o->records = metrics[EMBER_METRIC_RECORDS_OUT];
	o->bytes_out = metrics[EMBER_METRIC_BYTES_OUT];
	close(fd);
	json_decref(op);
	plan_free(plan);
	return (rc);
}

/* A temporary directory, as the uid's shuffle directory. */
static int
wsh_dir(char *path)
{
	int	fd;

	ck_assert_ptr_nonnull(mkdtemp(path));
	ck_assert_int_ne(fd = open(path, O_RDONLY | O_DIRECTORY), -1);
	return (fd);
}

/* Remove the directory and what the tasks left in it. */
static void
wsh_dir_remove(const char *path, int fd)
{
	char	cmd[256];

	close(fd);
	snprintf(cmd, sizeof cmd, "rm -rf '%s'", path);
	ck_assert_int_eq(system(cmd), 0);
}

/*
 * Run an operation of two stages: maps map tasks of a parallelize plan
 * of records with ops (JSON text), writing for op; then parts reduce
 * tasks of a shuffle source with ops2 (records: a JSON array, or a
 * source object).  The reduce tasks' renderings,
 * partition after partition, "|" between.  memory: the writers'.
 */
static char *
wsh_run(const char *records, int maps, const char *ops, const char *op,
    int parts, const char *ops2, size_t memory, char **error)
{
	char		 dir[] = "/tmp/check-wshuffle-XXXXXX", *planj, *all;
	struct wsh_out	 o;
	size_t		 used = 0;
	int		 dfd, p;

	dfd = wsh_dir(dir);
	*error = NULL;
	if (*records == '{')	/* a source of its own */
		ck_assert_int_ne(asprintf(&planj, "{\"source\": %s, "
		    "\"partitions\": %d, \"ops\": [%s]}", records, maps, ops),
		    -1);
	else
		ck_assert_int_ne(asprintf(&planj, "{\"source\": "
		    "{\"parallelize\": {\"records\": %s}}, \"partitions\": "
		    "%d, \"ops\": [%s]}", records, maps, ops), -1);
	for (p = 0; p < maps; p++) {
		if (wsh_task(dfd, planj, maps, p, MODE_SHUFFLE, 0, parts, op,
		    memory, &o) == -1) {
			/* A map task failed: the operation did. */
			*error = o.error;
			free(o.text);
			free(planj);
			wsh_dir_remove(dir, dfd);
			return (NULL);
		}
		ck_assert_int_eq(o.used, 0);	/* it sends no records */
		ck_assert_int_gt(o.bytes_out, 0);
		free(o.text);
	}
	free(planj);
	ck_assert_int_ne(asprintf(&planj, "{\"source\": {\"shuffle\": {\"op\": "
	    "%s, \"inputs\": [{\"stage\": 0, \"maps\": %d}]}}, \"partitions\": "
	    "%d, \"ops\": [%s]}", op, maps, parts, ops2), -1);
	ck_assert_ptr_nonnull(all = calloc(1, 1));
	for (p = 0; p < parts; p++) {
		if (wsh_task(dfd, planj, parts, p, MODE_RECORDS, 1, 0, NULL,
		    memory, &o) == -1) {
			*error = o.error;
			free(o.text);
			break;
		}
		ck_assert_ptr_nonnull(all = realloc(all, used + o.used + 2));
		if (p > 0)
			all[used++] = '|';
		memcpy(all + used, o.text, o.used + 1);
		used += o.used;
		free(o.text);
	}
	free(planj);
	wsh_dir_remove(dir, dfd);
	return (all);
}

/* Run and expect the renderings of every partition. */
static void
wsh_expect(const char *records, int maps, const char *ops, const char *op,
    int parts, const char *want)
{
	char	*got, *error;

	got = wsh_run(records, maps, ops, op, parts, "", 1 << 20, &error);
	ck_assert_msg(error == NULL, "%s: %s", op, error);
	ck_assert_str_eq(got, want);
	free(got);
}

#define WSH_WORDS "[\"a,1\", \"b,2\", \"a,3\", \"c,x\", \"b,4\", \"a,5\", " \
	"\"nokey\", null]"
#define WSH_KEY_BY "{\"key_by\": {\"field\": {\"sep\": \",\", \"index\": 0}, " \
	"\"value\": {\"field\": {\"sep\": \",\", \"index\": 1}}}}"

START_TEST(test_wshuffle_group_by_key)
{
	/* "nokey" has no field 1: dropped; null dropped.  Values keep
	 * their input order across map tasks. */
	wsh_expect(WSH_WORDS, 3, WSH_KEY_BY, "{\"group_by_key\": {}}", 1,
	    "a:[1,3,5] b:[2,4] c:[x]");
}
END_TEST

START_TEST(test_wshuffle_reduce_by_key)
{
	const char	*nums = "[\"a,1\", \"b,2\", \"a,3\", \"b,4\", "
			    "\"a,5\", \"c,9223372036854775807\", \"c,1\", "
			    "\"d,1.5\", \"d,2\"]";
	char		*got, *error;

	wsh_expect(nums, 3, WSH_KEY_BY, "{\"reduce_by_key\": {\"fn\": "
	    "\"sum\"}}", 1, "a=9 b=6 c=9.223372036854776e+18 d=3.5");
	wsh_expect(nums, 2, WSH_KEY_BY, "{\"reduce_by_key\": {\"fn\": "
	    "\"min\"}}", 1, "a=1 b=2 c=1 d=1.5");
	wsh_expect(nums, 2, WSH_KEY_BY, "{\"reduce_by_key\": {\"fn\": "
	    "\"max\"}}", 1, "a=5 b=4 c=9223372036854775807 d=2");
	/* Counts are summed across map tasks, not counted. */
	wsh_expect(WSH_WORDS, 3, WSH_KEY_BY, "{\"reduce_by_key\": {\"fn\": "
	    "\"count\"}}", 1, "a=3 b=2 c=1");
	wsh_expect(WSH_WORDS, 3, WSH_KEY_BY, "{\"reduce_by_key\": {\"fn\": "
	    "\"concat\", \"sep\": \"+\"}}", 1, "a=1+3+5 b=2+4 c=x");
	/* A value that is not a number fails the task, naming the key. */
	got = wsh_run(WSH_WORDS, 2, WSH_KEY_BY, "{\"reduce_by_key\": "
	    "{\"fn\": \"sum\"}}", 1, "", 1 << 20, &error);
	ck_assert_ptr_nonnull(error);
	ck_assert_str_eq(error, "reduce_by_key: key \"c\": value \"x\" is not "
	    "a number");
	free(error);
	free(got);
}
END_TEST

START_TEST(test_wshuffle_reduce_by_key_lone)
{
	/* A map task's lone value reads back on the reduce side as it came:
	 * 5.0 stays a double, so the sum is a double's (as a fold of the
	 * two values as they came gives), not the exact int64 9...998. */
	wsh_expect("[\"d,5.0\", \"d,9007199254740993\"]", 2, WSH_KEY_BY,
	    "{\"reduce_by_key\": {\"fn\": \"sum\"}}", 1,
	    "d=9007199254740996");
	wsh_expect("[\"d,5.0\", \"d,9007199254740993\"]", 1, WSH_KEY_BY,
	    "{\"reduce_by_key\": {\"fn\": \"sum\"}}", 1,
	    "d=9007199254740996");
	/* A lone int64 stays one; -0.0 a double. */
	wsh_expect("[\"a,-0.0\", \"b,-9223372036854775808\"]", 2,
	    WSH_KEY_BY, "{\"reduce_by_key\": {\"fn\": \"min\"}}", 1,
	    "a=-0 b=-9223372036854775808");
}
END_TEST

START_TEST(test_wshuffle_reduce_by_key_drained)
{
	static char	 recs[128 * 1024], want[16 * 1024];
	char		*got, *error;
	size_t		 used = 0, wused = 0;
	int		 i, k, sum[500];

	/* 3000 values of 500 keys summed in 4 KiB: the map side's table
	 * is written out many times over, and the writer combines what
	 * it wrote. */
	memset(sum, 0, sizeof sum);
	used += (size_t)snprintf(recs + used, sizeof recs - used, "[");
	for (i = 0; i < 3000; i++) {
		k = (i * 7) % 500;
		sum[k] += i;
		used += (size_t)snprintf(recs + used, sizeof recs - used,
		    "%s\"key-with-a-long-name-%03d,%d\"", i > 0 ? ", " : "",
		    k, i);
	}
	snprintf(recs + used, sizeof recs - used, "]");
	for (k = 0; k < 500; k++)
		wused += (size_t)snprintf(want + wused, sizeof want - wused,
		    "%skey-with-a-long-name-%03d=%d", k > 0 ? " " : "", k,
		    sum[k]);
	got = wsh_run(recs, 2, WSH_KEY_BY, "{\"reduce_by_key\": {\"fn\": "
	    "\"sum\"}}", 1, "", 4096, &error);
	ck_assert_ptr_null(error);
	ck_assert_str_eq(got, want);
	free(got);
}
END_TEST

START_TEST(test_wshuffle_reduce_by_key_pieces)
{
	char	 path[] = "/tmp/check-wshuffle-words-XXXXXX", *src, *got;
	char	*error;
	int	 fd;
	/* Words of 0 to 20 bytes, four times over (past the splitter's
	 * 64 bytes a step), then a last line without its newline. */
	static const char text[] = "a bb a  sixteen-bytes-16\n"
	    "seventeen-bytes17 a\n\nbb 3 -4 a-word-of-twenty-b\n"
	    "sixteen-bytes-16 3\n";
	int	 i;

	ck_assert_int_ne(fd = mkstemp(path), -1);
	for (i = 0; i < 4; i++)
		ck_assert_int_eq(write(fd, text, sizeof text - 1),
		    sizeof text - 1);
	ck_assert_int_eq(write(fd, "a", 1), 1);
	close(fd);
	ck_assert_int_ne(asprintf(&src, "{\"text\": {\"paths\": [\"%s\"]}}",
	    path), -1);
	/* The text source's blocks reach the table whole: the same counts
	 * as a record at a time would give. */
	got = wsh_run(src, 2, "{\"flat_map\": {\"split\": \" \"}}, "
	    "{\"key_by\": {}}", "{\"reduce_by_key\": {\"fn\": \"count\"}}",
	    1, "", 1 << 20, &error);
	ck_assert_ptr_null(error);
	ck_assert_str_eq(got, "=8 -4=4 3=8 a=13 a-word-of-twenty-b=4 bb=8 "
	    "seventeen-bytes17=4 sixteen-bytes-16=8");
	free(got);
	/* A sum fails on the first word that is not a number. */
	got = wsh_run(src, 1, "{\"flat_map\": {\"split\": \" \"}}, "
	    "{\"key_by\": {}}", "{\"reduce_by_key\": {\"fn\": \"sum\"}}",
	    1, "", 1 << 20, &error);
	ck_assert_ptr_nonnull(error);
	ck_assert_str_eq(error, "reduce_by_key: key \"a\": value \"a\" is not "
	    "a number");
	free(error);
	free(got);
	free(src);
	unlink(path);
}
END_TEST

START_TEST(test_wshuffle_partitions)
{
	char	*got, *error, *p;
	int	 n = 0;

	/* Four partitions: every key in exactly one, each whole. */
	got = wsh_run(WSH_WORDS, 2, WSH_KEY_BY, "{\"group_by_key\": {}}", 4,
	    "", 1 << 20, &error);
	ck_assert_ptr_null(error);
	for (p = got; (p = strchr(p, '|')) != NULL; p++)
		n++;
	ck_assert_int_eq(n, 3);
	ck_assert_ptr_nonnull(strstr(got, "a:[1,3,5]"));
	ck_assert_ptr_nonnull(strstr(got, "b:[2,4]"));
	ck_assert_ptr_nonnull(strstr(got, "c:[x]"));
	free(got);
}
END_TEST

START_TEST(test_wshuffle_distinct)
{
	wsh_expect("[\"b\", \"a\", null, \"b\", \"\", \"a\", null]", 3, "",
	    "{\"distinct\": {}}", 1, "~  a b");
	/* Pairs: the whole pair, so a key may come twice. */
	wsh_expect("[\"a,1\", \"a,2\", \"a,1\", \"b,1\"]", 2, WSH_KEY_BY,
	    "{\"distinct\": {}}", 1, "a=1 a=2 b=1");
}
END_TEST

START_TEST(test_wshuffle_sort_by)
{
	char		*got, *error, *p;
	const char	*recs = "[\"d\", \"b\", \"a\", \"e\", \"c\", \"b\", "
			    "\"f\", \"a\"]";

	/* Three partitions in order are one sorted stream. */
	wsh_expect(recs, 3, "", "{\"sort_by\": {}}", 1,
	    "a a b b c d e f");
	/* A null record first, then the empty one (split gives it with no
	 * bytes at all), over partitions. */
	wsh_expect("[\"b,\", null, \"a\"]", 2, "{\"flat_map\": {\"split\": "
	    "\",\"}}", "{\"sort_by\": {}}", 1, "~  a b");
	got = wsh_run("[\"b,\", null, \"a\", \"c\", \"\"]", 2, "{\"flat_map\": "
	    "{\"split\": \",\"}}", "{\"sort_by\": {}}", 3, "", 1 << 20, &error);
	ck_assert_ptr_null(error);
	for (p = got; *p != '\0'; p++)
		if (*p == '|')
			*p = ' ';
	ck_assert_str_eq(got, "~   a b c");
	free(got);
	wsh_expect("[\"10\", \"9\", \"100\", \"-1\", \"2.5\"]", 2, "",
	    "{\"sort_by\": {\"numeric\": true, \"descending\": true}}", 1,
	    "100 10 9 2.5 -1");
	/* A key that is not a number fails the task, naming it. */
	got = wsh_run("[\"1\", \"x\\\"y\"]", 1, "",
	    "{\"sort_by\": {\"numeric\": true}}", 1, "", 1 << 20, &error);
	ck_assert_ptr_null(got);
	ck_assert_str_eq(error, "sort_by: key \"x\\\"y\" is not a number");
	free(error);
	got = wsh_run("[null]", 1, "", "{\"sort_by\": {\"numeric\": true}}", 1,
	    "", 1 << 20, &error);
	ck_assert_str_eq(error, "sort_by: a null record is not a number");
	free(error);
	/* Stable: equal keys keep their input order. */
	wsh_expect("[\"k,1\", \"j,2\", \"k,3\", \"j,4\", \"k,5\"]", 2,
	    WSH_KEY_BY, "{\"sort_by\": {}}", 1, "j=2 j=4 k=1 k=3 k=5");
}
END_TEST

START_TEST(test_wshuffle_sort_by_ranges)
{
	char	*got, *error, *p, *prev = NULL;
	char	 recs[8192];
	size_t	 used = 0;
	int	 i;

	/* 400 keys over 4 partitions: each partition's keys all come after
	 * the one before's, and nothing is lost. */
	used += (size_t)snprintf(recs + used, sizeof recs - used, "[");
	for (i = 0; i < 400; i++)
		used += (size_t)snprintf(recs + used, sizeof recs - used,
		    "%s\"%03d\"", i > 0 ? ", " : "", (i * 37) % 400);
	snprintf(recs + used, sizeof recs - used, "]");
	got = wsh_run(recs, 3, "", "{\"sort_by\": {}}", 4, "", 1 << 20,
	    &error);
	ck_assert_ptr_null(error);
	for (p = got; *p != '\0'; p++)
		if (*p == '|')
			*p = ' ';
	for (i = 0, p = strtok(got, " "); p != NULL; p = strtok(NULL, " "),
	    i++) {
		if (prev != NULL)
			ck_assert_str_lt(prev, p);
		prev = p;
	}
	ck_assert_int_eq(i, 400);
	free(got);
}
END_TEST

START_TEST(test_wshuffle_repartition)
{
	char	*got, *error;

	/* Round robin from each map task's partition: every record once. */
	got = wsh_run("[\"1\", \"2\", \"3\", \"4\", \"5\", \"6\"]", 2, "",
	    "{\"repartition\": {\"partitions\": 3}}", 3, "", 1 << 20, &error);
	ck_assert_ptr_null(error);
	ck_assert_str_eq(got, "1 6|2 4|3 5");
	free(got);
}
END_TEST

START_TEST(test_wshuffle_spill)
{
	char	 recs[64 * 1024], *got, *error, *p, *prev = NULL;
	size_t	 used = 0;
	int	 i;

	/* 2000 records sorted in 4 KiB: the writer spills and merges. */
	used += (size_t)snprintf(recs + used, sizeof recs - used, "[");
	for (i = 0; i < 2000; i++)
		used += (size_t)snprintf(recs + used, sizeof recs - used,
		    "%s\"k%04d,%d\"", i > 0 ? ", " : "", (i * 7) % 500, i);
	snprintf(recs + used, sizeof recs - used, "]");
	got = wsh_run(recs, 2, WSH_KEY_BY, "{\"sort_by\": {}}", 1, "",
	    4096, &error);
	ck_assert_ptr_null(error);
	/* Sorted by key, and stable: within a key, values ascending (the
	 * input's order, map 0's first). */
	for (i = 0, p = strtok(got, " "); p != NULL; p = strtok(NULL, " "),
	    i++) {
		if (prev != NULL && strncmp(prev, p, 5) == 0)
			ck_assert_int_lt(atoi(prev + 6), atoi(p + 6));
		else if (prev != NULL)
			ck_assert_int_lt(strncmp(prev, p, 5), 0);
		prev = p;
	}
	ck_assert_int_eq(i, 2000);
	free(got);
}
END_TEST

/* Run map tasks of stage writing for op, as wsh_run does. */
static void
wsh_maps(int dfd, const char *records, int maps, const char *ops,
    const char *op, int stage, int parts)
{
	struct wsh_out	 o;
	char		*planj;
	int		 p;

	ck_assert_int_ne(asprintf(&planj, "{\"source\": {\"parallelize\": "
	    "{\"records\": %s}}, \"partitions\": %d, \"ops\": [%s]}", records,
	    maps, ops), -1);
	for (p = 0; p < maps; p++) {
		ck_assert_msg(wsh_task(dfd, planj, maps, p, MODE_SHUFFLE, stage,
		    parts, op, 1 << 20, &o) == 0, "map %d: %s", p, o.error);
		free(o.text);
	}
	free(planj);
}

/* Run the reduce tasks of two inputs (stages 0 and 1 of m0 and m1 maps);
 * their renderings, "|" between partitions. */
static char *
wsh_reduce2(int dfd, const char *op, int m0, int m1, int parts)
{
	struct wsh_out	 o;
	char		*planj, *all;
	size_t		 used = 0;
	int		 p;

	ck_assert_int_ne(asprintf(&planj, "{\"source\": {\"shuffle\": {\"op\": "
	    "%s, \"inputs\": [{\"stage\": 0, \"maps\": %d}, {\"stage\": 1, "
	    "\"maps\": %d}]}}, \"partitions\": %d}", op, m0, m1, parts), -1);
	ck_assert_ptr_nonnull(all = calloc(1, 1));
	for (p = 0; p < parts; p++) {
		ck_assert_msg(wsh_task(dfd, planj, parts, p, MODE_RECORDS, 2, 0,
		    NULL, 0, &o) == 0, "reduce %d: %s", p, o.error);
		ck_assert_ptr_nonnull(all = realloc(all, used + o.used + 2));
		if (p > 0)
			all[used++] = '|';
		memcpy(all + used, o.text, o.used + 1);
		used += o.used;
		free(o.text);
	}
	free(planj);
	return (all);
}

START_TEST(test_wshuffle_join)
{
	char		 dir[] = "/tmp/check-wshuffle-XXXXXX", *got;
	const char	*inner = "{\"join\": {}}", *left =
			    "{\"join\": {\"how\": \"left\"}}";
	int		 dfd;

	dfd = wsh_dir(dir);
	/* Left: a twice, b, d; right: a twice, b, c. */
	wsh_maps(dfd, "[\"a,1\", \"b,2\", \"a,3\", \"d,4\"]", 2, WSH_KEY_BY,
	    inner, 0, 1);
	wsh_maps(dfd, "[\"a,x\", \"c,y\", \"a,z\", \"b,w\"]", 3, WSH_KEY_BY,
	    inner, 1, 1);
	got = wsh_reduce2(dfd, inner, 2, 3, 1);
	ck_assert_str_eq(got, "a:[1,x] a:[1,z] a:[3,x] a:[3,z] b:[2,w]");
	free(got);
	wsh_dir_remove(dir, dfd);

	strcpy(dir + strlen(dir) - 6, "XXXXXX");
	dfd = wsh_dir(dir);
	wsh_maps(dfd, "[\"a,1\", \"b,2\", \"d,4\"]", 2, WSH_KEY_BY, left, 0,
	    1);
	wsh_maps(dfd, "[\"a,x\", \"c,y\"]", 1, WSH_KEY_BY, left, 1, 1);
	got = wsh_reduce2(dfd, left, 2, 1, 1);
	ck_assert_str_eq(got, "a:[1,x] b:[2,~] d:[4,~]");
	free(got);
	wsh_dir_remove(dir, dfd);
}
END_TEST

START_TEST(test_wshuffle_join_bounded)
{
	char		 dir[] = "/tmp/check-wshuffle-XXXXXX", *planj;
	const char	*op = "{\"join\": {}}";
	struct wsh_out	 o;
	int		 dfd;

	/* A key's right values are held while its left ones pass: within
	 * the task's memory, else the task fails saying so, never grows. */
	dfd = wsh_dir(dir);
	wsh_maps(dfd, "[\"a,1\"]", 1, WSH_KEY_BY, op, 0, 1);
	wsh_maps(dfd, "[\"a,xxxxxxxxxx\", \"a,yyyyyyyyyy\", \"a,zzzzzzzzzz\"]",
	    1, WSH_KEY_BY, op, 1, 1);
	ck_assert_int_ne(asprintf(&planj, "{\"source\": {\"shuffle\": {\"op\": "
	    "%s, \"inputs\": [{\"stage\": 0, \"maps\": 1}, {\"stage\": 1, "
	    "\"maps\": 1}]}}, \"partitions\": 1}", op), -1);
	ck_assert_int_eq(wsh_task(dfd, planj, 1, 0, MODE_RECORDS, 2, 0, NULL,
	    100, &o), 0);
	ck_assert_str_eq(o.text, "a:[1,xxxxxxxxxx] a:[1,yyyyyyyyyy] "
	    "a:[1,zzzzzzzzzz]");
	free(o.text);
	ck_assert_int_eq(wsh_task(dfd, planj, 1, 0, MODE_RECORDS, 2, 0, NULL,
	    30, &o), -1);
	ck_assert_str_eq(o.error, "join: key \"a\": its values on the right "
	    "are more than the 30 bytes of workers.shuffle_memory");
	free(o.error);
	free(o.text);
	free(planj);
	wsh_dir_remove(dir, dfd);
}
END_TEST

START_TEST(test_wshuffle_union)
{
	char		 dir[] = "/tmp/check-wshuffle-XXXXXX", *got;
	const char	*op = "{\"union\": {}}";
	int		 dfd;

	/* Partition p < 2: map p of the first; then the second's. */
	dfd = wsh_dir(dir);
	wsh_maps(dfd, "[\"1\", \"2\", \"3\"]", 2, "", op, 0, 1);
	wsh_maps(dfd, "[\"x\", null, \"z\"]", 3, "", op, 1, 1);
	got = wsh_reduce2(dfd, op, 2, 3, 5);
	ck_assert_str_eq(got, "1|2 3|x|~|z");
	free(got);
	wsh_dir_remove(dir, dfd);
}
END_TEST

START_TEST(test_wshuffle_lost)
{
	char		 dir[] = "/tmp/check-wshuffle-XXXXXX", path[256];
	const char	*op = "{\"group_by_key\": {}}";
	struct wsh_out	 o;
	char		*planj, c;
	int		 dfd, fd, p;

	dfd = wsh_dir(dir);
	ck_assert_int_ne(asprintf(&planj, "{\"source\": {\"parallelize\": "
	    "{\"records\": %s}}, \"partitions\": 2, \"ops\": [%s]}", WSH_WORDS,
	    WSH_KEY_BY), -1);
	for (p = 0; p < 2; p++) {
		ck_assert_int_eq(wsh_task(dfd, planj, 2, p, MODE_SHUFFLE, 3, 1,
		    op, 1 << 20, &o), 0);
		free(o.text);
	}
	free(planj);
	ck_assert_int_ne(asprintf(&planj, "{\"source\": {\"shuffle\": {\"op\": "
	    "%s, \"inputs\": [{\"stage\": 3, \"maps\": 2}]}}, \"partitions\": "
	    "1}", op), -1);
	/* A byte of map 1's entries flipped: its footer holds, the bucket's
	 * CRC does not, found as the merge reads it. */
	snprintf(path, sizeof path, "%s/op1/s3-m1.data", dir);
	ck_assert_int_ne(fd = open(path, O_RDWR), -1);
	ck_assert_int_eq(pread(fd, &c, 1, 6), 1);
	c ^= 0x20;
	ck_assert_int_eq(pwrite(fd, &c, 1, 6), 1);
	close(fd);
	ck_assert_int_eq(wsh_task(dfd, planj, 1, 0, MODE_RECORDS, 4, 0, NULL,
	    0, &o), -1);
	ck_assert_msg(strncmp(o.error, "SHUFFLE_LOST stage 3 map 1: ", 28) ==
	    0, "%s", o.error);
	free(o.error);
	free(o.text);
	/* Map 1's file cut short. */
	ck_assert_int_ne(fd = open(path, O_WRONLY), -1);
	ck_assert_int_eq(ftruncate(fd, 10), 0);
	close(fd);
	ck_assert_int_eq(wsh_task(dfd, planj, 1, 0, MODE_RECORDS, 4, 0, NULL,
	    0, &o), -1);
	ck_assert_msg(strncmp(o.error, "SHUFFLE_LOST stage 3 map 1: ", 28) ==
	    0, "%s", o.error);
	free(o.error);
	free(o.text);
	/* Map 0's file gone. */
	snprintf(path, sizeof path, "%s/op1/s3-m0.data", dir);
	ck_assert_int_eq(unlink(path), 0);
	ck_assert_int_eq(wsh_task(dfd, planj, 1, 0, MODE_RECORDS, 4, 0, NULL,
	    0, &o), -1);
	ck_assert_msg(strncmp(o.error, "SHUFFLE_LOST stage 3 map 0: ", 28) ==
	    0, "%s", o.error);
	free(o.error);
	free(o.text);
	free(planj);
	wsh_dir_remove(dir, dfd);
}
END_TEST

/* Fold values as a reduce side would; the result as text. */
static void
wsh_fold(enum plan_kv_fn fn, int partials, const char *const *vals,
    const char *want)
{
	struct kv_fold	*f = kv_fold_create(fn, ", ", 2, partials);
	const char	*v;
	size_t		 vlen;
	char		*err = NULL;

	kv_fold_begin(f);
	for (; *vals != NULL; vals++)
		ck_assert_int_eq(kv_fold_add(f, "k", 1, *vals, strlen(*vals), 0,
		    &err), 0);
	kv_fold_end(f, &v, &vlen);
	ck_assert_uint_eq(vlen, strlen(want));
	ck_assert_mem_eq(v, want, vlen);
	kv_fold_free(f);
}

START_TEST(test_wshuffle_fold)
{
	static const char *const ints[] = { "3", "-7", "+10", NULL };
	static const char *const reals[] = { "0.1", "0.2", NULL };
	static const char *const big[] = { "9223372036854775807", "1", NULL };
	struct kv_fold	*f;
	const char	*v;
	size_t		 vlen;
	char		*err = NULL;

	wsh_fold(PLAN_KV_SUM, 0, ints, "6");
	wsh_fold(PLAN_KV_MIN, 1, ints, "-7");
	wsh_fold(PLAN_KV_MAX, 0, ints, "10");
	wsh_fold(PLAN_KV_COUNT, 0, ints, "3");
	/* Partial counts are summed. */
	wsh_fold(PLAN_KV_COUNT, 1, ints, "6");
	wsh_fold(PLAN_KV_CONCAT, 0, ints, "3, -7, +10");
	wsh_fold(PLAN_KV_SUM, 0, reals, "0.30000000000000004");
	wsh_fold(PLAN_KV_MAX, 0, reals, "0.2");
	wsh_fold(PLAN_KV_SUM, 1, big, "9.223372036854776e+18");
	/* Null and text values. */
	f = kv_fold_create(PLAN_KV_SUM, NULL, 0, 0);
	kv_fold_begin(f);
	ck_assert_int_eq(kv_fold_add(f, "a\"b", 3, NULL, 0, 1, &err), -1);
	ck_assert_str_eq(err, "reduce_by_key: key \"a\\\"b\": value null is "
	    "not a number");
	free(err);
	ck_assert_int_eq(kv_fold_add(f, "k", 1, "1 ", 2, 0, &err), -1);
	free(err);
	/* A map task's partials: the value as it came, once checked. */
	ck_assert_int_eq(kv_fold_partial(f, "k", 1, "+10", 3, 0, &v, &vlen,
	    &err), 0);
	ck_assert_uint_eq(vlen, 3);
	ck_assert_mem_eq(v, "+10", 3);
	ck_assert_int_eq(kv_fold_partial(f, "k", 1, "ten", 3, 0, &v, &vlen,
	    &err), -1);
	ck_assert_str_eq(err, "reduce_by_key: key \"k\": value \"ten\" is not "
	    "a number");
	free(err);
	kv_fold_free(f);
	f = kv_fold_create(PLAN_KV_COUNT, NULL, 0, 0);
	ck_assert_int_eq(kv_fold_partial(f, "k", 1, NULL, 0, 1, &v, &vlen,
	    &err), 0);
	ck_assert_uint_eq(vlen, 1);
	ck_assert_mem_eq(v, "1", 1);
	kv_fold_free(f);
}
END_TEST

/* Drain a table into a string: "key=value" in key order. */
static int
wsh_drain_cb(void *arg, const char *key, size_t klen, const char *v,
    size_t vlen, __attribute__((unused)) char **err)
{
	char	**lines = arg, *line;
	size_t	  n;

	ck_assert_ptr_nonnull(line = malloc(klen + vlen + 2));
	for (n = 0; n < klen; n++)
		line[n] = key[n] == '\0' ? '@' : key[n];	/* shown */
	line[klen] = '=';
	memcpy(line + klen + 1, v, vlen);
	line[klen + 1 + vlen] = '\0';
	for (n = 0; lines[n] != NULL; n++)
		;
	ck_assert_uint_lt(n, 15);
	lines[n] = line;
	return (0);
}

/* Compare two strings, for qsort. */
static int
wsh_strcmp(const void *a, const void *b)
{
	return (strcmp(*(char *const *)a, *(char *const *)b));
}

/* Drain t; its partials, sorted, joined by spaces. */
static char *
wsh_drain(struct kv_table *t)
{
	char	*lines[16], *all;
	size_t	 n, used = 0;
	char	*err = NULL;

	memset(lines, 0, sizeof lines);
	ck_assert_int_eq(kv_table_drain(t, wsh_drain_cb, lines, &err), 0);
	for (n = 0; lines[n] != NULL; n++)
		;
	qsort(lines, n, sizeof *lines, wsh_strcmp);
	ck_assert_ptr_nonnull(all = calloc(1, 1024));
	for (n = 0; lines[n] != NULL; n++) {
		used += (size_t)snprintf(all + used, 1024 - used, "%s%s",
		    n > 0 ? " " : "", lines[n]);
		free(lines[n]);
	}
	return (all);
}

START_TEST(test_wshuffle_table)
{
	const char	*lk = "a key longer than sixteen bytes";
	struct kv_table	*t;
	char		*got;
	int		 i;

	t = kv_table_create(PLAN_KV_SUM);
	kv_table_add(t, "a", 1, 1, 1, 0);
	kv_table_add(t, "a", 1, 1, 2, 0);
	kv_table_add(t, "b", 1, 2, 0, 5.0);	/* lone: still a double */
	kv_table_add(t, "c", 1, 2, 0, 0.5);
	kv_table_add(t, "c", 1, 2, 0, 0.5);	/* a fold: kv_fold_end's */
	kv_table_add(t, "", 0, 1, -3, 0);
	kv_table_add(t, lk, strlen(lk), 1, 7, 0);
	kv_table_add(t, lk, strlen(lk), 1, 7, 0);
	kv_table_add(t, "sixteen bytes!!!", 16, 1, INT64_MAX, 0);
	kv_table_add(t, "sixteen bytes!!!", 16, 1, 1, 0);
	/* Keys that differ past the first word, and in length only. */
	kv_table_add(t, "abcdefgh1", 9, 1, 1, 0);
	kv_table_add(t, "abcdefgh2", 9, 1, 2, 0);
	kv_table_add(t, "a\0", 2, 1, 4, 0);
	ck_assert_uint_gt(kv_table_memory(t), 0);
	got = wsh_drain(t);
	ck_assert_str_eq(got, "=-3 a key longer than sixteen bytes=14 a=3 "
	    "a@=4 abcdefgh1=1 abcdefgh2=2 b=5.0 c=1 sixteen bytes!!!="
	    "9.223372036854776e+18");
	free(got);
	/* Drained, it is empty, and it grows again. */
	got = wsh_drain(t);
	ck_assert_str_eq(got, "");
	free(got);
	for (i = 0; i < 5000; i++)
		kv_table_add(t, (const char *)&i, sizeof i, 1, i, 0);
	for (i = 0; i < 5000; i++)
		kv_table_add(t, (const char *)&i, sizeof i, 1, i, 0);
	kv_table_free(t);

	t = kv_table_create(PLAN_KV_MIN);
	kv_table_add(t, "k", 1, 1, 3, 0);
	kv_table_add(t, "k", 1, 2, 0, 2.5);
	kv_table_add(t, "k", 1, 1, 4, 0);
	kv_table_add(t, "j", 1, 1, -1, 0);
	got = wsh_drain(t);
	ck_assert_str_eq(got, "j=-1 k=2.5");
	free(got);
	kv_table_free(t);
}
END_TEST

Suite *
wshuffle_suite(void)
{
	Suite	*s = suite_create("wshuffle");
	TCase	*tc;

	tc = tcase_create("reduce_by_key's fold");
	tcase_add_test(tc, test_wshuffle_fold);
	tcase_add_test(tc, test_wshuffle_table);
	suite_add_tcase(s, tc);

	tc = tcase_create("map and reduce sides");
	tcase_set_timeout(tc, 30);
	tcase_add_test(tc, test_wshuffle_group_by_key);
	tcase_add_test(tc, test_wshuffle_reduce_by_key);
	tcase_add_test(tc, test_wshuffle_reduce_by_key_lone);
	tcase_add_test(tc, test_wshuffle_reduce_by_key_drained);
	tcase_add_test(tc, test_wshuffle_reduce_by_key_pieces);
	tcase_add_test(tc, test_wshuffle_partitions);
	tcase_add_test(tc, test_wshuffle_distinct);
	tcase_add_test(tc, test_wshuffle_sort_by);
	tcase_add_test(tc, test_wshuffle_sort_by_ranges);
	tcase_add_test(tc, test_wshuffle_repartition);
	tcase_add_test(tc, test_wshuffle_spill);
	tcase_add_test(tc, test_wshuffle_join);
	tcase_add_test(tc, test_wshuffle_join_bounded);
	tcase_add_test(tc, test_wshuffle_union);
	tcase_add_test(tc, test_wshuffle_lost);
	suite_add_tcase(s, tc);
	return (s);
}
