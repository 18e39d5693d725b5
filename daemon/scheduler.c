#include <stdlib.h>

#include <event2/event.h>

#include "emberd.h"
#include "log.h"
#include "operation.h"
#include "pool.h"
#include "scheduler.h"

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

	(void)fd; (void)events; (void)arg;
	/* Each user's tasks in order; one user waiting for a worker does not
	 * hold up another's. */
	TAILQ_FOREACH_SAFE(t, &scheduler_queue, queue_entry, next) {
		if ((w = pool_take_worker(t)) == NULL)
			continue;
		scheduler_remove(t);
		worker_assign(w, t);
	}
	pool_flush();
	pool_grow_wanted();
}

void
scheduler_init(void)
{
	scheduler_event = event_new(ember_base, -1, 0, scheduler_dispatch_cb,
	    NULL);
}

void
scheduler_free(void)
{
	if (scheduler_event != NULL)
		event_free(scheduler_event);
	scheduler_event = NULL;
}

void
scheduler_kick(void)
{
	event_active(scheduler_event, 0, 1);
}

void
scheduler_submit(struct task *t)
{
	t->state = TASK_QUEUED;
	t->queued_ms = ember_now_ms();
	TAILQ_INSERT_TAIL(&scheduler_queue, t, queue_entry);
	scheduler_nqueued++;
	scheduler_kick();
}

void
scheduler_requeue(struct task *t)
{
	t->state = TASK_QUEUED;
	t->worker = NULL;
	TAILQ_INSERT_HEAD(&scheduler_queue, t, queue_entry);
	scheduler_nqueued++;
	scheduler_kick();
}

void
scheduler_remove(struct task *t)
{
	TAILQ_REMOVE(&scheduler_queue, t, queue_entry);
	scheduler_nqueued--;
}

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
		t->state = TASK_ASSIGNED;	/* out of the queue */
		task_failed(t, 0, why);
		next = TAILQ_FIRST(&scheduler_queue);
	}
}

size_t
scheduler_queued(void)
{
	return (scheduler_nqueued);
}
