/*
 * bench_shuffle: the shuffle file library alone (common/shuffle_file.c),
 * in this process, by CPU time, beside a baseline measured in the same
 * run.  "sort": N records of 100 bytes (99 random printable bytes and a
 * newline, as a text file's lines) written into one ordered bucket under
 * a memory bound, committed and read back, beside `LC_ALL=C sort
 * --parallel=1 -S MEMORY` of the same lines (its children's CPU time).
 * "sum": N pairs over K keys written with a sum's combine (a
 * reduce_by_key's map side), committed and read back.  No daemon: perf
 * can run it alone.
 *
 * usage: bench_shuffle [--records N] [--keys K] [--memory MB] [--dir DIR]
 *                      sort | sum
 */
#include <sys/resource.h>
#include <sys/wait.h>

#include <err.h>
#include <fcntl.h>
#include <getopt.h>
#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "shuffle_file.h"

static __attribute__((noreturn)) void	usage(void);

static void
usage(void)
{
	fprintf(stderr, "usage: bench_shuffle [--records N] [--keys K] "
	    "[--memory MB] [--dir DIR] sort | sum\n");
	exit(2);
}

/* CPU seconds (user and system) of this process, or of its children. */
static double
cpu_now(int who)
{
	struct rusage	ru;

	getrusage(who, &ru);
	return ((double)ru.ru_utime.tv_sec + (double)ru.ru_utime.tv_usec / 1e6 +
	    (double)ru.ru_stime.tv_sec + (double)ru.ru_stime.tv_usec / 1e6);
}

/* The next record: 99 printable bytes from a xorshift generator. */
static void
record_next(uint64_t *x, char *rec)
{
	int	i;

	for (i = 0; i < 99; i++) {
		if (i % 8 == 0) {
			*x ^= *x << 13;
			*x ^= *x >> 7;
			*x ^= *x << 17;
		}
		rec[i] = (char)(' ' + 1 + ((*x >> (i % 8 * 8)) & 63));
	}
	rec[99] = '\n';
}

/* Read a bucket to its end: its entries. */
static int64_t
read_all(int dir, const char *name)
{
	struct shuffle_reader	*r;
	struct shuffle_entry	 e;
	char			*err = NULL;
	int64_t			 n = 0;
	int			 rc;

	if ((r = shuffle_reader_open(dir, name, 0, &err)) == NULL)
		errx(1, "%s", err);
	while ((rc = shuffle_reader_next(r, &e, &err)) == 1)
		n++;
	if (rc == -1)
		errx(1, "%s", err);
	shuffle_reader_free(r);
	return (n);
}

/* Commit a writer: the file's size. */
static int64_t
commit(struct shuffle_writer *w)
{
	int64_t	 bytes;
	char	*err = NULL;

	if (shuffle_writer_commit(w, &bytes, &err) == -1)
		errx(1, "%s", err);
	shuffle_writer_free(w);
	return (bytes);
}

/* GNU sort on the same lines: its CPU seconds. */
static double
sort_baseline(const char *dir, int64_t n, size_t memory)
{
	char	 path[4096], cmd[8192], rec[100];
	uint64_t x = 88172645463325252ULL;
	FILE	*f;
	double	 t;
	int64_t	 i;

	snprintf(path, sizeof path, "%s/bench_shuffle.txt", dir);
	if ((f = fopen(path, "w")) == NULL)
		err(1, "%s", path);
	for (i = 0; i < n; i++) {
		record_next(&x, rec);
		fwrite(rec, 1, sizeof rec, f);
	}
	if (fclose(f) == EOF)
		err(1, "%s", path);
	snprintf(cmd, sizeof cmd, "LC_ALL=C sort --parallel=1 -S %zuM -T '%s' "
	    "'%s' >/dev/null", memory >> 20, dir, path);
	t = cpu_now(RUSAGE_CHILDREN);
	if (system(cmd) != 0)
		errx(1, "%s failed", cmd);
	t = cpu_now(RUSAGE_CHILDREN) - t;
	unlink(path);
	return (t);
}

/* sort: n records through one ordered bucket. */
static void
bench_sort(int dir, const char *dirname, int64_t n, size_t memory)
{
	struct shuffle_writer	*w;
	struct shuffle_entry	 e;
	char			 rec[100], *err = NULL;
	uint64_t		 x = 88172645463325252ULL;
	double			 t0, t1, t2, t3, base;
	int64_t			 i, bytes;
	int			 spills;

	w = shuffle_writer_create(dir, "bench_shuffle.data", 1,
	    SHUFFLE_ORDER_KEY, 0, memory, NULL, NULL, &err);
	if (w == NULL)
		errx(1, "%s", err);
	memset(&e, 0, sizeof e);
	e.kind = SHUFFLE_KIND_RECORD;
	e.key = rec;
	e.klen = 99;
	t0 = cpu_now(RUSAGE_SELF);
	for (i = 0; i < n; i++) {
		record_next(&x, rec);
		if (shuffle_writer_add(w, 0, &e, &err) == -1)
			errx(1, "%s", err);
	}
	spills = shuffle_writer_spills(w);
	t1 = cpu_now(RUSAGE_SELF);
	bytes = commit(w);
	t2 = cpu_now(RUSAGE_SELF);
	if (read_all(dir, "bench_shuffle.data") != n)
		errx(1, "records lost");
	t3 = cpu_now(RUSAGE_SELF);
	unlinkat(dir, "bench_shuffle.data", 0);
	base = sort_baseline(dirname, n, memory);
	printf("sort %" PRId64 " records of 100 bytes, %zu MiB: add %.2f, "
	    "commit %.2f, read %.2f CPU s (spills %d, %" PRId64 " bytes); "
	    "all %.2f; sort(1) %.2f; ratio %.2f\n", n, memory >> 20, t1 - t0,
	    t2 - t1, t3 - t2, spills, bytes, t3 - t0, base,
	    base / (t3 - t0));
}

static char	sum_buf[32];

/* Add two values as integers. */
static int
sum_cb(void *arg, const struct shuffle_entry *a, const struct shuffle_entry *b,
    struct shuffle_entry *out, char **err)
{
	int64_t	i, j;
	double	d;

	(void)arg;
	if (shuffle_number_parse(a->value, a->vlen, &i, &d) != 1 ||
	    shuffle_number_parse(b->value, b->vlen, &j, &d) != 1) {
		*err = strdup("not an integer");
		return (-1);
	}
	*out = *a;
	out->vlen = (size_t)snprintf(sum_buf, sizeof sum_buf, "%" PRId64,
	    i + j);
	out->value = sum_buf;
	return (0);
}

/* sum: n pairs over keys keys, combined. */
static void
bench_sum(int dir, int64_t n, int64_t keys, size_t memory)
{
	struct shuffle_writer	*w;
	struct shuffle_entry	 e;
	char			 k[32], *err = NULL;
	uint64_t		 x = 88172645463325252ULL;
	double			 t0, t1, t2, t3;
	int64_t			 i, got;

	w = shuffle_writer_create(dir, "bench_shuffle.data", 1,
	    SHUFFLE_ORDER_KEY, 0, memory, sum_cb, NULL, &err);
	if (w == NULL)
		errx(1, "%s", err);
	memset(&e, 0, sizeof e);
	e.kind = SHUFFLE_KIND_PAIR;
	e.key = k;
	e.value = "1";
	e.vlen = 1;
	t0 = cpu_now(RUSAGE_SELF);
	for (i = 0; i < n; i++) {
		x ^= x << 13;
		x ^= x >> 7;
		x ^= x << 17;
		e.klen = (size_t)snprintf(k, sizeof k, "user%" PRIu64,
		    x % (uint64_t)keys);
		if (shuffle_writer_add(w, 0, &e, &err) == -1)
			errx(1, "%s", err);
	}
	t1 = cpu_now(RUSAGE_SELF);
	commit(w);
	t2 = cpu_now(RUSAGE_SELF);
	got = read_all(dir, "bench_shuffle.data");
	t3 = cpu_now(RUSAGE_SELF);
	unlinkat(dir, "bench_shuffle.data", 0);
	printf("sum %" PRId64 " pairs over %" PRId64 " keys, %zu MiB: add "
	    "%.2f, commit %.2f, read %.2f CPU s; %" PRId64 " keys out\n", n,
	    keys, memory >> 20, t1 - t0, t2 - t1, t3 - t2, got);
}

int
main(int argc, char **argv)
{
	static struct option	 longopts[] = {
		{ "records", required_argument, NULL, 'n' },
		{ "keys", required_argument, NULL, 'k' },
		{ "memory", required_argument, NULL, 'm' },
		{ "dir", required_argument, NULL, 'd' },
		{ NULL, 0, NULL, 0 }
	};
	const char		*dirname = getenv("TMPDIR");
	int64_t			 n = 1000000, keys = 100000;
	size_t			 memory = (size_t)256 << 20;
	int			 c, dir;

	if (dirname == NULL)
		dirname = "/tmp";
	while ((c = getopt_long(argc, argv, "", longopts, NULL)) != -1) {
		switch (c) {
		case 'n':
			n = strtoll(optarg, NULL, 10);
			break;
		case 'k':
			keys = strtoll(optarg, NULL, 10);
			break;
		case 'm':
			memory = (size_t)strtoull(optarg, NULL, 10) << 20;
			break;
		case 'd':
			dirname = optarg;
			break;
		default:
			usage();
		}
	}
	if (optind + 1 != argc || n < 1 || keys < 1 || memory == 0)
		usage();
	if ((dir = open(dirname, O_RDONLY|O_DIRECTORY|O_CLOEXEC)) == -1)
		err(1, "%s", dirname);
	if (strcmp(argv[optind], "sort") == 0)
		bench_sort(dir, dirname, n, memory);
	else if (strcmp(argv[optind], "sum") == 0)
		bench_sum(dir, n, keys, memory);
	else
		usage();
	close(dir);
	return (0);
}
