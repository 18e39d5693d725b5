/*
 * Tests for daemon/commit.c, the save action's output committer: the
 * target's checks, the task directory, the commit that moves the parts
 * and writes _SUCCESS last, and the abort that leaves nothing behind.
 */
#include <sys/stat.h>

#include <errno.h>
#include <ftw.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "commit.h"
#include "suites.h"

#define COMMIT_TEMPLATE	"/tmp/ember-check-commit-XXXXXX"

static char	commit_dir[] = COMMIT_TEMPLATE;

static void
commit_setup(void)
{
	memcpy(commit_dir, COMMIT_TEMPLATE, sizeof commit_dir);
	ck_assert_ptr_nonnull(mkdtemp(commit_dir));
}

static int
remove_cb(const char *path, const struct stat *sb, int type, struct FTW *ftw)
{
	(void)sb; (void)type; (void)ftw;
	return (remove(path));
}

/* Remove the test's directory and everything in it. */
static void
commit_teardown(void)
{
	ck_assert_int_eq(nftw(commit_dir, remove_cb, 16, FTW_DEPTH | FTW_PHYS),
	    0);
}

/* A path under the test's directory. */
static const char *
path_of(const char *name)
{
	static char	path[4][512];
	static int	next;
	char		*p = path[next++ % 4];

	snprintf(p, sizeof path[0], "%s/%s", commit_dir, name);
	return (p);
}

static int
exists(const char *path)
{
	struct stat	sb;

	return (lstat(path, &sb) == 0);
}

static void
write_file(const char *path, const char *text)
{
	FILE	*f;

	ck_assert_ptr_nonnull(f = fopen(path, "w"));
	ck_assert_int_ge(fputs(text, f), 0);
	ck_assert_int_eq(fclose(f), 0);
}

/* Write part-NNNNN in the task directory, as a task would. */
static void
write_part(const struct commit *c, int partition, const char *text)
{
	char	path[1024];

	snprintf(path, sizeof path, "%s/part-%05d", commit_task_dir(c),
	    partition);
	write_file(path, text);
}

static char *
read_file(const char *path)
{
	static char	 buf[256];
	FILE		*f;
	size_t		 n;

	ck_assert_ptr_nonnull(f = fopen(path, "r"));
	n = fread(buf, 1, sizeof buf - 1, f);
	buf[n] = '\0';
	fclose(f);
	return (buf);
}

static struct commit *
begin_ok(const char *path, int overwrite, const char *operation)
{
	struct commit	*c;
	char		*err = NULL;

	c = commit_begin(path, overwrite, operation, geteuid(), getegid(),
	    &err);
	ck_assert_msg(c != NULL, "commit_begin %s: %s", path, err);
	return (c);
}

/* Refused, with an error that names options.path and has needle. */
static void
begin_refused(const char *path, int overwrite, const char *needle)
{
	char	*err = NULL;

	ck_assert_ptr_null(commit_begin(path, overwrite, "op", geteuid(),
	    getegid(), &err));
	ck_assert_ptr_nonnull(err);
	ck_assert_msg(strncmp(err, "options.path: ", 14) == 0, "error %s", err);
	ck_assert_msg(strstr(err, needle) != NULL, "error \"%s\" lacks \"%s\"",
	    err, needle);
	free(err);
}

START_TEST(test_commit_parts_then_success)
{
	const char	*out = path_of("out/a/b");
	struct commit	*c;
	char		*err = NULL;

	c = begin_ok(out, 0, "op1");
	ck_assert_str_eq(commit_task_dir(c), path_of("out/a/b/_temporary/op1"));
	ck_assert(exists(commit_task_dir(c)));
	ck_assert(!exists(path_of("out/a/b/_SUCCESS")));
	write_part(c, 0, "zero\n");
	write_part(c, 1, "one\n");
	ck_assert_int_eq(commit_finish(c, 2, &err), 0);
	ck_assert_str_eq(read_file(path_of("out/a/b/part-00000")), "zero\n");
	ck_assert_str_eq(read_file(path_of("out/a/b/part-00001")), "one\n");
	ck_assert_str_eq(read_file(path_of("out/a/b/_SUCCESS")), "");
	ck_assert(!exists(path_of("out/a/b/_temporary")));
	commit_free(c);
}
END_TEST

/* A part that is missing fails the commit, naming it, and no _SUCCESS. */
START_TEST(test_commit_missing_part)
{
	struct commit	*c;
	char		*err = NULL;

	c = begin_ok(path_of("out"), 0, "op1");
	write_part(c, 0, "zero\n");
	ck_assert_int_eq(commit_finish(c, 2, &err), -1);
	ck_assert_ptr_nonnull(err);
	ck_assert_msg(strstr(err, "part-00001") != NULL, "error %s", err);
	ck_assert(!exists(path_of("out/_SUCCESS")));
	free(err);
	commit_abort(c);
	commit_free(c);
}
END_TEST

START_TEST(test_commit_abort)
{
	struct commit	*c;

	c = begin_ok(path_of("out"), 0, "op1");
	write_part(c, 0, "zero\n");
	write_part(c, 1, "one\n");
	commit_abort(c);
	ck_assert(!exists(path_of("out/_temporary")));
	ck_assert(!exists(path_of("out/part-00000")));
	ck_assert(!exists(path_of("out/_SUCCESS")));
	ck_assert(exists(path_of("out")));
	commit_free(c);
}
END_TEST

START_TEST(test_commit_refuses_relative)
{
	begin_refused("out/relative", 0, "is not an absolute path");
	begin_refused("", 0, "is not an absolute path");
}
END_TEST

/* A directory that holds anything a save did not write is refused, even
 * with overwrite: a save never removes someone's files. */
START_TEST(test_commit_refuses_foreign)
{
	ck_assert_int_eq(mkdir(path_of("out"), 0755), 0);
	write_file(path_of("out/notes.txt"), "mine\n");
	write_file(path_of("out/part-00000"), "old\n");
	begin_refused(path_of("out"), 0, "holds files a save did not write");
	begin_refused(path_of("out"), 1, "holds files a save did not write");
	ck_assert_str_eq(read_file(path_of("out/notes.txt")), "mine\n");
	ck_assert(exists(path_of("out/part-00000")));
}
END_TEST

/* An earlier save's output is refused, unless overwrite: then its parts,
 * _SUCCESS and _temporary go before the new save starts. */
START_TEST(test_commit_overwrite)
{
	struct commit	*c;
	char		*err = NULL;

	c = begin_ok(path_of("out"), 0, "op1");
	write_part(c, 0, "a\n");
	write_part(c, 1, "b\n");
	write_part(c, 2, "c\n");
	ck_assert_int_eq(commit_finish(c, 3, &err), 0);
	commit_free(c);
	ck_assert_int_eq(mkdir(path_of("out/_temporary"), 0755), 0);
	ck_assert_int_eq(mkdir(path_of("out/_temporary/stale"), 0755), 0);
	write_file(path_of("out/_temporary/stale/part-00000"), "x\n");

	begin_refused(path_of("out"), 0, "set options.overwrite");
	c = begin_ok(path_of("out"), 1, "op2");
	ck_assert(!exists(path_of("out/part-00002")));
	ck_assert(!exists(path_of("out/_SUCCESS")));
	ck_assert(!exists(path_of("out/_temporary/stale")));
	write_part(c, 0, "new\n");
	ck_assert_int_eq(commit_finish(c, 1, &err), 0);
	ck_assert_str_eq(read_file(path_of("out/part-00000")), "new\n");
	ck_assert(!exists(path_of("out/part-00001")));
	ck_assert(exists(path_of("out/_SUCCESS")));
	commit_free(c);
}
END_TEST

/* A path that cannot be a directory fails with the system's reason. */
START_TEST(test_commit_not_a_directory)
{
	write_file(path_of("file"), "x\n");
	begin_refused(path_of("file"), 0, strerror(ENOTDIR));
	begin_refused(path_of("file/out"), 0, strerror(ENOTDIR));
}
END_TEST

/* As root, what the save creates belongs to the job's user. */
START_TEST(test_commit_owned_by_the_user)
{
	const uid_t	 uid = 64123;
	const gid_t	 gid = 64124;
	struct commit	*c;
	struct stat	 sb;
	char		*err = NULL;

	if (geteuid() != 0) {
		fprintf(stderr, "test_commit_owned_by_the_user: skipped, only "
		    "root can give files away\n");
		return;
	}
	c = commit_begin(path_of("out/sub"), 0, "op1", uid, gid, &err);
	ck_assert_msg(c != NULL, "commit_begin: %s", err);
	ck_assert_int_eq(stat(path_of("out/sub"), &sb), 0);
	ck_assert_int_eq(sb.st_uid, uid);
	ck_assert_int_eq(sb.st_gid, gid);
	ck_assert_int_eq(stat(commit_task_dir(c), &sb), 0);
	ck_assert_int_eq(sb.st_uid, uid);
	write_part(c, 0, "x\n");
	ck_assert_int_eq(commit_finish(c, 1, &err), 0);
	ck_assert_int_eq(stat(path_of("out/sub/_SUCCESS"), &sb), 0);
	ck_assert_int_eq(sb.st_uid, uid);
	ck_assert_int_eq(sb.st_gid, gid);
	commit_free(c);
}
END_TEST

Suite *
commit_suite(void)
{
	Suite	*s = suite_create("commit");
	TCase	*tc;

	tc = tcase_create("commit");
	tcase_add_checked_fixture(tc, commit_setup, commit_teardown);
	tcase_add_test(tc, test_commit_parts_then_success);
	tcase_add_test(tc, test_commit_missing_part);
	tcase_add_test(tc, test_commit_abort);
	tcase_add_test(tc, test_commit_owned_by_the_user);
	suite_add_tcase(s, tc);

	tc = tcase_create("target");
	tcase_add_checked_fixture(tc, commit_setup, commit_teardown);
	tcase_add_test(tc, test_commit_refuses_relative);
	tcase_add_test(tc, test_commit_refuses_foreign);
	tcase_add_test(tc, test_commit_overwrite);
	tcase_add_test(tc, test_commit_not_a_directory);
	suite_add_tcase(s, tc);

	return (s);
}
