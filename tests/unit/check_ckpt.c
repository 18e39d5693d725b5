/*
 * Tests for worker/checkpoint.c: partition files written and read back
 * (nulls, empty and large records), what a failed or cut file leaves, and
 * the helper verbs: a manifest only over every partition, removal, and the
 * clean that keeps what it must.
 */
#include <sys/stat.h>

#include <errno.h>
#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#include <jansson.h>

#include "checkpoint.h"
#include "ops.h"
#include "plan.h"
#include "suites.h"
#include "xmalloc.h"

#define CK_ID		"0b697aef-9a9d-44bf-a3db-6f881122a3e3"
#define CK_ID2		"5cf87b40-6b9c-4bea-a9fb-ea4171f59942"
#define CK_ID3		"6d1a2b3c-0000-4000-8000-00000000c0d3"
#define CK_ID4		"6d1a2b3c-0000-4000-8000-00000000c0d4"
#define CK_ID5		"6d1a2b3c-0000-4000-8000-00000000c0d5"

static char	ck_top[] = "/tmp/check_ckpt.XXXXXX";
static char	ck_dir[256];

/* A sink that keeps what reaches it as a JSON array (null for nulls). */
struct ck_capture {
	struct op	 op;
	json_t		*got;
};

static int
ck_push_cb(struct op *op, const struct record *r)
{
	struct ck_capture	*c = (struct ck_capture *)op;

	json_array_append_new(c->got, r->null ? json_null() :
	    json_stringn_nocheck(r->data, r->len));
	return (OP_OK);
}

static int
ck_finish_cb(__attribute__((unused)) struct op *op)
{
	return (OP_OK);
}

static void
ck_free_cb(__attribute__((unused)) struct op *op)
{
}

/* Make the uid's directory. */
static void
ck_setup(void)
{
	strcpy(ck_top, "/tmp/check_ckpt.XXXXXX");
	ck_assert_ptr_nonnull(mkdtemp(ck_top));
	snprintf(ck_dir, sizeof ck_dir, "%s/%s", ck_top, CK_ID);
}

static void
ck_teardown(void)
{
	char	cmd[512];

	snprintf(cmd, sizeof cmd, "rm -rf %s", ck_top);
	ck_assert_int_eq(system(cmd), 0);
}

/* ck_top, the uid's directory, as emberd passes it. */
static int
ck_top_fd(void)
{
	int	fd;

	ck_assert_int_ne(fd = open(ck_top, O_RDONLY | O_DIRECTORY), -1);
	return (fd);
}

/* Read partition p of the checkpoint at ck_dir: the records, or NULL
 * with *err. */
static json_t *
ck_read(int partition, char **err)
{
	struct ck_capture	 c;
	struct chain		*chain;
	struct plan		*plan;
	json_t			*j;
	int64_t			 in = 0;
	int			 rc, ufd;

	j = json_pack("{s:{s:s}}", "source", "checkpoint", CK_ID);
	ck_assert_int_eq(plan_parse(j, &plan, err), 0);
	json_decref(j);
	plan->partitions = 2;
	plan->checkpoint_dir = xstrdup(ck_dir);
	memset(&c, 0, sizeof c);
	c.op.push = ck_push_cb;
	c.op.finish = ck_finish_cb;
	c.op.free = ck_free_cb;
	c.got = json_array();
	chain = chain_create(plan, partition, NULL, &c.op, err);
	ck_assert_ptr_nonnull(chain);
	ufd = ck_top_fd();
	rc = ckpt_source_run(ck_dir, ufd, partition, chain, &in, err);
	close(ufd);
	chain_free(chain);
	plan_free(plan);
	if (rc != OP_OK) {
		json_decref(c.got);
		return (NULL);
	}
	ck_assert_int_eq(in, (int64_t)json_array_size(c.got));
	return (c.got);
}

/* Write partition p with the records of a JSON array; commit or not. */
static void
ck_write(int partition, json_t *records, int commit)
{
	struct ckpt_writer	*w;
	json_t			*r;
	char			*err = NULL;
	size_t			 i;
	int			 ufd;

	ufd = ck_top_fd();
	w = ckpt_writer_open(ck_dir, ufd, partition, 1, &err);
	close(ufd);
	ck_assert_msg(w != NULL, "%s", err);
	json_array_foreach(records, i, r) {
		ck_assert_int_eq(ckpt_writer_record(w, json_string_value(r),
		    json_is_null(r) ? 0 : json_string_length(r),
		    json_is_null(r), &err), 0);
	}
	if (commit)
		ck_assert_int_eq(ckpt_writer_commit(w, &err), 0);
	ckpt_writer_free(w);
}

/* Is there a file at ck_dir/name? */
static int
ck_exists(const char *name)
{
	char		path[512];
	struct stat	st;

	snprintf(path, sizeof path, "%s/%s", ck_dir, name);
	return (lstat(path, &st) == 0);
}

START_TEST(test_ckpt_roundtrip)
{
	json_t	*records, *got, *empty;
	char	*big, *err = NULL;

	big = xmalloc(600 * 1024);
	memset(big, 'x', 600 * 1024);
	records = json_pack("[s,n,s,s%,s]", "first", "", big,
	    (size_t)600 * 1024, "last");
	ck_write(0, records, 1);
	empty = json_array();
	ck_write(1, empty, 1);
	json_decref(empty);
	ck_assert(ck_exists("part-00000"));
	ck_assert(!ck_exists(".part-00000.tmp"));
	got = ck_read(0, &err);
	ck_assert_msg(got != NULL, "%s", err);
	ck_assert(json_equal(got, records));
	json_decref(got);
	got = ck_read(1, &err);
	ck_assert_msg(got != NULL, "%s", err);
	ck_assert_int_eq(json_array_size(got), 0);
	json_decref(got);
	json_decref(records);
	free(big);
}
END_TEST

START_TEST(test_ckpt_not_committed)
{
	json_t	*records = json_pack("[s,s]", "a", "b");
	char	*err = NULL;

	ck_write(0, records, 0);
	json_decref(records);
	ck_assert(!ck_exists("part-00000"));
	ck_assert(!ck_exists(".part-00000.tmp"));
	ck_assert_ptr_null(ck_read(0, &err));
	ck_assert_ptr_nonnull(strstr(err, "part-00000"));
	free(err);
}
END_TEST

START_TEST(test_ckpt_cut_and_corrupt)
{
	json_t		*records = json_pack("[s,s]", "alpha", "beta");
	char		 path[512], *err = NULL;
	struct stat	 st;
	int		 fd;

	ck_write(0, records, 1);
	json_decref(records);
	snprintf(path, sizeof path, "%s/part-00000", ck_dir);
	ck_assert_int_eq(stat(path, &st), 0);
	/* Without its end mark, a file is refused, not read short. */
	ck_assert_int_eq(truncate(path, st.st_size - 4), 0);
	ck_assert_ptr_null(ck_read(0, &err));
	ck_assert_ptr_nonnull(strstr(err, "truncated"));
	free(err);
	/* A length no writer makes. */
	fd = open(path, O_WRONLY);
	ck_assert_int_eq(pwrite(fd, "\xff\xff\xff\x80", 4, 0), 4);
	close(fd);
	ck_assert_ptr_null(ck_read(0, &err));
	ck_assert_ptr_nonnull(strstr(err, "corrupt"));
	free(err);
}
END_TEST

START_TEST(test_ckpt_bad_dir)
{
	char	*err = NULL, dir[300];

	struct ckpt_writer	*w;
	int			 ufd = ck_top_fd();

	snprintf(dir, sizeof dir, "%s/not-an-id", ck_top);
	ck_assert_ptr_null(ckpt_writer_open(dir, ufd, 0, 0, &err));
	ck_assert_ptr_nonnull(strstr(err, "not a checkpoint directory"));
	free(err);
	/* Without the uid directory's descriptor, nothing is opened. */
	ck_assert_ptr_null(ckpt_writer_open(ck_dir, -1, 0, 0, &err));
	ck_assert_ptr_nonnull(strstr(err, "no directory descriptor"));
	free(err);
	/* The name's parent is only a name: the descriptor is what counts. */
	w = ckpt_writer_open("/nonexistent/" CK_ID, ufd, 0, 0, &err);
	ck_assert_msg(w != NULL, "%s", err);
	ckpt_writer_free(w);
	ck_assert_int_eq(rmdir(ck_dir), 0);
	/* A link where the checkpoint's directory goes is not followed. */
	ck_assert_int_eq(symlink("/tmp", ck_dir), 0);
	ck_assert_ptr_null(ckpt_writer_open(ck_dir, ufd, 0, 0, &err));
	free(err);
	close(ufd);
}
END_TEST

/* Run a verb on ck_top, passed as emberd passes it: a descriptor; its
 * reply. */
static json_t *
ck_verb(json_t *(*fn)(json_t *, const int *, size_t, int *, size_t *,
    char **), json_t *args)
{
	json_t	*reply;
	size_t	 nout = 9;
	char	*err = NULL;
	int	 fd;

	ck_assert_int_ne(fd = open(ck_top, O_RDONLY | O_DIRECTORY), -1);
	reply = fn(args, &fd, 1, NULL, &nout, &err);
	close(fd);
	json_decref(args);
	ck_assert_ptr_nonnull(reply);
	ck_assert_int_eq(nout, 0);
	return (reply);
}

START_TEST(test_ckpt_commit_and_remove)
{
	json_t	*reply, *records = json_pack("[s]", "a");

	ck_write(0, records, 1);
	json_decref(records);
	/* Partition 1 is missing: no manifest. */
	reply = ck_verb(ckpt_verb_commit, json_pack("{s:s,s:s,s:{s:i}}",
	    "dir", ck_top, "id", CK_ID, "manifest", "partitions", 2));
	ck_assert_ptr_nonnull(strstr(json_string_value(json_object_get(reply,
	    "error")), "part-00001"));
	json_decref(reply);
	ck_assert(!ck_exists("manifest.json"));
	reply = ck_verb(ckpt_verb_commit, json_pack("{s:s,s:s,s:{s:i}}",
	    "dir", ck_top, "id", CK_ID, "manifest", "partitions", 1));
	ck_assert_ptr_null(json_object_get(reply, "error"));
	json_decref(reply);
	ck_assert(ck_exists("manifest.json"));
	ck_assert(!ck_exists(".manifest.json.tmp"));
	/* A removal takes an id, never a path. */
	reply = ck_verb(ckpt_verb_remove, json_pack("{s:s,s:s}", "dir",
	    ck_top, "id", ".."));
	ck_assert_ptr_nonnull(json_object_get(reply, "error"));
	json_decref(reply);
	reply = ck_verb(ckpt_verb_remove, json_pack("{s:s,s:s}", "dir",
	    ck_top, "id", CK_ID));
	ck_assert_ptr_null(json_object_get(reply, "error"));
	json_decref(reply);
	ck_assert_int_eq(access(ck_dir, F_OK), -1);
	/* Again: nothing to remove is no error. */
	reply = ck_verb(ckpt_verb_remove, json_pack("{s:s,s:s}", "dir",
	    ck_top, "id", CK_ID));
	ck_assert_ptr_null(json_object_get(reply, "error"));
	json_decref(reply);
}
END_TEST

/* Milliseconds since the epoch, seconds from now. */
static json_int_t
ck_ms(int seconds)
{
	return (((json_int_t)time(NULL) + seconds) * 1000);
}

START_TEST(test_ckpt_clean)
{
	json_t	*reply, *records = json_pack("[s]", "a"), *found;
	char	 path[512];
	int	 fd;

	/* CK_ID complete, CK_ID2 partial, and a stray file. */
	ck_write(0, records, 1);
	json_decref(reply = ck_verb(ckpt_verb_commit, json_pack(
	    "{s:s,s:s,s:{s:i,s:i}}", "dir", ck_top, "id", CK_ID, "manifest",
	    "partitions", 1, "records", 1)));
	snprintf(ck_dir, sizeof ck_dir, "%s/%s", ck_top, CK_ID2);
	ck_write(0, records, 1);
	json_decref(records);
	snprintf(path, sizeof path, "%s/stray", ck_top);
	fd = open(path, O_WRONLY | O_CREAT, 0600);
	close(fd);

	/* Everything is newer than before: nothing goes, but the complete
	 * one is answered whatever its age. */
	reply = ck_verb(ckpt_verb_clean, json_pack("{s:s,s:I,s:b,s:i,s:i}",
	    "dir", ck_top, "before_ms", ck_ms(-60), "complete", 1, "max", 8,
	    "max_manifest", 4096));
	ck_assert_int_eq(json_integer_value(json_object_get(reply,
	    "removed")), 0);
	json_decref(reply);
	ck_assert_int_eq(access(ck_dir, F_OK), 0);

	/* The partial one and the stray go; the complete one is kept and
	 * answered, its id from its directory's name. */
	reply = ck_verb(ckpt_verb_clean, json_pack("{s:s,s:I,s:b,s:i,s:i}",
	    "dir", ck_top, "before_ms", ck_ms(60), "complete", 1, "max", 8,
	    "max_manifest", 4096));
	ck_assert_int_eq(json_integer_value(json_object_get(reply,
	    "removed")), 2);
	found = json_object_get(reply, "checkpoints");
	ck_assert_int_eq(json_array_size(found), 1);
	ck_assert_str_eq(json_string_value(json_object_get(json_array_get(
	    found, 0), "id")), CK_ID);
	json_decref(reply);
	ck_assert_int_eq(access(ck_dir, F_OK), -1);
	ck_assert_int_eq(access(path, F_OK), -1);

	/* Without complete, all goes but what is kept by id. */
	reply = ck_verb(ckpt_verb_clean, json_pack("{s:s,s:[s],s:I}", "dir",
	    ck_top, "keep", CK_ID, "before_ms", ck_ms(60)));
	ck_assert_int_eq(json_integer_value(json_object_get(reply,
	    "removed")), 0);
	json_decref(reply);
	reply = ck_verb(ckpt_verb_clean, json_pack("{s:s,s:I}", "dir",
	    ck_top, "before_ms", ck_ms(60)));
	ck_assert_int_eq(json_integer_value(json_object_get(reply,
	    "removed")), 1);
	json_decref(reply);
	snprintf(path, sizeof path, "%s/%s", ck_top, CK_ID);
	ck_assert_int_eq(access(path, F_OK), -1);
}
END_TEST

/* Write text to name in checkpoint id's directory under ck_top. */
static void
ck_put(const char *id, const char *name, const char *text)
{
	char	path[512];
	int	fd;

	snprintf(path, sizeof path, "%s/%s", ck_top, id);
	mkdir(path, 0700);
	snprintf(path, sizeof path, "%s/%s/%s", ck_top, id, name);
	ck_assert_int_ne(fd = open(path, O_WRONLY | O_CREAT | O_TRUNC, 0600),
	    -1);
	ck_assert_int_eq(write(fd, text, strlen(text)), (ssize_t)strlen(text));
	close(fd);
}

START_TEST(test_ckpt_clean_hostile)
{
	json_t	*reply, *records = json_pack("[s]", "a"), *found, *sizes;
	char	 path[512], *big;
	size_t	 i;

	/* CK_ID kept, with what the user added; CK_ID2 a manifest too big
	 * to read; CK_ID3 a manifest that does not hold; CK_ID4 a good one
	 * past max. */
	ck_write(0, records, 1);
	json_decref(records);
	ck_put(CK_ID, "junk", "not the checkpoint's");
	snprintf(path, sizeof path, "%s/sub", ck_dir);
	ck_assert_int_eq(mkdir(path, 0700), 0);
	big = xmalloc(30010);
	memcpy(big, "{\"a\":[", 6);
	for (i = 6; i < 29998; i += 3)
		memcpy(big + i, "{},", 3);
	memcpy(big + i - 1, "]}", 3);
	ck_put(CK_ID2, "manifest.json", big);
	free(big);
	ck_put(CK_ID3, "manifest.json", "{\"partitions\": \"x\"}");
	ck_put(CK_ID4, "manifest.json", "{\"partitions\":1,\"records\":1,"
	    "\"bytes\":5}");
	ck_put(CK_ID5, "manifest.json", "{\"partitions\":1,\"records\":1,"
	    "\"bytes\":5}");
	reply = ck_verb(ckpt_verb_clean, json_pack("{s:s,s:[s],s:I,s:b,s:i,"
	    "s:i}", "dir", ck_top, "keep", CK_ID, "before_ms", ck_ms(60),
	    "complete", 1, "max", 1, "max_manifest", 4096));
	ck_assert_ptr_null(json_object_get(reply, "error"));
	/* Only what the kept one owns is left, and measured. */
	ck_assert(!ck_exists("junk"));
	ck_assert(!ck_exists("sub"));
	ck_assert(ck_exists("part-00000"));
	sizes = json_object_get(reply, "sizes");
	ck_assert_int_ge(json_integer_value(json_object_get(sizes, CK_ID)), 9);
	/* The two that do not hold are removed, never answered; of the
	 * two good ones, one is answered (max), as a summary. */
	ck_assert_int_eq(json_integer_value(json_object_get(reply,
	    "refused")), 2);
	ck_assert_int_eq(json_integer_value(json_object_get(reply, "more")),
	    1);
	found = json_object_get(reply, "checkpoints");
	ck_assert_int_eq(json_array_size(found), 1);
	ck_assert_ptr_null(json_object_get(json_array_get(found, 0), "a"));
	ck_assert_int_eq(json_integer_value(json_object_get(json_array_get(
	    found, 0), "partitions")), 1);
	json_decref(reply);
	snprintf(path, sizeof path, "%s/%s", ck_top, CK_ID2);
	ck_assert_int_eq(access(path, F_OK), -1);
	snprintf(path, sizeof path, "%s/%s", ck_top, CK_ID3);
	ck_assert_int_eq(access(path, F_OK), -1);

	/* Without the directory's descriptor, a verb does nothing. */
	{
		size_t	 nout = 0;
		char	*err = NULL;
		json_t	*args = json_pack("{s:s,s:I}", "dir", ck_top,
		    "before_ms", ck_ms(60));

		reply = ckpt_verb_clean(args, NULL, 0, NULL, &nout, &err);
		json_decref(args);
		ck_assert_ptr_nonnull(strstr(json_string_value(json_object_get(
		    reply, "error")), "no directory descriptor"));
		json_decref(reply);
		ck_assert(ck_exists("part-00000"));
	}
}
END_TEST

Suite *
ckpt_suite(void)
{
	Suite	*s = suite_create("checkpoint");
	TCase	*tc;

	tc = tcase_create("files");
	tcase_add_checked_fixture(tc, ck_setup, ck_teardown);
	tcase_set_timeout(tc, 30);
	tcase_add_test(tc, test_ckpt_roundtrip);
	tcase_add_test(tc, test_ckpt_not_committed);
	tcase_add_test(tc, test_ckpt_cut_and_corrupt);
	tcase_add_test(tc, test_ckpt_bad_dir);
	suite_add_tcase(s, tc);

	tc = tcase_create("verbs");
	tcase_add_checked_fixture(tc, ck_setup, ck_teardown);
	tcase_set_timeout(tc, 30);
	tcase_add_test(tc, test_ckpt_commit_and_remove);
	tcase_add_test(tc, test_ckpt_clean);
	tcase_add_test(tc, test_ckpt_clean_hostile);
	suite_add_tcase(s, tc);
	return (s);
}
