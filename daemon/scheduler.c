#include <stdlib.h>

#include <event2/event.h>

#include "emberd.h"
#include "log.h"
#include "pool.h"
#include "scheduler.h"
#include "task.h"
#include "worker.h"

static TAILQ_HEAD(, task) scheduler_queue =
    TAILQ_HEAD_INITIALIZER(scheduler_queue);
static size_t		 scheduler_nqueued;
static struct event	*scheduler_event;

/* Hand queued tasks to workers, then ask for the workers missing. */
static void
scheduler_dispatch_cb(evutil_socket_t fd, short events, void *arg)
{
	struct task	*t, *next;
	struct worker	*w;
	struct pool	*p;

	(void)fd; (void)events; (void)arg;
	/* Each user's tasks in order; one user waiting for a worker does not
	 * hold up another's. */
	TAILQ_FOREACH_SAFE(t, &scheduler_queue, queue_entry, next) {
		if ((p = pool_of_task(t)) == NULL)
			continue;
		if ((w = pool_take_worker(p, t)) == NULL) {
			pool_want_worker(p);
			continue;
		}
		scheduler_remove(t);
		worker_assign(w, t);
	}
	worker_flush_all();
	pool_grow_wanted();
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

/* Queue a new task at the back. */
void
scheduler_submit(struct task *t)
{
	task_queue(t);
	TAILQ_INSERT_TAIL(&scheduler_queue, t, queue_entry);
	scheduler_nqueued++;
	scheduler_kick();
}

/* Queue a task its worker never started at the front. */
void
scheduler_requeue(struct task *t)
{
	task_requeue(t);
	TAILQ_INSERT_HEAD(&scheduler_queue, t, queue_entry);
	scheduler_nqueued++;
	scheduler_kick();
}

/* Take a task out of the queue. */
void
scheduler_remove(struct task *t)
{
	TAILQ_REMOVE(&scheduler_queue, t, queue_entry);
	scheduler_nqueued--;
}

/* Fail the queued tasks of a pool. */
void
scheduler_fail_pool(struct pool *p, const char *why)
{
	struct task	*t, *next;

	TAILQ_FOREACH_SAFE(t, &scheduler_queue, queue_entry, next) {
		if (pool_of_task(t) != p)
			continue;
		/* Failing one task may end its operation and its other
		 * queued tasks: start over after each. */
		scheduler_remove(t);
		task_fail(t, 0, why);
		next = TAILQ_FIRST(&scheduler_queue);
	}
}

/* Return the number of queued tasks. */
size_t
scheduler_queued(void)
{
	return (scheduler_nqueued);
}
