/*
 * Tests for daemon/cgroup.c on a directory that stands for emberd's
 * cgroup v2 (regular files for the control files): when it is refused,
 * and what is written where when it is taken and a fork-server enters a
 * user's cgroup.
 */
#include <sys/stat.h>
#include <sys/xattr.h>

#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "cgroup.h"
#include "emberd.h"
#include "suites.h"

static char	cg_dir[] = "/tmp/ember-cgroup-XXXXXX";

/* Write s to dir/name, made if missing. */
static void
cg_put(const char *name, const char *s)
{
	char	path[256];
	FILE	*f;

	snprintf(path, sizeof path, "%s/%s", cg_dir, name);
	ck_assert_ptr_nonnull(f = fopen(path, "w"));
	fputs(s, f);
	fclose(f);
}

/* What dir/name holds. */
static const char *
cg_get(const char *name)
{
	static char	buf[256];
	char		path[256];
	FILE		*f;
	size_t		n;

	snprintf(path, sizeof path, "%s/%s", cg_dir, name);
	ck_assert_ptr_nonnull(f = fopen(path, "r"));
	n = fread(buf, 1, sizeof buf - 1, f);
	buf[n] = '\0';
	fclose(f);
	return (buf);
}

/* The string member key of status. */
static const char *
cg_status(json_t *st, const char *key)
{
	json_t	*v = json_object_get(st, key);

	return (json_is_string(v) ? json_string_value(v) : "");
}

/* A directory like a delegated cgroup with controllers, unless not. */
static void
cg_setup(void)
{
	char	sub[256];

	ck_assert_ptr_nonnull(mkdtemp(cg_dir));
	cg_put("cgroup.controllers", "cpuset cpu io memory pids\n");
	cg_put("cgroup.procs", "111\n222\n");
	cg_put("cgroup.subtree_control", "");
	snprintf(sub, sizeof sub, "%s/emberd", cg_dir);
	ck_assert_int_eq(mkdir(sub, 0755), 0);
	cg_put("emberd/cgroup.procs", "");
	ck_assert_int_eq(setxattr(cg_dir, "user.delegate", "1", 1, 0), 0);
	ember_conf.workers_max_pids_per_user = 50;
	ember_conf.workers_max_memory_per_user = 0;
	ember_conf.workers_cpu_weight = 20000;
}

static void
cg_teardown(void)
{
	char	cmd[300];

	cgroup_free();
	snprintf(cmd, sizeof cmd, "rm -rf %s", cg_dir);
	ck_assert_int_eq(system(cmd), 0);
	strcpy(cg_dir, "/tmp/ember-cgroup-XXXXXX");
}

START_TEST(test_refused_unless_delegated)
{
	json_t	*st;

	ck_assert_int_eq(removexattr(cg_dir, "user.delegate"), 0);
	ck_assert_int_eq(cgroup_init_at(cg_dir), -1);
	ck_assert(!cgroup_active());
	st = cgroup_status();
	ck_assert_str_eq(cg_status(st, "by"), "rlimit");
	ck_assert_ptr_nonnull(strstr(cg_status(st, "why"), "Delegate=yes"));
	json_decref(st);
	/* Nothing was touched. */
	ck_assert_str_eq(cg_get("cgroup.subtree_control"), "");
	ck_assert_int_eq(cgroup_enter(1000, 4242), 0);
}
END_TEST

START_TEST(test_refused_without_a_controller)
{
	json_t	*st;

	cg_put("cgroup.controllers", "cpu pids\n");
	ck_assert_int_eq(cgroup_init_at(cg_dir), -1);
	st = cgroup_status();
	ck_assert_ptr_nonnull(strstr(cg_status(st, "why"),
	    "no memory controller"));
	json_decref(st);
	ck_assert_str_eq(cg_get("emberd/cgroup.procs"), "");
}
END_TEST

START_TEST(test_taken_and_entered)
{
	struct stat	 sb;
	char		 path[256];
	json_t		*st;

	ck_assert_int_eq(cgroup_init_at(cg_dir), 0);
	ck_assert(cgroup_active());
	/* Its processes moved to the leaf (each write replaces the file's
	 * text here: the last pid shows), the controllers enabled below. */
	ck_assert_str_eq(cg_get("emberd/cgroup.procs"), "222");
	ck_assert_str_eq(cg_get("cgroup.subtree_control"),
	    "+pids +memory +cpu");
	st = cgroup_status();
	ck_assert_str_eq(cg_status(st, "by"), "cgroup");
	ck_assert_str_eq(cg_status(st, "path"), cg_dir);
	json_decref(st);

	/* A user's cgroup with its control files, as the kernel makes
	 * them: the limits and the fork-server's pid go there. */
	snprintf(path, sizeof path, "%s/user-1000", cg_dir);
	ck_assert_int_eq(mkdir(path, 0755), 0);
	cg_put("user-1000/pids.max", "");
	cg_put("user-1000/memory.max", "");
	cg_put("user-1000/cpu.weight", "");
	cg_put("user-1000/cgroup.procs", "");
	ck_assert_int_eq(cgroup_enter(1000, 4242), 0);
	ck_assert_str_eq(cg_get("user-1000/pids.max"), "50");
	ck_assert_str_eq(cg_get("user-1000/memory.max"), "max");
	ck_assert_str_eq(cg_get("user-1000/cpu.weight"), "10000");
	ck_assert_str_eq(cg_get("user-1000/cgroup.procs"), "4242");

	/* A cgroup made by emberd: root's, writable by no one else.  Here
	 * it has no control files, so the fork-server cannot be bounded
	 * and must not run. */
	ck_assert_int_eq(cgroup_enter(1001, 4343), -1);
	snprintf(path, sizeof path, "%s/user-1001", cg_dir);
	ck_assert_int_eq(stat(path, &sb), 0);
	ck_assert(S_ISDIR(sb.st_mode) && (sb.st_mode & 022) == 0);
	ck_assert_uint_eq(sb.st_uid, geteuid());

	/* At exit the empty users' cgroups go. */
	cgroup_free();
	ck_assert_int_eq(stat(path, &sb), -1);
}
END_TEST

Suite *
cgroup_suite(void)
{
	Suite	*s = suite_create("cgroup");
	TCase	*tc = tcase_create("delegated");

	tcase_add_checked_fixture(tc, cg_setup, cg_teardown);
	tcase_add_test(tc, test_refused_unless_delegated);
	tcase_add_test(tc, test_refused_without_a_controller);
	tcase_add_test(tc, test_taken_and_entered);
	suite_add_tcase(s, tc);
	return (s);
}
