#include <sys/wait.h>

#include <errno.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include <event2/buffer.h>
#include <event2/event.h>

#include "broadcast.h"
#include "pypreload.h"
#include "channel.h"
#include "emberd.h"
#include "fslink.h"
#include "frame.h"
#include "log.h"
#include "pool.h"
#include "protocol.h"
#include "scheduler.h"
#include "task.h"
#include "taskdesc.h"
#include "wmsg.h"
#include "worker.h"
#include "utf8.h"
#include "xmalloc.h"

/* An idle worker is checked for a pending kill after this long idle. */
#define WORKER_DYING_CHECK_MS	2
/* A worker told to stop its task (STOP_TASK) that has not ended it after
 * this long (a udf or a pipe command that does not return) is killed. */
#define WORKER_STOP_MS		2000
/* The largest plan members a worker's copy is kept of, to send none to it
 * for another operation of the same plan: a bound on what each worker
 * costs emberd; parsing a bigger one is no longer what a small task's
 * time is made of. */
#define WORKER_PLAN_KEPT_MAX	16384
/* How long a worker let go by closing its socket may take to exit
 * before it is killed: it holds its place in workers.max until then. */
#define WORKER_LINGER_MS	500

enum worker_state {
	WORKER_IDLE,
	WORKER_BUSY,
	WORKER_DEAD,		/* killed or gone; its exit is not reported yet */
};
static const char *const worker_state_names[] = { "idle", "busy", "dead" };

static const char *const retire_names[] = { "exited", "failed", "interrupted",
    "corrupt", "idle_timeout", "max_tasks", "no_reuse", "max_memory",
    "task_timeout", "forkserver_lost", "evicted", "stalled", "stale" };
/* Whether emberd kills the worker for that cause. */
#define RETIRE_KILLS(c)	((c) != RETIRE_EXITED && (c) != RETIRE_FAILED && \
	(c) != RETIRE_FORKSERVER)
/* Whether a worker retired for that cause has ended its tasks cleanly and
 * waits for the next descriptor: the end of its socket ends it. */
#define RETIRE_LETS_GO(c) ((c) == RETIRE_NO_REUSE || \
	(c) == RETIRE_MAX_TASKS || (c) == RETIRE_IDLE_TIMEOUT || \
	(c) == RETIRE_STALE)

struct worker {
	struct pool		*pool;
	pid_t			 pid;
	enum worker_state	 state;
	struct channel		*ch;
	struct event		*kick;
	TAILQ_HEAD(, task)	 tasks;		/* head runs, the rest wait */
	int			 ntasks;
	uint64_t		 plan_serial;	/* operation whose plan it has */
	char			*plan_text;	/* and the plan members sent, if
						   small, for another operation
						   of the same plan */
	uid_t			 plan_uid;	/* whose job they came with */
	uint64_t		 tasks_run;
	uint64_t		 started_ms;
	uint64_t		 task_ns;	/* when the head task was sent, or
						   the one before it ended */
	uint64_t		 idle_ms;	/* when it last became idle */
	uint64_t		 blocked_ms;	/* since when its output waits
						   for the client, or 0 */
	uint64_t		 max_tasks;	/* its own recycling point */
	int32_t			 gen;		/* its fork-server's at the
						   fork (pypreload.h) */
	uint64_t		 dead_ms;	/* when it was retired */
	int64_t			*held;		/* broadcasts it holds */
	size_t			 nheld;
	int			 eof;
	int			 unflushed;	/* descriptors not written yet */
	/*
	 * The last descriptor of this dispatch, not encoded yet: its task,
	 * what it says and its plan members (NULL: the worker has them).
	 * Tasks assigned after it that differ only in the partition join
	 * its batch (worker_batch_joins); worker_batch_close writes it.
	 */
	struct task		*batch_first;
	struct taskdesc		 batch_desc;
	const char		*batch_plan;
	int			 nbatch;
	int			 exited;
	int			 status;	/* wait status, once exited */
	int			 evicted;	/* stopped to make room */
	int			 stopping;	/* its task was stopped: its
						   output is dropped until the
						   task's end */
	struct event		*stop_ev;	/* kills it if that is slow */
	struct event		*linger_ev;	/* kills it if it stays on */
	TAILQ_ENTRY(worker)	 entry;
	TAILQ_ENTRY(worker)	 idle_entry;
};

/* Every worker, oldest first; the idle ones, most recently idle first. */
static TAILQ_HEAD(worker_list, worker) workers =
    TAILQ_HEAD_INITIALIZER(workers);
static TAILQ_HEAD(, worker) workers_idle = TAILQ_HEAD_INITIALIZER(workers_idle);
static int	nworkers;

static void	worker_process(struct worker *);
static void	worker_check_exit(struct worker *, uint64_t);

/* Name a retire cause. */
const char *
worker_retire_name(enum retire_cause cause)
{
	return (retire_names[cause]);
}

/* Return the number of workers. */
int
worker_count(void)
{
	return (nworkers);
}

/* Count p's workers and its idle ones. */
void
worker_count_pool(const struct pool *p, int *all, int *idle)
{
	struct worker	*w;

	*all = *idle = 0;
	TAILQ_FOREACH(w, &workers, entry) {
		if (w->pool != p)
			continue;
		(*all)++;
		if (w->state == WORKER_IDLE)
			(*idle)++;
	}
}

/* Find a worker of p by pid. */
struct worker *
worker_find(struct pool *p, pid_t pid)
{
	struct worker	*w;

	TAILQ_FOREACH(w, &workers, entry) {
		if (w->pid == pid && w->pool == p)
			return (w);
	}
	return (NULL);
}

/*
 * Was the worker forked before its fork-server loaded or dropped a Python
 * broadcast?  Then it lacks what the fork-server now holds, or holds what
 * was dropped: it is not used again.
 */
static int
worker_stale(const struct worker *w)
{
	return (w->gen != pypreload_gen(pool_pypreload(w->pool)));
}

/* Make a worker idle: the first one a task finds. */
static void
worker_set_idle(struct worker *w)
{
	w->state = WORKER_IDLE;
	w->idle_ms = ember_now_ms();
	TAILQ_INSERT_HEAD(&workers_idle, w, idle_entry);
}

/* Take a worker out of the idle list, into state. */
static void
worker_leave_idle(struct worker *w, enum worker_state state)
{
	if (w->state == WORKER_IDLE)
		TAILQ_REMOVE(&workers_idle, w, idle_entry);
	w->state = state;
}

/* Log what follows as about w and the task it runs. */
static const struct log_context *
worker_log_context(const struct worker *w, struct log_context *c)
{
	struct task	*t = TAILQ_FIRST(&w->tasks);

	if (t != NULL)
		log_context_fill(c, t->ops->session_id(t),
		    t->ops->operation_id(t), t->partition, (long)w->pid);
	else
		log_context_fill(c, NULL, NULL, -1, (long)w->pid);
	return (log_set_context(c));
}

static void
worker_read_cb(void *arg)
{
	struct log_context		 c;
	const struct log_context	*prev = worker_log_context(arg, &c);

	worker_process(arg);
	log_set_context(prev);
}

static void
worker_kick_cb(evutil_socket_t fd, short events, void *arg)
{
	struct worker	*w = arg;

	struct log_context		 c;
	const struct log_context	*prev;

	(void)fd; (void)events;
	if (w->state == WORKER_DEAD) {
		if (w->exited)
			worker_free(w);
		return;
	}
	prev = worker_log_context(w, &c);
	worker_process(w);
	log_set_context(prev);
}

/* Make a worker for a process p's fork-server started. */
struct worker *
worker_create(struct pool *p, pid_t pid, int fd, int32_t gen)
{
	struct worker	*w;

	w = xcalloc(1, sizeof *w);
	w->pool = p;
	w->pid = pid;
	w->gen = gen;
	w->started_ms = ember_now_ms();
	/* Up to a tenth more, so that workers started together do not all
	 * recycle together. */
	if (ember_conf.workers_max_tasks > 0)
		w->max_tasks = (uint64_t)ember_conf.workers_max_tasks +
		    arc4random_uniform((uint32_t)(ember_conf.workers_max_tasks /
		    10 + 1));
	TAILQ_INIT(&w->tasks);
	w->ch = channel_create(fd, WORKER_READ_FIRST, worker_read_cb, w);
	w->kick = event_new(ember_base, -1, 0, worker_kick_cb, w);
	TAILQ_INSERT_TAIL(&workers, w, entry);
	nworkers++;
	worker_set_idle(w);
	return (w);
}

/* Free a worker that holds no task. */
void
worker_free(struct worker *w)
{
	if (w->ntasks != 0)
		fatalx("worker %ld freed with %d tasks", (long)w->pid,
		    w->ntasks);
	worker_leave_idle(w, WORKER_DEAD);
	TAILQ_REMOVE(&workers, w, entry);
	nworkers--;
	event_free(w->kick);
	if (w->stop_ev != NULL)
		event_free(w->stop_ev);
	if (w->linger_ev != NULL)
		event_free(w->linger_ev);
	channel_free(w->ch);
	free(w->held);
	free(w->plan_text);
	free(w);
	scheduler_kick();	/* room for another worker */
}

/* Take the head task off the worker. */
static struct task *
worker_pop(struct worker *w)
{
	struct task	*t = TAILQ_FIRST(&w->tasks);
	uint64_t	 now = ember_now_ns();

	TAILQ_REMOVE(&w->tasks, t, queue_entry);
	w->ntasks--;
	/* What the worker says it took is its own; this, emberd's. */
	t->served_ns = now - w->task_ns;
	w->task_ns = now;
	w->blocked_ms = 0;
	return (t);
}

/* Free every worker; a fork-server kills its workers when emberd closes
 * its channel. */
void
worker_free_all(void)
{
	struct worker	*w;

	while ((w = TAILQ_FIRST(&workers)) != NULL) {
		while (w->ntasks > 0)
			worker_pop(w);
		worker_free(w);
	}
}

/* A worker let go by the end of its socket has not exited. */
static void
worker_linger_cb(evutil_socket_t fd, short events, void *arg)
{
	struct worker	*w = arg;

	(void)fd; (void)events;
	if (w->exited)
		return;
	log_info("worker %ld: still there %dms after its socket closed; "
	    "killing it", (long)w->pid, WORKER_LINGER_MS);
	ember_counters.workers_killed++;
	w->dead_ms = ember_now_ms();	/* its exit is owed from now on */
	fslink_kill(pool_fslink(w->pool), w->pid, SIGKILL);
}

/*
 * Let a worker that ended its tasks cleanly go by closing its socket (a
 * fresh one, or one retired idle): it exits at the end of file, sparing
 * FS_KILL's message, the fork-server's wake-up for it and its kill(2).
 * Only when no descriptor was sent after its task's: it would run that
 * task, which the scheduler has been given back.  A worker that stays on
 * (its user's code may make it) is killed after WORKER_LINGER_MS.
 */
static int
worker_let_go(struct worker *w, enum retire_cause cause, int queued)
{
	struct timeval	tv = { WORKER_LINGER_MS / 1000,
			    (WORKER_LINGER_MS % 1000) * 1000 };

	if (!RETIRE_LETS_GO(cause) || queued || w->exited)
		return (0);
	channel_shut(w->ch);
	w->linger_ev = evtimer_new(ember_base, worker_linger_cb, w);
	evtimer_add(w->linger_ev, &tv);
	return (1);
}

/*
 * Stop using a worker: kill its process group, give the tasks it had not
 * started back to the scheduler.  The head task, if any, is the caller's
 * business.  The structure goes when the fork-server reports the exit.
 */
void
worker_retire(struct worker *w, enum retire_cause cause)
{
	struct task	*t;
	int		 queued = w->ntasks > 0;

	if (w->state == WORKER_DEAD)
		return;
	pool_count_retired(w->pool, cause);
	log_debug("worker %ld retired: %s", (long)w->pid, retire_names[cause]);
	worker_leave_idle(w, WORKER_DEAD);
	w->dead_ms = ember_now_ms();
	w->stopping = 0;
	w->batch_first = NULL;		/* nothing more is written */
	if (w->stop_ev != NULL)
		event_del(w->stop_ev);
	channel_stop(w->ch);
	while ((t = TAILQ_FIRST(&w->tasks)) != NULL) {
		TAILQ_REMOVE(&w->tasks, t, queue_entry);
		w->ntasks--;
		scheduler_requeue(t);
	}
	if (!worker_let_go(w, cause, queued) && RETIRE_KILLS(cause) &&
	    !w->exited) {
		ember_counters.workers_killed++;
		fslink_kill(pool_fslink(w->pool), w->pid, SIGKILL);
	}
	if (w->exited)
		event_active(w->kick, 0, 1);	/* free it outside the caller */
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
		task_fail(t, w->pid, "worker sent a corrupt message");
}

/*
 * Was the worker killed by a signal that says nothing of its task: one an
 * operator, a service manager or the kernel's OOM killer sends?  A crash
 * signal (SIGSEGV, SIGABRT...) is the task's own, as an exit is; running
 * it again would end the same way.
 */
static int
worker_killed_from_outside(int status)
{
	if (!WIFSIGNALED(status))
		return (0);
	switch (WTERMSIG(status)) {
	case SIGKILL:
	case SIGTERM:
	case SIGHUP:
	case SIGINT:
	case SIGQUIT:
		return (1);
	default:
		return (0);
	}
}

/* Did the worker exit because an allocation failed under its
 * address-space limit?  Then cause says it exceeded workers.max_memory. */
static int
worker_out_of_memory(const struct worker *w, char *cause, size_t len)
{
	if (ember_conf.workers_max_memory == 0 || !WIFEXITED(w->status) ||
	    WEXITSTATUS(w->status) != EMBER_EXIT_NOMEM)
		return (0);
	snprintf(cause, len, "exceeded workers.max_memory (limit %llu MiB): "
	    "an allocation failed under its address-space limit of %llu MiB",
	    (unsigned long long)(ember_conf.workers_max_memory >> 20),
	    (unsigned long long)(ember_conf.workers_max_memory >> 19));
	return (1);
}

/* The worker's output ended before its task did. */
static void
worker_died(struct worker *w)
{
	char		 cause[160];
	struct task	*t;

	if (!w->exited)
		return;		/* wait for the exit report: it says why */
	log_describe_wait(w->status, cause, sizeof cause);
	if (w->ntasks == 0) {
		log_info("idle worker %ld %s", (long)w->pid, cause);
		worker_retire(w, RETIRE_EXITED);
		return;
	}
	if (worker_out_of_memory(w, cause, sizeof cause)) {
		/* A limit, as when the resident-memory check finds it. */
		t = worker_pop(w);
		log_warn("worker %ld: %s", (long)w->pid, cause);
		worker_retire(w, RETIRE_MAX_MEMORY);
		task_fail(t, w->pid, cause);
		return;
	}
	ember_counters.workers_crashed++;
	pool_count_crash(w->pool);
	t = worker_pop(w);
	worker_retire(w, RETIRE_EXITED);
	if (worker_killed_from_outside(w->status))
		task_lose(t, w->pid, cause);
	else
		task_fail(t, w->pid, cause);
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

static void	worker_limit(struct worker *, enum retire_cause, const char *);

/*
 * Is the batch whose header sits at the front of in whole and exact?  A
 * worker runs the user's code, which may write anything on its socket;
 * checked here, once, nothing behind (the limit's cut, the retry buffer,
 * the spool, the reply actions' merge) walks a frame that is not there.
 */
static int
worker_batch_valid(struct evbuffer *in, const struct wmsg *m,
    const char **err)
{
	struct evbuffer_iovec	 vec[16];
	struct evbuffer_ptr	 at;
	struct wmsg_batch	 b;
	size_t			 left = (size_t)m->length, len;
	int			 i, n;

	wmsg_batch_begin(&b, m);
	evbuffer_ptr_set(in, &at, WMSG_BATCH_SIZE, EVBUFFER_PTR_SET);
	while (left > 0) {
		n = evbuffer_peek(in, (ev_ssize_t)left, &at, vec, 16);
		for (i = 0; i < n && i < 16 && left > 0; i++) {
			len = vec[i].iov_len < left ? vec[i].iov_len : left;
			if (wmsg_batch_feed(&b, vec[i].iov_base, len,
			    err) == -1)
				return (0);
			left -= len;
			evbuffer_ptr_set(in, &at, len, EVBUFFER_PTR_ADD);
		}
	}
	return (wmsg_batch_end(&b, err) == 0);
}

/* Relay a record batch of the head task. */
static enum worker_progress
worker_batch(struct worker *w, struct task *t, struct evbuffer *in,
    const struct wmsg *m)
{
	const char	*bad;
	char		*err = NULL;

	if (!t->ops->accepts_batch(t)) {
		/* Its client is not reading: stream.stall_timeout counts. */
		if (w->blocked_ms == 0)
			w->blocked_ms = ember_now_ms();
		return (WORKER_BLOCKED);
	}
	w->blocked_ms = 0;
	if (!worker_batch_valid(in, m, &bad)) {
		worker_corrupt(w, bad);
		return (WORKER_STOPPED);
	}
	evbuffer_drain(in, WMSG_BATCH_SIZE);
	switch (t->ops->relay_batch(t, in, (size_t)m->length, m->records,
	    &err)) {
	case -1:
		worker_corrupt(w, "records the task should not send");
		return (WORKER_STOPPED);
	case -2:
		worker_limit(w, RETIRE_STALLED, err);
		free(err);
		return (WORKER_STOPPED);
	}
	channel_want(w->ch, 0);
	return (WORKER_HANDLED);
}

/* Take the metrics of the head task. */
static enum worker_progress
worker_timing(struct worker *w, struct task *t, struct evbuffer *in,
    const struct wmsg *m)
{
	unsigned char	 buf[WMSG_METRIC_SIZE * WMSG_MAX_METRICS];
	size_t		 len = wmsg_payload(m);
	const char	*err;

	evbuffer_drain(in, WMSG_TIMING_SIZE);
	evbuffer_remove(in, buf, len);
	if (wmsg_get_metrics(buf, len, m->length, t->metrics,
	    EMBER_METRIC_COUNT, &err) == -1) {
		worker_corrupt(w, err);
		return (WORKER_STOPPED);
	}
	return (WORKER_HANDLED);
}

/* The head task ended cleanly: reuse the worker, or retire it. */
static void
worker_end_head(struct worker *w)
{
	struct task	*t;

	t = worker_pop(w);
	w->tasks_run++;
	pool_count_success(w->pool);
	if (!ember_conf.workers_reuse)
		worker_retire(w, RETIRE_NO_REUSE);
	else if (w->max_tasks > 0 && w->tasks_run >= w->max_tasks)
		worker_retire(w, RETIRE_MAX_TASKS);
	else if (w->ntasks == 0 && worker_stale(w))
		worker_retire(w, RETIRE_STALE);
	else if (w->ntasks == 0) {
		worker_set_idle(w);
		scheduler_kick();
	}
	task_finish(t);
}

/* END_OF_STREAM: the head task ended cleanly. */
static enum worker_progress
worker_end(struct worker *w, struct evbuffer *in)
{
	evbuffer_drain(in, WMSG_TYPE_SIZE);
	worker_end_head(w);
	return (WORKER_HANDLED);
}

/*
 * Does each entry of a TASKS_DONE name the task it ends, in order, and are
 * there no more than the worker holds?  Checked before any ends: a forged
 * list ends nothing.
 */
static int
worker_tasks_done_valid(const struct worker *w, const unsigned char *p,
    const struct wmsg *m, const char **err)
{
	const struct task	*t = TAILQ_FIRST(&w->tasks);
	size_t			 each = wmsg_done_entry(m);
	int32_t			 i;

	if (m->records > w->ntasks) {
		*err = "more task ends than tasks";
		return (0);
	}
	for (i = 0; i < m->records; i++, t = TAILQ_NEXT(t, queue_entry)) {
		if (be32_get(p + (size_t)i * each) != t->partition) {
			*err = "a task end for another partition";
			return (0);
		}
	}
	return (1);
}

/* TASKS_DONE: the ends of the head tasks, several in one message. */
static enum worker_progress
worker_tasks_done(struct worker *w, struct evbuffer *in, const struct wmsg *m)
{
	unsigned char	*buf;
	size_t		 each = wmsg_done_entry(m), len = wmsg_payload(m);
	const char	*err;
	struct task	*t;
	int32_t		 i;

	evbuffer_drain(in, WMSG_DONE_SIZE);
	buf = xmalloc(len);
	evbuffer_remove(in, buf, len);
	if (!worker_tasks_done_valid(w, buf, m, &err)) {
		free(buf);
		worker_corrupt(w, err);
		return (WORKER_STOPPED);
	}
	/* An end may retire the worker (workers.max_tasks): the tasks
	 * left went back to the queue, and the rest of the list is moot. */
	err = NULL;
	for (i = 0; i < m->records && w->state == WORKER_BUSY; i++) {
		t = TAILQ_FIRST(&w->tasks);
		if (t == NULL || t->partition != be32_get(buf +
		    (size_t)i * each)) {
			err = "a task end for another partition";
			break;
		}
		if (wmsg_get_metrics(buf + (size_t)i * each + 4, each - 4,
		    m->length, t->metrics, EMBER_METRIC_COUNT, &err) == -1)
			break;
		if (t->ops->check_metrics(t) == -1) {
			err = "metrics out of range";
			break;
		}
		worker_end_head(w);
	}
	free(buf);
	if (err != NULL && w->state == WORKER_BUSY) {
		worker_corrupt(w, err);
		return (WORKER_STOPPED);
	}
	return (WORKER_HANDLED);
}

/* The head task failed: its worker exits by itself. */
static enum worker_progress
worker_exception(struct worker *w, struct evbuffer *in, const struct wmsg *m)
{
	struct task	*t;
	char		*msg, *clean;

	evbuffer_drain(in, WMSG_ERROR_SIZE);
	msg = xmalloc((size_t)m->length + 1);
	evbuffer_remove(in, msg, (size_t)m->length);
	/* A command's stderr may be any bytes: the client gets UTF-8. */
	clean = utf8_clean(msg, (size_t)m->length, EMBER_MAX_ERROR_FRAME);
	free(msg);
	t = worker_pop(w);
	worker_retire(w, RETIRE_FAILED);
	task_fail(t, w->pid, clean);
	free(clean);
	return (WORKER_STOPPED);
}

/* Handle one message of the head task. */
static enum worker_progress
worker_message(struct worker *w, struct task *t, struct evbuffer *in)
{
	unsigned char	 hdr[WMSG_MAX_SIZE];
	struct wmsg	 m;
	const char	*err;
	size_t		 size;

	if (!worker_need(w, in, WMSG_TYPE_SIZE))
		return (WORKER_INCOMPLETE);
	evbuffer_copyout(in, hdr, WMSG_TYPE_SIZE);
	if ((size = wmsg_size(be32_get(hdr))) == 0) {
		worker_corrupt(w, "unknown message");
		return (WORKER_STOPPED);
	}
	if (!worker_need(w, in, size))
		return (WORKER_INCOMPLETE);
	evbuffer_copyout(in, hdr, size);
	if (wmsg_get(hdr, size, &m, &err) == -1) {
		worker_corrupt(w, err);
		return (WORKER_STOPPED);
	}
	if (!worker_need(w, in, size + wmsg_payload(&m)))
		return (WORKER_INCOMPLETE);
	switch (m.type) {
	case EMBER_RECORD_BATCH:
		return (worker_batch(w, t, in, &m));
	case EMBER_END_OF_DATA_SECTION:
		evbuffer_drain(in, size);
		return (WORKER_HANDLED);
	case EMBER_TIMING_DATA:
		return (worker_timing(w, t, in, &m));
	case EMBER_END_OF_STREAM:
		if (t->ops->check_metrics(t) == -1) {
			worker_corrupt(w, "metrics out of range");
			return (WORKER_STOPPED);
		}
		return (worker_end(w, in));
	case EMBER_EXCEPTION_THROWN:
		return (worker_exception(w, in, &m));
	case EMBER_TASKS_DONE:
		return (worker_tasks_done(w, in, &m));
	}
	fatalx("%s: message %s", __func__, wmsg_type_name(m.type));
}

/* The stopped task ended cleanly: the worker is idle again. */
static void
worker_stopped(struct worker *w)
{
	log_debug("worker %ld: its stopped task ended", (long)w->pid);
	w->stopping = 0;
	event_del(w->stop_ev);
	w->tasks_run++;
	if (w->max_tasks > 0 && w->tasks_run >= w->max_tasks) {
		worker_retire(w, RETIRE_MAX_TASKS);
		return;
	}
	if (worker_stale(w)) {
		worker_retire(w, RETIRE_STALE);
		return;
	}
	worker_set_idle(w);
	scheduler_kick();
}

/* Drop the output of a stopped task until its end.  Nothing walks the
 * batches, so they need no check. */
static void
worker_drain_stopped(struct worker *w, struct evbuffer *in)
{
	unsigned char	 hdr[WMSG_MAX_SIZE];
	struct wmsg	 m;
	const char	*err;
	size_t		 size;

	while (w->stopping) {
		if (!worker_need(w, in, WMSG_TYPE_SIZE))
			break;
		evbuffer_copyout(in, hdr, WMSG_TYPE_SIZE);
		if ((size = wmsg_size(be32_get(hdr))) == 0) {
			worker_corrupt(w, "unknown message");
			return;
		}
		if (!worker_need(w, in, size))
			break;
		evbuffer_copyout(in, hdr, size);
		if (wmsg_get(hdr, size, &m, &err) == -1) {
			worker_corrupt(w, err);
			return;
		}
		if (!worker_need(w, in, size + wmsg_payload(&m)))
			break;
		evbuffer_drain(in, size + wmsg_payload(&m));
		if (m.type == EMBER_END_OF_STREAM ||
		    m.type == EMBER_TASKS_DONE)
			worker_stopped(w);
		else if (m.type == EMBER_EXCEPTION_THROWN) {
			worker_retire(w, RETIRE_FAILED);	/* it exits */
			return;
		}
	}
	if (w->stopping && w->eof)
		worker_retire(w, RETIRE_EXITED);
}

/* Relay what the worker sent, as far as its task may go right now. */
static void
worker_relay(struct worker *w)
{
	struct evbuffer	*in = channel_input(w->ch);
	struct task	*t;

	w->eof = channel_eof(w->ch);
	if (w->stopping)
		worker_drain_stopped(w, in);
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

/* Relay, then read on. */
static void
worker_process(struct worker *w)
{
	worker_relay(w);
	if (w->state != WORKER_DEAD)
		channel_resume(w->ch);
}

/* Look at the worker's output on the next loop turn. */
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
worker_rss(pid_t pid)
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

#define WORKER_TREE_MAX	256	/* processes of a worker's tree looked at */

/*
 * The resident memory of a worker and everything it started (a pipe's
 * shell and its commands, what a udf forked): workers.max_memory bounds
 * the task, not one process of it.  Walked through /proc's children
 * lists, breadth first, at most WORKER_TREE_MAX processes, so that a
 * task that forks without end costs the loop a bounded look (a user's
 * process count is the pool's own bound).  *n gets the processes seen.
 */
static uint64_t
worker_tree_rss(pid_t pid, int *n)
{
	pid_t			 tree[WORKER_TREE_MAX];
	char			 path[96];
	uint64_t		 rss = 0;
	long			 child;
	int			 head, count = 1;
	FILE			*f;

	tree[0] = pid;
	for (head = 0; head < count; head++) {
		rss += worker_rss(tree[head]);
		snprintf(path, sizeof path, "/proc/%ld/task/%ld/children",
		    (long)tree[head], (long)tree[head]);
		if ((f = fopen(path, "re")) == NULL)
			continue;
		while (count < WORKER_TREE_MAX && fscanf(f, "%ld", &child) == 1)
			tree[count++] = (pid_t)child;
		fclose(f);
	}
	*n = count;
	return (rss);
}

/*
 * Read a process's state letter and the signals pending for it or its
 * thread group from /proc/PID/status: 0, or -1 if it is gone.
 */
static int
worker_proc_status(pid_t pid, char *state, uint64_t *pending)
{
	char			 path[64], line[128], c;
	unsigned long long	 mask;
	FILE			*f;

	snprintf(path, sizeof path, "/proc/%ld/status", (long)pid);
	if ((f = fopen(path, "re")) == NULL)
		return (-1);
	*state = '?';
	*pending = 0;
	while (fgets(line, sizeof line, f) != NULL) {
		if (sscanf(line, "State: %c", &c) == 1)
			*state = c;
		else if (sscanf(line, "SigPnd: %llx", &mask) == 1 ||
		    sscanf(line, "ShdPnd: %llx", &mask) == 1)
			*pending |= mask;
	}
	fclose(f);
	return (0);
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
	const uint64_t	fatal = 1ULL << (SIGKILL - 1) | 1ULL << (SIGTERM - 1);
	uint64_t	pending;
	char		state;

	if (ember_now_ms() - w->idle_ms < WORKER_DYING_CHECK_MS)
		return (0);
	if (worker_proc_status(w->pid, &state, &pending) == -1)
		return (1);
	return (state == 'Z' || state == 'X' || (pending & fatal) != 0);
}

/*
 * Is a worker in uninterruptible sleep (a hard NFS mount, a FUSE file that
 * does not answer)?  Such a one cannot die of its SIGKILL until the kernel
 * lets it go: its exit is late, not hidden.
 */
static int
worker_in_kernel(pid_t pid)
{
	uint64_t	pending;
	char		state;

	return (worker_proc_status(pid, &state, &pending) == 0 &&
	    state == 'D');
}

/*
 * Whether w holds plan members equal to plan, from a job of t's user: the
 * bytes it parsed, so that the plan it made is the one plan would make
 * (the broadcasts, udfs and text files' sizes are in them).
 */
static int
worker_plan_holds(const struct worker *w, const struct task *t,
    const char *plan)
{
	return (plan != NULL && w->plan_text != NULL &&
	    w->plan_uid == t->ops->uid(t) && strcmp(w->plan_text, plan) == 0);
}

/* Find an idle worker of p for t. */
struct worker *
worker_take_idle(struct pool *p, const struct task *t)
{
	struct worker	*w, *first, *same;
	const char	*plan;
	uint64_t	 key;

	/*
	 * An idle worker, preferring one that has this operation's plan, then
	 * one that holds the same plan bytes of the same user (it reuses
	 * them), then the last to go idle.  One found dead (killed while
	 * idle; the loop has not seen it yet) is retired here, so the task
	 * goes to another instead of failing.
	 */
	plan = t->ops->plan(t, &key);
	for (;;) {
		first = same = NULL;
		TAILQ_FOREACH(w, &workers_idle, idle_entry) {
			if (w->pool != p)
				continue;
			if (first == NULL)
				first = w;
			if (w->plan_serial == key)
				break;
			if (same == NULL && worker_plan_holds(w, t, plan))
				same = w;
		}
		if (w == NULL)
			w = same != NULL ? same : first;
		if (w == NULL)
			return (NULL);
		if (!channel_alive(w->ch) || worker_dying(w))
			worker_retire(w, RETIRE_EXITED);
		else if (worker_stale(w))
			worker_retire(w, RETIRE_STALE);
		else
			return (w);
	}
}

void
worker_retire_stale(struct pool *p)
{
	struct worker	*w, *next;

	TAILQ_FOREACH_SAFE(w, &workers_idle, idle_entry, next) {
		if (w->pool == p && worker_stale(w))
			worker_retire(w, RETIRE_STALE);
	}
}

/*
 * Find a busy worker that can take t behind the tasks it has: the one
 * with fewest, so that what is queued spreads over the workers and no
 * batch holds more than its share.
 */
struct worker *
worker_take_behind(const struct task *t)
{
	struct worker	*w, *best = NULL;
	struct task	*head;

	TAILQ_FOREACH(w, &workers, entry) {
		if (w->state != WORKER_BUSY ||
		    w->ntasks >= t->ops->pipeline_depth(t) ||
		    !ember_conf.workers_reuse || (w->max_tasks > 0 &&
		    w->tasks_run + (uint64_t)w->ntasks >= w->max_tasks))
			continue;
		head = TAILQ_FIRST(&w->tasks);
		if (head != NULL && head->reply_mode && head->op == t->op &&
		    (best == NULL || w->ntasks < best->ntasks))
			best = w;
	}
	return (best);
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
 * The broadcast changes of a descriptor: the task's broadcasts the worker
 * lacks, then removals of what it holds and the task does not use.  The
 * worker's list changes to match.  Returns the number of changes, in *out
 * (to free).
 */
static size_t
worker_broadcast_diff(struct worker *w, const struct task *t,
    struct taskdesc_broadcast **out)
{
	struct broadcast *const		*use;
	struct taskdesc_broadcast	*d;
	size_t				 nuse, i, j, kept, n = 0;

	use = t->ops->broadcasts(t, &nuse);
	*out = NULL;
	if (nuse == 0 && w->nheld == 0)
		return (0);
	d = xreallocarray(NULL, nuse + w->nheld, sizeof *d);
	for (i = 0; i < nuse; i++) {
		if (worker_holds(w, broadcast_id(use[i])))
			continue;
		d[n].id = broadcast_id(use[i]);
		d[n].add = 1;
		d[n].fd = broadcast_fd(use[i]);
		d[n].size = broadcast_size(use[i]);
		d[n].index_fd = broadcast_index_fd(use[i]);
		d[n++].index = broadcast_index_size(use[i]);
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
		d[n].id = w->held[i];
		d[n].add = 0;
		d[n].fd = d[n].index_fd = -1;
		d[n].index = 0;
		d[n++].size = 0;
		ember_counters.broadcasts_removed++;
	}
	w->nheld = kept;
	for (i = 0; i < n; i++) {
		if (!d[i].add)
			continue;
		w->held = xreallocarray(w->held, w->nheld + 1, sizeof *w->held);
		w->held[w->nheld++] = d[i].id;
	}
	*out = d;
	return (n);
}

/*
 * May a descriptor open a batch: its task's output is for emberd, and it
 * passes no descriptor and no per-task directory, so that the next tasks
 * of its operation are the same but for the partition?
 */
static int
worker_batch_opens(const struct taskdesc *d, size_t nb)
{
	return (nb == 0 && (d->mode == MODE_COUNT ||
	    d->mode == MODE_COUNT_BY_VALUE || d->mode == MODE_REDUCE) &&
	    d->skip == 0 && d->save_dir == NULL && d->ckpt_dir == NULL &&
	    d->shuffle_dir == NULL && !d->source_dir_passed &&
	    !d->ckpt_dir_passed && !d->shuffle_dir_passed);
}

/* May t, described by d, join the open batch of w? */
static int
worker_batch_joins(const struct worker *w, const struct task *t,
    const struct taskdesc *d, size_t nb)
{
	const struct taskdesc	*first = &w->batch_desc;

	return (w->batch_first != NULL && t->op == w->batch_first->op &&
	    w->nbatch + 1 < EMBER_MAX_TASK_BATCH && worker_batch_opens(d, nb) &&
	    d->mode == first->mode && d->fn == first->fn &&
	    d->partitions == first->partitions);
}

/* Encode the open batch: its first task's descriptor, with the
 * partitions of the tasks that joined it. */
static void
worker_batch_close(struct worker *w)
{
	struct task	*t;
	int		*parts = NULL;
	int		 i;

	if (w->batch_first == NULL)
		return;
	if (w->nbatch > 0) {
		parts = xreallocarray(NULL, (size_t)w->nbatch, sizeof *parts);
		t = TAILQ_NEXT(w->batch_first, queue_entry);
		for (i = 0; i < w->nbatch; i++) {
			parts[i] = t->partition;
			t = TAILQ_NEXT(t, queue_entry);
		}
	}
	w->batch_desc.batch = parts;
	w->batch_desc.nbatch = (size_t)w->nbatch;
	taskdesc_encode(channel_output(w->ch), &w->batch_desc, NULL, 0,
	    w->batch_plan);
	free(parts);
	w->batch_first = NULL;
	w->nbatch = 0;
}

/*
 * Tell each worker that holds broadcast id to let it go, in a descriptor
 * of that removal alone: a dropped broadcast's memory must not outlive it
 * in workers waiting for a task, nor its unmapping fall on their next
 * task.  The broadcast is freed, so no task a worker runs or has queued
 * uses it: a worker that runs one reads this after it (a stopped stream's
 * worker, for one, still held the broadcast its task used).
 */
void
worker_drop_broadcast(int64_t id)
{
	struct worker			*w;
	struct taskdesc			 d;
	struct taskdesc_broadcast	 c;
	size_t				 i;

	TAILQ_FOREACH(w, &workers, entry) {
		for (i = 0; i < w->nheld && w->held[i] != id; i++)
			continue;
		/* One with a batch being built learns of it with the batch:
		 * nothing may come between the batch's descriptors and the
		 * bytes they ride on. */
		if (i == w->nheld || w->state == WORKER_DEAD || w->eof ||
		    w->ch == NULL || w->batch_first != NULL)
			continue;
		w->held[i] = w->held[--w->nheld];
		memset(&d, 0, sizeof d);
		d.operation = "held";
		d.partitions = 1;
		d.mode = MODE_COUNT;
		d.held_only = 1;
		memset(&c, 0, sizeof c);
		c.id = id;
		c.fd = c.index_fd = -1;
		taskdesc_encode(channel_output(w->ch), &d, &c, 1, NULL);
		channel_flush(w->ch);
		ember_counters.broadcasts_removed++;
	}
}

/* Pass a descriptor's descriptors, then write it, or open a batch with
 * it. */
static void
worker_describe(struct worker *w, struct task *t, struct taskdesc *d,
    struct taskdesc_broadcast *b, size_t nb, const char *plan)
{
	size_t	i;

	/* Each added broadcast's memfd, then its index's, rides on the
	 * descriptor's first bytes, in the order of the adds: the worker
	 * never opens a path. */
	for (i = 0; i < nb; i++) {
		if (!b[i].add)
			continue;
		channel_pass_fd(w->ch, b[i].fd);
		if (b[i].index > 0)
			channel_pass_fd(w->ch, b[i].index_fd);
	}
	/* Then the checkpoint directories, opened and checked by emberd. */
	if (d->source_dir_passed) {
		channel_pass_fd(w->ch, d->source_dirfd);
		close(d->source_dirfd);
	}
	if (d->ckpt_dir_passed) {
		channel_pass_fd(w->ch, d->ckpt_dirfd);
		close(d->ckpt_dirfd);
	}
	/* Then the uid's shuffle directory. */
	if (d->shuffle_dir_passed) {
		channel_pass_fd(w->ch, d->shuffle_dirfd);
		close(d->shuffle_dirfd);
	}
	if (worker_batch_opens(d, nb)) {
		w->batch_first = t;
		w->batch_desc = *d;
		w->batch_plan = plan;
		w->nbatch = 0;
	} else
		taskdesc_encode(channel_output(w->ch), d, b, nb, plan);
}

/* Remember the plan members sent to w, or forget the last if they are
 * too big to keep a copy of for every worker. */
static void
worker_plan_keep(struct worker *w, struct task *t, const char *plan)
{
	free(w->plan_text);
	w->plan_text = NULL;
	if (plan == NULL)
		return;
	ember_counters.plans_sent++;
	if (strlen(plan) <= WORKER_PLAN_KEPT_MAX) {
		w->plan_text = xstrdup(plan);
		w->plan_uid = t->ops->uid(t);
	}
}

/*
 * Queue a task descriptor; the plan goes only to a worker without it.
 * Tasks of one operation queued on a worker in one dispatch share a
 * descriptor (its batch) where they may: the worker parses one, and
 * answers them with one TASKS_DONE.
 */
void
worker_assign(struct worker *w, struct task *t)
{
	struct taskdesc			 d;
	struct taskdesc_broadcast	*b;
	size_t				 nb;
	const char			*plan = NULL;
	uint64_t			 key;

	t->ops->describe(t, &d);
	nb = worker_broadcast_diff(w, t, &b);
	plan = t->ops->plan(t, &key);
	if (w->plan_serial == key)
		plan = NULL;	/* it has them */
	else if (worker_plan_holds(w, t, plan)) {
		plan = NULL;
		d.reuse_plan = 1;
		ember_counters.plans_reused++;
	} else
		worker_plan_keep(w, t, plan);
	w->plan_serial = key;
	if (plan == NULL && worker_batch_joins(w, t, &d, nb))
		w->nbatch++;
	else {
		worker_batch_close(w);
		worker_describe(w, t, &d, b, nb, plan);
	}
	free(b);
	w->unflushed = 1;

	if (w->state == WORKER_IDLE) {
		worker_leave_idle(w, WORKER_BUSY);
		w->task_ns = ember_now_ns();
		if (w->tasks_run > 0) {
			ember_counters.worker_reuses++;
			pool_count_reuse(w->pool);
		}
	}
	TAILQ_INSERT_TAIL(&w->tasks, t, queue_entry);
	w->ntasks++;
	task_assign(t, w);
}

/* Write the descriptors assigned since the last flush. */
void
worker_flush_all(void)
{
	struct worker	*w;

	TAILQ_FOREACH(w, &workers, entry) {
		if (w->unflushed) {
			w->unflushed = 0;
			worker_batch_close(w);
			channel_flush(w->ch);
		}
	}
}

static void
worker_stop_timeout_cb(evutil_socket_t fd, short events, void *arg)
{
	struct worker	*w = arg;

	(void)fd; (void)events;
	log_info("worker %ld: its task did not stop within %dms; killing it",
	    (long)w->pid, WORKER_STOP_MS);
	worker_retire(w, RETIRE_INTERRUPTED);
}

/*
 * Can the worker's one task be stopped with STOP_TASK, and the worker
 * kept?  Only a stream's task (the others' ends are results), and only
 * the one task a worker has: a STOP_TASK stops whatever runs when the
 * worker reads it.
 */
static int
worker_can_stop(const struct worker *w, const struct task *t)
{
	return (w->state == WORKER_BUSY && !w->stopping && !t->reply_mode &&
	    w->ntasks == 1 && ember_conf.workers_reuse &&
	    !channel_eof(w->ch));
}

/* Tell the worker to stop its task, and drop its output until the end. */
static void
worker_stop_task(struct worker *w)
{
	struct timeval	tv = { WORKER_STOP_MS / 1000,
			    (WORKER_STOP_MS % 1000) * 1000 };

	evbuffer_add_int32(channel_output(w->ch), EMBER_STOP_TASK);
	channel_flush(w->ch);
	w->stopping = 1;
	w->blocked_ms = 0;
	if (w->stop_ev == NULL)
		w->stop_ev = evtimer_new(ember_base, worker_stop_timeout_cb, w);
	evtimer_add(w->stop_ev, &tv);
	worker_kick(w);		/* what it sent already may end it */
}

/* Take a task being stopped off its worker; the worker is told to stop
 * it, or retired. */
void
worker_cancel_task(struct worker *w, struct task *t)
{
	int	stop = worker_can_stop(w, t);

	TAILQ_REMOVE(&w->tasks, t, queue_entry);
	w->ntasks--;
	if (stop)
		worker_stop_task(w);
	else
		worker_retire(w, RETIRE_INTERRUPTED);
}

/* Note a worker's exit. */
void
worker_exited(struct worker *w, int status)
{
	char	cause[128];

	w->exited = 1;
	w->status = status;
	log_describe_wait(status, cause, sizeof cause);
	log_debug("worker %ld %s", (long)w->pid, cause);
	if (w->state == WORKER_DEAD) {
		worker_free(w);
		return;
	}
	/* Gone on its own: relay what it left, then report its task. */
	worker_kick(w);
}

/* Retire the workers of a pool whose fork-server died. */
void
worker_lost_pool(struct pool *p, const char *why)
{
	struct worker	*w, *next;
	struct task	*t;

	TAILQ_FOREACH_SAFE(w, &workers, entry, next) {
		if (w->pool != p)
			continue;
		/* Its workers die with it; no exit report will come. */
		t = w->ntasks > 0 ? worker_pop(w) : NULL;
		w->exited = 1;
		if (w->state == WORKER_DEAD)
			event_active(w->kick, 0, 1);
		worker_retire(w, RETIRE_FORKSERVER);
		if (t != NULL)
			task_lose(t, w->pid, why);
	}
}

/* Fail a busy worker's task for a limit it went past, and kill it. */
static void
worker_limit(struct worker *w, enum retire_cause cause, const char *why)
{
	struct task	*t = worker_pop(w);

	log_warn("worker %ld: %s", (long)w->pid, why);
	worker_retire(w, cause);
	task_fail(t, w->pid, why);
}

/*
 * The head task's client has taken none of its output for
 * stream.stall_timeout: give the worker back.  The rest of the partition
 * goes to a spool, the worker finishing its task; or the task stops, to
 * be computed again from where its client got to once it reads.
 */
static void
worker_stall(struct worker *w)
{
	struct task	*t = TAILQ_FIRST(&w->tasks);
	char		*err = NULL;

	w->blocked_ms = 0;
	switch (t->ops->stalled(t, &err)) {
	case STALL_SPOOL:
		worker_kick(w);
		break;
	case STALL_PARK:
		t = worker_pop(w);
		worker_retire(w, RETIRE_STALLED);
		task_park(t);
		break;
	case STALL_FAIL:
		worker_limit(w, RETIRE_STALLED, err);
		free(err);
		break;
	}
}

/* Check a busy worker against workers.task_timeout and max_memory, and
 * its stream against stream.stall_timeout. */
static void
worker_check(struct worker *w, uint64_t now)
{
	struct task	*t = TAILQ_FIRST(&w->tasks);
	uint64_t	rss;
	char		why[192];
	int		n;

	if (w->stopping)
		return;		/* its own timer bounds it */
	/* (The client's idle time is looked at on every check while the
	 * worker is blocked, so that both times run together.) */
	if (ember_conf.stream_stall_timeout > 0 && w->blocked_ms != 0 &&
	    t->ops->client_stalled(t, now) &&
	    now - w->blocked_ms >= (uint64_t)ember_conf.stream_stall_timeout) {
		worker_stall(w);
		return;
	}
	if (ember_conf.workers_task_timeout > 0 &&
	    now - w->task_ns / 1000000 >
	    (uint64_t)ember_conf.workers_task_timeout) {
		snprintf(why, sizeof why, "exceeded workers.task_timeout "
		    "(%lldms): killed after %llums",
		    (long long)ember_conf.workers_task_timeout,
		    (unsigned long long)(now - w->task_ns / 1000000));
		worker_limit(w, RETIRE_TASK_TIMEOUT, why);
		return;
	}
	if (ember_conf.workers_max_memory > 0 && (rss = worker_tree_rss(w->pid,
	    &n)) > (uint64_t)ember_conf.workers_max_memory) {
		snprintf(why, sizeof why, "exceeded workers.max_memory "
		    "(resident %llu MiB%s, limit %llu MiB): killed",
		    (unsigned long long)(rss >> 20), n > 1 ?
		    " with its commands" : "",
		    (unsigned long long)(ember_conf.workers_max_memory >> 20));
		worker_limit(w, RETIRE_MAX_MEMORY, why);
	}
}

/* Check every busy worker's limits. */
void
worker_check_limits(void)
{
	struct worker	*w, *next;
	uint64_t	 now = ember_now_ms();

	TAILQ_FOREACH_SAFE(w, &workers, entry, next) {
		if (w->state == WORKER_BUSY)
			worker_check(w, now);
		else if (w->state == WORKER_DEAD)
			worker_check_exit(w, now);
	}
}

/*
 * A fork-server may have run the user's code: the unpickling of a Python
 * broadcast, and what it left behind (a fork hook, a __del__, a signal
 * disposition), or Python's start there, which runs the user's own site
 * (usercustomize, .pth files) before any load.  So it is no more trusted
 * than a worker, whether it loaded anything or not.  One that leaves
 * a retired worker's exit unreported past python.broadcast_preload_timeout
 * would keep the worker's place in workers.max for ever: it is killed, and
 * its workers go with it (fslink.h).  A worker let go is owed no exit
 * until it has been killed after WORKER_LINGER_MS, nor one the kernel
 * holds in uninterruptible sleep: killing the fork-server would not free
 * its place, and would lose the user's other tasks.
 */
static void
worker_check_exit(struct worker *w, uint64_t now)
{
	char	why[128];

	if (w->exited ||
	    (w->linger_ev != NULL && evtimer_pending(w->linger_ev, NULL)) ||
	    now - w->dead_ms <=
	    (uint64_t)ember_conf.python_broadcast_preload_timeout ||
	    worker_in_kernel(w->pid))
		return;
	snprintf(why, sizeof why, "the exit of worker %ld not reported %llu "
	    "ms after it was retired", (long)w->pid,
	    (unsigned long long)(now - w->dead_ms));
	fslink_abort(pool_fslink(w->pool), why);
}

/* Retire p's idle workers past workers.idle_timeout, keeping keep. */
void
worker_expire_idle(struct pool *p, int keep)
{
	struct worker	*w, *next;
	uint64_t	 now = ember_now_ms();

	/* Most recently idle first: the oldest are last. */
	TAILQ_FOREACH_SAFE(w, &workers_idle, idle_entry, next) {
		if (w->pool != p || keep-- > 0)
			continue;
		if (ember_conf.workers_idle_timeout > 0 && now - w->idle_ms >
		    (uint64_t)ember_conf.workers_idle_timeout)
			worker_retire(w, RETIRE_IDLE_TIMEOUT);
	}
}

/* Retire the newest idle worker of another pool than p that may go. */
int
worker_evict_other(const struct pool *p,
    int (*may)(const struct pool *, void *), void *arg)
{
	struct worker	*w;

	TAILQ_FOREACH_REVERSE(w, &workers, worker_list, entry) {
		if (w->state == WORKER_IDLE && w->pool != p &&
		    may(w->pool, arg)) {
			w->evicted = 1;
			worker_retire(w, RETIRE_EVICTED);
			return (0);
		}
	}
	return (-1);
}

/* Retire idle workers, the newest first, while more than max would be
 * left: those that ran past workers.max go once no task wants them. */
void
worker_trim_idle(int max)
{
	struct worker	*w;

	while (nworkers - worker_count_evicting() > max &&
	    (w = TAILQ_FIRST(&workers_idle)) != NULL) {
		w->evicted = 1;
		worker_retire(w, RETIRE_EVICTED);
	}
}

/* Count the workers stopped to make room whose exit is not known yet. */
int
worker_count_evicting(void)
{
	struct worker	*w;
	int		 n = 0;

	TAILQ_FOREACH(w, &workers, entry) {
		if (w->evicted)
			n++;
	}
	return (n);
}

/* Count the busy workers running a task of uid's, or ending one it
 * stopped (which hold a place of its until they are idle again). */
int
worker_count_busy(uid_t uid)
{
	struct worker	*w;
	struct task	*t;
	int		 n = 0;

	TAILQ_FOREACH(w, &workers, entry) {
		if (w->state != WORKER_BUSY)
			continue;
		if ((t = TAILQ_FIRST(&w->tasks)) != NULL ?
		    t->ops->uid(t) == uid :
		    w->stopping && pool_client(w->pool) == uid)
			n++;
	}
	return (n);
}

/* Describe one worker for status. */
static json_t *
worker_status(const struct worker *w, uint64_t now)
{
	json_t		*o, *held;
	struct task	*t;
	size_t		 i;
	int		 n;

	o = json_pack("{s:I,s:s,s:I,s:I,s:I}", "pid", (json_int_t)w->pid,
	    "state", worker_state_names[w->state], "tasks",
	    (json_int_t)w->tasks_run, "age_ms",
	    (json_int_t)(now - w->started_ms), "rss_kb",
	    (json_int_t)(worker_tree_rss(w->pid, &n) >> 10));
	held = json_array();
	for (i = 0; i < w->nheld; i++)
		json_array_append_new(held, json_integer(w->held[i]));
	json_object_set_new(o, "broadcasts", held);
	if (w->stopping)
		json_object_set_new(o, "stopping", json_true());
	if ((t = TAILQ_FIRST(&w->tasks)) != NULL)
		json_object_set_new(o, "task", json_pack("{s:s,s:i,s:I}",
		    "operation", t->ops->operation_id(t), "partition",
		    t->partition, "age_ms",
		    (json_int_t)(now - w->task_ns / 1000000)));
	return (o);
}

/*
 * Does uid see w in status: root sees every worker, a user those of its
 * own pool and (with a non-root emberd, whose one pool runs everyone's
 * jobs) the one running its task.
 */
static int
worker_visible(const struct worker *w, uid_t uid)
{
	const struct task	*t = TAILQ_FIRST(&w->tasks);

	return (uid == 0 || pool_client(w->pool) == uid ||
	    (t != NULL && t->ops->uid(t) == uid));
}

void
worker_count_states(uint64_t counts[3])
{
	struct worker	*w;

	counts[0] = counts[1] = counts[2] = 0;
	TAILQ_FOREACH(w, &workers, entry)
		counts[w->state]++;
}

/* Describe for status the workers uid's jobs run on: all of them for
 * root. */
json_t *
worker_status_all(uid_t uid)
{
	json_t		*a = json_array();
	struct worker	*w;
	uint64_t	 now = ember_now_ms();

	TAILQ_FOREACH(w, &workers, entry) {
		if (worker_visible(w, uid))
			json_array_append_new(a, worker_status(w, now));
	}
	return (a);
}
