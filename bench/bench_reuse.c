/*
 * bench_reuse: what reusing workers is worth, with one emberd that reuses
 * its workers (workers.reuse = yes) and one that does not (no), beside a
 * raw fork measured in the same run.
 *
 * - tasks: a count over many small range partitions with a map, so every
 *   task runs in a worker and reads its records; microseconds per task on
 *   both daemons.  The baseline is fork(), _exit() in the child and
 *   waitpid() in the parent, as many times; on the reuse-off daemon half
 *   as many run just before and half just after each run, and the run's
 *   ratio to them printed.
 * - broadcast: the experiment of Spark's worker reuse change.  A broadcast
 *   of the integers 0 .. N-1, one per line, is uploaded to both daemons;
 *   the job counts the elements of a small range that are in it, in many
 *   partitions.  A reused worker builds the broadcast's set once and keeps
 *   it; without reuse every task is a new worker that builds it again.
 *   The broadcast is indexed when it is put: the put is timed apart, and
 *   the reuse-on runs (each on a new broadcast) are repeated and given
 *   as a median with their spread.  The time of a two-partition run on
 *   fresh workers (each maps the index, or builds the set, side by
 *   side) is printed as the reference.
 *
 * Nothing is started here: both daemons must be listening.  emberd's
 * counters are read around every run, so a run that did not execute every
 * task, or a daemon that does not reuse (or does reuse) its workers as its
 * socket option says, fails instead of printing a figure.
 */

#include <sys/types.h>
#include <sys/wait.h>

#include <err.h>
#include <errno.h>
#include <getopt.h>
#include <inttypes.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include <jansson.h>

#include "ember.h"
#include "bench_util.h"

#define DEFAULT_TASKS		2000
#define DEFAULT_RUNS		3
#define DEFAULT_ELEMENTS	30000000
#define DEFAULT_RANGE		24000
#define DEFAULT_PARTITIONS	100
#define DEFAULT_BROADCAST_RUNS	5
#define FORK_RUNS		2
#define WARMUP_TASKS		20

/* The counters read around a run. */
struct counters {
	int64_t	tasks_completed;
	int64_t	workers_forked;
	int64_t	worker_reuses;
	int64_t	broadcasts_sent;
	int64_t	broadcast_bytes_sent;
	int64_t	workers_max;		/* not a counter: the limit */
};

static void __attribute__((noreturn))
usage(void)
{
	fprintf(stderr, "usage: bench_reuse --socket PATH --socket-off PATH "
	    "[--tasks N] [--runs N]\n"
	    "       [--elements N] [--range N] [--partitions N] "
	    "[--only tasks | broadcast]\n"
	    "       [--broadcast-runs N] [--no-off]\n");
	exit(2);
}

/* Read the counters from emberd's status reply. */
static void
read_counters(struct ember *e, struct counters *c)
{
	json_t		*j, *cs;
	json_error_t	 jerr;
	char		*text;

	if ((text = ember_status(e)) == NULL)
		errx(1, "status: %s: %s", ember_error_class(e), ember_error(e));
	if ((j = json_loads(text, 0, &jerr)) == NULL)
		errx(1, "status: %s", jerr.text);
	cs = json_object_get(j, "counters");
#define GET(name) do {							\
	json_t	*v = json_object_get(cs, #name);			\
	if (!json_is_integer(v))					\
		errx(1, "status: no counter " #name);			\
	c->name = json_integer_value(v);				\
} while (0)
	GET(tasks_completed);
	GET(workers_forked);
	GET(worker_reuses);
	GET(broadcasts_sent);
	GET(broadcast_bytes_sent);
#undef GET
	if (!json_is_integer(json_object_get(j, "workers_max")))
		errx(1, "status: no workers_max");
	c->workers_max = json_integer_value(json_object_get(j, "workers_max"));
	json_decref(j);
	free(text);
}

/* Set d to the growth of every counter from a to b. */
static void
diff_counters(const struct counters *a, const struct counters *b,
    struct counters *d)
{
	d->tasks_completed = b->tasks_completed - a->tasks_completed;
	d->workers_forked = b->workers_forked - a->workers_forked;
	d->worker_reuses = b->worker_reuses - a->worker_reuses;
	d->broadcasts_sent = b->broadcasts_sent - a->broadcasts_sent;
	d->broadcast_bytes_sent = b->broadcast_bytes_sent -
	    a->broadcast_bytes_sent;
	d->workers_max = b->workers_max;
}

/*
 * Check what a run of tasks tasks did: every task completed, and most
 * tasks on a reused worker (reuse) or every task on a fresh one (!reuse).
 */
static void
check_run(const char *what, const struct counters *d, int64_t tasks,
    int reuse)
{
	if (d->tasks_completed != tasks)
		errx(1, "%s: emberd completed %" PRId64 " tasks, expected %"
		    PRId64, what, d->tasks_completed, tasks);
	if (reuse && d->workers_forked + d->workers_max >= tasks)
		errx(1, "%s: %" PRId64 " workers forked for %" PRId64 " tasks: "
		    "is workers.reuse on?", what, d->workers_forked, tasks);
	if (!reuse && (d->worker_reuses != 0 || d->workers_forked < tasks))
		errx(1, "%s: %" PRId64 " workers forked and %" PRId64
		    " reused for %" PRId64 " tasks: is workers.reuse off?",
		    what, d->workers_forked, d->worker_reuses, tasks);
}

/* Sort n figures; their median. */
static double
median_of(double *v, long n)
{
	qsort(v, (size_t)n, sizeof *v, cmp_double);
	return (n % 2 ? v[n / 2] : (v[n / 2 - 1] + v[n / 2]) / 2);
}

/* Fork a child that exits at once and wait for it, n times; us per fork. */
static double
fork_once(long n)
{
	uint64_t	t0, t1;
	pid_t		pid;
	long		i;
	int		status;

	t0 = now_ns();
	for (i = 0; i < n; i++) {
		switch (pid = fork()) {
		case -1:
			err(1, "fork");
		case 0:
			_exit(0);
		}
		while (waitpid(pid, &status, 0) == -1) {
			if (errno != EINTR)
				err(1, "waitpid");
		}
		if (!WIFEXITED(status) || WEXITSTATUS(status) != 0)
			errx(1, "fork child failed (status %#x)", status);
	}
	t1 = now_ns();
	return ((double)(t1 - t0) / 1e3 / (double)n);
}

/*
 * Time runs counts of the many-task plan on one daemon, after a warm-up;
 * the best microseconds per task, the median in *med, the worst in *max.
 * With ratio non-NULL, each run is framed by fork_once of half as many
 * forks just before and just after it (so both see the same load), and
 * ratio[i] is the run's us/task over the lesser of the two: a burst of
 * other work during one of them must not flatter the ratio.
 */
static double
tasks_on(const char *path, const char *name, int reuse, long tasks,
    long runs, double *med, double *max, double *ratio)
{
	struct ember	*e;
	struct counters	 a, b, d;
	double		*secs, best, f, f2;
	char		 plan[256], warm[256];
	long		 i;

	snprintf(warm, sizeof warm, "{\"source\":{\"range\":{\"start\":0,"
	    "\"end\":%d}},\"partitions\":%d,\"ops\":[{\"map\":\"upper\"}]}",
	    WARMUP_TASKS, WARMUP_TASKS);
	snprintf(plan, sizeof plan, "{\"source\":{\"range\":{\"start\":0,"
	    "\"end\":%ld}},\"partitions\":%ld,\"ops\":[{\"map\":\"upper\"}]}",
	    tasks, tasks);
	if ((secs = calloc((size_t)runs, sizeof *secs)) == NULL)
		err(1, "calloc");
	e = connect_or_die(path);
	count_once(e, warm, WARMUP_TASKS, WARMUP_TASKS);
	read_counters(e, &a);
	for (i = 0; i < runs; i++) {
		f = ratio != NULL ? fork_once(tasks / 2) : 0;
		secs[i] = count_once(e, plan, tasks, tasks);
		if (ratio == NULL)
			continue;
		f2 = fork_once(tasks / 2);
		f = f2 < f ? f2 : f;
		ratio[i] = secs[i] * 1e6 / (double)tasks / f;
		printf("  %s run %ld: %.1f us/task, fork+wait around it "
		    "%.1f us, ratio %.2f\n", name, i + 1, secs[i] * 1e6 /
		    (double)tasks, f, ratio[i]);
	}
	read_counters(e, &b);
	ember_close(e);
	diff_counters(&a, &b, &d);
	check_run(name, &d, (int64_t)tasks * runs, reuse);

	qsort(secs, (size_t)runs, sizeof *secs, cmp_double);
	best = secs[0] * 1e6 / (double)tasks;
	*med = secs[runs / 2] * 1e6 / (double)tasks;
	*max = secs[runs - 1] * 1e6 / (double)tasks;
	printf("ember %s: count of %ld one-record partitions with map upper "
	    "x %ld (after %d warm-up tasks): best %.3f s, %.1f us/task, median "
	    "%.1f us/task; %" PRId64 " workers forked, %" PRId64 " reuses\n",
	    name, tasks, runs, WARMUP_TASKS, secs[0], best, *med,
	    d.workers_forked,
	    d.worker_reuses);
	free(secs);
	return (best);
}

/*
 * The per-task benchmark.  The fresh worker is judged by its ratio to
 * fork+wait measured beside each run, not by an absolute time: a bare
 * fork's price moves 2x with the machine and its load.
 */
static void
bench_tasks(const char *on, const char *off, long tasks, long runs)
{
	double	fork_us[FORK_RUNS], f, on_us, off_us, med, max, off_med;
	double	off_max, *ratio;
	long	i;

	for (i = 0; i < FORK_RUNS; i++)
		fork_us[i] = fork_once(tasks);
	qsort(fork_us, FORK_RUNS, sizeof *fork_us, cmp_double);
	f = fork_us[0];
	printf("raw fork: fork + _exit + waitpid x %ld, best of %d: %.1f "
	    "us/task\n", tasks, FORK_RUNS, f);

	if ((ratio = calloc((size_t)runs, sizeof *ratio)) == NULL)
		err(1, "calloc");
	on_us = tasks_on(on, "reuse on ", 1, tasks, runs, &med, &max, NULL);
	off_us = tasks_on(off, "reuse off", 0, tasks, runs, &off_med,
	    &off_max, ratio);
	printf("reuse off / reuse on %.1f; reuse off - raw fork %.1f us/task\n",
	    off_us / on_us, off_us - f);

	printf("result reuse_on_us %.1f\n", on_us);
	printf("result reuse_off_us %.1f\n", off_us);
	printf("result fork_us %.1f\n", f);
	printf("result reuse_off_median_us %.1f\n", off_med);
	printf("result reuse_off_max_us %.1f\n", off_max);
	printf("result reuse_off_fork_ratio %.2f\n", median_of(ratio, runs));
	printf("result reuse_off_fork_ratio_min %.2f\n", ratio[0]);
	printf("result reuse_off_fork_ratio_max %.2f\n", ratio[runs - 1]);
	free(ratio);
}

/* Make the broadcast's bytes: 0 .. n-1, one per line; its size in *size. */
static char *
make_numbers(long n, size_t *size)
{
	char	*buf, *p;
	size_t	 cap = 0;
	long	 i, lo, hi, d;

	/* The numbers of d digits are lo .. hi-1, each d bytes and a newline. */
	for (d = 1, lo = 0, hi = 10; lo < n; d++, lo = hi, hi *= 10)
		cap += (size_t)((n < hi ? n : hi) - lo) * (size_t)(d + 1);
	if ((buf = malloc(cap + 32)) == NULL)
		err(1, "malloc");
	for (p = buf, i = 0; i < n; i++)
		p += sprintf(p, "%ld\n", i);
	if ((size_t)(p - buf) != cap)
		errx(1, "numbers: %zu bytes, expected %zu", (size_t)(p - buf),
		    cap);
	*size = cap;
	return (buf);
}

/* Upload the broadcast; its id. */
static int64_t
put_broadcast(struct ember *e, const char *name, const char *data,
    size_t size)
{
	uint64_t	t0, t1;
	int64_t		id;

	t0 = now_ns();
	if (ember_broadcast_put(e, data, size, &id) == -1)
		errx(1, "broadcast_put: %s: %s", ember_error_class(e),
		    ember_error(e));
	t1 = now_ns();
	printf("  %s: broadcast %" PRId64 " uploaded in %.3f s (%.0f MB/s)\n",
	    name, id, (double)(t1 - t0) / 1e9, (double)size / 1e6 /
	    ((double)(t1 - t0) / 1e9));
	return (id);
}

/*
 * Count the range's elements that are in broadcast id, in that many
 * partitions; seconds, and the counters' growth in *d.
 */
static double
broadcast_run(struct ember *e, const char *what, int reuse, int64_t id,
    long range, long partitions, struct counters *d)
{
	struct counters	 a, b;
	double		 t;
	char		 plan[256];

	snprintf(plan, sizeof plan, "{\"source\":{\"range\":{\"start\":0,"
	    "\"end\":%ld}},\"partitions\":%ld,\"ops\":[{\"filter\":"
	    "{\"in_broadcast\":%" PRId64 "}}]}", range, partitions, id);
	read_counters(e, &a);
	t = count_once(e, plan, partitions, range);
	read_counters(e, &b);
	diff_counters(&a, &b, d);
	if (d->tasks_completed != partitions)
		errx(1, "%s: emberd completed %" PRId64 " tasks, expected %ld",
		    what, d->tasks_completed, partitions);
	if (!reuse)
		check_run(what, d, partitions, 0);
	printf("  %-30s %8.3f s  (%ld partitions; broadcasts_sent +%" PRId64
	    ", broadcast_bytes_sent +%" PRId64 " = %.1f MB; workers forked +%"
	    PRId64 ")\n", what, t, partitions, d->broadcasts_sent,
	    d->broadcast_bytes_sent, (double)d->broadcast_bytes_sent / 1e6,
	    d->workers_forked);
	return (t);
}

/* Print a figure's median, min and max over n runs. */
static void
print_spread(const char *name, const char *what, double *v, long n)
{
	double	med = median_of(v, n);

	printf("  %-34s median of %ld %.3f s (%.3f-%.3f)\n", what, n, med,
	    v[0], v[n - 1]);
	printf("result %s %.3f\n", name, med);
	printf("result %s_min %.3f\n", name, v[0]);
	printf("result %s_max %.3f\n", name, v[n - 1]);
}

/*
 * The reuse-on runs, runs times: a new broadcast each time (so the put,
 * the index built with it, is timed apart from the tasks), its first
 * run on the reused workers (each maps it, or builds its set, on its
 * first task), a second with the workers holding it, then the drop.
 */
static void
bench_broadcast_on(struct ember *eon, const char *data, size_t size,
    long range, long partitions, long runs)
{
	struct counters	 d1, d2;
	double		*put, *on, *warm;
	int64_t		 id;
	uint64_t	 t0;
	long		 r;

	put = calloc((size_t)runs, sizeof *put);
	on = calloc((size_t)runs, sizeof *on);
	warm = calloc((size_t)runs, sizeof *warm);
	if (put == NULL || on == NULL || warm == NULL)
		err(1, "calloc");
	for (r = 0; r < runs; r++) {
		t0 = now_ns();
		id = put_broadcast(eon, "reuse on ", data, size);
		put[r] = (double)(now_ns() - t0) / 1e9;
		on[r] = broadcast_run(eon, "reuse on:", 1, id, range,
		    partitions, &d1);
		warm[r] = broadcast_run(eon, "reuse on, sets held:", 1, id,
		    range, partitions, &d2);
		if (d1.broadcasts_sent + d2.broadcasts_sent > d1.workers_max +
		    d1.workers_forked + d2.workers_forked)
			errx(1, "reuse on: the broadcast was sent more than "
			    "once per worker (%" PRId64 " times, then %" PRId64
			    ")", d1.broadcasts_sent, d2.broadcasts_sent);
		if (ember_broadcast_drop(eon, id) == -1)
			errx(1, "broadcast_drop: %s", ember_error(eon));
	}
	print_spread("bcast_put_s", "put (bytes, then the index):", put,
	    runs);
	print_spread("bcast_on_s", "reuse on, first use:", on, runs);
	print_spread("bcast_on_warm_s", "reuse on, held:", warm, runs);
	printf("result bcast_on_sent %" PRId64 "\n", d1.broadcasts_sent);
	printf("result bcast_on_mb %.1f\n", (double)d1.broadcast_bytes_sent /
	    1e6);
	free(put);
	free(on);
	free(warm);
}

/* The broadcast benchmark. */
static void
bench_broadcast(const char *on, const char *off, long elements, long range,
    long partitions, long runs, int with_off)
{
	struct ember	*eon, *eoff;
	struct counters	 d0, d3;
	int64_t		 id_off;
	double		 build, t_off;
	size_t		 size;
	char		*data;

	if (range > elements)
		errx(2, "--range must not exceed --elements");
	data = make_numbers(elements, &size);
	printf("broadcast: the integers 0 .. %ld, one per line, %zu bytes "
	    "(%.1f MB); count range(%ld) in it\n", elements - 1, size,
	    (double)size / 1e6, range);
	eon = connect_or_die(on);
	eoff = connect_or_die(off);
	bench_broadcast_on(eon, data, size, range, partitions, runs);

	id_off = put_broadcast(eoff, "reuse off", data, size);
	free(data);
	build = broadcast_run(eoff, "one set (2 fresh workers):", 0,
	    id_off, range, 2, &d0);
	printf("result bcast_build_s %.3f\n", build);
	if (with_off) {
		t_off = broadcast_run(eoff, "reuse off:", 0, id_off, range,
		    partitions, &d3);
		if (d3.broadcasts_sent != partitions)
			errx(1, "reuse off: the broadcast was sent %" PRId64
			    " times for %ld tasks", d3.broadcasts_sent,
			    partitions);
		printf("result bcast_off_s %.3f\n", t_off);
		printf("result bcast_off_sent %" PRId64 "\n",
		    d3.broadcasts_sent);
		printf("result bcast_off_mb %.1f\n",
		    (double)d3.broadcast_bytes_sent / 1e6);
	}
	if (ember_broadcast_drop(eoff, id_off) == -1)
		errx(1, "broadcast_drop: %s", ember_error(eoff));
	ember_close(eon);
	ember_close(eoff);
	printf("(Spark: 281 s without reuse / 65 s with on 4 CPUs)\n");
}

int
main(int argc, char **argv)
{
	static const struct option longopts[] = {
		{ "socket",	required_argument, NULL, 's' },
		{ "socket-off",	required_argument, NULL, 'S' },
		{ "tasks",	required_argument, NULL, 't' },
		{ "runs",	required_argument, NULL, 'r' },
		{ "elements",	required_argument, NULL, 'n' },
		{ "range",	required_argument, NULL, 'R' },
		{ "partitions",	required_argument, NULL, 'p' },
		{ "only",	required_argument, NULL, 'o' },
		{ "broadcast-runs", required_argument, NULL, 'b' },
		{ "no-off",	no_argument,	   NULL, 'O' },
		{ NULL,		0,		   NULL, 0 }
	};
	const char	*on = NULL, *off = NULL;
	long		 tasks = DEFAULT_TASKS, runs = DEFAULT_RUNS;
	long		 elements = DEFAULT_ELEMENTS, range = DEFAULT_RANGE;
	long		 partitions = DEFAULT_PARTITIONS;
	long		 bruns = DEFAULT_BROADCAST_RUNS;
	int		 with_off = 1;
	int		 ch, do_tasks = 1, do_broadcast = 1;

	while ((ch = getopt_long(argc, argv, "", longopts, NULL)) != -1) {
		switch (ch) {
		case 's':
			on = optarg;
			break;
		case 'S':
			off = optarg;
			break;
		case 't':
			tasks = parse_count(optarg, "--tasks", 1);
			break;
		case 'r':
			runs = parse_count(optarg, "--runs", 1);
			break;
		case 'n':
			elements = parse_count(optarg, "--elements", 1);
			break;
		case 'R':
			range = parse_count(optarg, "--range", 1);
			break;
		case 'p':
			partitions = parse_count(optarg, "--partitions", 1);
			break;
		case 'b':
			bruns = parse_count(optarg, "--broadcast-runs", 1);
			break;
		case 'O':
			with_off = 0;
			break;
		case 'o':
			if (strcmp(optarg, "tasks") == 0)
				do_broadcast = 0;
			else if (strcmp(optarg, "broadcast") == 0)
				do_tasks = 0;
			else
				usage();
			break;
		default:
			usage();
		}
	}
	if (optind != argc || on == NULL || off == NULL)
		usage();
	setvbuf(stdout, NULL, _IOLBF, 0);

	if (do_tasks)
		bench_tasks(on, off, tasks, runs);
	if (do_broadcast)
		bench_broadcast(on, off, elements, range, partitions, bruns,
		    with_off);
	return (0);
}
