/*
 * Tests for daemon/task.c: every transition of a task's state machine,
 * the neighbour each one tells (the operation, the scheduler, the worker),
 * and the transitions refused.  The neighbours are stubs that record their
 * calls.
 */
#include <stdint.h>
#include <stdlib.h>
#include <string.h>


#include "emberd.h"
#include "metrics.h"
#include "operation.h"
#include "scheduler.h"
#include "suites.h"
#include "task.h"
#include "worker.h"

static struct task	*stub_finished, *stub_failed, *stub_removed;
static const struct task *stub_measured, *stub_failure;
static struct task	*stub_cancelled;
static struct worker	*stub_cancelled_by, *stub_kicked;
static struct task	*stub_requeued;
static int		 stub_may_retry;
static uint64_t		 stub_now = 1000;

/* The stubs of task.c's neighbours. */
uint64_t
ember_now_ms(void)
{
	return (stub_now);
}

const char *
operation_id(const struct operation *op)
{
	(void)op;
	return ("op");
}

const char *
operation_session_id(const struct operation *op)
{
	(void)op;
	return ("session");
}

void
operation_task_finished(struct operation *op, struct task *t)
{
	(void)op;
	stub_finished = t;
}

void
operation_task_failed(struct operation *op, struct task *t)
{
	(void)op;
	stub_failed = t;
}

/* A lost shuffle file parks the task; none is lost here but the test's. */
int
operation_input_lost(struct operation *op, struct task *t, const char *cause)
{
	(void)op; (void)t;
	return (strncmp(cause, "SHUFFLE_LOST ", 13) == 0);
}

void
metrics_task_finished(const struct task *t)
{
	stub_measured = t;
}

void
metrics_task_failed(const struct task *t)
{
	/* Its error is set before the failure is remembered. */
	ck_assert_ptr_nonnull(t->error);
	stub_failure = t;
}

void
scheduler_remove(struct task *t)
{
	stub_removed = t;
}

int
operation_may_retry(const struct operation *op, const struct task *t)
{
	(void)op; (void)t;
	return (stub_may_retry);
}

void
scheduler_requeue(struct task *t)
{
	task_requeue(t);
	stub_requeued = t;
}

void
worker_cancel_task(struct worker *w, struct task *t)
{
	stub_cancelled_by = w;
	stub_cancelled = t;
}

void
worker_kick(struct worker *w)
{
	stub_kicked = w;
}

/* Forget what the stubs saw. */
static void
task_setup(void)
{
	memset(&ember_counters, 0, sizeof ember_counters);
	stub_finished = stub_failed = stub_removed = stub_cancelled = NULL;
	stub_measured = stub_failure = NULL;
	stub_cancelled_by = stub_kicked = NULL;
	stub_requeued = NULL;
	stub_may_retry = 0;
}

/* A fake worker: task.c only keeps and passes the pointer. */
#define FAKE_WORKER	((struct worker *)&stub_now)
#define FAKE_OP		((struct operation *)&stub_now)

START_TEST(test_task_finish)
{
	struct task	*t = task_create(FAKE_OP, NULL, 3, 1);

	ck_assert_int_eq(t->state, TASK_NEW);
	ck_assert_int_eq(t->partition, 3);
	ck_assert_int_eq(t->reply_mode, 1);
	ck_assert_uint_eq(ember_counters.tasks, 1);
	task_queue(t);
	ck_assert_int_eq(t->state, TASK_QUEUED);
	ck_assert_uint_eq(t->queued_ms, 1000);
	task_assign(t, FAKE_WORKER);
	ck_assert_int_eq(t->state, TASK_ASSIGNED);
	ck_assert_ptr_eq(t->worker, FAKE_WORKER);
	task_kick(t);
	ck_assert_ptr_eq(stub_kicked, FAKE_WORKER);
	task_finish(t);
	ck_assert_int_eq(t->state, TASK_DONE);
	ck_assert_ptr_null(t->worker);
	ck_assert_ptr_eq(stub_finished, t);
	ck_assert_ptr_null(stub_failed);
	ck_assert_ptr_eq(stub_measured, t);
	ck_assert_ptr_null(stub_failure);
	ck_assert_uint_eq(ember_counters.tasks_completed, 1);
	stub_kicked = NULL;
	task_kick(t);
	ck_assert_ptr_null(stub_kicked);
	task_free(t);
	ck_assert_ptr_null(stub_removed);
	ck_assert_ptr_null(stub_cancelled);
}
END_TEST

START_TEST(test_task_requeue)
{
	struct task	*t = task_create(FAKE_OP, NULL, 0, 0);

	task_queue(t);
	task_assign(t, FAKE_WORKER);
	task_requeue(t);
	ck_assert_int_eq(t->state, TASK_QUEUED);
	ck_assert_ptr_null(t->worker);
	task_kick(t);
	ck_assert_ptr_null(stub_kicked);
	task_assign(t, FAKE_WORKER);
	ck_assert_int_eq(t->state, TASK_ASSIGNED);
	/* Freed while assigned: its worker gives it up. */
	task_free(t);
	ck_assert_ptr_eq(stub_cancelled, t);
	ck_assert_ptr_eq(stub_cancelled_by, FAKE_WORKER);
	ck_assert_ptr_null(stub_removed);
}
END_TEST

START_TEST(test_task_fail)
{
	struct task	*t = task_create(FAKE_OP, NULL, 4, 0);
	struct task	*u = task_create(FAKE_OP, NULL, 5, 0);

	task_queue(t);
	task_assign(t, FAKE_WORKER);
	task_fail(t, 4242, "killed by signal 9 (SIGKILL)");
	ck_assert_int_eq(t->state, TASK_FAILED);
	ck_assert_ptr_null(t->worker);
	ck_assert_str_eq(t->error,
	    "partition 4: worker 4242: killed by signal 9 (SIGKILL)");
	ck_assert_ptr_eq(stub_failed, t);
	ck_assert_ptr_eq(stub_failure, t);
	ck_assert_ptr_null(stub_measured);
	/* A queued task fails without a worker: no pid in the message. */
	task_queue(u);
	task_fail(u, 0, "no worker");
	ck_assert_str_eq(u->error, "partition 5: no worker");
	ck_assert_ptr_eq(stub_failed, u);
	ck_assert_uint_eq(ember_counters.tasks_failed, 2);
	ck_assert_uint_eq(ember_counters.tasks_completed, 0);
	task_free(t);
	task_free(u);
	ck_assert_ptr_null(stub_removed);
	ck_assert_ptr_null(stub_cancelled);
}
END_TEST

/* A task whose shuffle input was lost is parked, not failed: what it
 * relayed is skipped when it runs again. */
START_TEST(test_task_input_lost)
{
	struct task	*t = task_create(FAKE_OP, NULL, 2, 0);

	task_queue(t);
	task_assign(t, FAKE_WORKER);
	t->records = 7;
	task_fail(t, 4242, "SHUFFLE_LOST stage 0 map 3: gone");
	ck_assert_int_eq(t->state, TASK_PARKED);
	ck_assert_int_eq(t->waiting_input, 1);
	ck_assert_int_eq(t->skip, 7);
	ck_assert_ptr_null(t->worker);
	ck_assert_ptr_null(t->error);
	ck_assert_ptr_null(stub_failed);
	ck_assert_uint_eq(ember_counters.tasks_failed, 0);
	task_queue(t);
	ck_assert_int_eq(t->state, TASK_QUEUED);
	task_free(t);
}
END_TEST

START_TEST(test_task_free_queued)
{
	struct task	*t = task_create(FAKE_OP, NULL, 0, 0);
	struct task	*n = task_create(FAKE_OP, NULL, 1, 0);

	task_queue(t);
	task_free(t);
	ck_assert_ptr_eq(stub_removed, t);
	stub_removed = NULL;
	task_free(n);
	ck_assert_ptr_null(stub_removed);
}
END_TEST

/* A parked task skips, when it runs again, every record it relayed in
 * each run before. */
START_TEST(test_task_park)
{
	struct task	*t = task_create(FAKE_OP, NULL, 2, 0);

	t->skip = 5;		/* a recompute after a reattach */
	task_queue(t);
	task_assign(t, FAKE_WORKER);
	t->records = 100;
	task_park(t);
	ck_assert_int_eq(t->state, TASK_PARKED);
	ck_assert_ptr_null(t->worker);
	ck_assert_int_eq(t->skip, 105);
	ck_assert_int_eq(t->records, 100);
	task_free(t);		/* a parked task is in no list */
	ck_assert_ptr_null(stub_removed);
	ck_assert_ptr_null(stub_cancelled);

	t = task_create(FAKE_OP, NULL, 2, 0);
	task_queue(t);
	task_assign(t, FAKE_WORKER);
	t->records = 7;
	task_park(t);
	task_queue(t);
	ck_assert_int_eq(t->state, TASK_QUEUED);
	task_assign(t, FAKE_WORKER);
	t->records += 3;	/* records count on across runs */
	task_park(t);
	ck_assert_int_eq(t->skip, 10);
	task_free(t);
}
END_TEST

START_TEST(test_task_park_queued)
{
	struct task	*t = task_create(FAKE_OP, NULL, 0, 0);

	task_queue(t);
	task_park(t);
}
END_TEST

START_TEST(test_task_names)
{
	ck_assert_str_eq(task_state_name(TASK_NEW), "new");
	ck_assert_str_eq(task_state_name(TASK_QUEUED), "queued");
	ck_assert_str_eq(task_state_name(TASK_ASSIGNED), "assigned");
	ck_assert_str_eq(task_state_name(TASK_PARKED), "parked");
	ck_assert_str_eq(task_state_name(TASK_DONE), "done");
	ck_assert_str_eq(task_state_name(TASK_FAILED), "failed");
}
END_TEST

/* Transitions from the wrong state are bugs: emberd exits. */
START_TEST(test_task_finish_queued)
{
	struct task	*t = task_create(FAKE_OP, NULL, 0, 0);

	task_queue(t);
	task_finish(t);
}
END_TEST

START_TEST(test_task_assign_new)
{
	task_assign(task_create(FAKE_OP, NULL, 0, 0), FAKE_WORKER);
}
END_TEST

START_TEST(test_task_queue_twice)
{
	struct task	*t = task_create(FAKE_OP, NULL, 0, 0);

	task_queue(t);
	task_queue(t);
}
END_TEST

START_TEST(test_task_fail_done)
{
	struct task	*t = task_create(FAKE_OP, NULL, 0, 0);

	task_queue(t);
	task_assign(t, FAKE_WORKER);
	task_finish(t);
	task_fail(t, 0, "late");
}
END_TEST

/* A lost task its operation may retry is queued again, skipping what it
 * relayed; one it may not is failed. */
START_TEST(test_task_lose)
{
	struct task	*t = task_create(FAKE_OP, NULL, 2, 0);

	task_queue(t);
	task_assign(t, FAKE_WORKER);
	t->records = 7;
	stub_may_retry = 1;
	task_lose(t, 42, "killed by signal 9 (SIGKILL)");
	ck_assert_int_eq(t->state, TASK_QUEUED);
	ck_assert_ptr_eq(stub_requeued, t);
	ck_assert_ptr_null(t->worker);
	ck_assert_int_eq(t->retries, 1);
	ck_assert_int_eq(t->skip, 7);
	ck_assert_uint_eq(ember_counters.tasks_retried, 1);
	ck_assert_ptr_null(stub_failed);
	/* Three more records relayed by the next worker, then lost again:
	 * no more retries. */
	task_assign(t, FAKE_WORKER);
	t->records = 10;
	stub_may_retry = 0;
	task_lose(t, 43, "killed by signal 9 (SIGKILL)");
	ck_assert_int_eq(t->state, TASK_FAILED);
	ck_assert_ptr_eq(stub_failed, t);
	ck_assert_str_eq(t->error, "partition 2: worker 43: killed by signal 9 "
	    "(SIGKILL)");
	ck_assert_uint_eq(ember_counters.tasks_retried, 1);
	task_free(t);
}
END_TEST

START_TEST(test_task_lose_queued)
{
	struct task	*t = task_create(FAKE_OP, NULL, 0, 0);

	task_queue(t);
	stub_may_retry = 1;
	task_lose(t, 1, "lost");
}
END_TEST

START_TEST(test_task_requeue_queued)
{
	struct task	*t = task_create(FAKE_OP, NULL, 0, 0);

	task_queue(t);
	task_requeue(t);
}
END_TEST

Suite *
task_suite(void)
{
	Suite	*s = suite_create("task");
	TCase	*tc;

	tc = tcase_create("transitions");
	tcase_add_checked_fixture(tc, task_setup, NULL);
	tcase_add_test(tc, test_task_finish);
	tcase_add_test(tc, test_task_requeue);
	tcase_add_test(tc, test_task_fail);
	tcase_add_test(tc, test_task_input_lost);
	tcase_add_test(tc, test_task_free_queued);
	tcase_add_test(tc, test_task_park);
	tcase_add_test(tc, test_task_lose);
	tcase_add_test(tc, test_task_names);
	suite_add_tcase(s, tc);

	tc = tcase_create("refused");
	tcase_add_checked_fixture(tc, task_setup, NULL);
	tcase_add_exit_test(tc, test_task_finish_queued, 1);
	tcase_add_exit_test(tc, test_task_assign_new, 1);
	tcase_add_exit_test(tc, test_task_queue_twice, 1);
	tcase_add_exit_test(tc, test_task_fail_done, 1);
	tcase_add_exit_test(tc, test_task_requeue_queued, 1);
	tcase_add_exit_test(tc, test_task_park_queued, 1);
	tcase_add_exit_test(tc, test_task_lose_queued, 1);
	suite_add_tcase(s, tc);
	return (s);
}
