#include <sys/resource.h>
#include <sys/types.h>

#include <dirent.h>
#include <malloc.h>
#include <stdio.h>
#include <stddef.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#include <event2/buffer.h>

#include "emberd.h"
#include "metrics.h"
#include "operation.h"
#include "queue.h"
#include "pool.h"
#include "scheduler.h"
#include "session.h"
#include "task.h"
#include "utf8.h"
#include "worker.h"
#include "xmalloc.h"

/* Upper bounds of the histograms' buckets, in seconds. */
static const double metrics_bounds[] = { 0.0005, 0.001, 0.0025, 0.005, 0.01,
    0.025, 0.05, 0.1, 0.25, 0.5, 1, 2.5, 5, 10, 30, 60, 300 };
#define METRICS_BUCKETS	(sizeof metrics_bounds / sizeof metrics_bounds[0])

struct histogram {
	uint64_t	 counts[METRICS_BUCKETS + 1];	/* the last: +Inf */
	uint64_t	 count;
	double		 sum;
};
static struct histogram	metrics_duration, metrics_first_record;

/* A task failure, kept for the status page. */
struct failure {
	uint64_t	 wall_ms;	/* since the epoch */
	uint64_t	 mono_ms;
	uid_t		 uid;
	char		 operation[40];
	int		 partition;
	char		*message;
};
#define METRICS_FAILURES	32	/* per uid */
#define METRICS_MESSAGE_MAX	1024
/* One uid's recent failures: one user's failures never push out
 * another's. */
struct failure_user {
	uid_t			 uid;
	struct failure		 ring[METRICS_FAILURES];
	size_t			 next, used;
	TAILQ_ENTRY(failure_user) entry;
};
static TAILQ_HEAD(, failure_user) metrics_failure_users =
    TAILQ_HEAD_INITIALIZER(metrics_failure_users);
static size_t		metrics_failures_kept;

/* The name and meaning of each status counter as a Prometheus counter. */
static const struct {
	const char	*counter;
	const char	*name;
	const char	*help;
} metrics_counters[] = {
	{ "connections", "ember_connections_total",
	    "Client connections accepted." },
	{ "connections_refused", "ember_connections_refused_total",
	    "Client connections refused by a connection limit." },
	{ "connections_timed_out", "ember_connections_timed_out_total",
	    "Client connections closed by the request, idle or write timeout." },
	{ "requests", "ember_requests_total", "Control requests read." },
	{ "request_errors", "ember_request_errors_total",
	    "Control requests answered with an error." },
	{ "operations", "ember_operations_started_total",
	    "Operations started (jobs executed)." },
	{ "operations_completed", "ember_operations_completed_total",
	    "Operations that ended with their whole result." },
	{ "operations_failed", "ember_operations_failed_total",
	    "Operations that ended with an error." },
	{ "operations_interrupted", "ember_operations_interrupted_total",
	    "Operations interrupted by their client, a timeout or a shutdown." },
	{ "tasks", "ember_tasks_started_total",
	    "Tasks made, one per partition run (recomputes included)." },
	{ "tasks_completed", "ember_tasks_completed_total",
	    "Tasks that ended cleanly." },
	{ "tasks_failed", "ember_tasks_failed_total",
	    "Tasks that ended with an error." },
	{ "tasks_retried", "ember_tasks_retried_total",
	    "Tasks whose worker was lost, run again (workers.task_retries)." },
	{ "stages", "ember_stages_total",
	    "Map stages run to their end (operations with wide ops)." },
	{ "shuffle_bytes", "ember_shuffle_bytes_total",
	    "Bytes of shuffle files written by map tasks." },
	{ "records_sent", "ember_records_streamed_total",
	    "Records streamed to clients." },
	{ "bytes_sent", "ember_bytes_streamed_total",
	    "Bytes of records streamed to clients." },
	{ "workers_forked", "ember_workers_forked_total",
	    "Worker processes forked, in all pools." },
	{ "workers_exited", "ember_workers_exited_total",
	    "Worker exits reported by the fork-servers." },
	{ "workers_killed", "ember_workers_killed_total",
	    "Workers emberd had killed." },
	{ "workers_crashed", "ember_workers_crashed_total",
	    "Workers that died on their own, not asked to." },
	{ "worker_reuses", "ember_worker_reuses_total",
	    "Tasks given to a worker that had run one before." },
	{ "plans_sent", "ember_plans_sent_total",
	    "Task descriptors sent with their plan." },
	{ "plans_reused", "ember_plans_reused_total",
	    "Task descriptors of an operation sent without their plan, the "
	    "worker holding the same plan from another." },
	{ "forkserver_restarts", "ember_forkserver_restarts_total",
	    "Fork-servers started again after one died." },
	{ "broadcasts", "ember_broadcasts_total", "Broadcasts uploaded." },
	{ "broadcasts_sent", "ember_broadcasts_sent_total",
	    "Broadcasts sent to a worker (once per worker that holds one)." },
	{ "broadcast_bytes_sent", "ember_broadcast_bytes_sent_total",
	    "Bytes of broadcasts sent to workers." },
	{ "broadcasts_removed", "ember_broadcasts_removed_total",
	    "Broadcasts removed from workers that held them." },
};

/* Count one observation, in seconds. */
static void
metrics_observe(struct histogram *h, double seconds)
{
	size_t	i;

	for (i = 0; i < METRICS_BUCKETS; i++) {
		if (seconds <= metrics_bounds[i])
			break;
	}
	h->counts[i]++;
	h->count++;
	h->sum += seconds;
}

void
metrics_task_finished(const struct task *t)
{
	/* emberd's clock, not what the worker says its task took. */
	metrics_observe(&metrics_duration, (double)t->served_ns / 1e9);
}

void
metrics_task_first_record(const struct task *t)
{
	uint64_t	now = ember_now_ms();

	metrics_observe(&metrics_first_record, now > t->queued_ms ?
	    (double)(now - t->queued_ms) / 1e3 : 0);
}

/* Milliseconds since the epoch. */
static uint64_t
metrics_wall_ms(void)
{
	struct timespec	ts;

	clock_gettime(CLOCK_REALTIME, &ts);
	return ((uint64_t)ts.tv_sec * 1000 + (uint64_t)ts.tv_nsec / 1000000);
}

/* The failures of uid, made if it has none yet. */
static struct failure_user *
metrics_failure_user(uid_t uid)
{
	struct failure_user	*fu;

	TAILQ_FOREACH(fu, &metrics_failure_users, entry) {
		if (fu->uid == uid)
			return (fu);
	}
	fu = xcalloc(1, sizeof *fu);
	fu->uid = uid;
	TAILQ_INSERT_TAIL(&metrics_failure_users, fu, entry);
	return (fu);
}

void
metrics_task_failed(const struct task *t)
{
	struct failure_user	*fu = metrics_failure_user(operation_uid(t->op));
	struct failure		*f = &fu->ring[fu->next];
	const char		*msg = t->error != NULL ? t->error : "";

	free(f->message);
	f->wall_ms = metrics_wall_ms();
	f->mono_ms = ember_now_ms();
	f->uid = operation_uid(t->op);
	snprintf(f->operation, sizeof f->operation, "%s", operation_id(t->op));
	f->partition = t->partition;
	/* Cut between characters: a cut inside one would make the whole
	 * message invalid UTF-8, and it would not be shown at all. */
	f->message = xstrndup(msg, utf8_cut(msg, strlen(msg),
	    METRICS_MESSAGE_MAX));
	fu->next = (fu->next + 1) % METRICS_FAILURES;
	if (fu->used < METRICS_FAILURES) {
		fu->used++;
		metrics_failures_kept++;
	}
}

/* Newest first. */
static int
metrics_failure_cmp(const void *a, const void *b)
{
	const struct failure	*fa = *(struct failure *const *)a;
	const struct failure	*fb = *(struct failure *const *)b;

	return (fa->mono_ms < fb->mono_ms ? 1 : fa->mono_ms > fb->mono_ms ?
	    -1 : 0);
}

json_t *
metrics_failures(int (*allowed)(uid_t))
{
	json_t			*a = json_array();
	struct failure_user	*fu;
	struct failure		*f, **all;
	uint64_t		 now = ember_now_ms();
	size_t			 i, n = 0;

	all = xreallocarray(NULL, metrics_failures_kept + 1, sizeof *all);
	TAILQ_FOREACH(fu, &metrics_failure_users, entry) {
		if (!allowed(fu->uid))
			continue;
		for (i = 0; i < fu->used; i++)
			all[n++] = &fu->ring[i];
	}
	qsort(all, n, sizeof *all, metrics_failure_cmp);
	for (i = 0; i < n; i++) {
		f = all[i];
		json_array_append_new(a, json_pack("{s:I,s:I,s:I,s:s,s:i,s:s}",
		    "time_ms", (json_int_t)f->wall_ms,
		    "age_ms", (json_int_t)(now - f->mono_ms),
		    "uid", (json_int_t)f->uid, "operation", f->operation,
		    "partition", f->partition, "message", f->message));
	}
	free(all);
	return (a);
}

size_t
metrics_failures_count(void)
{
	return (metrics_failures_kept);
}

/* Write a metric family's HELP and TYPE lines. */
static void
metrics_head(struct evbuffer *b, const char *name, const char *type,
    const char *help)
{
	evbuffer_add_printf(b, "# HELP %s %s\n# TYPE %s %s\n", name, help,
	    name, type);
}

/* Write a number: whole ones in full, others to nine digits. */
static void
metrics_number(struct evbuffer *b, double value)
{
	if (value == (double)(int64_t)value && value < 9007199254740992.0 &&
	    value > -9007199254740992.0)
		evbuffer_add_printf(b, "%lld", (long long)value);
	else
		evbuffer_add_printf(b, "%.9g", value);
}

/* Write one sample without labels. */
static void
metrics_value(struct evbuffer *b, const char *name, const char *type,
    const char *help, double value)
{
	metrics_head(b, name, type, help);
	evbuffer_add_printf(b, "%s ", name);
	metrics_number(b, value);
	evbuffer_add(b, "\n", 1);
}

/* Write a label value, escaped as the text format wants. */
static void
metrics_label(struct evbuffer *b, const char *s)
{
	for (; *s != '\0'; s++) {
		if (*s == '\\' || *s == '"')
			evbuffer_add_printf(b, "\\%c", *s);
		else if (*s == '\n')
			evbuffer_add(b, "\\n", 2);
		else
			evbuffer_add(b, s, 1);
	}
}

/* Write a histogram family. */
static void
metrics_histogram(struct evbuffer *b, const char *name, const char *help,
    const struct histogram *h)
{
	uint64_t	cumulative = 0;
	size_t		i;

	metrics_head(b, name, "histogram", help);
	for (i = 0; i < METRICS_BUCKETS; i++) {
		cumulative += h->counts[i];
		evbuffer_add_printf(b, "%s_bucket{le=\"%g\"} %llu\n", name,
		    metrics_bounds[i], (unsigned long long)cumulative);
	}
	evbuffer_add_printf(b, "%s_bucket{le=\"+Inf\"} %llu\n", name,
	    (unsigned long long)h->count);
	evbuffer_add_printf(b, "%s_sum ", name);
	metrics_number(b, h->sum);
	evbuffer_add_printf(b, "\n%s_count %llu\n", name,
	    (unsigned long long)h->count);
}

/* The Prometheus name and help of a status counter. */
static const char *
metrics_counter_name(const char *counter, const char **help, char *buf,
    size_t len)
{
	size_t	i;

	for (i = 0; i < sizeof metrics_counters / sizeof metrics_counters[0];
	    i++) {
		if (strcmp(metrics_counters[i].counter, counter) == 0) {
			*help = metrics_counters[i].help;
			return (metrics_counters[i].name);
		}
	}
	*help = "A counter of emberd's status reply.";
	snprintf(buf, len, "ember_%s_total", counter);
	return (buf);
}

/* Write status's counters as counters. */
static void
metrics_write_counters(struct evbuffer *b)
{
#define METRICS_COUNTER_NAME(name)	#name,
#define METRICS_COUNTER_VALUE(name)	ember_counters.name,
	static const char *const counters[] = {
		EMBER_COUNTERS(METRICS_COUNTER_NAME)
	};
	const uint64_t	 values[] = { EMBER_COUNTERS(METRICS_COUNTER_VALUE) };
#undef METRICS_COUNTER_NAME
#undef METRICS_COUNTER_VALUE
	const char	*name, *help;
	char		 buf[128];
	size_t		 i;

	for (i = 0; i < sizeof counters / sizeof counters[0]; i++) {
		name = metrics_counter_name(counters[i], &help, buf,
		    sizeof buf);
		metrics_value(b, name, "counter", help, (double)values[i]);
	}
}

/* Workers by state, and the forks under way. */
static void
metrics_write_workers(struct evbuffer *b, const struct pool_stats *pools,
    size_t npools)
{
	static const char *const states[] = { "idle", "busy", "dead", NULL };
	uint64_t	 counts[3], starting = 0;
	size_t		 i;

	worker_count_states(counts);
	for (i = 0; i < npools; i++)
		starting += (uint64_t)pools[i].starting;
	metrics_head(b, "ember_workers", "gauge", "Worker processes by state "
	    "(starting: forks asked for, not made yet).");
	for (i = 0; states[i] != NULL; i++)
		evbuffer_add_printf(b, "ember_workers{state=\"%s\"} %llu\n",
		    states[i], (unsigned long long)counts[i]);
	evbuffer_add_printf(b, "ember_workers{state=\"starting\"} %llu\n",
	    (unsigned long long)starting);
	metrics_value(b, "ember_workers_max", "gauge",
	    "Workers allowed at once, in all pools (workers.max).",
	    ember_workers_max());
}

/* Operations by state, sessions. */
static void
metrics_write_operations(struct evbuffer *b)
{
	static const char *const states[] = { "attached", "detached",
	    "complete", NULL };
	uint64_t	 counts[3];
	size_t		 i;

	operation_count_states(counts);
	metrics_head(b, "ember_operations", "gauge", "Operations held, by "
	    "state: with a client, waiting for a reattach, or complete and "
	    "waiting for release.");
	for (i = 0; states[i] != NULL; i++)
		evbuffer_add_printf(b, "ember_operations{state=\"%s\"} %llu\n",
		    states[i], (unsigned long long)counts[i]);
	metrics_value(b, "ember_sessions", "gauge", "Sessions held.",
	    (double)session_count());
	metrics_value(b, "ember_tasks_queued", "gauge",
	    "Tasks waiting for a worker.", (double)scheduler_queued());
}

/* One family of per-pool counters, labelled by the pool's uid: the
 * uint64_t at offset off of each pool's numbers. */
static void
metrics_write_pool_family(struct evbuffer *b, const struct pool_stats *pools,
    size_t npools, const char *name, const char *help, size_t off)
{
	size_t	i;

	metrics_head(b, name, "counter", help);
	for (i = 0; i < npools; i++)
		evbuffer_add_printf(b, "%s{uid=\"%lld\"} %lld\n", name,
		    (long long)pools[i].client, (long long)*(const uint64_t *)
		    (const void *)((const char *)&pools[i] + off));
}

/* Per pool: workers, forks, reuses, retirements by cause. */
static void
metrics_write_pools(struct evbuffer *b, const struct pool_stats *pools,
    size_t npools)
{
	static const char *const states[] = { "idle", "busy", "starting" };
	size_t		 i;
	int		 k, n[3];

	metrics_head(b, "ember_pool_workers", "gauge",
	    "Workers of each pool (uid: the user whose jobs it runs), by "
	    "state.");
	for (i = 0; i < npools; i++) {
		n[0] = pools[i].idle;
		n[1] = pools[i].busy;
		n[2] = pools[i].starting;
		for (k = 0; k < 3; k++)
			evbuffer_add_printf(b, "ember_pool_workers{uid=\"%lld\","
			    "state=\"%s\"} %lld\n", (long long)pools[i].client,
			    states[k], (long long)n[k]);
	}
	metrics_write_pool_family(b, pools, npools, "ember_pool_forks_total",
	    "Workers each pool's fork-server made.",
	    offsetof(struct pool_stats, forks));
	metrics_write_pool_family(b, pools, npools, "ember_pool_reuses_total",
	    "Tasks each pool gave to a worker that had run one.",
	    offsetof(struct pool_stats, reuses));
	metrics_head(b, "ember_pool_retirements_total", "counter",
	    "Workers each pool stopped using, by cause.");
	for (i = 0; i < npools; i++) {
		for (k = 0; k < RETIRE_CAUSES; k++) {
			evbuffer_add_printf(b, "ember_pool_retirements_total{"
			    "uid=\"%lld\",cause=\"", (long long)pools[i].client);
			metrics_label(b, worker_retire_name(k));
			evbuffer_add_printf(b, "\"} %lld\n",
			    (long long)pools[i].retired[k]);
		}
	}
}

/* Count the entries of a directory, "." and ".." aside. */
static long
metrics_count_dir(const char *path)
{
	DIR		*d;
	struct dirent	*e;
	long		 n = 0;

	if ((d = opendir(path)) == NULL)
		return (-1);
	while ((e = readdir(d)) != NULL) {
		if (strcmp(e->d_name, ".") != 0 && strcmp(e->d_name, "..") != 0)
			n++;
	}
	closedir(d);
	return (n - 1);		/* the directory's own descriptor */
}

/* Bytes of the heap in use.  AddressSanitizer's allocator stands in for
 * malloc's, whose mallinfo2 then counts nothing: ask it instead. */
#if defined(__SANITIZE_ADDRESS__)
size_t	__sanitizer_get_current_allocated_bytes(void);

static double
metrics_heap_in_use(void)
{
	return ((double)__sanitizer_get_current_allocated_bytes());
}
#else
static double
metrics_heap_in_use(void)
{
	struct mallinfo2 mi = mallinfo2();

	return ((double)(mi.uordblks + mi.hblkhd));
}
#endif

/* emberd's own process: the conventional process_* names. */
static void
metrics_write_process(struct evbuffer *b)
{
	struct rusage	 ru;
	struct rlimit	 rl;
	FILE		*f;
	unsigned long	 size = 0, resident = 0;
	long		 page = sysconf(_SC_PAGESIZE), fds;
	double		 start;

	if ((f = fopen("/proc/self/statm", "re")) != NULL) {
		if (fscanf(f, "%lu %lu", &size, &resident) != 2)
			size = resident = 0;
		fclose(f);
	}
	metrics_value(b, "process_resident_memory_bytes", "gauge",
	    "emberd's resident set size.", (double)resident * (double)page);
	metrics_value(b, "process_virtual_memory_bytes", "gauge",
	    "emberd's virtual memory size.", (double)size * (double)page);
	/* What the allocator hands out, without the pages it keeps after a
	 * free: a leak shows here, not in the RSS (bench/bench_memory.py). */
	metrics_value(b, "ember_heap_in_use_bytes", "gauge",
	    "Bytes of emberd's heap in use (malloc'd and not freed).",
	    metrics_heap_in_use());
	if ((fds = metrics_count_dir("/proc/self/fd")) >= 0)
		metrics_value(b, "process_open_fds", "gauge",
		    "emberd's open file descriptors.", (double)fds);
	if (getrlimit(RLIMIT_NOFILE, &rl) == 0)
		metrics_value(b, "process_max_fds", "gauge",
		    "emberd's limit on open file descriptors.",
		    rl.rlim_cur == RLIM_INFINITY ? -1 : (double)rl.rlim_cur);
	if (getrusage(RUSAGE_SELF, &ru) == 0)
		metrics_value(b, "process_cpu_seconds_total", "counter",
		    "emberd's user and system CPU time.",
		    (double)ru.ru_utime.tv_sec + (double)ru.ru_stime.tv_sec +
		    (double)(ru.ru_utime.tv_usec + ru.ru_stime.tv_usec) / 1e6);
	start = (double)(metrics_wall_ms() - (ember_now_ms() -
	    ember_started_ms)) / 1e3;
	metrics_value(b, "process_start_time_seconds", "gauge",
	    "When emberd started, in seconds since the epoch.", start);
}

void
metrics_write(struct evbuffer *b)
{
	struct pool_stats	*pools;
	size_t			 npools;

	pools = pool_stats_all(&npools);
	metrics_head(b, "ember_build_info", "gauge",
	    "Always 1; the version of emberd in a label.");
	evbuffer_add_printf(b, "ember_build_info{version=\"");
	metrics_label(b, PACKAGE_VERSION);
	evbuffer_add_printf(b, "\"} 1\n");
	metrics_value(b, "ember_draining", "gauge",
	    "1 while emberd drains after SIGTERM, else 0.", ember_draining);
	metrics_write_counters(b);
	metrics_write_workers(b, pools, npools);
	metrics_write_operations(b);
	metrics_write_pools(b, pools, npools);
	free(pools);
	metrics_histogram(b, "ember_task_duration_seconds",
	    "Run time of the tasks that ended cleanly, as emberd saw it: "
	    "from its turn at its worker to its end.", &metrics_duration);
	metrics_histogram(b, "ember_task_first_record_seconds",
	    "Time from a task's queueing to its first record streamed to "
	    "the client.", &metrics_first_record);
	metrics_value(b, "ember_task_failures_remembered", "gauge",
	    "Recent task failures kept for the status page (at most 32 per user).",
	    (double)metrics_failures_count());
	metrics_write_process(b);
}
