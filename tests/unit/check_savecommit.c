/*
 * Tests for worker/savecommit.c, the save action's output committer on
 * directory handles: the target's checks, the part files, the commit that
 * writes _SUCCESS last, the abort that leaves nothing, and what a user's
 * own races (links planted or swapped mid-save) can and cannot do.
 */
#include <sys/stat.h>

#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <ftw.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "helper.h"
#include "savecommit.h"
#include "suites.h"

#define SC_TEMPLATE	"/tmp/ember-check-savecommit-XXXXXX"

static char	sc_dir[] = SC_TEMPLATE;

static void
sc_setup(void)
{
	memcpy(sc_dir, SC_TEMPLATE, sizeof sc_dir);
	ck_assert_ptr_nonnull(mkdtemp(sc_dir));
}

static int
remove_cb(const char *path, const struct stat *sb, int type, struct FTW *ftw)
{
	(void)sb; (void)type; (void)ftw;
	return (remove(path));
}

/* Remove the test's directory and everything in it. */
static void
sc_teardown(void)
{
	ck_assert_int_eq(nftw(sc_dir, remove_cb, 16, FTW_DEPTH | FTW_PHYS),
	    0);
}

/* A path under the test's directory. */
static const char *
at(const char *name)
{
	static char	path[8][512];
	static int	next;
	char		*p = path[next++ % 8];

	snprintf(p, sizeof path[0], "%s/%s", sc_dir, name);
	return (p);
}

static int
exists(const char *path)
{
	struct stat	sb;

	return (lstat(path, &sb) == 0);
}

static int
is_link(const char *path)
{
	struct stat	sb;

	return (lstat(path, &sb) == 0 && S_ISLNK(sb.st_mode));
}

static void
write_file(const char *path, const char *text)
{
	FILE	*f;

	ck_assert_ptr_nonnull(f = fopen(path, "w"));
	ck_assert_int_ge(fputs(text, f), 0);
	ck_assert_int_eq(fclose(f), 0);
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

/* How many entries a directory holds. */
static int
entries(const char *path)
{
	DIR		*d;
	struct dirent	*e;
	int		 n = 0;

	ck_assert_ptr_nonnull(d = opendir(path));
	while ((e = readdir(d)) != NULL) {
		if (strcmp(e->d_name, ".") != 0 && strcmp(e->d_name, "..") != 0)
			n++;
	}
	closedir(d);
	return (n);
}

/* A victim directory with a file, outside what the saves may touch. */
static void
make_victim(void)
{
	ck_assert_int_eq(mkdir(at("victim"), 0755), 0);
	write_file(at("victim/part-00000"), "victim's\n");
	write_file(at("victim/keep"), "keep\n");
}

/* The victim is as made_victim left it. */
static void
check_victim(void)
{
	ck_assert_str_eq(read_file(at("victim/part-00000")), "victim's\n");
	ck_assert_str_eq(read_file(at("victim/keep")), "keep\n");
	ck_assert_int_eq(entries(at("victim")), 2);
}

static void
begin_ok(const char *path, const char *op, int overwrite,
    struct savecommit_ids *ids)
{
	char	*err = NULL;

	ck_assert_msg(savecommit_begin(path, op, overwrite, ids, &err) == 0,
	    "savecommit_begin %s: %s", path, err);
}

/* Refused, with an error that has needle. */
static void
begin_refused(const char *path, int overwrite, const char *needle)
{
	struct savecommit_ids	 ids;
	char			*err = NULL;

	ck_assert_int_eq(savecommit_begin(path, "op", overwrite, &ids, &err),
	    -1);
	ck_assert_ptr_nonnull(err);
	ck_assert_msg(strstr(err, needle) != NULL, "error \"%s\" lacks \"%s\"",
	    err, needle);
	free(err);
}

/* Refused, for operation op. */
static void
begin_refused_op(const char *path, const char *op, int overwrite,
    const char *needle)
{
	struct savecommit_ids	 ids;
	char			*err = NULL;

	ck_assert_int_eq(savecommit_begin(path, op, overwrite, &ids, &err),
	    -1);
	ck_assert_ptr_nonnull(err);
	ck_assert_msg(strstr(err, needle) != NULL, "error \"%s\" lacks \"%s\"",
	    err, needle);
	free(err);
}

/* The operation's directory of a save to path. */
static const char *
task_dir(const char *path, const char *op)
{
	static char	dir[600];

	snprintf(dir, sizeof dir, "%s/_temporary/%s", path, op);
	return (dir);
}

/* Write a part as a task does: a temporary file, then its name. */
static void
write_part(const char *dir, int partition, uint64_t attempt, const char *text)
{
	struct savecommit_part	*p;
	char			*err = NULL;
	size_t			 len = strlen(text);

	p = savecommit_part_create(dir, partition, attempt, &err);
	ck_assert_msg(p != NULL, "savecommit_part_create: %s", err);
	ck_assert_int_eq(write(savecommit_part_fd(p), text, len), (ssize_t)len);
	ck_assert_msg(savecommit_part_commit(p, &err) == 0, "commit: %s", err);
	savecommit_part_free(p);
}

static void
finish_ok(const char *path, const char *op, int partitions, int overwrite,
    const struct savecommit_ids *ids)
{
	char	*err = NULL;

	ck_assert_msg(savecommit_finish(path, op, partitions, overwrite, ids,
	    &err) == 0, "savecommit_finish: %s", err);
}

/* The commit fails, with an error that has needle. */
static void
finish_fails(const char *path, const char *op, int partitions, int overwrite,
    const struct savecommit_ids *ids, const char *needle)
{
	char	*err = NULL;

	ck_assert_int_eq(savecommit_finish(path, op, partitions, overwrite, ids,
	    &err), -1);
	ck_assert_ptr_nonnull(err);
	ck_assert_msg(strstr(err, needle) != NULL, "error \"%s\" lacks \"%s\"",
	    err, needle);
	free(err);
}

static void
abort_ok(const char *path, const char *op, const struct savecommit_ids *ids)
{
	char	*err = NULL;

	ck_assert_msg(savecommit_abort(path, op, ids, &err) == 0,
	    "savecommit_abort: %s", err);
}

/* Save two parts to path in one go. */
static void
save(const char *path, const char *op, int overwrite, const char *a,
    const char *b)
{
	struct savecommit_ids	ids;

	begin_ok(path, op, overwrite, &ids);
	write_part(task_dir(path, op), 0, 1, a);
	write_part(task_dir(path, op), 1, 2, b);
	finish_ok(path, op, 2, overwrite, &ids);
}

/* Commit: parts, then _SUCCESS; missing parents made; _temporary gone. */
START_TEST(test_parts_then_success)
{
	const char		*out = at("out/a/b");
	struct savecommit_ids	 ids;

	begin_ok(out, "op1", 0, &ids);
	ck_assert(exists(at("out/a/b/_temporary/op1")));
	ck_assert(!exists(at("out/a/b/_SUCCESS")));
	write_part(task_dir(out, "op1"), 0, 1, "zero\n");
	write_part(task_dir(out, "op1"), 1, 2, "one\n");
	finish_ok(out, "op1", 2, 0, &ids);
	ck_assert_str_eq(read_file(at("out/a/b/part-00000")), "zero\n");
	ck_assert_str_eq(read_file(at("out/a/b/part-00001")), "one\n");
	ck_assert_str_eq(read_file(at("out/a/b/_SUCCESS")), "");
	ck_assert(!exists(at("out/a/b/_temporary")));
	ck_assert_int_eq(entries(out), 3);
}
END_TEST

/* A missing part fails the commit, naming it; nothing moves, no _SUCCESS,
 * and the abort then leaves nothing. */
START_TEST(test_missing_part)
{
	struct savecommit_ids	ids;

	begin_ok(at("out"), "op1", 0, &ids);
	write_part(task_dir(at("out"), "op1"), 0, 1, "zero\n");
	finish_fails(at("out"), "op1", 2, 0, &ids, "part-00001");
	ck_assert(!exists(at("out/_SUCCESS")));
	ck_assert(!exists(at("out/part-00000")));
	abort_ok(at("out"), "op1", &ids);
	ck_assert_int_eq(entries(at("out")), 0);
}
END_TEST

/* The temporary directory is the user's alone. */
START_TEST(test_temporary_private)
{
	struct savecommit_ids	ids;
	struct stat		sb;

	begin_ok(at("out"), "op1", 0, &ids);
	ck_assert_int_eq(stat(at("out/_temporary"), &sb), 0);
	ck_assert_int_eq(sb.st_mode & 0777, 0700);
	ck_assert_int_eq(stat(task_dir(at("out"), "op1"), &sb), 0);
	ck_assert_int_eq(sb.st_mode & 0777, 0700);
	abort_ok(at("out"), "op1", &ids);
}
END_TEST

START_TEST(test_refuses_relative)
{
	begin_refused("out/relative", 0, "is not an absolute path");
	begin_refused("", 0, "is not an absolute path");
}
END_TEST

/* A directory that holds anything a save did not write is refused, even
 * with overwrite. */
START_TEST(test_refuses_foreign)
{
	ck_assert_int_eq(mkdir(at("out"), 0755), 0);
	write_file(at("out/notes.txt"), "mine\n");
	write_file(at("out/part-00000"), "old\n");
	begin_refused(at("out"), 0, "holds files a save did not write");
	begin_refused(at("out"), 1, "holds files a save did not write");
	ck_assert_str_eq(read_file(at("out/notes.txt")), "mine\n");
	ck_assert(exists(at("out/part-00000")));
	ck_assert_int_eq(entries(at("out")), 2);
}
END_TEST

/* A path that cannot be a directory fails with the system's reason, and
 * a refused save leaves nothing made. */
START_TEST(test_not_a_directory)
{
	write_file(at("file"), "x\n");
	begin_refused(at("file"), 0, strerror(ENOTDIR));
	begin_refused(at("file/out"), 0, strerror(ENOTDIR));
	ck_assert_int_eq(mkdir(at("ro"), 0555), 0);
	if (geteuid() != 0) {
		begin_refused(at("ro/a/b"), 0, strerror(EACCES));
		ck_assert_int_eq(entries(at("ro")), 0);
	}
}
END_TEST

/* A failed begin removes the directories it made on the way. */
START_TEST(test_refused_leaves_nothing)
{
	struct savecommit_ids	ids;

	/* The operation's directory cannot be made: one is there. */
	begin_ok(at("out"), "op1", 0, &ids);
	begin_refused_op(at("out"), "op1", 1, "out/_temporary/op1");
	ck_assert_int_eq(entries(at("out/_temporary")), 1);
	abort_ok(at("out"), "op1", &ids);
	ck_assert_int_eq(entries(at("out")), 0);
	/* Refused at the first look: nothing is made. */
	write_file(at("out/part-00000"), "old\n");
	begin_refused_op(at("out"), "op1", 0, "set options.overwrite");
	ck_assert_int_eq(entries(at("out")), 1);
}
END_TEST

/* A target that is a symbolic link is refused: a save never writes
 * through a link at its end.  Links on the way are followed. */
START_TEST(test_symlinked_target)
{
	make_victim();
	ck_assert_int_eq(symlink(at("victim"), at("out")), 0);
	begin_refused(at("out"), 0, "is a symbolic link");
	begin_refused(at("out"), 1, "is a symbolic link");
	check_victim();
	ck_assert_int_eq(mkdir(at("real"), 0755), 0);
	ck_assert_int_eq(symlink(at("real"), at("via")), 0);
	save(at("via/out"), "op1", 0, "a\n", "b\n");
	ck_assert_str_eq(read_file(at("real/out/part-00001")), "b\n");
	ck_assert(exists(at("real/out/_SUCCESS")));
}
END_TEST

/* Swapped for a link between begin and commit: the commit refuses, and
 * the abort removes nothing through it. */
START_TEST(test_symlinked_target_mid_save)
{
	struct savecommit_ids	ids;
	char			*err = NULL;

	make_victim();
	begin_ok(at("out"), "op1", 0, &ids);
	write_part(task_dir(at("out"), "op1"), 0, 1, "zero\n");
	ck_assert_int_eq(rename(at("out"), at("moved")), 0);
	ck_assert_int_eq(symlink(at("victim"), at("out")), 0);
	finish_fails(at("out"), "op1", 1, 1, &ids, "symbolic link");
	ck_assert_int_eq(savecommit_abort(at("out"), "op1", &ids, &err), -1);
	free(err);
	check_victim();
	/* A directory of the same name that the save did not begin in. */
	ck_assert_int_eq(unlink(at("out")), 0);
	ck_assert_int_eq(mkdir(at("out"), 0755), 0);
	ck_assert_int_eq(mkdir(at("out/_temporary"), 0700), 0);
	ck_assert_int_eq(mkdir(at("out/_temporary/op1"), 0700), 0);
	write_file(at("out/_temporary/op1/part-00000"), "other\n");
	finish_fails(at("out"), "op1", 1, 1, &ids, "no longer the directory");
	ck_assert_int_eq(savecommit_abort(at("out"), "op1", &ids, &err), -1);
	free(err);
	ck_assert_str_eq(read_file(at("out/_temporary/op1/part-00000")),
	    "other\n");
	ck_assert(!exists(at("out/part-00000")));
}
END_TEST

/* _temporary planted as a link before the save: refused, nothing made
 * through it. */
START_TEST(test_symlinked_temporary)
{
	make_victim();
	ck_assert_int_eq(mkdir(at("out"), 0755), 0);
	ck_assert_int_eq(symlink(at("victim"), at("out/_temporary")), 0);
	begin_refused(at("out"), 1, "is a symbolic link");
	check_victim();
	ck_assert(is_link(at("out/_temporary")));
}
END_TEST

/* _temporary swapped for a link mid-save: the commit and the abort fail,
 * the victim's files stay where they are. */
START_TEST(test_symlinked_temporary_mid_save)
{
	struct savecommit_ids	 ids;
	char			*err = NULL;

	make_victim();
	ck_assert_int_eq(mkdir(at("victim/op1"), 0755), 0);
	write_file(at("victim/op1/part-00000"), "victim's part\n");
	begin_ok(at("out"), "op1", 1, &ids);
	write_part(task_dir(at("out"), "op1"), 0, 1, "zero\n");
	ck_assert_int_eq(rename(at("out/_temporary"), at("tmp-moved")), 0);
	ck_assert_int_eq(symlink(at("victim"), at("out/_temporary")), 0);
	finish_fails(at("out"), "op1", 1, 1, &ids, "symbolic link");
	ck_assert_int_eq(savecommit_abort(at("out"), "op1", &ids, &err), -1);
	ck_assert_ptr_nonnull(err);
	free(err);
	ck_assert_str_eq(read_file(at("victim/op1/part-00000")),
	    "victim's part\n");
	ck_assert(!exists(at("out/part-00000")));
	ck_assert(!exists(at("out/_SUCCESS")));
	ck_assert_int_eq(unlink(at("victim/op1/part-00000")), 0);
	ck_assert_int_eq(rmdir(at("victim/op1")), 0);
	check_victim();
}
END_TEST

/* The operation's directory swapped for a link to a directory of part
 * files, or for another directory: nothing moved, nothing removed. */
START_TEST(test_swapped_task_dir)
{
	struct savecommit_ids	 ids;
	char			*err = NULL;

	make_victim();
	begin_ok(at("out"), "op1", 0, &ids);
	ck_assert_int_eq(rename(task_dir(at("out"), "op1"), at("op-moved")),
	    0);
	ck_assert_int_eq(symlink(at("victim"), task_dir(at("out"), "op1")),
	    0);
	finish_fails(at("out"), "op1", 1, 0, &ids, "symbolic link");
	ck_assert_int_eq(savecommit_abort(at("out"), "op1", &ids, &err), -1);
	free(err);
	check_victim();
	ck_assert(!exists(at("out/part-00000")));

	ck_assert_int_eq(unlink(task_dir(at("out"), "op1")), 0);
	ck_assert_int_eq(mkdir(task_dir(at("out"), "op1"), 0700), 0);
	write_file(at("out/_temporary/op1/part-00000"), "planted\n");
	finish_fails(at("out"), "op1", 1, 0, &ids, "no longer the directory");
	ck_assert_int_eq(savecommit_abort(at("out"), "op1", &ids, &err), -1);
	free(err);
	ck_assert_str_eq(read_file(at("out/_temporary/op1/part-00000")),
	    "planted\n");
	ck_assert(!exists(at("out/part-00000")));
}
END_TEST

/* A part file swapped for a link is not moved as a part. */
START_TEST(test_swapped_part)
{
	struct savecommit_ids	ids;

	make_victim();
	begin_ok(at("out"), "op1", 0, &ids);
	ck_assert_int_eq(symlink(at("victim/part-00000"),
	    at("out/_temporary/op1/part-00000")), 0);
	finish_fails(at("out"), "op1", 1, 0, &ids, "part-00000");
	ck_assert(!exists(at("out/part-00000")));
	ck_assert(!exists(at("out/_SUCCESS")));
	abort_ok(at("out"), "op1", &ids);
	ck_assert_int_eq(entries(at("out")), 0);
	check_victim();
}
END_TEST

/* _SUCCESS planted as a link to a file mid-save: the file is never
 * opened; with overwrite the link is replaced by a _SUCCESS of its own. */
START_TEST(test_planted_success)
{
	struct savecommit_ids	ids;

	make_victim();
	begin_ok(at("out"), "op1", 0, &ids);
	write_part(task_dir(at("out"), "op1"), 0, 1, "zero\n");
	ck_assert_int_eq(symlink(at("victim/keep"), at("out/_SUCCESS")), 0);
	finish_fails(at("out"), "op1", 1, 0, &ids, "another save");
	abort_ok(at("out"), "op1", &ids);
	check_victim();

	begin_ok(at("out"), "op2", 1, &ids);
	ck_assert(!exists(at("out/_SUCCESS")));
	write_part(task_dir(at("out"), "op2"), 0, 1, "zero\n");
	ck_assert_int_eq(symlink(at("victim/keep"), at("out/_SUCCESS")), 0);
	finish_ok(at("out"), "op2", 1, 1, &ids);
	ck_assert(!is_link(at("out/_SUCCESS")));
	ck_assert_str_eq(read_file(at("out/_SUCCESS")), "");
	check_victim();
}
END_TEST

/* Attempts of one partition never share a temporary name; one left by a
 * killed attempt stops neither the next attempt nor the commit. */
START_TEST(test_attempts_do_not_collide)
{
	struct savecommit_ids	 ids;
	struct savecommit_part	*a, *b;
	char			*err = NULL;

	begin_ok(at("out"), "op1", 0, &ids);
	a = savecommit_part_create(task_dir(at("out"), "op1"), 0, 7, &err);
	ck_assert_ptr_nonnull(a);
	b = savecommit_part_create(task_dir(at("out"), "op1"), 0, 8, &err);
	ck_assert_msg(b != NULL, "second attempt: %s", err);
	ck_assert_str_ne(savecommit_part_name(a), savecommit_part_name(b));
	savecommit_part_free(a);
	savecommit_part_free(b);
	ck_assert_int_eq(entries(task_dir(at("out"), "op1")), 0);

	/* An attempt killed while writing leaves its file behind. */
	write_file(at("out/_temporary/op1/.part-00000.7.tmp"), "killed\n");
	write_part(task_dir(at("out"), "op1"), 0, 8, "done\n");
	finish_ok(at("out"), "op1", 1, 0, &ids);
	ck_assert_str_eq(read_file(at("out/part-00000")), "done\n");
	ck_assert(!exists(at("out/_temporary")));
	ck_assert_int_eq(entries(at("out")), 2);
}
END_TEST

/* A temporary name planted as a link is not written through. */
START_TEST(test_planted_temporary_file)
{
	struct savecommit_ids	 ids;
	char			*err = NULL;

	make_victim();
	begin_ok(at("out"), "op1", 0, &ids);
	ck_assert_int_eq(symlink(at("victim/keep"),
	    at("out/_temporary/op1/.part-00000.1.tmp")), 0);
	ck_assert_ptr_null(savecommit_part_create(task_dir(at("out"), "op1"),
	    0, 1, &err));
	ck_assert_ptr_nonnull(strstr(err, strerror(EEXIST)));
	free(err);
	abort_ok(at("out"), "op1", &ids);
	check_victim();
	ck_assert_int_eq(entries(at("out")), 0);
}
END_TEST

/* Two saves to one path, both begun before either commits: without
 * overwrite, the second commit fails and leaves the first's output; with
 * it, the output is all the second's. */
START_TEST(test_two_saves_racing)
{
	struct savecommit_ids	one, two;

	begin_ok(at("out"), "op1", 0, &one);
	begin_ok(at("out"), "op2", 1, &two);	/* overwrite: not refused */
	write_part(task_dir(at("out"), "op1"), 0, 1, "1a\n");
	write_part(task_dir(at("out"), "op1"), 1, 1, "1b\n");
	write_part(task_dir(at("out"), "op1"), 2, 1, "1c\n");
	write_part(task_dir(at("out"), "op2"), 0, 1, "2a\n");
	finish_ok(at("out"), "op1", 3, 0, &one);
	ck_assert(exists(at("out/_temporary/op2")));
	finish_ok(at("out"), "op2", 1, 1, &two);
	ck_assert_str_eq(read_file(at("out/part-00000")), "2a\n");
	ck_assert(!exists(at("out/part-00001")));
	ck_assert(!exists(at("out/part-00002")));
	ck_assert(exists(at("out/_SUCCESS")));
	ck_assert_int_eq(entries(at("out")), 2);

	ck_assert_int_eq(mkdir(at("out2"), 0755), 0);
	begin_ok(at("out2"), "op1", 0, &one);
	begin_ok(at("out2"), "op2", 1, &two);
	write_part(task_dir(at("out2"), "op1"), 0, 1, "1a\n");
	write_part(task_dir(at("out2"), "op2"), 0, 1, "2a\n");
	write_part(task_dir(at("out2"), "op2"), 1, 1, "2b\n");
	finish_ok(at("out2"), "op2", 2, 1, &two);
	finish_fails(at("out2"), "op1", 1, 0, &one, "another save");
	abort_ok(at("out2"), "op1", &one);
	ck_assert_str_eq(read_file(at("out2/part-00000")), "2a\n");
	ck_assert_str_eq(read_file(at("out2/part-00001")), "2b\n");
	ck_assert_int_eq(entries(at("out2")), 3);
}
END_TEST

/* An earlier save's output is refused unless overwrite; then its parts
 * and _SUCCESS go, and nothing else: not another save's directory in
 * progress, not what a part that is a link points to. */
START_TEST(test_overwrite_non_empty)
{
	struct savecommit_ids	ids, other;

	make_victim();
	save(at("out"), "op1", 0, "a\n", "b\n");
	begin_refused(at("out"), 0, "set options.overwrite");
	ck_assert_int_eq(unlink(at("out/part-00001")), 0);
	ck_assert_int_eq(symlink(at("victim/part-00000"),
	    at("out/part-00001")), 0);
	begin_ok(at("out"), "op2", 1, &other);
	begin_ok(at("out"), "op3", 1, &ids);
	ck_assert(!exists(at("out/part-00000")));
	ck_assert(!exists(at("out/part-00001")));
	ck_assert(!exists(at("out/_SUCCESS")));
	ck_assert(exists(task_dir(at("out"), "op2")));
	check_victim();
	write_part(task_dir(at("out"), "op3"), 0, 1, "new\n");
	finish_ok(at("out"), "op3", 1, 1, &ids);
	ck_assert_str_eq(read_file(at("out/part-00000")), "new\n");
	ck_assert(exists(task_dir(at("out"), "op2")));
	abort_ok(at("out"), "op2", &other);
	ck_assert_int_eq(entries(at("out")), 2);
}
END_TEST

/* A part name that is a directory is not removed, and refuses. */
START_TEST(test_overwrite_part_directory)
{
	ck_assert_int_eq(mkdir(at("out"), 0755), 0);
	ck_assert_int_eq(mkdir(at("out/part-00000"), 0755), 0);
	write_file(at("out/part-00000/inside"), "x\n");
	begin_refused(at("out"), 1, "part-00000");
	ck_assert(exists(at("out/part-00000/inside")));
	ck_assert(!exists(at("out/_temporary")));
}
END_TEST

/* The abort removes what the save made: parts, temporary files, the
 * operation's directory, _temporary. */
START_TEST(test_abort_leaves_nothing)
{
	struct savecommit_ids	 ids;
	struct savecommit_part	*p;
	char			*err = NULL;

	begin_ok(at("out"), "op1", 0, &ids);
	write_part(task_dir(at("out"), "op1"), 0, 1, "zero\n");
	write_part(task_dir(at("out"), "op1"), 1, 1, "one\n");
	p = savecommit_part_create(task_dir(at("out"), "op1"), 2, 3, &err);
	ck_assert_ptr_nonnull(p);
	abort_ok(at("out"), "op1", &ids);
	ck_assert_int_eq(entries(at("out")), 0);
	ck_assert(exists(at("out")));
	savecommit_part_free(p);	/* its file is gone already */
	abort_ok(at("out"), "op1", &ids);	/* again: nothing to do */
	ck_assert_int_eq(rmdir(at("out")), 0);
	abort_ok(at("out"), "op1", &ids);	/* and with PATH gone */
}
END_TEST

/* The abort never goes into a directory the save did not make, nor
 * removes a file it did not write. */
START_TEST(test_abort_stays_out)
{
	struct savecommit_ids	 ids;
	char			*err = NULL;

	begin_ok(at("out"), "op1", 0, &ids);
	write_part(task_dir(at("out"), "op1"), 0, 1, "zero\n");
	ck_assert_int_eq(mkdir(at("out/_temporary/op1/part-00001"), 0755), 0);
	write_file(at("out/_temporary/op1/part-00001/inside"), "x\n");
	write_file(at("out/_temporary/op1/notes"), "mine\n");
	ck_assert_int_eq(savecommit_abort(at("out"), "op1", &ids, &err), -1);
	ck_assert_ptr_nonnull(err);
	free(err);
	ck_assert(!exists(at("out/_temporary/op1/part-00000")));
	ck_assert(exists(at("out/_temporary/op1/part-00001/inside")));
	ck_assert(exists(at("out/_temporary/op1/notes")));
}
END_TEST

/* Put part in PATH as a run of the commit does before it is cut short. */
static void
link_part(const char *path, const char *op, const char *part)
{
	char	from[700], to[700];

	snprintf(from, sizeof from, "%s/%s", task_dir(path, op), part);
	snprintf(to, sizeof to, "%s/%s", path, part);
	ck_assert_int_eq(link(from, to), 0);
}

/* A commit cut short after it linked a part: the next run takes that
 * part as it is and finishes. */
START_TEST(test_commit_run_again)
{
	struct savecommit_ids	ids;

	begin_ok(at("out"), "op1", 0, &ids);
	write_part(task_dir(at("out"), "op1"), 0, 1, "zero\n");
	write_part(task_dir(at("out"), "op1"), 1, 2, "one\n");
	link_part(at("out"), "op1", "part-00000");
	finish_ok(at("out"), "op1", 2, 0, &ids);
	ck_assert_str_eq(read_file(at("out/part-00000")), "zero\n");
	ck_assert_str_eq(read_file(at("out/part-00001")), "one\n");
	ck_assert(exists(at("out/_SUCCESS")));
	ck_assert_int_eq(entries(at("out")), 3);
}
END_TEST

/* A commit cut short after _SUCCESS, while it removed the operation's
 * directory: the next run only finishes that; and once it is gone, a run
 * again answers that it is done. */
START_TEST(test_commit_run_again_after_success)
{
	struct savecommit_ids	ids;

	begin_ok(at("out"), "op1", 0, &ids);
	write_part(task_dir(at("out"), "op1"), 0, 1, "zero\n");
	write_part(task_dir(at("out"), "op1"), 1, 2, "one\n");
	link_part(at("out"), "op1", "part-00000");
	link_part(at("out"), "op1", "part-00001");
	write_file(at("out/_SUCCESS"), "");
	ck_assert_int_eq(unlink(at("out/_temporary/op1/part-00000")), 0);
	finish_ok(at("out"), "op1", 2, 0, &ids);
	ck_assert_int_eq(entries(at("out")), 3);
	ck_assert(!exists(at("out/_temporary")));
	finish_ok(at("out"), "op1", 2, 0, &ids);
	ck_assert_int_eq(entries(at("out")), 3);
}
END_TEST

/* The abort after a commit cut short takes the parts it linked back out
 * of PATH, and _SUCCESS; another save's part stays. */
START_TEST(test_abort_takes_back)
{
	struct savecommit_ids	ids;

	begin_ok(at("out"), "op1", 0, &ids);
	write_part(task_dir(at("out"), "op1"), 0, 1, "zero\n");
	write_part(task_dir(at("out"), "op1"), 1, 2, "one\n");
	link_part(at("out"), "op1", "part-00000");
	write_file(at("out/_SUCCESS"), "");
	abort_ok(at("out"), "op1", &ids);
	ck_assert_int_eq(entries(at("out")), 0);

	begin_ok(at("out"), "op2", 0, &ids);
	write_part(task_dir(at("out"), "op2"), 0, 1, "zero\n");
	write_file(at("out/part-00000"), "another save's\n");
	abort_ok(at("out"), "op2", &ids);
	ck_assert_str_eq(read_file(at("out/part-00000")), "another save's\n");
	ck_assert_int_eq(entries(at("out")), 1);
}
END_TEST

/* A beginning whose answer was lost is undone by name: the operation's
 * directory and _temporary, only while empty. */
START_TEST(test_unbegin)
{
	struct savecommit_ids	 ids;
	char			*err = NULL;

	begin_ok(at("out"), "op1", 0, &ids);
	ck_assert_msg(savecommit_unbegin(at("out"), "op1", &err) == 0,
	    "savecommit_unbegin: %s", err);
	ck_assert_int_eq(entries(at("out")), 0);
	ck_assert_msg(savecommit_unbegin(at("out"), "op1", &err) == 0,
	    "savecommit_unbegin again: %s", err);

	begin_ok(at("out"), "op2", 0, &ids);
	write_part(task_dir(at("out"), "op2"), 0, 1, "zero\n");
	ck_assert_int_eq(savecommit_unbegin(at("out"), "op2", &err), -1);
	ck_assert_ptr_nonnull(err);
	free(err);
	ck_assert(exists(at("out/_temporary/op2/part-00000")));
}
END_TEST

/* An operation id that is not a plain name is refused. */
START_TEST(test_operation_names)
{
	struct savecommit_ids	 ids;
	char			*err = NULL;

	ck_assert_int_eq(savecommit_begin(at("out"), "../x", 0, &ids, &err),
	    -1);
	free(err);
	ck_assert_int_eq(savecommit_begin(at("out"), "..", 0, &ids, &err), -1);
	free(err);
	ck_assert(!exists(at("out")));
	ck_assert(!exists(at("x")));
}
END_TEST

/* Run a helper verb; its reply (NULL: it refused the request). */
static json_t *
verb(const char *name, json_t *args)
{
	helper_verb_fn	 fn;
	json_t		*reply;
	int		 out[4];
	size_t		 nout = 9;
	char		*err = NULL;

	ck_assert_ptr_nonnull(fn = helper_find_verb(name));
	reply = fn(args, NULL, 0, out, &nout, &err);
	ck_assert_uint_eq(nout, 0);
	json_decref(args);
	free(err);
	return (reply);
}

/* The helper verbs: begin answers what it made, commit and abort take it
 * back; bad requests are refused, the user's errors answered. */
START_TEST(test_verbs)
{
	json_t	*r, *ids;

	r = verb("save_begin", json_pack("{s:s,s:s,s:b}", "path", at("out"),
	    "operation", "op1", "overwrite", 0));
	ck_assert_ptr_nonnull(r);
	ck_assert_ptr_nonnull(ids = json_object_get(r, "ids"));
	json_incref(ids);
	json_decref(r);
	write_part(task_dir(at("out"), "op1"), 0, 1, "zero\n");
	r = verb("save_commit", json_pack("{s:s,s:s,s:i,s:b,s:O}", "path",
	    at("out"), "operation", "op1", "partitions", 1, "overwrite", 0,
	    "ids", ids));
	ck_assert_ptr_nonnull(r);
	ck_assert_uint_eq(json_object_size(r), 0);
	json_decref(r);
	ck_assert_str_eq(read_file(at("out/part-00000")), "zero\n");

	r = verb("save_begin", json_pack("{s:s,s:s,s:b}", "path", at("out"),
	    "operation", "op2", "overwrite", 0));
	ck_assert_ptr_nonnull(strstr(json_string_value(json_object_get(r,
	    "error")), "options.path"));
	json_decref(r);
	r = verb("save_abort", json_pack("{s:s,s:s,s:O}", "path", at("out"),
	    "operation", "op1", "ids", ids));
	ck_assert_uint_eq(json_object_size(r), 0);
	json_decref(r);
	ck_assert_ptr_null(verb("save_commit", json_pack("{s:s,s:s,s:i,s:b}",
	    "path", at("out"), "operation", "op1", "partitions", 1,
	    "overwrite", 0)));
	ck_assert_ptr_null(verb("save_abort", json_pack("{s:s,s:s,s:O,s:i}",
	    "path", at("out"), "operation", "op1", "ids", ids, "extra", 1)));
	json_decref(ids);
}
END_TEST

/* One TCase with the checked fixture. */
static TCase *
sc_tcase(const char *name)
{
	TCase	*tc = tcase_create(name);

	tcase_add_checked_fixture(tc, sc_setup, sc_teardown);
	return (tc);
}

Suite *
savecommit_suite(void)
{
	Suite	*s = suite_create("savecommit");
	TCase	*tc;

	tc = sc_tcase("commit");
	tcase_add_test(tc, test_parts_then_success);
	tcase_add_test(tc, test_missing_part);
	tcase_add_test(tc, test_temporary_private);
	suite_add_tcase(s, tc);

	tc = sc_tcase("target");
	tcase_add_test(tc, test_refuses_relative);
	tcase_add_test(tc, test_refuses_foreign);
	tcase_add_test(tc, test_not_a_directory);
	tcase_add_test(tc, test_refused_leaves_nothing);
	tcase_add_test(tc, test_operation_names);
	suite_add_tcase(s, tc);

	tc = sc_tcase("symlinked target");
	tcase_add_test(tc, test_symlinked_target);
	tcase_add_test(tc, test_symlinked_target_mid_save);
	suite_add_tcase(s, tc);

	tc = sc_tcase("symlinked _temporary");
	tcase_add_test(tc, test_symlinked_temporary);
	tcase_add_test(tc, test_symlinked_temporary_mid_save);
	suite_add_tcase(s, tc);

	tc = sc_tcase("swapped task dir");
	tcase_add_test(tc, test_swapped_task_dir);
	tcase_add_test(tc, test_swapped_part);
	tcase_add_test(tc, test_planted_success);
	suite_add_tcase(s, tc);

	tc = sc_tcase("collisions");
	tcase_add_test(tc, test_attempts_do_not_collide);
	tcase_add_test(tc, test_planted_temporary_file);
	tcase_add_test(tc, test_two_saves_racing);
	suite_add_tcase(s, tc);

	tc = sc_tcase("overwrite");
	tcase_add_test(tc, test_overwrite_non_empty);
	tcase_add_test(tc, test_overwrite_part_directory);
	suite_add_tcase(s, tc);

	tc = sc_tcase("abort");
	tcase_add_test(tc, test_abort_leaves_nothing);
	tcase_add_test(tc, test_abort_stays_out);
	suite_add_tcase(s, tc);

	tc = sc_tcase("cut short");
	tcase_add_test(tc, test_commit_run_again);
	tcase_add_test(tc, test_commit_run_again_after_success);
	tcase_add_test(tc, test_abort_takes_back);
	tcase_add_test(tc, test_unbegin);
	suite_add_tcase(s, tc);

	tc = sc_tcase("helper verbs");
	tcase_add_test(tc, test_verbs);
	suite_add_tcase(s, tc);

	return (s);
}
