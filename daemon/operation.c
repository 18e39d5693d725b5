/*
 * An operation: one executed job, its tasks' window, their ends, the
 * replies of the actions that answer once, and status.  Its execute, its
 * stream and its reattach are in execute.c, stream.c and reattach.c
 * (operation_private.h).
 */
#include <stdarg.h>
#include <stdlib.h>
#include <string.h>

#include <event2/event.h>

#include "connection.h"
#include "emberd.h"
#include "heap.h"
#include "helper.h"
#include "limit.h"
#include "log.h"
#include "plan.h"
#include "broadcast.h"
#include "checkpoint.h"
#include "commit.h"
#include "retry.h"
#include "scheduler.h"
#include "session.h"
#include "spool.h"
#include "worker.h"
#include "xmalloc.h"

#include "operation_private.h"
#include "stage.h"

/* Without options.prefetch, iterate computes ahead one partition per
 * worker, fewer when what they would hold in emberd passes this. */
#define OPERATION_AHEAD_BYTES	(4 * 1024 * 1024)
/* Counting tasks queued per worker: deeper when tasks are short, so the
 * round trip to emberd never leaves a worker waiting for its next task. */
#define PIPELINE_SHALLOW	2
#define PIPELINE_DEEP		8
#define PIPELINE_SHORT_NS	500000
/* Shorter tasks queue deeper still, most sharing one descriptor: as many
 * as run in about a millisecond, up to a batch's. */
#define PIPELINE_QUEUED_NS	1000000

struct operation_list operations = TAILQ_HEAD_INITIALIZER(operations);
size_t		 noperations;

static void	operation_save_failed(struct operation *, const char *,
		    const char *, ...) __attribute__((format(printf, 3, 4)));
static void	operation_answer_error(struct connection *, const char *,
		    const char *, ...) __attribute__((format(printf, 3, 4)));
static void	operation_reply(struct operation *op);
static void	operation_reply_send(struct operation *op, json_t *reply);
static void	operation_checkpoint_done(struct operation *op, const char *why);

uint64_t
operation_serial(const struct operation *op)
{
	return (op->serial);
}

const char *
operation_id(const struct operation *op)
{
	return (op->id);
}

uid_t
operation_uid(const struct operation *op)
{
	return (session_uid(op->session));
}

const char *
operation_session_id(const struct operation *op)
{
	return (session_id(op->session));
}

gid_t
operation_gid(const struct operation *op)
{
	return (session_gid(op->session));
}

int
operation_partitions(const struct operation *op)
{
	return (op->npartitions);
}

const char *
operation_task_plan(const struct operation *op, const struct task *t,
    uint64_t *key)
{
	if (op->nstages > 0)
		return (operation_stage_plan(op, t, key));
	*key = op->serial << 12;
	return (op->plan_text);
}

struct broadcast *const *
operation_broadcasts(const struct operation *op, size_t *n)
{
	*n = op->nbroadcasts;
	return (op->broadcasts);
}

/* Fill in what a task descriptor says of t, for one attempt of it. */
/* The directory of c's uid, for a task of op: -1 (logged) if it cannot
 * be opened; the task then fails in its worker, saying so. */
static int
operation_open_ckpt_dir(const struct operation *op,
    const struct checkpoint *c)
{
	char	*err = NULL;
	int	 fd;

	if ((fd = checkpoint_open_dir(c, &err)) == -1) {
		log_warn("operation %s: checkpoint %s: %s", op->id,
		    checkpoint_id(c), err);
		free(err);
	}
	return (fd);
}

void
operation_describe_task(struct operation *op, const struct task *t,
    struct taskdesc *d)
{
	memset(d, 0, sizeof *d);
	d->operation = op->id;
	d->partition = t->partition;
	d->partitions = op->npartitions;
	d->mode = action_modes[op->action];
	d->fn = op->fn;
	d->skip = t->skip;
	/* Only the first stage reads the checkpoint source. */
	if (op->source != NULL && t->stage == 0) {
		d->source_dirfd = operation_open_ckpt_dir(op, op->source);
		d->source_dir_passed = d->source_dirfd != -1;
	}
	if (op->nstages > 0 && t->stage < op->nstages - 1) {
		/* A map task: it writes its shuffle file, not the action's
		 * output, and gets no descriptor of the action's. */
		operation_stage_describe(op, t, d);
		return;
	}
	if (op->action == ACTION_SAVE) {
		d->save_dir = commit_task_dir(op->commit);
		d->save_attempt = (int64_t)++op->save_attempts;
	}
	if (op->action == ACTION_CHECKPOINT) {
		d->ckpt_dir = checkpoint_dir(op->ckpt);
		d->ckpt_sync = checkpoint_sync(op->ckpt);
		d->ckpt_dirfd = operation_open_ckpt_dir(op, op->ckpt);
		d->ckpt_dir_passed = d->ckpt_dirfd != -1;
	}
	if (op->nstages > 0)
		operation_stage_describe(op, t, d);
}

size_t
operation_count(void)
{
	struct operation	*op;
	size_t			 n = 0;

	TAILQ_FOREACH(op, &operations, entry) {
		if (op->conn != NULL)
			n++;
	}
	return (n);
}

/* Find uid's operation id: ids are the uid's own. */
struct operation *
operation_find(uid_t uid, const char *id)
{
	struct operation	*op;

	TAILQ_FOREACH(op, &operations, entry) {
		if (operation_uid(op) == uid && strcmp(op->id, id) == 0)
			return (op);
	}
	return (NULL);
}

int
operation_pipeline_depth(const struct operation *op)
{
	int64_t	each, n;

	if (ACTION_STREAMS(op->action))
		return (1);
	if (op->done == 0 || (each = op->task_ns / op->done) >=
	    PIPELINE_SHORT_NS)
		return (PIPELINE_SHALLOW);
	n = PIPELINE_QUEUED_NS / (each > 0 ? each : 1);
	if (n > EMBER_MAX_TASK_BATCH)
		return (EMBER_MAX_TASK_BATCH);
	return (n > PIPELINE_DEEP ? (int)n : PIPELINE_DEEP);
}

/*
 * Partitions iterate computes ahead of the one the client reads: its
 * options.prefetch, else one per worker, as many as fit in
 * OPERATION_AHEAD_BYTES at what each holds in emberd while it waits for
 * its turn (a worker's output buffer, or less: the average of the
 * partitions sent so far).
 */
static int
operation_ahead(const struct operation *op)
{
	uint64_t	each = WORKER_BATCH_HELD;
	int		n = ember_workers_max();

	if (op->prefetch >= 0)
		return (op->prefetch);
	if (op->next_deliver > 0 &&
	    op->bytes_sent / (uint64_t)op->next_deliver < each)
		each = op->bytes_sent / (uint64_t)op->next_deliver + 1;
	if ((uint64_t)n > OPERATION_AHEAD_BYTES / each)
		n = (int)(OPERATION_AHEAD_BYTES / each);
	return (n > 0 ? n : 1);
}

/* Tasks allowed in flight: ahead of the delivered partition for streams. */
static int
operation_window(const struct operation *op)
{
	switch (op->action) {
	case ACTION_ITERATE:
		return (operation_ahead(op) + op->requested);
	case ACTION_COLLECT:
		return (ember_workers_max() + 1);
	default:
		return (operation_pipeline_depth(op) * ember_workers_max());
	}
}

/* Start tasks while the window has room. */
void
operation_fill(struct operation *op)
{
	struct task	*t;

	if (op->failing || op->waiting)
		return;
	if (operation_in_map_stage(op)) {
		operation_stage_fill(op);
		return;
	}
	while (op->next_start < op->npartitions &&
	    op->live < operation_window(op)) {
		t = task_create(op, &operation_task_ops, op->next_start++,
		    !ACTION_STREAMS(op->action));
		if (op->nstages > 0)
			t->stage = op->nstages - 1;
		if (op->skip > 0 && t->partition == op->skip_partition) {
			t->skip = op->skip;
			op->skip = 0;
		}
		TAILQ_INSERT_TAIL(&op->tasks, t, op_entry);
		op->live++;
		scheduler_submit(t);
	}
}

/* Retire a task: stop it wherever it is and free it. */
void
operation_retire(struct operation *op, struct task *t)
{
	TAILQ_REMOVE(&op->tasks, t, op_entry);
	op->live--;
	spool_free(t->spool);
	task_free(t);
}

/* Free the merged result and what it held of daemon.max_results. */
void
operation_drop_result(struct operation *op)
{
	if (op->result_charged > 0)
		limit_release(session_uid(op->session), LIMIT_RESULTS,
		    op->result_charged);
	op->result_charged = 0;
	result_free(op->result);
	op->result = NULL;
}

/*
 * Free an operation: its tasks are stopped and its workers not reused.
 * One refused before it started is in no list and has no task.
 */
void
operation_free(struct operation *op)
{
	struct task	*t;
	int		 started = op->session != NULL;

	while ((t = TAILQ_FIRST(&op->tasks)) != NULL)
		operation_retire(op, t);
	operation_stages_free(op);
	if (started) {
		log_debug("operation %s ended: %lld records sent", op->id,
		    (long long)op->records_sent);
		TAILQ_REMOVE(&operations, op, entry);
		noperations--;
		if (op->completed_on != NULL)
			connection_set_completed(op->completed_on, NULL);
		operation_drop_result(op);
		session_remove_operation(op->session, op);
	}
	result_free(op->result);	/* refused before it started */
	if (op->counted)
		limit_release(op->uid, LIMIT_OPERATIONS, 1);
	limit_release(op->uid, LIMIT_PLAN_BYTES, op->plan_charged);
	commit_free(op->commit);	/* undoes a save not committed */
	free(op->fail_error);
	if (op->ckpt != NULL)
		checkpoint_abandon(op->ckpt, op);	/* not committed */
	if (op->source != NULL) {
		if (op->waiting)
			checkpoint_unwait(op->source, op);
		checkpoint_unuse(op->source);
	}
	if (op->limit_ev != NULL)
		event_free(op->limit_ev);
	helper_cancel(op->planning);
	if (op->plan_json != NULL)
		json_decref(op->plan_json);
	free(op->save_path);
	if (op->pump_ev != NULL)
		event_free(op->pump_ev);
	free(op->result_error);
	retry_free(op->retry);
	if (op->reply != NULL)
		json_decref(op->reply);
	while (op->nbroadcasts > 0)
		broadcast_unuse(op->broadcasts[--op->nbroadcasts]);
	free(op->broadcasts);
	plan_free(op->plan);
	free(op->plan_text);
	free(op);
	heap_check_soon();
	/* One refused before it started may be what a drain waits for: its
	 * connection is free now. */
	ember_check_drained();
}

/* Answer c, which waited for an operation, with an error of class: the
 * connection writes it. */
static void
operation_answer_error(struct connection *c, const char *class,
    const char *fmt, ...)
{
	struct request_answer	a;
	va_list			ap;

	memset(&a, 0, sizeof a);
	a.kind = REQUEST_ANSWER_ERROR;
	a.class = class;
	va_start(ap, fmt);
	xvasprintf(&a.message, fmt, ap);
	va_end(ap);
	connection_answer(c, &a);
}

/* Give the connection back to control frames and free the operation. */
void
operation_end(struct operation *op)
{
	struct connection	*c = op->conn;

	op->conn = NULL;
	if (c != NULL) {
		if (ACTION_STREAMS(op->action))
			connection_stream_end(c);
		else
			connection_busy_end(c);
	}
	operation_free(op);
}

/* Interrupt op and tell its client, if any, why: an error reply, or on a
 * stream an error frame that starts with the same class. */
void
operation_abort(struct operation *op, const char *class, const char *why)
{
	char	*msg;

	operation_bury(op, "OPERATION_FINISHED", "operation %s was "
	    "interrupted: %s", op->id, why);
	if (op->conn != NULL) {
		if (ACTION_STREAMS(op->action)) {
			xasprintf(&msg, "%s: operation %s: %s at partition %d",
			    class, op->id, why, op->next_deliver);
			operation_stream_error(op, msg);
			free(msg);
		} else
			operation_answer_error(op->conn, class,
			    "operation %s: %s", op->id, why);
	}
	ember_counters.operations_interrupted++;
	operation_end(op);
}

void
operation_interrupt_all(const char *why)
{
	struct operation	*op;

	while ((op = TAILQ_FIRST(&operations)) != NULL)
		operation_abort(op, "SHUTTING_DOWN", why);
}

void
operation_interrupt_session(struct session *s, const char *why)
{
	struct operation	*op, *next;

	TAILQ_FOREACH_SAFE(op, &operations, entry, next) {
		if (op->session == s)
			operation_abort(op, "INTERRUPTED", why);
	}
}

/* Keep what a detached stream needs, and no more than its bound. */
void
operation_unplug(struct operation *op)
{
	op->conn = NULL;
	op->detached_ms = ember_now_ms();
	if (op->reattachable && ember_conf.operation_detached_timeout > 0)
		operation_maintenance_due(op->detached_ms +
		    (uint64_t)ember_conf.operation_detached_timeout);
	op->partition_open = 0;
	op->requested = op->action == ACTION_COLLECT;
	if (op->retry != NULL)
		retry_trim(op->retry, (size_t)(ember_conf.stream_retry_buffer +
		    ember_conf.stream_buffer));
}

/*
 * The shutdown grace is over while op is still being checked by a helper,
 * not started: its check is cancelled (a save begun is undone once its
 * beginning answers) and its client told SHUTTING_DOWN, as the clients of
 * started operations are.
 */
void
operation_shutdown_unstarted(struct operation *op)
{
	struct connection	*c = op->conn;

	if (op->planning == NULL && !op->beginning)
		return;
	op->conn = NULL;
	connection_busy_end(c);
	operation_answer_error(c, "SHUTTING_DOWN", "emberd is shutting down; "
	    "operation %s did not start", op->id);
	ember_counters.operations_interrupted++;
	operation_free(op);
}

int
operation_may_retry(const struct operation *op, const struct task *t)
{
	return (op->deterministic && !op->failing && !t->merged &&
	    t->retries < ember_conf.workers_task_retries);
}

/*
 * Can the task end with the metrics its worker sent?  Not if one is below
 * zero, nor if its records or time would take the operation's sums past an
 * int64: no real worker sends those.  Checked at END_OF_STREAM, just
 * before operation_task_finished adds them, so another task cannot come
 * between.
 */
int
operation_check_metrics(const struct operation *op, const struct task *t)
{
	const int64_t	*m = t->metrics;
	int64_t		 sum;
	int		 i;

	for (i = 0; i < EMBER_METRIC_COUNT; i++) {
		if (m[i] < 0)
			return (-1);
	}
	if (ACTION_STREAMS(op->action))
		return (0);
	if (__builtin_add_overflow(op->count, m[EMBER_METRIC_RECORDS_OUT],
	    &sum))
		return (-1);
	return (0);
}

/* A task ended cleanly: deliver it, or count it and go on. */
void
operation_task_finished(struct operation *op, struct task *t)
{
	if (op->nstages > 0 && t->stage < op->nstages - 1) {
		operation_stage_task_finished(op, t);
		return;
	}
	if (ACTION_STREAMS(op->action)) {
		if (TAILQ_FIRST(&op->tasks) == t)
			operation_pump(op);
		return;
	}
	op->count += t->metrics[EMBER_METRIC_RECORDS_OUT];
	op->task_ns += (int64_t)t->served_ns;
	op->done++;
	if (op->ckpt != NULL && op->result_error == NULL &&
	    checkpoint_written(op->ckpt, t->metrics[EMBER_METRIC_RECORDS_OUT],
	    t->metrics[EMBER_METRIC_BYTES_OUT], &op->result_error) == -1)
		op->result_class = "LIMIT_EXCEEDED";
	operation_retire(op, t);
	if (op->result_error != NULL) {
		ember_counters.operations_failed++;
		if (op->conn != NULL)
			operation_answer_error(op->conn, op->result_class,
			    "%s; operation %s", op->result_error, op->id);
		operation_end(op);
		return;
	}
	if (op->done < op->npartitions) {
		operation_fill(op);
		return;
	}
	operation_reply(op);
}

/* A task failed: a stream fails at its partition, a reply at once. */
void
operation_task_failed(struct operation *op, struct task *t)
{
	if (op->nstages > 0 && t->stage < op->nstages - 1) {
		operation_stage_task_failed(op, t);
		return;
	}
	if (ACTION_STREAMS(op->action)) {
		if (TAILQ_FIRST(&op->tasks) == t)
			operation_pump(op);
		return;
	}
	if (op->action == ACTION_SAVE) {
		operation_save_failed(op, "TASK_FAILED", "%s", t->error);
		return;
	}
	ember_counters.operations_failed++;
	operation_bury(op, "OPERATION_FINISHED", "operation %s failed: %s",
	    op->id, t->error);
	if (op->conn != NULL)
		operation_answer_error(op->conn, "TASK_FAILED", "%s", t->error);
	operation_end(op);
}

/* The save's abort has answered (or there was nothing to undo): send the
 * error that failed it, and end. */
static void
operation_failed(struct operation *op)
{
	if (op->conn != NULL)
		operation_answer_error(op->conn, op->fail_class, "%s",
		    op->fail_error);
	operation_end(op);
}

/* save_abort answered. */
static void
operation_aborted_cb(const char *class, const char *error, void *arg)
{
	struct operation	*op = arg;

	if (class != NULL)
		log_warn("operation %s: undoing the save: %s", op->id, error);
	operation_failed(op);
}

/*
 * A save failed: stop its tasks, undo what it made (as the user, see
 * commit.c), and only then tell the client, so that when it hears of the
 * failure nothing of the save is left.
 */
static void
operation_save_failed(struct operation *op, const char *class,
    const char *fmt, ...)
{
	struct task	*t;
	const char	*hclass;
	char		*herr = NULL;
	va_list		 ap;

	ember_counters.operations_failed++;
	op->failing = 1;
	op->fail_class = class;
	va_start(ap, fmt);
	xvasprintf(&op->fail_error, fmt, ap);
	va_end(ap);
	operation_bury(op, "OPERATION_FINISHED", "operation %s failed: %s",
	    op->id, op->fail_error);
	while ((t = TAILQ_FIRST(&op->tasks)) != NULL)
		operation_retire(op, t);
	switch (commit_abort(op->commit, operation_aborted_cb, op, &hclass,
	    &herr)) {
	case 0:
		return;		/* operation_aborted_cb goes on */
	case -1:
		log_warn("operation %s: cannot undo the save: %s", op->id,
		    herr);
		free(herr);
		break;
	}
	operation_failed(op);
}

/* save_commit answered: the save's reply, or its failure. */
static void
operation_committed_cb(const char *class, const char *error, void *arg)
{
	struct operation	*op = arg;
	json_t			*reply;

	if (class != NULL) {
		operation_save_failed(op, class, "operation %s: %s", op->id,
		    error);
		return;
	}
	reply = json_pack("{s:s,s:i,s:i,s:I}", "operation", op->id,
	    "partitions", op->npartitions, "files", op->npartitions,
	    "records", (json_int_t)op->count);
	operation_reply_send(op, reply);
}

/* Every task of a save succeeded: commit it, as the user. */
static void
operation_commit(struct operation *op)
{
	const char	*class;
	char		*err = NULL;

	if (commit_finish(op->commit, op->npartitions, operation_committed_cb,
	    op, &class, &err) == -1) {
		operation_save_failed(op, class, "operation %s: %s", op->id,
		    err);
		free(err);
	}
}

/* Every task of a reply action ended well: answer, and end. */
static void
operation_reply(struct operation *op)
{
	json_t	*reply;

	if (op->action == ACTION_SAVE) {
		operation_commit(op);
		return;
	}
	reply = json_pack("{s:s,s:i}", "operation", op->id, "partitions",
	    op->npartitions);
	switch (op->action) {
	case ACTION_COUNT:
		json_object_set_new(reply, "count", json_integer(op->count));
		break;
	case ACTION_COUNT_BY_VALUE:
	case ACTION_REDUCE:
		json_object_update_new(reply, result_reply(op->result));
		break;
	case ACTION_CHECKPOINT:
		/* The reply comes once it is committed. */
		json_decref(reply);
		checkpoint_commit(op->ckpt, op, operation_checkpoint_done);
		return;
	default:
		fatalx("operation %s: no reply for a stream", op->id);
	}
	operation_reply_send(op, reply);
}

/*
 * Send a reply action's reply to c, and end.  The reply's bytes, not the
 * merged result's, are held against the uid's results until the client
 * takes them; past the bounds it is LIMIT_EXCEEDED instead.
 */
void
operation_reply_deliver(struct operation *op, struct connection *c,
    json_t *reply)
{
	char	*err;

	operation_drop_result(op);
	if (connection_reply_held(c, reply, &err) == -1) {
		log_info("operation %s: %s", op->id, err);
		operation_answer_error(c, "LIMIT_EXCEEDED", "%s (the reply of "
		    "operation %s, until the client reads it)", err, op->id);
		operation_bury(op, "LIMIT_EXCEEDED", "operation %s: its reply "
		    "was over a limit: %s", op->id, err);
		free(err);
	} else
		operation_bury(op, "OPERATION_FINISHED", "operation %s is "
		    "complete and its reply was sent", op->id);
	operation_end(op);
}

/* Send a reply action's reply (or keep it for a reattach), and end. */
static void
operation_reply_send(struct operation *op, json_t *reply)
{
	ember_counters.operations_completed++;
	if (op->conn == NULL && op->reattachable) {
		/* Kept for the client to reattach and take. */
		op->reply = reply;
		op->complete = 1;
		return;
	}
	if (op->conn != NULL) {
		operation_reply_deliver(op, op->conn, reply);
		return;
	}
	json_decref(reply);
	operation_end(op);
}

/* A checkpoint action's reply fields. */
json_t *
operation_checkpoint_reply(const struct operation *op)
{
	return (json_pack("{s:s,s:i,s:s,s:s,s:b,s:I,s:I}", "operation", op->id,
	    "partitions", op->npartitions, "checkpoint",
	    checkpoint_id(op->ckpt), "kind", op->ckpt_local ? "local" :
	    "reliable", "eager", op->ckpt_eager, "records",
	    (json_int_t)checkpoint_records(op->ckpt), "bytes",
	    (json_int_t)checkpoint_bytes(op->ckpt)));
}

/* The checkpoint is committed, or could not be. */
static void
operation_checkpoint_done(struct operation *op, const char *why)
{
	json_t	*reply;

	if (why != NULL) {
		op->ckpt = NULL;	/* the checkpoint removes itself */
		ember_counters.operations_failed++;
		operation_bury(op, "OPERATION_FINISHED", "operation %s failed: "
		    "%s", op->id, why);
		if (op->conn != NULL)
			operation_answer_error(op->conn, "CHECKPOINT_FAILED",
			    "operation %s: %s", op->id, why);
		operation_end(op);
		return;
	}
	reply = operation_checkpoint_reply(op);
	op->ckpt = NULL;
	if (op->internal) {
		ember_counters.operations_completed++;
		json_decref(reply);
		operation_end(op);
		return;
	}
	operation_reply_send(op, reply);
}

void
operation_checkpoint_ready(struct operation *op, const char *why)
{
	op->waiting = 0;
	if (why != NULL) {
		operation_abort(op, "CHECKPOINT_FAILED", why);
		return;
	}
	operation_fill(op);
	if (ACTION_STREAMS(op->action))
		operation_pump(op);
}

/* "p:k", for status. */
static json_t *
operation_position_json(const struct position *pos)
{
	char	buf[48];

	snprintf(buf, sizeof buf, "%lld:%lld", (long long)pos->partition,
	    (long long)pos->offset);
	return (json_string(buf));
}

/* Bytes op's stalled tasks hold in their spools, for status. */
static size_t
operation_spooled(const struct operation *op)
{
	const struct task	*t;
	size_t			 n = 0;

	TAILQ_FOREACH(t, &op->tasks, op_entry) {
		if (t->spool != NULL)
			n += spool_pending(t->spool);
	}
	return (n);
}

/* Tasks of op stopped while their client did not read, for status. */
static int
operation_parked(const struct operation *op)
{
	const struct task	*t;
	int			 n = 0;

	TAILQ_FOREACH(t, &op->tasks, op_entry) {
		if (t->state == TASK_PARKED)
			n++;
	}
	return (n);
}

/* What state an operation is in, for status. */
static const char *
operation_state(const struct operation *op)
{
	if (op->complete)
		return ("complete");
	return (op->conn != NULL ? "attached" : "detached");
}

void
operation_count_states(uint64_t counts[3])
{
	struct operation	*op;

	counts[0] = counts[1] = counts[2] = 0;
	TAILQ_FOREACH(op, &operations, entry)
		counts[op->complete ? 2 : op->conn != NULL ? 0 : 1]++;
}

json_t *
operation_status(uid_t uid)
{
	json_t			*a = json_array(), *o;
	struct operation	*op;
	uint64_t		 now = ember_now_ms();
	char			*what;

	TAILQ_FOREACH(op, &operations, entry) {
		if (uid != 0 && session_uid(op->session) != uid)
			continue;
		o = json_pack("{s:s,s:s,s:s,s:s,s:i,s:i,s:i,s:b,s:I,s:I}",
		    "id", op->id, "session", session_id(op->session),
		    "action", action_names[op->action],
		    "state", operation_state(op),
		    "partitions", op->npartitions, "done",
		    ACTION_STREAMS(op->action) ? op->next_deliver : op->done,
		    "running", op->live, "attached", op->conn != NULL,
		    "records_sent", (json_int_t)op->records_sent, "age_ms",
		    (json_int_t)(now - op->started_ms));
		json_object_set_new(o, "bytes_sent",
		    json_integer((json_int_t)op->bytes_sent));
		json_object_set_new(o, "spooled_bytes", json_integer(
		    (json_int_t)operation_spooled(op)));
		json_object_set_new(o, "parked", json_integer(
		    operation_parked(op)));
		what = plan_describe(op->plan);
		json_object_set_new(o, "what", json_string(what));
		free(what);
		if (op->nstages > 0)
			json_object_set_new(o, "stages", json_pack(
			    "{s:i,s:i,s:i,s:i,s:I}", "count", op->nstages,
			    "running", op->stage, "done", op->stage_done,
			    "tasks", op->stages[op->stage].partitions,
			    "shuffle_bytes", (json_int_t)op->shuffle_bytes));
		if (op->conn == NULL && op->reattachable)
			json_object_set_new(o, "detached_ms",
			    json_integer((json_int_t)(now - op->detached_ms)));
		if (op->retry != NULL) {
			json_object_set_new(o, "sent",
			    operation_position_json(retry_sent(op->retry)));
			json_object_set_new(o, "buffered_from",
			    operation_position_json(retry_start(op->retry)));
			json_object_set_new(o, "buffered_bytes", json_integer(
			    (json_int_t)retry_bytes(op->retry)));
		}
		json_array_append_new(a, o);
	}
	return (a);
}

/* What a worker asks about a task, answered by the task's operation. */
static const char *
operation_task_operation_id(const struct task *t)
{
	return (operation_id(t->op));
}

static const char *
operation_task_session_id(const struct task *t)
{
	return (operation_session_id(t->op));
}

static uid_t
operation_task_uid(const struct task *t)
{
	return (operation_uid(t->op));
}

static gid_t
operation_task_gid(const struct task *t)
{
	return (operation_gid(t->op));
}

static int
operation_task_pipeline_depth(const struct task *t)
{
	return (operation_pipeline_depth(t->op));
}

static void
operation_task_describe(const struct task *t, struct taskdesc *d)
{
	operation_describe_task(t->op, t, d);
}

static const char *
operation_task_plan_of(const struct task *t, uint64_t *key)
{
	return (operation_task_plan(t->op, t, key));
}

static struct broadcast *const *
operation_task_broadcasts(const struct task *t, size_t *n)
{
	return (operation_broadcasts(t->op, n));
}

static int
operation_task_accepts_batch(struct task *t)
{
	return (operation_accepts_batch(t->op, t));
}

static int
operation_task_relay_batch(struct task *t, struct evbuffer *in,
    size_t bytes, int32_t records, char **err)
{
	return (operation_relay_batch(t->op, t, in, bytes, records, err));
}

static int
operation_task_check_metrics(const struct task *t)
{
	return (operation_check_metrics(t->op, t));
}

static enum stall_action
operation_task_stalled_cb(struct task *t, char **err)
{
	return (operation_task_stalled(t->op, t, err));
}

static int
operation_task_client_stalled(const struct task *t, uint64_t now)
{
	return (operation_client_stalled(t->op, now));
}

const struct task_ops operation_task_ops = {
	.operation_id = operation_task_operation_id,
	.session_id = operation_task_session_id,
	.uid = operation_task_uid,
	.gid = operation_task_gid,
	.pipeline_depth = operation_task_pipeline_depth,
	.describe = operation_task_describe,
	.plan = operation_task_plan_of,
	.broadcasts = operation_task_broadcasts,
	.accepts_batch = operation_task_accepts_batch,
	.relay_batch = operation_task_relay_batch,
	.check_metrics = operation_task_check_metrics,
	.stalled = operation_task_stalled_cb,
	.client_stalled = operation_task_client_stalled,
};
