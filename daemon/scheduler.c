#include <stdlib.h>

#include <event2/event.h>

#include "emberd.h"
#include "log.h"
#include "pool.h"
#include "scheduler.h"
#include "task.h"
#include "worker.h"
#include "xmalloc.h"

/*
 * The run queue, kept fair.  Queued tasks wait in flows, one per
 * operation, and flows under their user (the client uid).  A dispatch
 * hands idle workers out one at a time: to the user who holds the fewest
 * workers (busy ones, and forks asked for), the one served longest ago on
 * a tie; within that user, to the flow served longest ago.  A user whose
 * next task finds no worker waits for the rest of the dispatch; then the
 * waiting users, fewest held first, ask their pools for a worker each in
 * turn while workers.max has room.  With no room, an idle worker of a user
 * who holds as many or more (or has nothing queued) is stopped to make
 * some: a user with work waiting gets a worker as soon as one is idle
 * anywhere, and stream.stall_timeout bounds how long a worker stays busy
 * for a client that does not read.  With none idle, a user holding no
 * worker at all gets one forked past workers.max, within
 * workers.max_total: another user's long tasks never make its first
 * task wait.  Workers past workers.max are stopped once idle.
 */
struct sched_user;

struct sched_flow {
	struct operation	*op;
	struct sched_user	*user;
	TAILQ_HEAD(, task)	 tasks;
	uint64_t		 served;	/* when it last got a worker */
	TAILQ_ENTRY(sched_flow)	 entry;
};

struct sched_user {
	uid_t			 uid;
	TAILQ_HEAD(sched_flow_list, sched_flow) flows;
	size_t			 nqueued;
	uint64_t		 served;
	/* This dispatch: */
	int			 waiting;	/* its next task found no worker */
	struct pool		*pool;		/* where it waits for one */
	int			 held;
	TAILQ_ENTRY(sched_user)	 entry;
};

static TAILQ_HEAD(sched_user_list, sched_user) scheduler_users =
    TAILQ_HEAD_INITIALIZER(scheduler_users);
static size_t		 scheduler_nqueued;
static uint64_t		 scheduler_stamp;
static struct event	*scheduler_event;

/* Find uid's queue. */
static struct sched_user *
scheduler_find_user(uid_t uid)
{
	struct sched_user	*u;

	TAILQ_FOREACH(u, &scheduler_users, entry) {
		if (u->uid == uid)
			return (u);
	}
	return (NULL);
}

/* The flow of t's operation, made if it has none. */
static struct sched_flow *
scheduler_get_flow(struct task *t)
{
	struct sched_user	*u;
	struct sched_flow	*f;
	uid_t			 uid = t->ops->uid(t);

	if ((u = scheduler_find_user(uid)) == NULL) {
		u = xcalloc(1, sizeof *u);
		u->uid = uid;
		TAILQ_INIT(&u->flows);
		TAILQ_INSERT_TAIL(&scheduler_users, u, entry);
	}
	TAILQ_FOREACH(f, &u->flows, entry) {
		if (f->op == t->op)
			return (f);
	}
	f = xcalloc(1, sizeof *f);
	f->op = t->op;
	f->user = u;
	TAILQ_INIT(&f->tasks);
	TAILQ_INSERT_TAIL(&u->flows, f, entry);
	return (f);
}

/* How many workers uid holds: busy with its tasks, or being forked for
 * its pool. */
static int
scheduler_held(uid_t uid, struct pool *p)
{
	return (worker_count_busy(uid) + (p != NULL ? pool_pending(p) : 0));
}

/* The user whose turn it is: not waiting, fewest held, served longest
 * ago.  NULL when every user with queued tasks waits. */
static struct sched_user *
scheduler_next_user(void)
{
	struct sched_user	*u, *best = NULL;
	struct task		*t;
	int64_t			 cap = ember_conf.workers_max_per_user;

	TAILQ_FOREACH(u, &scheduler_users, entry) {
		if (u->waiting)
			continue;
		t = TAILQ_FIRST(&TAILQ_FIRST(&u->flows)->tasks);
		if ((u->pool = pool_of_task(t)) == NULL) {
			u->waiting = 1;		/* no pool: fails elsewhere */
			continue;
		}
		u->held = scheduler_held(u->uid, u->pool);
		if (cap > 0 && u->held >= cap) {
			/* At workers.max_per_user: it queues. */
			u->waiting = 1;
			u->pool = NULL;
			continue;
		}
		if (best == NULL || u->held < best->held ||
		    (u->held == best->held && u->served < best->served))
			best = u;
	}
	return (best);
}

/* The flow of u served longest ago. */
static struct sched_flow *
scheduler_next_flow(struct sched_user *u)
{
	struct sched_flow	*f, *best = NULL;

	TAILQ_FOREACH(f, &u->flows, entry) {
		if (best == NULL || f->served < best->served)
			best = f;
	}
	return (best);
}

/*
 * May an idle worker of pool victim be stopped for waiting user u?  If its
 * user has nothing queued, or would hold more than u with it: holds at
 * least as many as u now.  (Two users holding none, one with idle workers
 * of its own: the other, waiting, gets one.)
 */
static int
scheduler_may_evict(const struct pool *victim, void *arg)
{
	struct sched_user	*u = arg, *owner;

	owner = scheduler_find_user(pool_client(victim));
	if (owner == NULL || owner->nqueued == 0)
		return (1);
	return (scheduler_held(owner->uid, (struct pool *)victim) >= u->held);
}

/*
 * u's next task found no worker.  At workers.max, with nothing being
 * forked for u, stop an idle worker of a user who would hold more with it
 * (scheduler_may_evict), before that user's turn, so it cannot take it
 * back: its exit makes the room, and the next dispatch gives it to the
 * user holding fewest.  One such stop at a time.
 */
static void
scheduler_make_room(struct sched_user *u)
{
	if (pool_room() <= 0 && pool_pending(u->pool) == 0 &&
	    worker_count_evicting() == 0)
		worker_evict_other(u->pool, scheduler_may_evict, u);
}

/*
 * May u, which found no worker and no room, have one forked past
 * workers.max?  Only if it holds none (so one user is past by one worker
 * at most, and many users together by workers.max_total), and no
 * stopped worker is about to make room.
 */
static int
scheduler_may_overflow(const struct sched_user *u)
{
	return (u->held == 0 && pool_room() <= 0 &&
	    worker_count_evicting() == 0 && pool_room_past() > 0);
}

/*
 * Ask for the workers the waiting users need: one fork each in turn,
 * fewest held first, while workers.max has room; past it, one for each
 * user holding none (scheduler_may_overflow).
 */
static void
scheduler_grow(void)
{
	struct sched_user	*u, *first;
	int			 again;

	do {
		again = 0;
		first = NULL;
		TAILQ_FOREACH(u, &scheduler_users, entry) {
			if (!u->waiting || u->pool == NULL)
				continue;
			if (first == NULL || u->held < first->held ||
			    (u->held == first->held &&
			    u->served < first->served))
				first = u;
		}
		if (first == NULL)
			return;
		if ((size_t)pool_pending(first->pool) < first->nqueued &&
		    (pool_grow_one(first->pool) ||
		    (scheduler_may_overflow(first) &&
		    pool_grow_past(first->pool)))) {
			first->held++;
			again = 1;
			continue;
		}
		first->pool = NULL;	/* done with it this dispatch */
		again = 1;
	} while (again);
}

/* Hand queued tasks to workers, fairly, then ask for the workers
 * missing. */
static void
scheduler_dispatch_cb(evutil_socket_t fd, short events, void *arg)
{
	struct sched_user	*u;
	struct sched_flow	*f;
	struct task		*t;
	struct worker		*w;
	int			 alone;

	(void)fd; (void)events; (void)arg;
	TAILQ_FOREACH(u, &scheduler_users, entry) {
		u->waiting = 0;
		u->pool = NULL;
	}
	while ((u = scheduler_next_user()) != NULL) {
		f = scheduler_next_flow(u);
		t = TAILQ_FIRST(&f->tasks);
		/* Queueing behind a busy worker keeps that worker from
		 * everyone else: only while one operation alone waits. */
		alone = TAILQ_FIRST(&scheduler_users) ==
		    TAILQ_LAST(&scheduler_users, sched_user_list) &&
		    TAILQ_FIRST(&u->flows) == TAILQ_LAST(&u->flows,
		    sched_flow_list);
		if ((w = pool_take_worker(u->pool, t, alone)) == NULL) {
			u->waiting = 1;
			scheduler_make_room(u);
			continue;
		}
		f->served = u->served = ++scheduler_stamp;
		scheduler_remove(t);		/* may free f and u */
		worker_assign(w, t);
	}
	worker_flush_all();
	/* Those past workers.max that no task took. */
	worker_trim_idle(ember_workers_max());
	scheduler_grow();
}

/* Make the dispatch event. */
void
scheduler_init(void)
{
	scheduler_event = event_new(ember_base, -1, 0, scheduler_dispatch_cb,
	    NULL);
}

/* Free the dispatch event. */
void
scheduler_free(void)
{
	if (scheduler_event != NULL)
		event_free(scheduler_event);
	scheduler_event = NULL;
}

/* Dispatch on the next loop turn. */
void
scheduler_kick(void)
{
	event_active(scheduler_event, 0, 1);
}

/* Queue a new task at the back of its operation's flow. */
void
scheduler_submit(struct task *t)
{
	struct sched_flow	*f = scheduler_get_flow(t);

	task_queue(t);
	t->flow = f;
	TAILQ_INSERT_TAIL(&f->tasks, t, queue_entry);
	f->user->nqueued++;
	scheduler_nqueued++;
	scheduler_kick();
}

/* Queue a task its worker never started at the front of its flow. */
void
scheduler_requeue(struct task *t)
{
	struct sched_flow	*f = scheduler_get_flow(t);

	task_requeue(t);
	t->flow = f;
	TAILQ_INSERT_HEAD(&f->tasks, t, queue_entry);
	f->user->nqueued++;
	scheduler_nqueued++;
	scheduler_kick();
}

/* Take a task out of the queue; an empty flow, and a user with no flow
 * left, go. */
void
scheduler_remove(struct task *t)
{
	struct sched_flow	*f = t->flow;
	struct sched_user	*u = f->user;

	TAILQ_REMOVE(&f->tasks, t, queue_entry);
	t->flow = NULL;
	u->nqueued--;
	scheduler_nqueued--;
	if (TAILQ_EMPTY(&f->tasks)) {
		TAILQ_REMOVE(&u->flows, f, entry);
		free(f);
	}
	if (TAILQ_EMPTY(&u->flows)) {
		TAILQ_REMOVE(&scheduler_users, u, entry);
		free(u);
	}
}

/* The first queued task of pool p, or NULL. */
static struct task *
scheduler_first_of_pool(struct pool *p)
{
	struct sched_user	*u;
	struct sched_flow	*f;
	struct task		*t;

	TAILQ_FOREACH(u, &scheduler_users, entry) {
		TAILQ_FOREACH(f, &u->flows, entry) {
			TAILQ_FOREACH(t, &f->tasks, queue_entry) {
				if (pool_of_task(t) == p)
					return (t);
			}
		}
	}
	return (NULL);
}

/* Fail the queued tasks of a pool. */
void
scheduler_fail_pool(struct pool *p, const char *why)
{
	struct task	*t;

	/* Failing one task may end its operation and its other queued
	 * tasks: look again after each. */
	while ((t = scheduler_first_of_pool(p)) != NULL) {
		scheduler_remove(t);
		task_fail(t, 0, why);
	}
}

/* Return the number of queued tasks. */
size_t
scheduler_queued(void)
{
	return (scheduler_nqueued);
}
