/*
 * bench_tasks: what emberd costs per task, beside a raw socketpair ping-pong
 * between two processes measured in the same run.
 *
 * - throughput: count over a plan of many empty range partitions, a few
 *   times after a warm-up; best, median and worst tasks/s and microseconds
 *   per task.
 * - latency: many sequential one-partition counts on one connection with a
 *   warm worker, in several runs, each beside a ping-pong timed one trip
 *   at a time just before it; per run the median and p99 microseconds per
 *   job and their ratios to the ping-pong's median round trip, and the
 *   median of the runs with their least and greatest.
 * - baseline: 4-byte request, 4-byte reply between two forked processes over
 *   a socketpair; microseconds per round trip.
 *
 * Nothing is started here: emberd must be listening on --socket.  emberd's
 * tasks_completed counter is read before and after, so a run that did not
 * really execute every task fails instead of printing a figure.
 */

#include <sys/types.h>
#include <sys/socket.h>
#include <sys/wait.h>

#include <err.h>
#include <getopt.h>
#include <inttypes.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "ember.h"
#include "frame.h"
#include "bench_util.h"

#define DEFAULT_PARTITIONS	10000
#define DEFAULT_RUNS		5
#define DEFAULT_JOBS		2000
#define DEFAULT_ROUND_TRIPS	100000
#define PINGPONG_RUNS		3
#define LATENCY_WARMUP		100
#define DEFAULT_LATENCY_RUNS	5
#define MAX_LATENCY_RUNS	99

/* One latency run: its jobs' median and p99, the ping-pong round trip
 * timed the same way just before, and the ratios to it. */
struct latency {
	double	med, p99, rt, rt_p99;
	double	med_ratio, p99_ratio;
};

static const char	*socket_path;

static void __attribute__((noreturn))
usage(void)
{
	fprintf(stderr, "usage: bench_tasks --socket PATH [--partitions N] "
	    "[--runs N] [--jobs N] [--round-trips N] [--latency-runs N]\n");
	exit(2);
}

/* Return the q quantile (nearest rank) of n sorted values. */
static double
quantile(const double *v, size_t n, double q)
{
	size_t	i;

	i = (size_t)(q * (double)n + 0.999999);
	if (i > 0)
		i--;
	if (i >= n)
		i = n - 1;
	return (v[i]);
}

/* Echo int32 requests plus one until end of file; the ping-pong peer. */
static void __attribute__((noreturn))
pingpong_peer(int fd)
{
	int32_t	v;

	while (fd_read_int32(fd, &v) == 0) {
		if (fd_write_int32(fd, v + 1) == -1)
			_exit(1);
	}
	_exit(0);
}

/*
 * Time n round trips over a fresh socketpair; microseconds per trip.  If
 * each is not NULL, every trip is also timed on its own, in microseconds.
 */
static double
pingpong_once(long n, double *each)
{
	uint64_t	t0, t1, t;
	pid_t		pid;
	int32_t		v;
	int		sv[2], status;
	long		i;

	if (socketpair(AF_UNIX, SOCK_STREAM, 0, sv) == -1)
		err(1, "socketpair");
	switch (pid = fork()) {
	case -1:
		err(1, "fork");
	case 0:
		close(sv[0]);
		pingpong_peer(sv[1]);
	}
	close(sv[1]);

	/* Warm up: both processes running, pages touched. */
	for (i = 0; i < 1000; i++) {
		if (fd_write_int32(sv[0], (int32_t)i) == -1 ||
		    fd_read_int32(sv[0], &v) == -1)
			err(1, "ping-pong");
	}

	t0 = t = now_ns();
	for (i = 0; i < n; i++) {
		if (fd_write_int32(sv[0], (int32_t)i) == -1 ||
		    fd_read_int32(sv[0], &v) == -1)
			err(1, "ping-pong");
		if (v != (int32_t)i + 1)
			errx(1, "ping-pong: sent %ld, got %d back", i, v);
		if (each != NULL) {
			t1 = now_ns();
			each[i] = (double)(t1 - t) / 1e3;
			t = t1;
		}
	}
	t1 = now_ns();

	close(sv[0]);
	if (waitpid(pid, &status, 0) == -1)
		err(1, "waitpid");
	if (!WIFEXITED(status) || WEXITSTATUS(status) != 0)
		errx(1, "ping-pong peer failed (status %#x)", status);
	return ((double)(t1 - t0) / 1e3 / (double)n);
}

/*
 * One latency run into *l: n round trips of a ping-pong, each timed, then
 * n one-partition counts on e, each timed; lat holds n values.
 */
static void
latency_run(struct ember *e, const char *plan, long n, double *lat,
    struct latency *l)
{
	long	i;

	pingpong_once(n, lat);
	qsort(lat, (size_t)n, sizeof *lat, cmp_double);
	l->rt = quantile(lat, (size_t)n, 0.5);
	l->rt_p99 = quantile(lat, (size_t)n, 0.99);
	for (i = 0; i < n; i++)
		lat[i] = count_once(e, plan, 1, 1) * 1e6;
	qsort(lat, (size_t)n, sizeof *lat, cmp_double);
	l->med = quantile(lat, (size_t)n, 0.5);
	l->p99 = quantile(lat, (size_t)n, 0.99);
	l->med_ratio = l->med / l->rt;
	l->p99_ratio = l->p99 / l->rt;
	printf("ember latency: %ld one-partition counts: min %.1f us, median "
	    "%.1f us, p99 %.1f us, max %.1f us | ping-pong median %.1f us, "
	    "p99 %.1f us | median/rt %.2f, p99/rt %.2f\n", n, lat[0], l->med,
	    l->p99, lat[n - 1], l->rt, l->rt_p99, l->med_ratio, l->p99_ratio);
}

/* Print "result NAME MED", NAME_min and NAME_max of field off of the n
 * runs, with the given decimals. */
static void
latency_result(const struct latency *lr, long n, size_t off,
    const char *name, int decimals)
{
	double	v[MAX_LATENCY_RUNS];
	long	i;

	for (i = 0; i < n; i++)
		memcpy(&v[i], (const char *)&lr[i] + off, sizeof v[i]);
	qsort(v, (size_t)n, sizeof *v, cmp_double);
	printf("result %s %.*f\n", name, decimals, v[(n - 1) / 2]);
	printf("result %s_min %.*f\n", name, decimals, v[0]);
	printf("result %s_max %.*f\n", name, decimals, v[n - 1]);
}

/* The latency figures for bench/run.sh: medians of the runs, min, max. */
static void
latency_print(const struct latency *lr, long n)
{
	latency_result(lr, n, offsetof(struct latency, med),
	    "latency_median_us", 1);
	latency_result(lr, n, offsetof(struct latency, p99),
	    "latency_p99_us", 1);
	latency_result(lr, n, offsetof(struct latency, rt),
	    "latency_rt_us", 1);
	latency_result(lr, n, offsetof(struct latency, rt_p99),
	    "pingpong_p99_us", 1);
	latency_result(lr, n, offsetof(struct latency, med_ratio),
	    "latency_ratio", 2);
	latency_result(lr, n, offsetof(struct latency, p99_ratio),
	    "latency_p99_ratio", 2);
}

int
main(int argc, char **argv)
{
	static const struct option longopts[] = {
		{ "socket",	 required_argument, NULL, 's' },
		{ "partitions",	 required_argument, NULL, 'p' },
		{ "runs",	 required_argument, NULL, 'r' },
		{ "jobs",	 required_argument, NULL, 'j' },
		{ "round-trips", required_argument, NULL, 't' },
		{ "latency-runs", required_argument, NULL, 'l' },
		{ NULL,		 0,		    NULL, 0 }
	};
	struct ember	*e;
	double		 pp[PINGPONG_RUNS], *secs, *lat;
	struct latency	 lr[MAX_LATENCY_RUNS];
	double		 pp_best, pp_med, best, med, secs_max;
	char		 plan[256], plan1[256];
	long		 partitions = DEFAULT_PARTITIONS, runs = DEFAULT_RUNS;
	long		 jobs = DEFAULT_JOBS, trips = DEFAULT_ROUND_TRIPS, i;
	long		 lruns = DEFAULT_LATENCY_RUNS, r;
	int64_t		 before, after, expect;
	int		 ch;

	while ((ch = getopt_long(argc, argv, "", longopts, NULL)) != -1) {
		switch (ch) {
		case 's':
			socket_path = optarg;
			break;
		case 'p':
			partitions = parse_count(optarg, "--partitions", 1);
			break;
		case 'r':
			runs = parse_count(optarg, "--runs", 1);
			break;
		case 'j':
			jobs = parse_count(optarg, "--jobs", 1);
			break;
		case 't':
			trips = parse_count(optarg, "--round-trips", 1);
			break;
		case 'l':
			lruns = parse_count(optarg, "--latency-runs", 1);
			if (lruns > MAX_LATENCY_RUNS)
				errx(2, "--latency-runs: at most %d",
				    MAX_LATENCY_RUNS);
			break;
		default:
			usage();
		}
	}
	if (optind != argc || socket_path == NULL)
		usage();
	setvbuf(stdout, NULL, _IOLBF, 0);

	/* Baseline: a raw ping-pong between two processes. */
	for (i = 0; i < PINGPONG_RUNS; i++)
		pp[i] = pingpong_once(trips, NULL);
	qsort(pp, PINGPONG_RUNS, sizeof *pp, cmp_double);
	pp_best = pp[0];
	pp_med = quantile(pp, PINGPONG_RUNS, 0.5);
	printf("raw ping-pong: %ld round trips x %d: best %.2f us, "
	    "median %.2f us per round trip\n", trips, PINGPONG_RUNS, pp_best,
	    pp_med);

	e = connect_or_die(socket_path);

	/* Throughput: many empty partitions, one warm-up run first. */
	snprintf(plan, sizeof plan, "{\"source\":{\"range\":{\"start\":0,"
	    "\"end\":0}},\"partitions\":%ld}", partitions);
	secs = calloc((size_t)runs, sizeof *secs);
	lat = calloc((size_t)jobs, sizeof *lat);
	if (secs == NULL || lat == NULL)
		err(1, "calloc");
	before = status_counter(e, "tasks_completed");
	count_once(e, plan, partitions, 0);
	for (i = 0; i < runs; i++)
		secs[i] = count_once(e, plan, partitions, 0);
	after = status_counter(e, "tasks_completed");
	expect = (int64_t)(runs + 1) * partitions;
	if (after - before != expect)
		errx(1, "emberd completed %" PRId64 " tasks, expected %"
		    PRId64, after - before, expect);
	qsort(secs, (size_t)runs, sizeof *secs, cmp_double);
	best = secs[0];
	secs_max = secs[runs - 1];
	med = quantile(secs, (size_t)runs, 0.5);
	printf("ember count: %ld empty partitions x %ld runs (after a "
	    "warm-up): best %.3f s, median %.3f s\n", partitions, runs, best,
	    med);
	printf("  best   %9.0f tasks/s  %7.2f us/task  (%.2fx a ping-pong "
	    "round trip)\n", (double)partitions / best,
	    best * 1e6 / (double)partitions,
	    best * 1e6 / (double)partitions / pp_best);
	printf("  median %9.0f tasks/s  %7.2f us/task  (%.2fx)\n",
	    (double)partitions / med, med * 1e6 / (double)partitions,
	    med * 1e6 / (double)partitions / pp_best);

	/* Latency: sequential one-partition jobs on a warm worker, run by
	 * run beside a ping-pong timed the same way. */
	snprintf(plan1, sizeof plan1, "{\"source\":{\"range\":{\"start\":0,"
	    "\"end\":1}},\"partitions\":1}");
	before = status_counter(e, "tasks_completed");
	for (i = 0; i < LATENCY_WARMUP; i++)
		count_once(e, plan1, 1, 1);
	for (r = 0; r < lruns; r++)
		latency_run(e, plan1, jobs, lat, &lr[r]);
	after = status_counter(e, "tasks_completed");
	if (after - before != LATENCY_WARMUP + lruns * jobs)
		errx(1, "emberd completed %" PRId64 " tasks, expected %ld",
		    after - before, LATENCY_WARMUP + lruns * jobs);

	ember_close(e);
	free(secs);
	free(lat);

	/* Figures for bench/run.sh, one per line. */
	printf("result pingpong_us %.2f\n", pp_best);
	printf("result task_us %.2f\n", best * 1e6 / (double)partitions);
	printf("result task_us_median %.2f\n", med * 1e6 / (double)partitions);
	printf("result task_us_max %.2f\n", secs_max * 1e6 / (double)partitions);
	latency_print(lr, lruns);
	return (0);
}
