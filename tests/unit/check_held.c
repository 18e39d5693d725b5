/*
 * Tests for worker/held.c: adding and removing broadcasts (-id-1),
 * checking their files, and the sets of their lines.
 */
#include <sys/resource.h>
#include <sys/stat.h>
#include <sys/wait.h>

#include <errno.h>
#include <fcntl.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#include <jansson.h>

#include "bindex.h"
#include "held.h"
#include "suites.h"
#include "taskdesc.h"
#include "xmalloc.h"

static char	bc_dir[] = "/tmp/check_broadcast.XXXXXX";
static int	bc_files;

/* Make the directory the broadcast files go in. */
static void
bc_setup(void)
{
	strcpy(bc_dir, "/tmp/check_broadcast.XXXXXX");
	ck_assert_ptr_nonnull(mkdtemp(bc_dir));
	bc_files = 0;
}

/* Drop every broadcast and remove the files. */
static void
bc_teardown(void)
{
	char	path[256];
	int	i;

	held_clear();
	for (i = 0; i < bc_files; i++) {
		snprintf(path, sizeof path, "%s/b%d", bc_dir, i);
		unlink(path);
	}
	rmdir(bc_dir);
}

/* Write a broadcast file; its path, allocated. */
static char *
bc_file(const void *data, size_t len)
{
	char	*path;
	int	 fd;

	xasprintf(&path, "%s/b%d", bc_dir, bc_files++);
	fd = open(path, O_WRONLY | O_CREAT | O_TRUNC, 0600);
	ck_assert_int_ne(fd, -1);
	ck_assert_int_eq(write(fd, data, len), (ssize_t)len);
	close(fd);
	return (path);
}

/* Decode and apply changes given as a descriptor's broadcasts member, as
 * the worker does: 0, or -1 with *err. */
static int
bc_apply_json(json_t *j, char **err)
{
	struct taskdesc	 d;
	const char	*path;
	size_t		 i;
	int		 rc;

	memset(&d, 0, sizeof d);
	*err = NULL;
	rc = taskdesc_decode_broadcasts(j, &d, err);
	/* emberd passes each add's descriptor with the frame; here the test
	 * names a file ("path", which the worker ignores) to open as it. */
	for (i = 0; rc == 0 && i < d.nbroadcasts; i++) {
		path = json_string_value(json_object_get(json_array_get(j, i),
		    "path"));
		if (d.broadcasts[i].add && path != NULL)
			d.broadcasts[i].fd = open(path, O_RDONLY | O_CLOEXEC);
		path = json_string_value(json_object_get(json_array_get(j, i),
		    "index_path"));
		if (d.broadcasts[i].add && path != NULL)
			d.broadcasts[i].index_fd = open(path,
			    O_RDONLY | O_CLOEXEC);
	}
	if (rc == 0)
		rc = held_apply(d.broadcasts, d.nbroadcasts, err);
	taskdesc_clear(&d);
	return (rc);
}

/* Apply changes given as JSON text: 0, or -1 with *err. */
static int
bc_apply(const char *text, char **err)
{
	json_t		*j;
	json_error_t	 jerr;
	int		 rc;

	j = json_loads(text, 0, &jerr);
	ck_assert_msg(j != NULL, "bad test JSON: %s", jerr.text);
	rc = bc_apply_json(j, err);
	json_decref(j);
	return (rc);
}

/* Add broadcast id with a file of these bytes, which must succeed. */
static void
bc_add(int64_t id, const void *data, size_t len)
{
	json_t	*j;
	char	*path, *err;

	path = bc_file(data, len);
	j = json_pack("[{s:I, s:s, s:I}]", "id", (json_int_t)id, "path", path,
	    "size", (json_int_t)len);
	if (bc_apply_json(j, &err) != 0)
		ck_abort_msg("add %lld: %s", (long long)id, err);
	ck_assert_ptr_null(err);
	json_decref(j);
	free(path);
}

/*
 * Add broadcast id with a file of these bytes and an index file, built
 * as the helper builds it, then changed by corrupt (if not NULL): 0, or
 * -1 with *err.
 */
static int
bc_add_indexed(int64_t id, const void *data, size_t len,
    void (*corrupt)(void *, size_t), char **err)
{
	struct bindex_stats	 st;
	json_t			*j;
	char			*path, *ipath;
	void			*ix;
	size_t			 size, lines;
	int			 rc;

	size = bindex_size(data, len, &lines);
	ix = xcalloc(1, size);
	bindex_build(data, len, lines, ix, size, &st);
	if (corrupt != NULL)
		corrupt(ix, size);
	path = bc_file(data, len);
	ipath = bc_file(ix, size);
	j = json_pack("[{s:I, s:s, s:I, s:s, s:I}]", "id", (json_int_t)id,
	    "path", path, "size", (json_int_t)len, "index_path", ipath,
	    "index", (json_int_t)size);
	rc = bc_apply_json(j, err);
	json_decref(j);
	free(path);
	free(ipath);
	free(ix);
	return (rc);
}

/* Remove broadcast id (as -id-1): 0, or -1 with *err. */
static int
bc_remove(int64_t id, char **err)
{
	char	text[64];

	snprintf(text, sizeof text, "[{\"id\": %lld}]", (long long)-id - 1);
	return (bc_apply(text, err));
}

/* Build the set of broadcast id, which must succeed. */
static const struct held_set *
bc_set(int64_t id)
{
	const struct held_set	*set;
	char				*err;

	set = held_set_get(id, &err);
	if (set == NULL)
		ck_abort_msg("set of %lld: %s", (long long)id, err);
	return (set);
}

/* Is a C string in the set? */
static int
bc_has(const struct held_set *set, const char *s)
{
	return (held_set_contains(set, s, strlen(s)));
}

START_TEST(test_add_remove)
{
	const char	*bytes;
	size_t		 len;
	char		*err;

	bc_add(0, "zero\n", 5);
	bc_add(5, "five", 4);
	ck_assert_uint_eq(held_count(), 2);
	ck_assert_uint_eq(held_bytes_held(), 9);
	bytes = held_bytes(0, &len);
	ck_assert_ptr_nonnull(bytes);
	ck_assert_uint_eq(len, 5);
	ck_assert_mem_eq(bytes, "zero\n", 5);
	bytes = held_bytes(5, &len);
	ck_assert_uint_eq(len, 4);
	ck_assert_mem_eq(bytes, "five", 4);
	ck_assert_ptr_null(held_bytes(1, &len));

	/* -id-1: -1 removes 0, -6 removes 5. */
	ck_assert_int_eq(bc_apply("[{\"id\": -1}]", &err), 0);
	ck_assert_ptr_null(held_bytes(0, &len));
	ck_assert_ptr_nonnull(held_bytes(5, &len));
	ck_assert_int_eq(bc_apply("[{\"id\": -6}]", &err), 0);
	ck_assert_ptr_null(held_bytes(5, &len));
	ck_assert_uint_eq(held_count(), 0);

	/* An id removed may come back. */
	bc_add(5, "again", 5);
	ck_assert_uint_eq(held_count(), 1);
	bytes = held_bytes(5, &len);
	ck_assert_mem_eq(bytes, "again", 5);
}
END_TEST

START_TEST(test_in_order)
{
	char	*path, *err, text[512];
	size_t	 len;

	/* Added and removed in one list. */
	path = bc_file("x\n", 2);
	snprintf(text, sizeof text, "[{\"id\": 1, \"path\": \"%s\", "
	    "\"size\": 2}, {\"id\": -2}]", path);
	ck_assert_int_eq(bc_apply(text, &err), 0);
	ck_assert_uint_eq(held_count(), 0);

	/* Removed, then added again under the same id. */
	bc_add(1, "old\n", 4);
	snprintf(text, sizeof text, "[{\"id\": -2}, {\"id\": 1, \"path\": "
	    "\"%s\", \"size\": 2}]", path);
	ck_assert_int_eq(bc_apply(text, &err), 0);
	ck_assert_mem_eq(held_bytes(1, &len), "x\n", 2);
	ck_assert_uint_eq(len, 2);

	/* An empty list changes nothing; so does none at all. */
	ck_assert_int_eq(bc_apply("[]", &err), 0);
	ck_assert_int_eq(held_apply(NULL, 0, &err), 0);
	ck_assert_uint_eq(held_count(), 1);
	free(path);
}
END_TEST

START_TEST(test_already_held)
{
	char	*path, *err, text[512];
	size_t	 len;

	bc_add(3, "abc", 3);
	path = bc_file("other", 5);
	snprintf(text, sizeof text, "[{\"id\": 3, \"path\": \"%s\", "
	    "\"size\": 5}]", path);
	ck_assert_int_eq(bc_apply(text, &err), -1);
	ck_assert_str_eq(err, "broadcast 3: already held");
	free(err);
	/* The one held is untouched. */
	ck_assert_mem_eq(held_bytes(3, &len), "abc", 3);
	free(path);
}
END_TEST

START_TEST(test_remove_not_held)
{
	char	*err;

	bc_add(1, "a", 1);
	ck_assert_int_eq(bc_remove(3, &err), -1);
	ck_assert_ptr_nonnull(strstr(err, "broadcast 3"));
	ck_assert_ptr_nonnull(strstr(err, "not held"));
	free(err);
	ck_assert_uint_eq(held_count(), 1);

	/* The most negative id removes INT64_MAX, which is not held. */
	ck_assert_int_eq(bc_apply("[{\"id\": -9223372036854775808}]", &err),
	    -1);
	ck_assert_ptr_nonnull(strstr(err, "broadcast 9223372036854775807"));
	free(err);
}
END_TEST

START_TEST(test_size_mismatch)
{
	char	*path, *err, text[512];

	path = bc_file("0123456789", 10);
	snprintf(text, sizeof text, "[{\"id\": 2, \"path\": \"%s\", "
	    "\"size\": 9}]", path);
	ck_assert_int_eq(bc_apply(text, &err), -1);
	ck_assert_ptr_nonnull(strstr(err, "broadcast 2"));
	ck_assert_ptr_nonnull(strstr(err, "10 bytes, expected 9"));
	free(err);
	ck_assert_uint_eq(held_count(), 0);
	free(path);
}
END_TEST

START_TEST(test_bad_file)
{
	char	*err, text[512];

	snprintf(text, sizeof text, "[{\"id\": 4, \"path\": \"%s/missing\", "
	    "\"size\": 1}]", bc_dir);
	ck_assert_int_eq(bc_apply(text, &err), -1);
	/* No descriptor came: the add fails, naming the broadcast. */
	ck_assert_ptr_nonnull(strstr(err, "broadcast 4"));
	ck_assert_ptr_nonnull(strstr(err, "no descriptor came with it"));
	free(err);

	/* A directory is not a broadcast. */
	snprintf(text, sizeof text, "[{\"id\": 4, \"path\": \"%s\", "
	    "\"size\": 0}]", bc_dir);
	ck_assert_int_eq(bc_apply(text, &err), -1);
	ck_assert_ptr_nonnull(strstr(err, "not a regular file"));
	free(err);
	ck_assert_uint_eq(held_count(), 0);
}
END_TEST

START_TEST(test_bad_changes)
{
	static const struct {
		const char	*text;
		const char	*want;
	} cases[] = {
		{ "{}", "broadcasts: expected an array" },
		{ "[1]", "broadcasts[0]: expected an object" },
		{ "[{}]", "broadcasts[0].id: missing" },
		{ "[{\"id\": \"1\"}]", "broadcasts[0].id: expected" },
		{ "[{\"id\": 1}]", "broadcasts[0].size: missing" },
		{ "[{\"id\": 1, \"path\": \"/x\", \"size\": -1}]",
		    "broadcasts[0]: size: must not be negative" },
	};
	char	*err;
	size_t	 i;

	for (i = 0; i < sizeof cases / sizeof *cases; i++) {
		ck_assert_int_eq(bc_apply(cases[i].text, &err), -1);
		ck_assert_msg(strstr(err, cases[i].want) != NULL,
		    "%s: got \"%s\", want \"%s\"", cases[i].text, err,
		    cases[i].want);
		free(err);
	}
}
END_TEST

START_TEST(test_empty)
{
	const struct held_set	*set;
	const char			*bytes;
	size_t				 len = 99;

	bc_add(0, "", 0);
	bytes = held_bytes(0, &len);
	ck_assert_ptr_nonnull(bytes);
	ck_assert_uint_eq(len, 0);
	set = bc_set(0);
	ck_assert_uint_eq(held_set_size(set), 0);
	ck_assert_int_eq(bc_has(set, ""), 0);
	ck_assert_int_eq(bc_has(set, "a"), 0);
}
END_TEST

START_TEST(test_set_lines)
{
	static const char		 data[] = "a\nbb\n\nccc\r\nlast";
	const struct held_set	*set;

	bc_add(1, data, sizeof data - 1);
	set = bc_set(1);
	ck_assert_uint_eq(held_set_size(set), 5);
	ck_assert_int_eq(bc_has(set, "a"), 1);
	ck_assert_int_eq(bc_has(set, "bb"), 1);
	ck_assert_int_eq(bc_has(set, ""), 1);
	ck_assert_int_eq(bc_has(set, "ccc\r"), 1);
	ck_assert_int_eq(bc_has(set, "last"), 1);

	ck_assert_int_eq(bc_has(set, "ccc"), 0);	/* '\r' is data */
	ck_assert_int_eq(bc_has(set, "b"), 0);
	ck_assert_int_eq(bc_has(set, "bbb"), 0);
	ck_assert_int_eq(bc_has(set, "las"), 0);
	ck_assert_int_eq(bc_has(set, "lastx"), 0);
	ck_assert_int_eq(bc_has(set, "A"), 0);
	/* A record holding a newline spans lines; it is none of them. */
	ck_assert_int_eq(bc_has(set, "a\nbb"), 0);
	ck_assert_int_eq(bc_has(set, "a\n"), 0);
	ck_assert_int_eq(bc_has(set, "\n"), 0);
}
END_TEST

START_TEST(test_final_newline)
{
	const struct held_set	*set;

	/* The empty piece after the last newline is not a line. */
	bc_add(1, "x\ny\n", 4);
	set = bc_set(1);
	ck_assert_uint_eq(held_set_size(set), 2);
	ck_assert_int_eq(bc_has(set, "x"), 1);
	ck_assert_int_eq(bc_has(set, "y"), 1);
	ck_assert_int_eq(bc_has(set, ""), 0);

	/* But an empty line before it is. */
	bc_add(2, "x\n\n", 3);
	set = bc_set(2);
	ck_assert_uint_eq(held_set_size(set), 2);
	ck_assert_int_eq(bc_has(set, ""), 1);

	/* A lone newline is one empty line. */
	bc_add(3, "\n", 1);
	set = bc_set(3);
	ck_assert_uint_eq(held_set_size(set), 1);
	ck_assert_int_eq(bc_has(set, ""), 1);
	ck_assert_int_eq(bc_has(set, "x"), 0);

	/* One line without a newline. */
	bc_add(4, "only", 4);
	set = bc_set(4);
	ck_assert_uint_eq(held_set_size(set), 1);
	ck_assert_int_eq(bc_has(set, "only"), 1);
	ck_assert_int_eq(bc_has(set, ""), 0);
}
END_TEST

START_TEST(test_duplicates)
{
	static const char		 data[] = "1\n2\n1\n1\n\n2\n\n10\n1";
	const struct held_set	*set;

	bc_add(1, data, sizeof data - 1);
	set = bc_set(1);
	ck_assert_uint_eq(held_set_size(set), 4);
	ck_assert_int_eq(bc_has(set, "1"), 1);
	ck_assert_int_eq(bc_has(set, "2"), 1);
	ck_assert_int_eq(bc_has(set, "10"), 1);
	ck_assert_int_eq(bc_has(set, ""), 1);
	ck_assert_int_eq(bc_has(set, "0"), 0);
}
END_TEST

START_TEST(test_nul_bytes)
{
	static const char		 data[] = "a\0b\n\0\n\0\0\nc";
	const struct held_set	*set;

	bc_add(1, data, sizeof data - 1);
	set = bc_set(1);
	ck_assert_uint_eq(held_set_size(set), 4);
	ck_assert_int_eq(held_set_contains(set, "a\0b", 3), 1);
	ck_assert_int_eq(held_set_contains(set, "\0", 1), 1);
	ck_assert_int_eq(held_set_contains(set, "\0\0", 2), 1);
	ck_assert_int_eq(held_set_contains(set, "c", 1), 1);
	ck_assert_int_eq(held_set_contains(set, "a", 1), 0);
	ck_assert_int_eq(held_set_contains(set, "a\0", 2), 0);
	ck_assert_int_eq(held_set_contains(set, "\0\0\0", 3), 0);
	ck_assert_int_eq(held_set_contains(set, "", 0), 0);
}
END_TEST

START_TEST(test_lengths)
{
	const struct held_set	*set;
	char				*data, *p, line[300];
	size_t				 len, i, j;

	/* Lines of every length from 0 to 200, of two kinds each, to cover
	 * every path of the hash. */
	data = xmalloc(2 * 201 * 202);
	p = data;
	for (i = 0; i <= 200; i++) {
		for (j = 0; j < i; j++)
			*p++ = (char)('a' + (i + j) % 26);
		*p++ = '\n';
		for (j = 0; j < i; j++)
			*p++ = (char)('A' + j % 26);
		*p++ = '\n';
	}
	len = (size_t)(p - data);
	bc_add(9, data, len);
	set = bc_set(9);
	ck_assert_uint_eq(held_set_size(set), 2 * 201 - 1);
	for (i = 0; i <= 200; i++) {
		for (j = 0; j < i; j++)
			line[j] = (char)('a' + (i + j) % 26);
		ck_assert_int_eq(held_set_contains(set, line, i), 1);
		if (i > 0) {
			/* One byte changed, at either end. */
			line[i - 1] ^= 0x20;
			ck_assert_int_eq(held_set_contains(set, line, i),
			    0);
			line[i - 1] ^= 0x20;
			line[0] ^= 0x01;
			ck_assert_int_eq(held_set_contains(set, line, i),
			    0);
			line[0] ^= 0x01;
		}
		for (j = 0; j < i; j++)
			line[j] = (char)('A' + j % 26);
		ck_assert_int_eq(held_set_contains(set, line, i), 1);
		/* A prefix of a line is another line only where one is. */
		if (i > 1)
			ck_assert_int_eq(held_set_contains(set, line,
			    i - 1), 1);
		line[i] = 'x';
		ck_assert_int_eq(held_set_contains(set, line, i + 1), 0);
	}
	free(data);
}
END_TEST

START_TEST(test_set_kept)
{
	const struct held_set	*set, *again;
	char				*err;

	bc_add(7, "a\nb\n", 4);
	set = bc_set(7);
	ck_assert_uint_ne(held_set_bytes_held(), 0);

	/* The next "task" adds another broadcast and finds the same set. */
	bc_add(8, "c\n", 2);
	again = bc_set(7);
	ck_assert_ptr_eq(set, again);
	ck_assert_int_eq(bc_has(again, "b"), 1);

	/* Removing it drops the set; its id is no longer known. */
	ck_assert_int_eq(bc_remove(7, &err), 0);
	ck_assert_ptr_null(held_set_get(7, &err));
	ck_assert_str_eq(err, "broadcast 7 is not held by this worker");
	free(err);
	ck_assert_ptr_null(held_set_get(99, &err));
	ck_assert_str_eq(err, "broadcast 99 is not held by this worker");
	free(err);
	ck_assert_int_eq(bc_has(bc_set(8), "c"), 1);
}
END_TEST

START_TEST(test_large)
{
	const struct held_set	*set;
	struct timespec			 a, b;
	char				*data, line[32];
	size_t				 len = 0, size, i, n = 1000000;
	int				 k;
	double				 ms;

	size = n * 12;
	data = xmalloc(size);
	for (i = 0; i < n; i++)
		len += (size_t)snprintf(data + len, size - len, "%zu\n", i * 7);
	bc_add(1, data, len);
	free(data);

	clock_gettime(CLOCK_MONOTONIC, &a);
	set = bc_set(1);
	clock_gettime(CLOCK_MONOTONIC, &b);
	ms = (b.tv_sec - a.tv_sec) * 1e3 + (b.tv_nsec - a.tv_nsec) / 1e6;
	ck_assert_uint_eq(held_set_size(set), n);
	/* Generous, for valgrind and slow machines: about 50 ms natively. */
	ck_assert_msg(ms < 10000, "building a set of %zu lines took %.0f ms",
	    n, ms);
	/* Compact: 8 bytes a slot, at most 4/3 slots a line, in whole huge
	 * pages. */
	ck_assert_uint_le(held_set_bytes_held(),
	    n * 8 * 4 / 3 + (2 << 20));

	for (i = 0; i < n * 7; i += 3) {
		k = snprintf(line, sizeof line, "%zu", i);
		ck_assert_int_eq(held_set_contains(set, line, (size_t)k),
		    i % 7 == 0);
	}
}
END_TEST

START_TEST(test_memory_limit)
{
	const struct held_set	*set;
	struct rlimit			 rl;
	char				*data, *err;
	size_t				 len = 0, i, n = 1000000;
	unsigned long			 pages;
	FILE				*f;
	pid_t				 pid;
	int				 status;

	data = xmalloc(n * 8);
	for (i = 0; i < n; i++)
		len += (size_t)snprintf(data + len, n * 8 - len, "%zu\n", i);
	bc_add(1, data, len);
	free(data);

	/* In a child: the limit would stay with a runner that does not fork. */
	pid = fork();
	ck_assert_int_ne(pid, -1);
	if (pid == 0) {
		f = fopen("/proc/self/statm", "r");
		if (f == NULL || fscanf(f, "%lu", &pages) != 1)
			_exit(2);
		rl.rlim_cur = rl.rlim_max = pages * 4096 + (1 << 20);
		if (setrlimit(RLIMIT_AS, &rl) == -1)
			_exit(3);
		set = held_set_get(1, &err);
		if (set != NULL)
			_exit(4);
		if (strstr(err, "broadcast 1") == NULL ||
		    strstr(err, "no memory for a set of 1000000 "
		    "lines") == NULL ||
		    strstr(err, "workers.max_memory") == NULL) {
			fprintf(stderr, "unexpected error: %s\n", err);
			_exit(5);
		}
		_exit(0);
	}
	ck_assert_int_eq(waitpid(pid, &status, 0), pid);
	ck_assert_msg(WIFEXITED(status) && WEXITSTATUS(status) == 0,
	    "child status %#x", status);
}
END_TEST

/* A broadcast that came with its index answers from it, building
 * nothing, as the set built from its bytes does. */
START_TEST(test_index_used)
{
	const struct held_set	*set, *built;
	char			*data, *err, line[32];
	size_t			 len = 0, i, n = 50000;
	int			 k;

	data = xmalloc(n * 8);
	for (i = 0; i < n; i++)
		len += (size_t)sprintf(data + len, "%zu\n", i * 3);
	ck_assert_int_eq(bc_add_indexed(1, data, len, NULL, &err), 0);
	bc_add(2, data, len);
	free(data);
	set = bc_set(1);
	ck_assert_uint_eq(held_set_bytes_held(), 0);	/* nothing built */
	built = bc_set(2);
	ck_assert_uint_ne(held_set_bytes_held(), 0);
	ck_assert_uint_eq(held_set_size(set), n);
	ck_assert_uint_eq(held_set_size(built), n);
	for (i = 0; i < n * 3 + 10; i++) {
		k = snprintf(line, sizeof line, "%zu", i);
		ck_assert_int_eq(held_set_contains(set, line, (size_t)k),
		    held_set_contains(built, line, (size_t)k));
	}
}
END_TEST

/* Break an index's magic. */
static void
bc_break_magic(void *ix, size_t size)
{
	(void)size;
	((char *)ix)[1] ^= 0x20;
}

/* Point every slot of an index past the bytes, its header kept. */
static void
bc_break_slots(void *ix, size_t size)
{
	uint64_t	*slots = (uint64_t *)((char *)ix + BINDEX_HEADER);
	size_t		 i;

	for (i = 0; i < (size - BINDEX_HEADER) / 8; i++) {
		if (slots[i] != 0)
			slots[i] |= UINT64_C(0xffffff0000000000);
	}
}

/* A corrupt index fails the set's use with what is wrong, and the
 * worker goes on. */
START_TEST(test_index_corrupt)
{
	static const char	 data[] = "a\nb\nc\n";
	char			*err;

	ck_assert_int_eq(bc_add_indexed(1, data, sizeof data - 1,
	    bc_break_magic, &err), 0);
	ck_assert_ptr_null(held_set_get(1, &err));
	ck_assert_str_eq(err, "broadcast 1: its index is corrupt: not an "
	    "index (its magic)");
	free(err);
	/* Slots past the bytes: the lookup that meets one says so. */
	ck_assert_int_eq(bc_add_indexed(2, data, sizeof data - 1,
	    bc_break_slots, &err), 0);
	ck_assert_int_eq(held_set_contains(bc_set(2), "b", 1), -1);
}
END_TEST

/* The broadcast store's suite. */
Suite *
held_suite(void)
{
	Suite	*s;
	TCase	*tc;

	s = suite_create("held");

	tc = tcase_create("changes");
	tcase_add_checked_fixture(tc, bc_setup, bc_teardown);
	tcase_add_test(tc, test_add_remove);
	tcase_add_test(tc, test_in_order);
	tcase_add_test(tc, test_already_held);
	tcase_add_test(tc, test_remove_not_held);
	tcase_add_test(tc, test_size_mismatch);
	tcase_add_test(tc, test_bad_file);
	tcase_add_test(tc, test_bad_changes);
	suite_add_tcase(s, tc);

	tc = tcase_create("set");
	tcase_add_checked_fixture(tc, bc_setup, bc_teardown);
	tcase_set_timeout(tc, 60);
	tcase_add_test(tc, test_empty);
	tcase_add_test(tc, test_set_lines);
	tcase_add_test(tc, test_final_newline);
	tcase_add_test(tc, test_duplicates);
	tcase_add_test(tc, test_nul_bytes);
	tcase_add_test(tc, test_lengths);
	tcase_add_test(tc, test_set_kept);
	tcase_add_test(tc, test_large);
	tcase_add_test(tc, test_memory_limit);
	tcase_add_test(tc, test_index_used);
	tcase_add_test(tc, test_index_corrupt);
	suite_add_tcase(s, tc);

	return (s);
}
