#include <sys/wait.h>

#include <errno.h>
#include <pwd.h>
#include <limits.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include <event2/buffer.h>
#include <event2/event.h>

#include "broadcast.h"
#include "channel.h"
#include "emberd.h"
#include "forkserver.h"
#include "frame.h"
#include "log.h"
#include "operation.h"
#include "pool.h"
#include "protocol.h"
#include "scheduler.h"
#include "xmalloc.h"

/* Output buffered from one worker before emberd stops reading it. */
#define WORKER_READ_HIGH	(256 * 1024)
/* Crashes in a row after which forks are spaced out. */
#define POOL_CRASH_STORM	3

enum worker_state {
	WORKER_IDLE,
	WORKER_BUSY,
	WORKER_DEAD,		/* killed or gone; its exit is not reported yet */
};
static const char *const worker_state_names[] = { "idle", "busy", "dead" };

/* Why a worker stopped being used; status counts each. */
enum retire_cause {
	RETIRE_EXITED,		/* it died on its own */
	RETIRE_FAILED,		/* its task failed; it exits by itself */
	RETIRE_INTERRUPTED,	/* its task was stopped: killed */
	RETIRE_CORRUPT,		/* it broke the protocol: killed */
	RETIRE_IDLE_TIMEOUT,	/* idle past workers.idle_timeout */
	RETIRE_MAX_TASKS,	/* recycled after workers.max_tasks */
	RETIRE_NO_REUSE,	/* workers.reuse is off */
	RETIRE_MAX_MEMORY,	/* past workers.max_memory */
	RETIRE_TASK_TIMEOUT,	/* its task ran past workers.task_timeout */
	RETIRE_FORKSERVER,	/* its fork-server died */
	RETIRE_EVICTED,		/* idle, and another user's pool needed room */
	RETIRE_CAUSES
};
static const char *const retire_names[] = { "exited", "failed", "interrupted",
    "corrupt", "idle_timeout", "max_tasks", "no_reuse", "max_memory",
    "task_timeout", "forkserver_lost", "evicted" };
/* Whether emberd kills the worker for that cause. */
#define RETIRE_KILLS(c)	((c) != RETIRE_EXITED && (c) != RETIRE_FAILED && \
	(c) != RETIRE_FORKSERVER)

/* An idle worker is checked for a pending kill after this long idle. */
#define POOL_DYING_CHECK_MS	2

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
	struct forkserver	*fs;
	TAILQ_HEAD(, worker)	 idle;		/* most recently idle first */
	int			 nworkers;	/* processes, dead ones too */
	int			 nidle;
	int			 pending;	/* fork requests not answered */
	int			 wanted;	/* tasks waiting, this dispatch */
	int			 crashes;	/* in a row */
	uint64_t		 fork_after_ms;	/* crash-storm back-off */
	struct event		*backoff;
	uint64_t		 forks, reuses;
	uint64_t		 retired[RETIRE_CAUSES];
	TAILQ_ENTRY(pool)	 entry;
};

struct worker {
	struct pool		*pool;
	pid_t			 pid;
	enum worker_state	 state;
	struct channel		*ch;
	struct event		*kick;
	TAILQ_HEAD(, task)	 tasks;		/* head runs, the rest wait */
	int			 ntasks;
	uint64_t		 plan_serial;	/* operation whose plan it has */
	uint64_t		 tasks_run;
	uint64_t		 started_ms;
	uint64_t		 task_ms;	/* when the head task was sent */
	uint64_t		 idle_ms;	/* when it last became idle */
	uint64_t		 max_tasks;	/* its own recycling point */
	int64_t			*held;		/* broadcasts it holds */
	size_t			 nheld;
	int			 eof;
	int			 unflushed;	/* descriptors not written yet */
	int			 exited;
	int			 status;	/* wait status, once exited */
	TAILQ_ENTRY(worker)	 entry;
	TAILQ_ENTRY(worker)	 idle_entry;
};

static TAILQ_HEAD(, pool) pools = TAILQ_HEAD_INITIALIZER(pools);
static TAILQ_HEAD(pool_worker_list, worker) pool_workers =
    TAILQ_HEAD_INITIALIZER(pool_workers);
static int		 pool_nworkers;		/* in every pool */
static int		 pool_pending;		/* in every pool */
static int32_t		 pool_next_request = 1;
static struct event	*pool_maintain;

static void	worker_process(struct worker *);
static void	worker_relay(struct worker *);
static void	pool_grow(struct pool *, size_t);
static int	worker_dying(const struct worker *);
static struct pool *pool_get(uid_t, gid_t);

/* Describe a wait status: "killed by signal 9 (SIGKILL)". */
static void
pool_describe_status(int status, char *buf, size_t len)
{
	if (WIFSIGNALED(status))
		snprintf(buf, len, "killed by signal %d (SIG%s)",
		    WTERMSIG(status), sigabbrev_np(WTERMSIG(status)) ?
		    sigabbrev_np(WTERMSIG(status)) : "?");
	else if (WIFEXITED(status))
		snprintf(buf, len, "exited with status %d", WEXITSTATUS(status));
	else
		snprintf(buf, len, "ended with wait status %d", status);
}

static struct worker *
pool_find(pid_t pid)
{
	struct worker	*w;

	TAILQ_FOREACH(w, &pool_workers, entry) {
		if (w->pid == pid)
			return (w);
	}
	return (NULL);
}

static void
worker_free(struct worker *w)
{
	if (w->ntasks != 0)
		fatalx("worker %ld freed with %d tasks", (long)w->pid,
		    w->ntasks);
	if (w->state == WORKER_IDLE) {
		TAILQ_REMOVE(&w->pool->idle, w, idle_entry);
		w->pool->nidle--;
	}
	TAILQ_REMOVE(&pool_workers, w, entry);
	pool_nworkers--;
	w->pool->nworkers--;
	event_free(w->kick);
	channel_free(w->ch);
	free(w->held);
	free(w);
	scheduler_kick();	/* room for another worker */
}

/*
 * Stop using a worker: kill its process group, give the tasks it had not
 * started back to the scheduler.  The head task, if any, is the caller's
 * business.  The structure goes when the fork-server reports the exit.
 */
static void
worker_retire(struct worker *w, enum retire_cause cause)
{
	struct task	*t;

	if (w->state == WORKER_DEAD)
		return;
	w->pool->retired[cause]++;
	log_debug("worker %ld retired: %s", (long)w->pid, retire_names[cause]);
	if (w->state == WORKER_IDLE) {
		TAILQ_REMOVE(&w->pool->idle, w, idle_entry);
		w->pool->nidle--;
	}
	w->state = WORKER_DEAD;
	channel_stop(w->ch);
	while ((t = TAILQ_FIRST(&w->tasks)) != NULL) {
		TAILQ_REMOVE(&w->tasks, t, queue_entry);
		w->ntasks--;
		scheduler_requeue(t);
	}
	if (RETIRE_KILLS(cause) && !w->exited) {
		ember_counters.workers_killed++;
		forkserver_kill(w->pool->fs, w->pid, SIGKILL);
	}
	if (w->exited)
		event_active(w->kick, 0, 1);	/* free it outside the caller */
}

/* Take the head task off the worker. */
static struct task *
worker_pop(struct worker *w)
{
	struct task	*t = TAILQ_FIRST(&w->tasks);

	TAILQ_REMOVE(&w->tasks, t, queue_entry);
	w->ntasks--;
	t->worker = NULL;
	w->task_ms = ember_now_ms();
	return (t);
}

/* The worker broke the protocol: a bug, so kill it and fail its task. */
static void
worker_corrupt(struct worker *w, const char *what)
{
	struct task	*t;

	log_error("worker %ld: %s; killing it", (long)w->pid, what);
	t = w->ntasks > 0 ? worker_pop(w) : NULL;
	worker_retire(w, RETIRE_CORRUPT);
	if (t != NULL)
		task_failed(t, w->pid, "worker sent a corrupt message");
}

/* The worker's output ended before its task did. */
static void
worker_died(struct worker *w)
{
	char		 cause[128];
	struct task	*t;

	if (!w->exited)
		return;		/* wait for the exit report: it says why */
	pool_describe_status(w->status, cause, sizeof cause);
	if (w->ntasks == 0) {
		log_info("idle worker %ld %s", (long)w->pid, cause);
		worker_retire(w, RETIRE_EXITED);
		return;
	}
	ember_counters.workers_crashed++;
	w->pool->crashes++;
	t = worker_pop(w);
	worker_retire(w, RETIRE_EXITED);
	task_failed(t, w->pid, cause);
}

/* Is len bytes buffered?  If not, make sure emberd will read that far. */
static int
worker_need(struct worker *w, struct evbuffer *in, size_t len)
{
	if (evbuffer_get_length(in) >= len)
		return (1);
	channel_want(w->ch, len);
	return (0);
}

enum worker_progress {
	WORKER_HANDLED,		/* one message handled */
	WORKER_INCOMPLETE,	/* the next message is not all here */
	WORKER_BLOCKED,		/* a batch waits for the client */
	WORKER_STOPPED,		/* the worker was retired */
};

/* Handle one message of the head task. */
static enum worker_progress
worker_message(struct worker *w, struct task *t, struct evbuffer *in)
{
	unsigned char	 hdr[12], m[8 * EMBER_METRIC_COUNT];
	int32_t		 type, records, bytes, n;
	char		*msg;
	int		 i;

	if (!worker_need(w, in, 4))
		return (WORKER_INCOMPLETE);
	evbuffer_copyout(in, hdr, 4);
	type = be32_get(hdr);
	switch (type) {
	case EMBER_RECORD_BATCH:
		if (!worker_need(w, in, 12))
			return (WORKER_INCOMPLETE);
		evbuffer_copyout(in, hdr, 12);
		records = be32_get(hdr + 4);
		bytes = be32_get(hdr + 8);
		if (records < 0 || bytes < 0 || bytes > EMBER_MAX_BATCH) {
			worker_corrupt(w, "bad record batch");
			return (WORKER_STOPPED);
		}
		if (!worker_need(w, in, 12 + (size_t)bytes))
			return (WORKER_INCOMPLETE);
		if (!task_accepts_batch(t))
			return (WORKER_BLOCKED);
		evbuffer_drain(in, 12);
		if (task_relay_batch(t, in, (size_t)bytes, records) == -1) {
			worker_corrupt(w, "records the task should not send");
			return (WORKER_STOPPED);
		}
		channel_want(w->ch, 0);
		return (WORKER_HANDLED);
	case EMBER_END_OF_DATA_SECTION:
		evbuffer_drain(in, 4);
		return (WORKER_HANDLED);
	case EMBER_TIMING_DATA:
		if (!worker_need(w, in, 8))
			return (WORKER_INCOMPLETE);
		evbuffer_copyout(in, hdr, 8);
		n = be32_get(hdr + 4);
		if (n < 0 || n > 64) {
			worker_corrupt(w, "bad metrics count");
			return (WORKER_STOPPED);
		}
		if (!worker_need(w, in, 8 + (size_t)n * 8))
			return (WORKER_INCOMPLETE);
		evbuffer_drain(in, 8);
		for (i = 0; i < n; i++) {
			evbuffer_remove(in, m, 8);
			if (i < EMBER_METRIC_COUNT)
				t->metrics[i] = be64_get(m);
		}
		return (WORKER_HANDLED);
	case EMBER_END_OF_STREAM:
		evbuffer_drain(in, 4);
		t = worker_pop(w);
		w->tasks_run++;
		w->pool->crashes = 0;
		if (!ember_conf.workers_reuse)
			worker_retire(w, RETIRE_NO_REUSE);
		else if (w->max_tasks > 0 && w->tasks_run >= w->max_tasks)
			worker_retire(w, RETIRE_MAX_TASKS);
		else if (w->ntasks == 0) {
			w->state = WORKER_IDLE;
			w->idle_ms = ember_now_ms();
			TAILQ_INSERT_HEAD(&w->pool->idle, w, idle_entry);
			w->pool->nidle++;
			scheduler_kick();
		}
		task_finished(t);
		return (WORKER_HANDLED);
	case EMBER_EXCEPTION_THROWN:
		if (!worker_need(w, in, 8))
			return (WORKER_INCOMPLETE);
		evbuffer_copyout(in, hdr, 8);
		n = be32_get(hdr + 4);
		if (n < 0 || n > EMBER_MAX_ERROR_FRAME) {
			worker_corrupt(w, "bad error frame");
			return (WORKER_STOPPED);
		}
		if (!worker_need(w, in, 8 + (size_t)n))
			return (WORKER_INCOMPLETE);
		evbuffer_drain(in, 8);
		msg = xmalloc((size_t)n + 1);
		evbuffer_remove(in, msg, (size_t)n);
		msg[n] = '\0';
		t = worker_pop(w);
		worker_retire(w, RETIRE_FAILED);
		task_failed(t, w->pid, msg);
		free(msg);
		return (WORKER_STOPPED);
	default:
		worker_corrupt(w, "unknown message");
		return (WORKER_STOPPED);
	}
}

/* Relay what the worker sent, as far as its task may go right now. */
static void
worker_process(struct worker *w)
{
	worker_relay(w);
	if (w->state != WORKER_DEAD)
		channel_resume(w->ch);
}

static void
worker_relay(struct worker *w)
{
	struct evbuffer	*in = channel_input(w->ch);
	struct task	*t;

	w->eof = channel_eof(w->ch);
	while (w->state == WORKER_BUSY && (t = TAILQ_FIRST(&w->tasks)) != NULL) {
		switch (worker_message(w, t, in)) {
		case WORKER_HANDLED:
			continue;
		case WORKER_INCOMPLETE:
			/* No more is coming: the worker died mid-task. */
			if (w->eof)
				worker_died(w);
			return;
		case WORKER_BLOCKED:
		case WORKER_STOPPED:
			return;
		}
	}
	if (w->state == WORKER_IDLE && evbuffer_get_length(in) > 0)
		worker_corrupt(w, "output while idle");
	else if (w->state == WORKER_IDLE && w->eof)
		worker_died(w);
}

static void
worker_read_cb(void *arg)
{
	worker_process(arg);
}

static void
worker_kick_cb(evutil_socket_t fd, short events, void *arg)
{
	struct worker	*w = arg;

	(void)fd; (void)events;
	if (w->state == WORKER_DEAD) {
		if (w->exited)
			worker_free(w);
		return;
	}
	worker_process(w);
}

void
worker_kick(struct worker *w)
{
	event_active(w->kick, 0, 1);
}

/*
 * A worker's own resident memory in bytes (RssAnon: not the pages of a
 * broadcast it shares with the others, nor its code), or 0 if it cannot
 * be read.
 */
static uint64_t
pool_rss(pid_t pid)
{
	char			 path[64], line[128];
	unsigned long long	 kb = 0;
	FILE			*f;

	snprintf(path, sizeof path, "/proc/%ld/status", (long)pid);
	if ((f = fopen(path, "re")) == NULL)
		return (0);
	while (fgets(line, sizeof line, f) != NULL) {
		if (sscanf(line, "RssAnon: %llu kB", &kb) == 1)
			break;
	}
	fclose(f);
	return ((uint64_t)kb * 1024);
}

/*
 * Is an idle worker dying: a zombie, or a SIGKILL or SIGTERM pending?  A
 * kill sent from outside just before a job arrives leaves the worker's
 * socket open for a moment; /proc already knows.  Only asked of workers
 * idle for a while, as it costs a read of /proc.
 */
static int
worker_dying(const struct worker *w)
{
	char			 path[64], line[128];
	unsigned long long	 mask;
	const uint64_t		 fatal = 1ULL << (SIGKILL - 1) |
				     1ULL << (SIGTERM - 1);
	FILE			*f;
	int			 dying = 0;

	if (ember_now_ms() - w->idle_ms < POOL_DYING_CHECK_MS)
		return (0);
	snprintf(path, sizeof path, "/proc/%ld/status", (long)w->pid);
	if ((f = fopen(path, "re")) == NULL)
		return (1);
	while (!dying && fgets(line, sizeof line, f) != NULL) {
		if (strncmp(line, "State:", 6) == 0)
			dying = strchr(line, 'Z') != NULL ||
			    strchr(line, 'X') != NULL;
		else if ((sscanf(line, "SigPnd: %llx", &mask) == 1 ||
		    sscanf(line, "ShdPnd: %llx", &mask) == 1) && (mask & fatal))
			dying = 1;
	}
	fclose(f);
	return (dying);
}

/* Fail a busy worker's task for a limit it went past, and kill it. */
static void
worker_limit(struct worker *w, enum retire_cause cause, const char *why)
{
	struct task	*t = worker_pop(w);

	log_warn("worker %ld: %s", (long)w->pid, why);
	worker_retire(w, cause);
	task_failed(t, w->pid, why);
}

/* Check the limits: task timeouts, memory, idle workers, warm workers. */
static void
pool_maintain_cb(evutil_socket_t fd, short events, void *arg)
{
	struct worker	*w, *next;
	struct pool	*p;
	uint64_t	 now = ember_now_ms(), rss;
	int64_t		 keep;
	char		 why[160];

	(void)fd; (void)events; (void)arg;
	TAILQ_FOREACH_SAFE(w, &pool_workers, entry, next) {
		if (w->state != WORKER_BUSY)
			continue;
		if (ember_conf.workers_task_timeout > 0 && now - w->task_ms >
		    (uint64_t)ember_conf.workers_task_timeout) {
			snprintf(why, sizeof why, "exceeded workers.task_timeout "
			    "(%lldms): killed after %llums",
			    (long long)ember_conf.workers_task_timeout,
			    (unsigned long long)(now - w->task_ms));
			worker_limit(w, RETIRE_TASK_TIMEOUT, why);
			continue;
		}
		if (ember_conf.workers_max_memory > 0 && (rss =
		    pool_rss(w->pid)) > (uint64_t)ember_conf.workers_max_memory) {
			snprintf(why, sizeof why, "exceeded workers.max_memory "
			    "(resident %llu MiB, limit %llu MiB): killed",
			    (unsigned long long)(rss >> 20),
			    (unsigned long long)
			    (ember_conf.workers_max_memory >> 20));
			worker_limit(w, RETIRE_MAX_MEMORY, why);
		}
	}
	TAILQ_FOREACH(p, &pools, entry) {
		/* Most recently idle first: the oldest are last. */
		keep = ember_conf.workers_min_idle;
		TAILQ_FOREACH_SAFE(w, &p->idle, idle_entry, next) {
			if (keep-- > 0)
				continue;
			if (ember_conf.workers_idle_timeout > 0 &&
			    now - w->idle_ms >
			    (uint64_t)ember_conf.workers_idle_timeout)
				worker_retire(w, RETIRE_IDLE_TIMEOUT);
		}
		if (p->nidle + p->pending < ember_conf.workers_min_idle)
			pool_grow(p, (size_t)(ember_conf.workers_min_idle -
			    p->nidle));
	}
}

int
pool_init(void)
{
	struct timeval	 tv = { 0, POOL_MAINTAIN_MS * 1000 };
	uid_t		 uid;
	gid_t		 gid;

	scheduler_init();
	pool_maintain = event_new(ember_base, -1, EV_PERSIST, pool_maintain_cb,
	    NULL);
	evtimer_add(pool_maintain, &tv);
	/* As root, check now that root's jobs have someone to run as; else
	 * the one pool starts now, so min_idle workers are warm from the
	 * start. */
	if (geteuid() == 0)
		return (pool_job_user(0, 0, &uid, &gid));
	return (pool_get(getuid(), getgid()) == NULL ? -1 : 0);
}

void
pool_shutdown(void)
{
	struct worker	*w;

	struct pool	*p;

	/* A fork-server kills every worker when emberd closes its channel. */
	while ((w = TAILQ_FIRST(&pool_workers)) != NULL) {
		while (w->ntasks > 0)
			worker_pop(w);
		if (w->state == WORKER_IDLE) {
			TAILQ_REMOVE(&w->pool->idle, w, idle_entry);
			w->pool->nidle--;
		}
		w->state = WORKER_DEAD;
		TAILQ_REMOVE(&pool_workers, w, entry);
		pool_nworkers--;
		event_free(w->kick);
		channel_free(w->ch);
		free(w->held);
		free(w);
	}
	forkserver_stop_all();
	while ((p = TAILQ_FIRST(&pools)) != NULL) {
		TAILQ_REMOVE(&pools, p, entry);
		if (p->backoff != NULL)
			event_free(p->backoff);
		free(p);
	}
	if (pool_maintain != NULL)
		event_free(pool_maintain);
	pool_maintain = NULL;
	scheduler_free();
}

/* The user a client's jobs run as: itself, never root. */
int
pool_job_user(uid_t client, gid_t client_gid, uid_t *uid, gid_t *gid)
{
	struct passwd	*pw;

	if (geteuid() != 0) {
		*uid = getuid();
		*gid = getgid();
		return (0);
	}
	if (client == 0)
		pw = getpwnam(ember_conf.workers_root_user);
	else
		pw = getpwuid(client);
	if (pw == NULL && client != 0) {
		/* A uid without a name still runs as itself. */
		*uid = client;
		*gid = client_gid;
		return (0);
	}
	if (pw == NULL || pw->pw_uid == 0) {
		log_error("workers.root_user: \"%s\" is %s",
		    ember_conf.workers_root_user, pw == NULL ? "no user" :
		    "root, and a job never runs as root");
		return (-1);
	}
	*uid = pw->pw_uid;
	*gid = pw->pw_gid;
	return (0);
}

/* The pool for a task's client, made (with its fork-server) on first use;
 * NULL if none can be. */
struct pool *
pool_of_task(const struct task *t)
{
	static int	root = -1;

	if (root == -1)
		root = geteuid() == 0;
	if (!root)
		return (pool_get(getuid(), getgid()));
	return (pool_get(operation_uid(t->op), operation_gid(t->op)));
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
	TAILQ_INIT(&p->idle);
	if (pool_job_user(client, gid, &p->uid, &p->gid) == -1) {
		free(p);
		return (NULL);
	}
	TAILQ_INSERT_TAIL(&pools, p, entry);
	p->fs = forkserver_create(p, p->uid, p->gid);
	return (p);
}

struct worker *
pool_take_worker(const struct task *t)
{
	struct pool	*p = pool_of_task(t);
	struct worker	*w, *first;
	struct task	*head;

	if (p == NULL)
		return (NULL);
	/*
	 * An idle worker, preferring one that has this operation's plan.  One
	 * found dead (killed while idle; the loop has not seen it yet) is
	 * discarded here, so the task goes to another instead of failing.
	 */
	while ((first = TAILQ_FIRST(&p->idle)) != NULL) {
		TAILQ_FOREACH(w, &p->idle, idle_entry) {
			if (w->plan_serial == operation_serial(t->op))
				break;
		}
		if (w == NULL)
			w = first;
		if (channel_alive(w->ch) && !worker_dying(w))
			return (w);
		worker_retire(w, RETIRE_EXITED);
	}
	/*
	 * Tasks whose output is for emberd can queue behind one another, once
	 * every worker there may be is there: before, a worker being forked
	 * would sit idle while another holds the tasks.
	 */
	if (t->reply_mode && pool_nworkers + pool_pending >= ember_workers_max()) {
		TAILQ_FOREACH(w, &pool_workers, entry) {
			if (w->state != WORKER_BUSY ||
			    w->ntasks >= operation_pipeline_depth(t->op) ||
			    !ember_conf.workers_reuse || (w->max_tasks > 0 &&
			    w->tasks_run + (uint64_t)w->ntasks >= w->max_tasks))
				continue;
			head = TAILQ_FIRST(&w->tasks);
			if (head->reply_mode && head->op == t->op)
				return (w);
		}
	}
	p->wanted++;
	return (NULL);
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

/* At workers.max, stop an idle worker of another pool to make room. */
static int
pool_evict(const struct pool *p)
{
	struct worker	*w;

	TAILQ_FOREACH_REVERSE(w, &pool_workers, pool_worker_list, entry) {
		if (w->state == WORKER_IDLE && w->pool != p) {
			worker_retire(w, RETIRE_EVICTED);
			return (0);
		}
	}
	return (-1);
}

/* Ask p's fork-server for up to wanted workers, within workers.max. */
static void
pool_grow(struct pool *p, size_t wanted)
{
	uint64_t	now, delay;
	int		room;

	if (!forkserver_running(p->fs) || wanted <= (size_t)p->pending)
		return;
	room = ember_workers_max() - pool_nworkers - pool_pending;
	if (room <= 0 && p->nworkers + p->pending == 0 && pool_evict(p) == 0)
		return;		/* the eviction's exit makes the room */
	if (room <= 0)
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
		if (forkserver_fork(p->fs, pool_next_request++) == -1)
			return;
		p->pending++;
		pool_pending++;
	}
}

void
pool_grow_wanted(void)
{
	struct pool	*p;

	TAILQ_FOREACH(p, &pools, entry) {
		if (p->wanted > 0)
			pool_grow(p, (size_t)p->wanted);
		p->wanted = 0;
	}
}

/* Does the worker hold broadcast id? */
static int
worker_holds(const struct worker *w, int64_t id)
{
	size_t	i;

	for (i = 0; i < w->nheld; i++) {
		if (w->held[i] == id)
			return (1);
	}
	return (0);
}

/*
 * Append the broadcasts member of a descriptor: the task's broadcasts the
 * worker lacks, then removals (-id-1) of what it holds and the task does
 * not use.  The worker's list changes to match.
 */
static void
worker_broadcast_diff(struct worker *w, const struct task *t,
    struct evbuffer *d)
{
	struct broadcast *const	*use;
	size_t			 nuse, i, j, kept;
	const char		*sep = ",\"broadcasts\":[";
	json_t			*path;
	char			*text;

	use = operation_broadcasts(t->op, &nuse);
	for (i = 0; i < nuse; i++) {
		if (worker_holds(w, broadcast_id(use[i])))
			continue;
		path = json_string(broadcast_path(use[i]));
		text = json_dumps(path, JSON_ENCODE_ANY);
		json_decref(path);
		evbuffer_add_printf(d, "%s{\"id\":%lld,\"path\":%s,\"size\":%lld}",
		    sep, (long long)broadcast_id(use[i]), text,
		    (long long)broadcast_size(use[i]));
		free(text);
		sep = ",";
		w->held = xreallocarray(w->held, w->nheld + 1, sizeof *w->held);
		w->held[w->nheld++] = broadcast_id(use[i]);
		ember_counters.broadcasts_sent++;
		ember_counters.broadcast_bytes_sent +=
		    (uint64_t)broadcast_size(use[i]);
	}
	for (i = kept = 0; i < w->nheld; i++) {
		for (j = 0; j < nuse; j++) {
			if (broadcast_id(use[j]) == w->held[i])
				break;
		}
		if (j < nuse) {
			w->held[kept++] = w->held[i];
			continue;
		}
		evbuffer_add_printf(d, "%s{\"id\":%lld}", sep,
		    (long long)(-w->held[i] - 1));
		sep = ",";
		ember_counters.broadcasts_removed++;
	}
	w->nheld = kept;
	if (*sep == ',' && sep[1] == '\0')
		evbuffer_add(d, "]", 1);
}

/* Write a task descriptor; the plan goes only to a worker without it. */
void
worker_assign(struct worker *w, struct task *t)
{
	struct evbuffer	*out = channel_output(w->ch), *d = evbuffer_new();
	char		 fields[PATH_MAX + 256];

	operation_task_fields(t, fields, sizeof fields);
	evbuffer_add_printf(d, "{\"operation\":\"%s\",\"partition\":%d,"
	    "\"partitions\":%d%s", operation_id(t->op), t->partition,
	    operation_partitions(t->op), fields);
	worker_broadcast_diff(w, t, d);
	if (w->plan_serial != operation_serial(t->op)) {
		evbuffer_add(d, ",", 1);
		evbuffer_add(d, operation_plan_text(t->op),
		    strlen(operation_plan_text(t->op)));
		w->plan_serial = operation_serial(t->op);
	}
	evbuffer_add(d, "}", 1);
	evbuffer_add_int32(out, (int32_t)evbuffer_get_length(d));
	evbuffer_add_buffer(out, d);
	evbuffer_free(d);
	w->unflushed = 1;

	if (w->state == WORKER_IDLE) {
		TAILQ_REMOVE(&w->pool->idle, w, idle_entry);
		w->pool->nidle--;
		w->state = WORKER_BUSY;
		w->task_ms = ember_now_ms();
		if (w->tasks_run > 0) {
			ember_counters.worker_reuses++;
			w->pool->reuses++;
		}
	}
	TAILQ_INSERT_TAIL(&w->tasks, t, queue_entry);
	w->ntasks++;
	t->state = TASK_ASSIGNED;
	t->worker = w;
}

void
pool_flush(void)
{
	struct worker	*w;

	TAILQ_FOREACH(w, &pool_workers, entry) {
		if (w->unflushed) {
			w->unflushed = 0;
			channel_flush(w->ch);
		}
	}
}

void
pool_cancel_task(struct task *t)
{
	struct worker	*w = t->worker;

	TAILQ_REMOVE(&w->tasks, t, queue_entry);
	w->ntasks--;
	t->worker = NULL;
	worker_retire(w, RETIRE_INTERRUPTED);
}

void
pool_worker_forked(struct pool *p, int32_t request, pid_t pid, int fd)
{
	struct worker	*w;

	(void)request;
	if (p->pending > 0) {
		p->pending--;
		pool_pending--;
	}
	w = xcalloc(1, sizeof *w);
	w->pool = p;
	w->pid = pid;
	w->started_ms = w->idle_ms = ember_now_ms();
	/* Up to a tenth more, so that workers started together do not all
	 * recycle together. */
	if (ember_conf.workers_max_tasks > 0)
		w->max_tasks = (uint64_t)ember_conf.workers_max_tasks +
		    arc4random_uniform((uint32_t)(ember_conf.workers_max_tasks /
		    10 + 1));
	TAILQ_INIT(&w->tasks);
	w->ch = channel_create(fd, WORKER_READ_HIGH, worker_read_cb, w);
	w->kick = event_new(ember_base, -1, 0, worker_kick_cb, w);
	w->state = WORKER_IDLE;
	TAILQ_INSERT_TAIL(&pool_workers, w, entry);
	TAILQ_INSERT_HEAD(&p->idle, w, idle_entry);
	pool_nworkers++;
	p->nworkers++;
	p->nidle++;
	p->forks++;
	ember_counters.workers_forked++;
	log_debug("worker %ld started as uid %ld", (long)pid, (long)p->uid);
	scheduler_kick();
}

void
pool_fork_failed(struct pool *p, int32_t request, int error)
{
	(void)request;
	if (p->pending > 0) {
		p->pending--;
		pool_pending--;
	}
	p->crashes++;
	log_error("fork-server could not fork a worker: %s", strerror(error));
	scheduler_kick();
}

void
pool_worker_exited(struct pool *p, pid_t pid, int status)
{
	struct worker	*w = pool_find(pid);
	char		 cause[128];

	ember_counters.workers_exited++;
	if (w == NULL || w->pool != p) {
		log_debug("exit of unknown worker %ld", (long)pid);
		return;
	}
	w->exited = 1;
	w->status = status;
	pool_describe_status(status, cause, sizeof cause);
	log_debug("worker %ld %s", (long)pid, cause);
	if (w->state == WORKER_DEAD) {
		worker_free(w);
		return;
	}
	/* Gone on its own: relay what it left, then report its task. */
	worker_kick(w);
}

void
pool_forkserver_ready(struct pool *p)
{
	(void)p;
	scheduler_kick();
}

void
pool_forkserver_lost(struct pool *p, const char *why, int before_hello)
{
	struct worker	*w, *next;
	struct task	*t;

	/* One that dies before it says hello cannot make workers: fail the
	 * tasks waiting for it rather than keep them waiting. */
	if (before_hello)
		scheduler_fail_pool(p, why);

	pool_pending -= p->pending;
	p->pending = 0;
	TAILQ_FOREACH_SAFE(w, &pool_workers, entry, next) {
		if (w->pool != p)
			continue;
		/* Its workers die with it; no exit report will come. */
		t = w->ntasks > 0 ? worker_pop(w) : NULL;
		w->exited = 1;
		if (w->state == WORKER_DEAD)
			event_active(w->kick, 0, 1);
		worker_retire(w, RETIRE_FORKSERVER);
		if (t != NULL)
			task_failed(t, w->pid, why);
	}
}

json_t *
pool_status_workers(void)
{
	json_t		*a = json_array(), *o;
	struct worker	*w;
	struct task	*t;
	uint64_t	 now = ember_now_ms();
	size_t		 i;

	TAILQ_FOREACH(w, &pool_workers, entry) {
		o = json_pack("{s:I,s:s,s:I,s:I,s:I}", "pid", (json_int_t)w->pid,
		    "state", worker_state_names[w->state], "tasks",
		    (json_int_t)w->tasks_run, "age_ms",
		    (json_int_t)(now - w->started_ms), "rss_kb",
		    (json_int_t)(pool_rss(w->pid) >> 10));
		json_object_set_new(o, "broadcasts", json_array());
		for (i = 0; i < w->nheld; i++)
			json_array_append_new(json_object_get(o, "broadcasts"),
			    json_integer(w->held[i]));
		if ((t = TAILQ_FIRST(&w->tasks)) != NULL)
			json_object_set_new(o, "task", json_pack("{s:s,s:i,s:I}",
			    "operation", operation_id(t->op), "partition",
			    t->partition, "age_ms",
			    (json_int_t)(now - w->task_ms)));
		json_array_append_new(a, o);
	}
	return (a);
}

json_t *
pool_status(uid_t uid)
{
	json_t		*a = json_array(), *retired;
	struct pool	*p;
	int		 i;

	TAILQ_FOREACH(p, &pools, entry) {
		if (uid != 0 && p->client != uid)
			continue;
		retired = json_object();
		for (i = 0; i < RETIRE_CAUSES; i++)
			json_object_set_new(retired, retire_names[i],
			    json_integer((json_int_t)p->retired[i]));
		json_array_append_new(a, json_pack("{s:I,s:I,s:I,s:i,s:i,s:i,"
		    "s:i,s:i,s:I,s:I,s:o,s:i}", "client", (json_int_t)p->client,
		    "uid", (json_int_t)p->uid, "gid", (json_int_t)p->gid,
		    "workers", p->nworkers, "idle", p->nidle, "busy",
		    p->nworkers - p->nidle, "starting", p->pending,
		    "crashes_in_a_row", p->crashes, "forks",
		    (json_int_t)p->forks, "reuses", (json_int_t)p->reuses,
		    "retired", retired, "forkserver", forkserver_running(p->fs) ?
		    (int)forkserver_pid(p->fs) : 0));
	}
	return (a);
}
