#include <stdlib.h>

#include "emberd.h"
#include "log.h"
#include "metrics.h"
#include "operation.h"
#include "scheduler.h"
#include "task.h"
#include "worker.h"
#include "xmalloc.h"

static const char *const task_state_names[] = { "new", "queued", "assigned",
    "parked", "done", "failed" };

/* Check that a transition starts from an allowed state. */
static void
task_expect(const struct task *t, const char *to, unsigned int from)
{
	if ((from & (1U << t->state)) == 0)
		fatalx("task %d: %s from state %s", t->partition, to,
		    task_state_names[t->state]);
}
#define TASK_IN(s)	(1U << (s))

/* Return the name of a state. */
const char *
task_state_name(enum task_state state)
{
	return (task_state_names[state]);
}

/* Make a task for a partition of op. */
struct task *
task_create(struct operation *op, const struct task_ops *ops, int partition,
    int reply_mode)
{
	struct task	*t;

	t = xcalloc(1, sizeof *t);
	t->op = op;
	t->ops = ops;
	t->partition = partition;
	t->reply_mode = reply_mode;
	t->state = TASK_NEW;
	ember_counters.tasks++;
	return (t);
}

/* Stop a task where it is and free it. */
void
task_free(struct task *t)
{
	switch (t->state) {
	case TASK_QUEUED:
		scheduler_remove(t);
		break;
	case TASK_ASSIGNED:
		if (t->worker != NULL)
			worker_cancel_task(t->worker, t);
		break;
	case TASK_NEW:
	case TASK_PARKED:
	case TASK_DONE:
	case TASK_FAILED:
		break;
	}
	free(t->error);
	free(t);
}

/* Mark a new or parked task queued. */
void
task_queue(struct task *t)
{
	task_expect(t, "queue", TASK_IN(TASK_NEW) | TASK_IN(TASK_PARKED));
	t->state = TASK_QUEUED;
	t->queued_ms = ember_now_ms();
}

/* Mark a task its worker never started queued again. */
void
task_requeue(struct task *t)
{
	task_expect(t, "requeue", TASK_IN(TASK_ASSIGNED));
	t->state = TASK_QUEUED;
	t->worker = NULL;
}

/* Mark a queued task sent to w. */
void
task_assign(struct task *t, struct worker *w)
{
	task_expect(t, "assign", TASK_IN(TASK_QUEUED));
	t->state = TASK_ASSIGNED;
	t->worker = w;
}

/* Mark a task parked: its worker is gone, and the records it relayed are
 * skipped when it runs again. */
void
task_park(struct task *t)
{
	task_expect(t, "park", TASK_IN(TASK_ASSIGNED));
	t->state = TASK_PARKED;
	t->worker = NULL;
	t->skip += t->records - t->parked_records;
	t->parked_records = t->records;
}

/* Mark a task done and tell its operation. */
void
task_finish(struct task *t)
{
	task_expect(t, "finish", TASK_IN(TASK_ASSIGNED));
	t->state = TASK_DONE;
	t->worker = NULL;
	ember_counters.tasks_completed++;
	metrics_task_finished(t);
	operation_task_finished(t->op, t);
}

/* Log a task's failure, about its operation, partition and worker: a
 * warning, for it is a job that did not do what its user asked. */
static void
task_log_failure(const struct task *t, pid_t pid)
{
	struct log_context		 c;
	const struct log_context	*prev;

	log_context_fill(&c, operation_session_id(t->op), operation_id(t->op),
	    t->partition, (long)pid);
	prev = log_set_context(&c);
	log_warn("operation %s: %s", operation_id(t->op), t->error);
	log_set_context(prev);
}

/* Mark a task failed and tell its operation. */
void
task_fail(struct task *t, pid_t pid, const char *cause)
{
	task_expect(t, "fail", TASK_IN(TASK_QUEUED) | TASK_IN(TASK_ASSIGNED));
	if (t->state == TASK_ASSIGNED && operation_input_lost(t->op, t,
	    cause)) {
		/* As a parked task: what was relayed is not sent again. */
		t->state = TASK_PARKED;
		t->worker = NULL;
		t->waiting_input = 1;
		t->skip += t->records - t->parked_records;
		t->parked_records = t->records;
		ember_counters.tasks_retried++;
		return;
	}
	t->state = TASK_FAILED;
	t->worker = NULL;
	if (pid > 0)
		xasprintf(&t->error, "partition %d: worker %ld: %s",
		    t->partition, (long)pid, cause);
	else
		xasprintf(&t->error, "partition %d: %s", t->partition, cause);
	ember_counters.tasks_failed++;
	metrics_task_failed(t);
	task_log_failure(t, pid);
	operation_task_failed(t->op, t);
}

void
task_lose(struct task *t, pid_t pid, const char *cause)
{
	if (!operation_may_retry(t->op, t)) {
		task_fail(t, pid, cause);
		return;
	}
	task_expect(t, "retry", TASK_IN(TASK_ASSIGNED));
	t->retries++;
	/* As a parked task: what was relayed is not sent again. */
	t->skip += t->records - t->parked_records;
	t->parked_records = t->records;
	ember_counters.tasks_retried++;
	log_warn("operation %s: partition %d: worker %ld: %s; running it "
	    "again (retry %d of workers.task_retries %lld)",
	    operation_id(t->op), t->partition, (long)pid, cause, t->retries,
	    (long long)ember_conf.workers_task_retries);
	scheduler_requeue(t);
}

/* Let the task's worker relay what it has buffered for it. */
void
task_kick(struct task *t)
{
	if (t->state == TASK_ASSIGNED && t->worker != NULL)
		worker_kick(t->worker);
}
