#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include <event2/event.h>

#include "cgroup.h"
#include "emberd.h"
#include "fslink.h"
#include "log.h"
#include "pool.h"
#include "pypreload.h"
#include "scheduler.h"
#include "service.h"
#include "session.h"
#include "task.h"
#include "worker.h"
#include "xmalloc.h"

/* Crashes in a row after which forks are spaced out. */
#define POOL_CRASH_STORM	3

/* How often limits are checked: timeouts, memory, idle workers. */
#define POOL_MAINTAIN_MS	100

/*
 * A pool: the workers of one user, and the fork-server that makes them.
 * When emberd is root each client uid has its own pool (root's jobs run as
 * workers.root_user); otherwise there is one, as emberd's own user.
 */
struct pool {
	uid_t			 client;	/* the uid whose jobs it runs */
	uid_t			 uid;		/* what its workers run as */
	gid_t			 gid;
	struct fslink	*fs;
	struct pypreload	*py;		/* its fork-server's Python
						   broadcasts */
	int			 pending;	/* fork requests not answered */
	int			 crashes;	/* in a row */
	int			 ready;		/* its fork-server said hello */
	uint64_t		 fork_after_ms;	/* crash-storm back-off */
	struct event		*backoff;
	uint64_t		 forks, reuses;
	uint64_t		 retired[RETIRE_CAUSES];
	TAILQ_ENTRY(pool)	 entry;
};

static TAILQ_HEAD(, pool) pools = TAILQ_HEAD_INITIALIZER(pools);
static int		 pool_pending_all;		/* in every pool */
static int32_t		 pool_next_request = 1;
static struct event	*pool_maintain;

static void	pool_grow(struct pool *, size_t, int);
static struct pool *pool_get(uid_t, gid_t);

/* The user and group a pool's workers run as. */
void
pool_job_user(const struct pool *p, uid_t *uid, gid_t *gid)
{
	*uid = p->uid;
	*gid = p->gid;
}

/* Return the uid whose jobs a pool runs. */
uid_t
pool_client(const struct pool *p)
{
	return (p->client);
}

/* Return the fork-server of a pool. */
struct fslink *
pool_fslink(struct pool *p)
{
	return (p->fs);
}

/* Return what a pool's fork-server holds of Python broadcasts. */
struct pypreload *
pool_pypreload(struct pool *p)
{
	return (p->py);
}

/* Count a worker retired. */
void
pool_count_retired(struct pool *p, enum retire_cause cause)
{
	p->retired[cause]++;
}

/* Count a worker reused. */
void
pool_count_reuse(struct pool *p)
{
	p->reuses++;
}

/* Count a worker that crashed in its task. */
void
pool_count_crash(struct pool *p)
{
	p->crashes++;
}

/* A task ended cleanly: the crashes in a row are over. */
void
pool_count_success(struct pool *p)
{
	p->crashes = 0;
}

/* Check the limits: task timeouts, memory, idle workers, warm workers. */
static void
pool_maintain_cb(evutil_socket_t fd, short events, void *arg)
{
	struct pool	*p;
	int		 all, idle;

	(void)fd; (void)events; (void)arg;
	worker_check_limits();
	TAILQ_FOREACH(p, &pools, entry) {
		fslink_check_answers(p->fs, ember_now_ms());
		worker_expire_idle(p, (int)ember_conf.workers_min_idle);
		worker_count_pool(p, &all, &idle);
		if (idle + p->pending < ember_conf.workers_min_idle)
			pool_grow(p, (size_t)(ember_conf.workers_min_idle -
			    idle), 0);
	}
}

static void	pool_worker_forked(struct fslink *, int32_t, pid_t, int,
		    int32_t);
static void	pool_fork_failed(struct fslink *, int32_t, int);
static int	pool_worker_exited(struct fslink *, pid_t, int);
static void	pool_forkserver_ready(struct fslink *);
static void	pool_forkserver_hello(struct fslink *);
static void	pool_forkserver_lost(struct fslink *, const char *, int, int);

/* What a pool's fork-server tells it (fslink.h). */
static const struct fslink_peer pool_fslink_peer = {
	.ready = pool_forkserver_ready,
	.hello = pool_forkserver_hello,
	.forked = pool_worker_forked,
	.fork_failed = pool_fork_failed,
	.exited = pool_worker_exited,
	.lost = pool_forkserver_lost,
};

/* Start the maintenance timer and, unless root, the one pool. */
int
pool_init(void)
{
	struct timeval	 tv = { 0, POOL_MAINTAIN_MS * 1000 };
	uid_t		 uid;
	gid_t		 gid;

	/* Before any fork-server starts: each goes into its user's cgroup,
	 * and tells its pool what it forked. */
	cgroup_init();
	fslink_add_peer(FSLINK_WORKERS, &pool_fslink_peer);
	pool_maintain = event_new(ember_base, -1, EV_PERSIST, pool_maintain_cb,
	    NULL);
	evtimer_add(pool_maintain, &tv);
	/* As root, check now that root's jobs have someone to run as; else
	 * the one pool starts now, so min_idle workers are warm from the
	 * start. */
	if (geteuid() == 0)
		return (session_job_user(0, 0, &uid, &gid));
	return (pool_get(getuid(), getgid()) == NULL ? -1 : 0);
}

/* Free the workers, the fork-servers and the pools. */
void
pool_shutdown(void)
{
	struct pool	*p;

	worker_free_all();
	fslink_stop_all();
	cgroup_free();
	while ((p = TAILQ_FIRST(&pools)) != NULL) {
		TAILQ_REMOVE(&pools, p, entry);
		if (p->backoff != NULL)
			event_free(p->backoff);
		pypreload_free(p->py);
		free(p);
	}
	if (pool_maintain != NULL)
		event_free(pool_maintain);
	pool_maintain = NULL;
}

/* The pool for a task's client, made (with its fork-server) on first use;
 * NULL if none can be. */
struct pool *
pool_of_task(const struct task *t)
{
	return (pool_of_client(t->ops->uid(t), t->ops->gid(t)));
}

/* The pool for client uid:gid: its own when emberd is root, else the one. */
struct pool *
pool_of_client(uid_t uid, gid_t gid)
{
	static int	root = -1;

	if (root == -1)
		root = geteuid() == 0;
	if (!root)
		return (pool_get(getuid(), getgid()));
	return (pool_get(uid, gid));
}

/* The pool of client uid:gid, made with its fork-server on first use. */
static struct pool *
pool_get(uid_t client, gid_t gid)
{
	struct pool	*p;

	TAILQ_FOREACH(p, &pools, entry) {
		if (p->client == client)
			return (p);
	}
	p = xcalloc(1, sizeof *p);
	p->client = client;
	if (session_job_user(client, gid, &p->uid, &p->gid) == -1) {
		free(p);
		return (NULL);
	}
	TAILQ_INSERT_TAIL(&pools, p, entry);
	p->py = pypreload_create(p);
	p->fs = fslink_create(p, p->uid, p->gid);
	return (p);
}

/* Find a worker for t. */
struct worker *
pool_take_worker(struct pool *p, const struct task *t, int behind)
{
	struct worker	*w;

	if ((w = worker_take_idle(p, t)) != NULL)
		return (w);
	/*
	 * Tasks whose output is for emberd can queue behind one another, once
	 * every worker there may be is there: before, a worker being forked
	 * would sit idle while another holds the tasks.
	 */
	if (behind && t->reply_mode && worker_count() + pool_pending_all >=
	    ember_workers_max())
		return (worker_take_behind(t));
	return (NULL);
}

int
pool_pending(const struct pool *p)
{
	return (p->pending);
}

int
pool_room(void)
{
	return (ember_workers_max() - worker_count() - pool_pending_all);
}

int
pool_room_past(void)
{
	return (ember_workers_total() - worker_count() - pool_pending_all);
}

int
pool_grow_one(struct pool *p)
{
	int	before = p->pending;

	pool_grow(p, (size_t)p->pending + 1, 0);
	return (p->pending > before);
}

int
pool_grow_past(struct pool *p)
{
	int	before = p->pending;

	pool_grow(p, (size_t)p->pending + 1, 1);
	return (p->pending > before);
}

static void
pool_backoff_cb(evutil_socket_t fd, short events, void *arg)
{
	(void)fd; (void)events; (void)arg;
	scheduler_kick();
}

/* Look at the run queue again in ms milliseconds. */
static void
pool_wait(struct pool *p, uint64_t ms)
{
	struct timeval	tv;

	if (p->backoff == NULL)
		p->backoff = evtimer_new(ember_base, pool_backoff_cb, NULL);
	tv.tv_sec = (time_t)(ms / 1000);
	tv.tv_usec = (suseconds_t)(ms % 1000) * 1000;
	evtimer_add(p->backoff, &tv);
}

/* Ask p's fork-server for up to wanted workers, within workers.max, or
 * with past, within workers.max_total. */
static void
pool_grow(struct pool *p, size_t wanted, int past)
{
	uint64_t	now, delay;
	int		room;

	if (!fslink_running(p->fs) || wanted <= (size_t)p->pending)
		return;
	/* At workers.max the scheduler may stop another pool's idle
	 * worker: its exit makes the room. */
	if ((room = past ? pool_room_past() : pool_room()) <= 0)
		return;
	now = ember_now_ms();
	if (p->crashes >= POOL_CRASH_STORM) {
		/* The timer may fire a little early: wait out the rest. */
		if (now < p->fork_after_ms) {
			pool_wait(p, p->fork_after_ms - now);
			return;
		}
		delay = (uint64_t)ember_conf.workers_fork_backoff <<
		    (p->crashes - POOL_CRASH_STORM < 5 ?
		    p->crashes - POOL_CRASH_STORM : 5);
		p->fork_after_ms = now + delay;
		log_warn("uid %ld: %d workers crashed in a row; next fork in "
		    "%llums", (long)p->uid, p->crashes,
		    (unsigned long long)delay);
		pool_wait(p, delay);
		room = 1;
	}
	if ((size_t)room > wanted - (size_t)p->pending)
		room = (int)(wanted - (size_t)p->pending);
	while (room-- > 0) {
		if (fslink_fork(p->fs, pool_next_request++) == -1)
			return;
		p->pending++;
		pool_pending_all++;
	}
}

/* Its fork-server forked a worker. */
static void
pool_worker_forked(struct fslink *fs, int32_t request, pid_t pid, int fd,
    int32_t gen)
{
	struct pool	*p = fslink_pool(fs);

	(void)request;
	if (p->pending > 0) {
		p->pending--;
		pool_pending_all--;
	}
	worker_create(p, pid, fd, gen);
	p->forks++;
	ember_counters.workers_forked++;
	log_debug("worker %ld started as uid %ld", (long)pid, (long)p->uid);
	scheduler_kick();
	service_check_ready();
}

/* Its fork-server could not fork a worker. */
static void
pool_fork_failed(struct fslink *fs, int32_t request, int error)
{
	struct pool	*p = fslink_pool(fs);

	(void)request;
	if (p->pending > 0) {
		p->pending--;
		pool_pending_all--;
	}
	p->crashes++;
	log_error("fork-server could not fork a worker: %s", strerror(error));
	scheduler_kick();
}

/* A child of its fork-server that no helper was exited: a worker. */
static int
pool_worker_exited(struct fslink *fs, pid_t pid, int status)
{
	struct worker	*w = worker_find(fslink_pool(fs), pid);

	ember_counters.workers_exited++;
	if (w == NULL) {
		log_debug("exit of unknown worker %ld", (long)pid);
		return (1);
	}
	worker_exited(w, status);
	return (1);
}

/* Its fork-server started: forks may be asked for. */
static void
pool_forkserver_ready(struct fslink *fs)
{
	/* A new fork-server: it has loaded nothing yet. */
	pypreload_reset(fslink_pool(fs)->py);
	scheduler_kick();
}

/* Its fork-server said hello. */
static void
pool_forkserver_hello(struct fslink *fs)
{
	fslink_pool(fs)->ready = 1;
	service_check_ready();
}

int
pool_first_warm(void)
{
	struct pool	*p = TAILQ_FIRST(&pools);
	int64_t		 warm = ember_conf.workers_min_idle;
	int		 all, idle;

	if (p == NULL || !p->ready)
		return (0);
	if (warm > ember_workers_max())
		warm = ember_workers_max();
	worker_count_pool(p, &all, &idle);
	return (idle >= warm);
}

/* Its fork-server is gone, and its workers with it. */
static void
pool_forkserver_lost(struct fslink *fs, const char *why, int restarting,
    int before_hello)
{
	struct pool	*p = fslink_pool(fs);

	(void)restarting;
	/* One that dies before it says hello cannot make workers: fail the
	 * tasks waiting for it rather than keep them waiting. */
	if (before_hello) {
		scheduler_fail_pool(p, why);
		service_start_failed(why);
	}

	pool_pending_all -= p->pending;
	p->pending = 0;
	worker_lost_pool(p, why);
}


/* Fill in p's numbers. */
static void
pool_stats(struct pool *p, struct pool_stats *st)
{
	int	i;

	st->client = p->client;
	worker_count_pool(p, &st->workers, &st->idle);
	st->busy = st->workers - st->idle;
	st->starting = p->pending;
	st->forks = p->forks;
	st->reuses = p->reuses;
	for (i = 0; i < RETIRE_CAUSES; i++)
		st->retired[i] = p->retired[i];
}

struct pool_stats *
pool_stats_all(size_t *n)
{
	struct pool_stats	*a = NULL;
	struct pool		*p;

	*n = 0;
	TAILQ_FOREACH(p, &pools, entry) {
		a = xreallocarray(a, *n + 1, sizeof *a);
		pool_stats(p, &a[(*n)++]);
	}
	return (a);
}

json_t *
pool_status(uid_t uid)
{
	json_t			*a = json_array(), *retired;
	struct pool		*p;
	struct pool_stats	 st;
	int			 i;

	TAILQ_FOREACH(p, &pools, entry) {
		if (uid != 0 && p->client != uid)
			continue;
		pool_stats(p, &st);
		retired = json_object();
		for (i = 0; i < RETIRE_CAUSES; i++)
			json_object_set_new(retired, worker_retire_name(i),
			    json_integer((json_int_t)st.retired[i]));
		json_array_append_new(a, json_pack("{s:I,s:I,s:I,s:i,s:i,s:i,"
		    "s:i,s:i,s:I,s:I,s:o,s:i,s:o}", "client",
		    (json_int_t)p->client,
		    "uid", (json_int_t)p->uid, "gid", (json_int_t)p->gid,
		    "workers", st.workers, "idle", st.idle, "busy", st.busy,
		    "starting", st.starting,
		    "crashes_in_a_row", p->crashes, "forks",
		    (json_int_t)st.forks, "reuses", (json_int_t)st.reuses,
		    "retired", retired, "forkserver", fslink_running(p->fs) ?
		    (int)fslink_pid(p->fs) : 0, "python_broadcasts",
		    pypreload_status(p->py)));
	}
	return (a);
}
