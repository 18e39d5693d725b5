#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include <event2/buffer.h>
#include <event2/event.h>
#include <uuid/uuid.h>

#include "connection.h"
#include "emberd.h"
#include "frame.h"
#include "helper.h"
#include "jread.h"
#include "limit.h"
#include "log.h"
#include "metrics.h"
#include "operation.h"
#include "plan.h"
#include "broadcast.h"
#include "checkpoint.h"
#include "commit.h"
#include "result.h"
#include "retry.h"
#include "scheduler.h"
#include "session.h"
#include "spool.h"
#include "task.h"
#include "taskdesc.h"
#include "utf8.h"
#include "worker.h"
#include "xmalloc.h"

#define OPERATION_MAX_PREFETCH	1024
/* Without options.prefetch, iterate computes ahead one partition per
 * worker, fewer when what they would hold in emberd passes this. */
#define OPERATION_AHEAD_BYTES	(4 * 1024 * 1024)
/* Counting tasks queued per worker: deeper when tasks are short, so the
 * round trip to emberd never leaves a worker waiting for its next task. */
#define PIPELINE_SHALLOW	2
#define PIPELINE_DEEP		8
#define PIPELINE_SHORT_NS	500000

enum action {
	ACTION_ITERATE,		/* pull: a partition per client request */
	ACTION_COLLECT,		/* push: every partition in order */
	ACTION_COUNT,		/* the rest answer with one reply */
	ACTION_COUNT_BY_VALUE,
	ACTION_REDUCE,
	ACTION_SAVE,
	ACTION_CHECKPOINT,
};
static const char *const action_names[] = { "iterate", "collect", "count",
    "count_by_value", "reduce", "save", "checkpoint" };
/* What a task of each action is asked to send back (docs/protocol.md). */
static const enum taskdesc_mode action_modes[] = { MODE_RECORDS, MODE_RECORDS,
    MODE_COUNT, MODE_COUNT_BY_VALUE, MODE_REDUCE, MODE_SAVE, MODE_CHECKPOINT };
#define ACTION_STREAMS(a)	((a) == ACTION_ITERATE || (a) == ACTION_COLLECT)

struct operation {
	char			 id[37];
	uint64_t		 serial;
	struct session		*session;
	struct connection	*conn;		/* attached, or NULL */
	enum action		 action;
	int			 prefetch;	/* -1: as many as fit */
	struct plan		*plan;
	char			*plan_text;	/* "plan":...,"files":... */
	int			 npartitions;
	int			 next_start;	/* first partition not started */
	int			 next_deliver;	/* partition the client gets next */
	int			 requested;	/* the client asked for it */
	int			 partition_open; /* its "1" went out */
	int			 live;		/* tasks started, not retired */
	int			 done;		/* tasks retired (count) */
	int64_t			 count;		/* records out, tasks retired */
	int64_t			 task_ns;	/* elapsed, tasks retired */
	struct result		*result;	/* count_by_value, reduce */
	int64_t			 result_charged; /* to daemon.max_results */
	int64_t			 count_distinct; /* records in the result */
	uid_t			 uid;		/* counted in daemon.max_operations */
	int			 counted;
	const char		*result_class;	/* result over its bound: */
	char			*result_error;	/* freed, and the op fails */
	enum reduce_fn		 fn;
	struct commit		*commit;	/* save: its steps run as the
						   user, the operation waits */
	int			 beginning;	/* save_begin runs: not started */
	int			 failing;	/* save_abort runs, then the
						   error goes out */
	const char		*fail_class;
	char			*fail_error;
	uint64_t		 save_attempts;	/* tasks sent, each a number of
						   its own for its part file */
	struct checkpoint	*ckpt;		/* checkpoint: what it writes,
						   until committed */
	int			 ckpt_local, ckpt_eager;
	struct checkpoint	*source;	/* the checkpoint it reads */
	int			 waiting;	/* for source to be computed */
	int			 internal;	/* computes a lazy checkpoint
						   for its first read */
	struct broadcast	**broadcasts;	/* the plan uses, each once */
	size_t			 nbroadcasts;
	int64_t			 records_sent;
	uint64_t		 bytes_sent;
	int64_t			 limit;		/* records in all, 0: no limit */
	int			 limit_reached;
	struct event		*limit_ev;	/* ends a stream at its limit */
	struct event		*pump_ev;	/* delivers, on the next turn */
	uint64_t		 client_idle_ms; /* since when its client has
						   taken nothing, or 0 */
	uint64_t		 started_ms;

	/* Reattachable operations (docs/protocol.md, "Reattach"). */
	int			 reattachable;
	int			 deterministic;	/* its plan can be recomputed */
	struct retry		*retry;		/* reattachable streams */
	int64_t			 delivered;	/* records of next_deliver sent
						   on this attachment */
	int			 complete;	/* its end went out; it waits
						   for release all */
	json_t			*reply;		/* a reply action's, kept for
						   a reattach */
	struct connection	*completed_on;	/* its end went out there */
	uint64_t		 detached_ms;	/* when it lost its client */
	uint64_t		 attached_ms;	/* when its stream began */
	uint64_t		 attached_bytes; /* sent on that stream */
	int			 skip_partition; /* the next task of it skips */
	int64_t			 skip;

	/* Between execute and start: the plan's files and plugins being
	 * checked by a helper, as the user.  The connection is busy. */
	struct helper		*planning;
	struct session		*planned_for;
	json_t			*plan_json;
	char			*save_path;
	int			 overwrite;

	TAILQ_HEAD(, task)	 tasks;		/* live tasks, by partition */
	TAILQ_ENTRY(operation)	 entry;
};
static TAILQ_HEAD(, operation) operations = TAILQ_HEAD_INITIALIZER(operations);
static size_t	 noperations;
static uint64_t	 operation_next_serial = 1;

/* An operation that is gone but remembered, to tell a late reattach why. */
struct tombstone {
	char			 id[37];
	uid_t			 uid;
	const char		*class;		/* OPERATION_ABANDONED, ... */
	char			*message;
	TAILQ_ENTRY(tombstone)	 entry;
};
/* One uid's tombstones, oldest first, at most operation.tombstones: one
 * user's operations never push another's out. */
struct tomb_user {
	uid_t			 uid;
	TAILQ_HEAD(, tombstone)	 list;
	size_t			 n;
	TAILQ_ENTRY(tomb_user)	 entry;
};
static TAILQ_HEAD(, tomb_user) tomb_users = TAILQ_HEAD_INITIALIZER(tomb_users);
static struct event *operation_timer;
static uint64_t operation_timer_due;	/* when it fires (ember_now_ms) */

static void	operation_pump(struct operation *);
static void	operation_reply(struct operation *);
static void	operation_relay_records(struct operation *, struct task *,
		    struct evbuffer *, size_t, int32_t);
static void	operation_checkpoint_done(struct operation *, const char *);
static void	operation_start(struct operation *, struct connection *,
		    struct session *);

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
operation_plan_text(const struct operation *op)
{
	return (op->plan_text);
}

struct broadcast *const *
operation_broadcasts(const struct operation *op, size_t *n)
{
	*n = op->nbroadcasts;
	return (op->broadcasts);
}

/* Add broadcast id, named by field, to the operation's; -1 with *err if
 * the session has no such broadcast. */
static int
operation_use_broadcast(struct operation *op, struct session *s, int64_t id,
    const char *field, char **err)
{
	struct broadcast	*b;
	size_t			 i;

	if ((b = broadcast_find(s, id)) == NULL) {
		xasprintf(err, "%s: no broadcast %lld in this session", field,
		    (long long)id);
		return (-1);
	}
	for (i = 0; i < op->nbroadcasts; i++) {
		if (op->broadcasts[i] == b)
			return (0);
	}
	op->broadcasts = xreallocarray(op->broadcasts, op->nbroadcasts + 1,
	    sizeof *op->broadcasts);
	op->broadcasts[op->nbroadcasts++] = b;
	broadcast_use(b);
	return (0);
}

/* Find the broadcasts the plan's ops use; each must be the session's. */
static int
operation_find_broadcasts(struct operation *op, struct session *s,
    char **err)
{
	const struct plan_op	*o;
	char			 field[96];
	size_t			 i, j;

	for (i = 0; i < op->plan->nops; i++) {
		o = &op->plan->ops[i];
		if (o->type == PLAN_OP_FILTER_BROADCAST) {
			snprintf(field, sizeof field,
			    "plan.ops[%zu].filter.in_broadcast", i);
			if (operation_use_broadcast(op, s, o->broadcast, field,
			    err) == -1)
				return (-1);
		}
		for (j = 0; (o->type == PLAN_OP_UDF ||
		    o->type == PLAN_OP_PYTHON) && j < o->udf_nbroadcasts;
		    j++) {
			snprintf(field, sizeof field,
			    "plan.ops[%zu].%s.broadcasts[%zu]", i,
			    o->type == PLAN_OP_UDF ? "udf" : "python", j);
			if (operation_use_broadcast(op, s, o->udf_broadcasts[j],
			    field, err) == -1)
				return (-1);
		}
	}
	return (0);
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
	if (op->source != NULL) {
		d->source_dirfd = operation_open_ckpt_dir(op, op->source);
		d->source_dir_passed = d->source_dirfd != -1;
	}
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
static struct operation *
operation_find(uid_t uid, const char *id)
{
	struct operation	*op;

	TAILQ_FOREACH(op, &operations, entry) {
		if (operation_uid(op) == uid && strcmp(op->id, id) == 0)
			return (op);
	}
	return (NULL);
}

/* The tombstones of uid, or NULL. */
static struct tomb_user *
operation_tomb_user(uid_t uid)
{
	struct tomb_user	*tu;

	TAILQ_FOREACH(tu, &tomb_users, entry) {
		if (tu->uid == uid)
			return (tu);
	}
	return (NULL);
}

/* Find uid's tombstone for id. */
static struct tombstone *
operation_find_tombstone(uid_t uid, const char *id)
{
	struct tomb_user	*tu = operation_tomb_user(uid);
	struct tombstone	*ts;

	if (tu == NULL)
		return (NULL);
	TAILQ_FOREACH(ts, &tu->list, entry) {
		if (strcmp(ts->id, id) == 0)
			return (ts);
	}
	return (NULL);
}

/* Forget the oldest tombstone of tu. */
static void
operation_drop_tombstone(struct tomb_user *tu)
{
	struct tombstone	*ts = TAILQ_FIRST(&tu->list);

	TAILQ_REMOVE(&tu->list, ts, entry);
	tu->n--;
	free(ts->message);
	free(ts);
}

/* Remember why a reattachable operation is gone, in a bounded list. */
static void __attribute__((format(printf, 3, 4)))
operation_bury(struct operation *op, const char *class, const char *fmt, ...)
{
	struct tomb_user	*tu;
	struct tombstone	*ts;
	va_list			 ap;

	if (!op->reattachable || ember_conf.operation_tombstones == 0)
		return;
	if ((tu = operation_tomb_user(operation_uid(op))) == NULL) {
		tu = xcalloc(1, sizeof *tu);
		tu->uid = operation_uid(op);
		TAILQ_INIT(&tu->list);
		TAILQ_INSERT_TAIL(&tomb_users, tu, entry);
	}
	while (tu->n >= (size_t)ember_conf.operation_tombstones)
		operation_drop_tombstone(tu);
	ts = xcalloc(1, sizeof *ts);
	memcpy(ts->id, op->id, sizeof ts->id);
	ts->uid = operation_uid(op);
	ts->class = class;
	va_start(ap, fmt);
	if (vasprintf(&ts->message, fmt, ap) == -1)
		fatal("vasprintf");
	va_end(ap);
	TAILQ_INSERT_TAIL(&tu->list, ts, entry);
	tu->n++;
}

int
operation_pipeline_depth(const struct operation *op)
{
	if (ACTION_STREAMS(op->action))
		return (1);
	if (op->done > 0 && op->task_ns / op->done < PIPELINE_SHORT_NS)
		return (PIPELINE_DEEP);
	return (PIPELINE_SHALLOW);
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
	uint64_t	each = WORKER_READ_HIGH;
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
static void
operation_fill(struct operation *op)
{
	struct task	*t;

	if (op->failing || op->waiting)
		return;
	while (op->next_start < op->npartitions &&
	    op->live < operation_window(op)) {
		t = task_create(op, op->next_start++,
		    !ACTION_STREAMS(op->action));
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
static void
operation_retire(struct operation *op, struct task *t)
{
	TAILQ_REMOVE(&op->tasks, t, op_entry);
	op->live--;
	spool_free(t->spool);
	task_free(t);
}

/* Free the merged result and what it held of daemon.max_results. */
static void
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
static void
operation_free(struct operation *op)
{
	struct task	*t;
	int		 started = op->session != NULL;

	while ((t = TAILQ_FIRST(&op->tasks)) != NULL)
		operation_retire(op, t);
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
	/* One refused before it started may be what a drain waits for: its
	 * connection is free now. */
	ember_check_drained();
}

/* Give the connection back to control frames and free the operation. */
static void
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

/* End a stream with an error: -1 before the partition's first record,
 * -2 (EXCEPTION_THROWN) after it, then the message frame. */
static void
operation_stream_error(struct operation *op, const char *msg)
{
	struct evbuffer	*out = connection_output(op->conn);
	char		*explained;
	size_t		 len;

	explained = session_explain_denied(session_uid(op->session), msg);
	if (explained != NULL)
		msg = explained;
	len = strlen(msg);
	evbuffer_add_int32(out, op->partition_open ? EMBER_EXCEPTION_THROWN :
	    EMBER_STREAM_ERROR);
	evbuffer_add_frame(out, msg, utf8_cut(msg, len,
	    EMBER_MAX_ERROR_FRAME));
	free(explained);
}

/* Interrupt op and tell its client, if any, why: an error reply, or on a
 * stream an error frame that starts with the same class. */
static void
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
			connection_reply_error(op->conn, class, "operation %s: %s",
			    op->id, why);
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
static void
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

void
operation_detach(struct operation *op)
{
	if (op->planning != NULL || op->beginning) {
		/* Not started: its check is cancelled, nothing is left (a
		 * save begun is undone once its beginning answers). */
		log_debug("operation %s: client went away while its plan was "
		    "checked", op->id);
		op->conn = NULL;
		operation_free(op);
		return;
	}
	log_debug("operation %s: client went away at partition %d of %d",
	    op->id, op->next_deliver, op->npartitions);
	if (op->reattachable) {
		/* Its tasks go on as far as their buffers let them. */
		operation_unplug(op);
		return;
	}
	/* Nobody to deliver to: stop the tasks, free the workers. */
	op->conn = NULL;
	ember_counters.operations_interrupted++;
	operation_free(op);
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
	connection_reply_error(c, "SHUTTING_DOWN", "emberd is shutting down; "
	    "operation %s did not start", op->id);
	ember_counters.operations_interrupted++;
	operation_free(op);
}

/* Has the attached stream run long enough to be cut at a boundary? */
static int
operation_cut_due(const struct operation *op)
{
	if (!op->reattachable)
		return (0);
	if (ember_conf.stream_max_bytes > 0 &&
	    op->attached_bytes >= (uint64_t)ember_conf.stream_max_bytes)
		return (1);
	return (ember_conf.stream_max_duration > 0 &&
	    ember_now_ms() - op->attached_ms >=
	    (uint64_t)ember_conf.stream_max_duration);
}

/* End the attached stream with DETACHED: the operation goes on. */
static void
operation_cut(struct operation *op)
{
	struct connection	*c = op->conn;

	log_debug("operation %s: stream cut at partition %d after %llu bytes",
	    op->id, op->next_deliver, (unsigned long long)op->attached_bytes);
	evbuffer_add_int32(connection_output(c), EMBER_STREAM_DETACHED);
	operation_unplug(op);
	connection_stream_end(c);
}

/* The stream's 0 went out: a reattachable one waits for its release (its
 * end may not have reached the client), any other ends. */
static void
operation_complete(struct operation *op)
{
	struct connection	*c = op->conn;

	ember_counters.operations_completed++;
	if (!op->reattachable) {
		operation_end(op);
		return;
	}
	op->complete = 1;
	operation_unplug(op);
	connection_stream_end(c);
	op->completed_on = c;
	connection_set_completed(c, op);
}

void
operation_confirm(struct operation *op)
{
	log_debug("operation %s: its end arrived", op->id);
	op->reattachable = 0;	/* as a release: no tombstone */
	operation_end(op);
}

void
operation_forget_connection(struct operation *op)
{
	op->completed_on = NULL;
}

/*
 * Send from the retry buffer what the attached client is behind: the rest
 * of partition next_deliver up to what was sent.  1 if that partition
 * ended there (the caller goes on with the next), else 0: the live task
 * of next_deliver relays the rest.
 */
static int
operation_replay(struct operation *op, struct evbuffer *out)
{
	struct position	pos = { op->next_deliver, op->delivered };
	size_t		before = evbuffer_get_length(out);

	if (op->retry == NULL || position_cmp(&pos, retry_sent(op->retry)) >= 0)
		return (0);
	if (!op->partition_open) {
		evbuffer_add_int32(out, EMBER_STREAM_PARTITION);
		op->partition_open = 1;
	}
	if (!retry_replay(op->retry, &pos, out)) {
		op->delivered = pos.offset;
		op->attached_bytes += evbuffer_get_length(out) - before;
		return (0);
	}
	evbuffer_add_int32(out, EMBER_END_OF_DATA_SECTION);
	op->attached_bytes += evbuffer_get_length(out) - before;
	op->partition_open = 0;
	op->next_deliver++;
	op->delivered = 0;
	op->requested = op->action == ACTION_COLLECT;
	return (1);
}

/* Relay the next spooled records of t, the stream's head task; -1 if the
 * spool failed, and the operation with it. */
static int
operation_unspool(struct operation *op, struct task *t)
{
	struct evbuffer	*b = evbuffer_new();
	size_t		 bytes;
	int32_t		 records;
	char		*err, *msg;

	if (spool_take(t->spool, b, (size_t)ember_conf.stream_buffer, &bytes,
	    &records, &err) == -1) {
		evbuffer_free(b);
		xasprintf(&msg, "partition %d: %s", t->partition, err);
		log_error("operation %s: %s", op->id, msg);
		free(err);
		ember_counters.operations_failed++;
		operation_bury(op, "OPERATION_FINISHED", "operation %s failed: "
		    "%s", op->id, msg);
		operation_stream_error(op, msg);
		free(msg);
		operation_end(op);
		return (-1);
	}
	operation_relay_records(op, t, b, bytes, records);
	evbuffer_free(b);
	return (0);
}

static void
operation_pump_cb(evutil_socket_t fd, short events, void *arg)
{
	(void)fd; (void)events;
	operation_pump(arg);
}

/* Deliver on the next loop turn, not underneath the caller. */
static void
operation_pump_later(struct operation *op)
{
	if (op->pump_ev == NULL)
		op->pump_ev = event_new(ember_base, -1, 0, operation_pump_cb,
		    op);
	event_active(op->pump_ev, 0, 1);
}

/* Deliver what can be delivered, in partition order. */
static void
operation_pump(struct operation *op)
{
	struct evbuffer	*out;
	struct task	*t;

	while (op->conn != NULL && !op->waiting) {
		if (op->action == ACTION_ITERATE && !op->requested)
			return;
		out = connection_output(op->conn);
		if (op->limit_reached && op->partition_open) {
			evbuffer_add_int32(out, EMBER_END_OF_DATA_SECTION);
			op->partition_open = 0;
			op->requested = op->action == ACTION_COLLECT;
			continue;
		}
		if (op->next_deliver == op->npartitions || op->limit_reached) {
			evbuffer_add_int32(out, EMBER_STREAM_DONE);
			operation_complete(op);
			return;
		}
		if (!op->partition_open && operation_cut_due(op)) {
			operation_cut(op);
			return;
		}
		if (operation_replay(op, out))
			continue;
		operation_fill(op);
		t = TAILQ_FIRST(&op->tasks);
		if (t == NULL || t->partition != op->next_deliver)
			fatalx("operation %s: partition %d has no task", op->id,
			    op->next_deliver);
		if (t->spool != NULL && spool_pending(t->spool) > 0) {
			/* What it spooled goes first, as the client reads. */
			if (connection_output_full(op->conn))
				return;
			if (operation_unspool(op, t) == -1)
				return;
			continue;
		}
		switch (t->state) {
		case TASK_DONE:
			if (!op->partition_open)
				evbuffer_add_int32(out, EMBER_STREAM_PARTITION);
			evbuffer_add_int32(out, EMBER_END_OF_DATA_SECTION);
			if (op->retry != NULL)
				retry_end_partition(op->retry);
			op->partition_open = 0;
			op->delivered = 0;
			op->next_deliver++;
			op->requested = op->action == ACTION_COLLECT;
			operation_retire(op, t);
			break;
		case TASK_FAILED:
			ember_counters.operations_failed++;
			operation_bury(op, "OPERATION_FINISHED", "operation %s "
			    "failed: %s", op->id, t->error);
			operation_stream_error(op, t->error);
			operation_end(op);
			return;
		case TASK_ASSIGNED:
			/* Its worker holds the records: let it relay them. */
			task_kick(t);
			return;
		case TASK_PARKED:
			/* Computed again once the client has room for it. */
			if (!connection_output_full(op->conn))
				scheduler_submit(t);
			return;
		case TASK_NEW:
		case TASK_QUEUED:
			return;
		}
	}
}

/* Can t's records go to the client now? */
static int
operation_can_deliver(struct operation *op, struct task *t)
{
	return (op->conn != NULL && op->requested &&
	    TAILQ_FIRST(&op->tasks) == t && op->next_deliver == t->partition &&
	    !connection_output_full(op->conn));
}

/* Tell whether op takes a batch of t now. */
int
operation_accepts_batch(struct operation *op, struct task *t)
{
	if (!ACTION_STREAMS(op->action))
		return (1);	/* a partial result: taken at once */
	if (t->spool != NULL)
		return (1);	/* to the client, or behind what is spooled */
	return (operation_can_deliver(op, t));
}

/*
 * Has op's client taken nothing for stream.stall_timeout?  It is idle
 * while it is gone, has not asked for the partition, or leaves its output
 * full; a worker blocked only because its partition is not the one being
 * sent yet, while the client reads, is not the client's doing.  Asked of
 * blocked workers on every check of the limits: the idle time counts
 * from the first check that sees the client idle.
 */
int
operation_client_stalled(struct operation *op, uint64_t now)
{
	int	idle;

	idle = op->conn == NULL || (op->action == ACTION_ITERATE &&
	    !op->requested) || connection_output_full(op->conn);
	if (!ACTION_STREAMS(op->action) || !idle) {
		op->client_idle_ms = 0;
		return (0);
	}
	if (op->client_idle_ms == 0)
		op->client_idle_ms = now;
	return (now - op->client_idle_ms >=
	    (uint64_t)ember_conf.stream_stall_timeout);
}

enum stall_action
operation_task_stalled(struct operation *op, struct task *t, char **err)
{
	if (op->deterministic) {
		log_debug("operation %s: partition %d stalled; its worker "
		    "goes, and it is computed again after record %lld when "
		    "its client reads", op->id, t->partition,
		    (long long)(t->skip + t->records));
		return (STALL_PARK);
	}
	if ((t->spool = spool_create(operation_uid(op), err)) == NULL)
		return (STALL_FAIL);
	log_debug("operation %s: partition %d stalled; spooling the rest of "
	    "it", op->id, t->partition);
	return (STALL_SPOOL);
}

/*
 * The merged result would pass a bound: free it now, and fail the
 * operation when its task ends.  The bound is the operation's own
 * (daemon.max_result), or what the uid's results, or everyone's, may hold.
 */
static void
operation_result_over(struct operation *op, int own, size_t wanted)
{
	char	*err;

	if (own) {
		op->result_class = "RESULT_TOO_LARGE";
		xasprintf(&op->result_error, "the result is over "
		    "daemon.max_result (%lld bytes)",
		    (long long)ember_conf.daemon_max_result);
	} else {
		op->result_class = "LIMIT_EXCEEDED";
		if (limit_charge(session_uid(op->session), LIMIT_RESULTS,
		    (int64_t)wanted, &err) == 0)
			fatalx("operation %s: a refused result fits", op->id);
		xasprintf(&op->result_error, "%s (merging the counts of %lld "
		    "distinct records)", err, (long long)op->count_distinct);
		free(err);
	}
	log_info("operation %s: %s", op->id, op->result_error);
	operation_drop_result(op);
}

/* Merge a partial result within the bounds, and charge what it grew. */
static int
operation_absorb(struct operation *op, struct evbuffer *from, size_t bytes)
{
	unsigned char	*data;
	char		*err;
	size_t		 before, own, room, wanted;
	int		 rc;

	if (op->result_error != NULL) {
		evbuffer_drain(from, bytes);	/* it failed: nothing to keep */
		return (0);
	}
	before = result_size(op->result);
	own = (size_t)ember_conf.daemon_max_result > before ?
	    (size_t)ember_conf.daemon_max_result - before : 0;
	room = (size_t)limit_room(session_uid(op->session), LIMIT_RESULTS);
	result_set_budget(op->result, before + (own < room ? own : room));
	data = evbuffer_pullup(from, (ev_ssize_t)bytes);
	if ((rc = result_absorb(op->result, data, bytes, &err)) == -1) {
		log_error("operation %s: %s", op->id, err);
		free(err);
	}
	evbuffer_drain(from, bytes);
	if (result_size(op->result) > before) {
		if (limit_charge(session_uid(op->session), LIMIT_RESULTS,
		    (int64_t)(result_size(op->result) - before), &err) == -1)
			fatalx("operation %s: %s", op->id, err);
		op->result_charged += (int64_t)(result_size(op->result) -
		    before);
	}
	op->count_distinct = (int64_t)result_distinct(op->result);
	if ((wanted = result_over(op->result)) > 0)
		operation_result_over(op, own <= room, wanted);
	return (rc);
}

/*
 * options.limit: the stream ends once it has sent limit records.  From the
 * loop, not underneath the worker that relayed them: close the partition
 * and stop every task; collect ends at once, iterate answers 0 to the
 * client's next request.
 */
static void
operation_limit_cb(evutil_socket_t fd, short events, void *arg)
{
	struct operation	*op = arg;
	struct evbuffer		*out;
	struct task		*t;

	(void)fd; (void)events;
	log_debug("operation %s: options.limit of %lld records reached",
	    op->id, (long long)op->limit);
	while ((t = TAILQ_FIRST(&op->tasks)) != NULL)
		operation_retire(op, t);
	op->next_start = op->npartitions;
	if (op->conn == NULL)
		return;
	out = connection_output(op->conn);
	if (op->partition_open)
		evbuffer_add_int32(out, EMBER_END_OF_DATA_SECTION);
	op->partition_open = 0;
	op->requested = op->action == ACTION_COLLECT;
	operation_pump(op);
}

/* The batch cut to its first n records: drain what lies after them, say
 * the limit is reached, and return the bytes of those kept.  worker.c
 * checked the batch's frames as it arrived, so a short one is ours. */
static size_t
operation_limit_batch(struct operation *op, struct evbuffer *from,
    size_t bytes, int32_t n)
{
	struct evbuffer_ptr	 pos;
	unsigned char		 b[4];
	size_t			 keep = 0;
	int32_t			 len;

	while (n-- > 0) {
		evbuffer_ptr_set(from, &pos, keep, EVBUFFER_PTR_SET);
		if (evbuffer_copyout_from(from, &pos, b, sizeof b) != 4)
			fatalx("operation %s: short batch", op->id);
		len = be32_get(b);
		keep += 4 + (len > 0 ? (size_t)len : 0);
	}
	if (keep > bytes)
		fatalx("operation %s: batch overrun", op->id);
	if (keep < bytes) {
		/* The rest of the batch sits after what is kept. */
		struct evbuffer	*rest = evbuffer_new();

		evbuffer_remove_buffer(from, rest, keep);
		evbuffer_drain(from, bytes - keep);
		evbuffer_prepend_buffer(from, rest);
		evbuffer_free(rest);
	}
	op->limit_reached = 1;
	if (op->limit_ev == NULL)
		op->limit_ev = event_new(ember_base, -1, 0, operation_limit_cb,
		    op);
	event_active(op->limit_ev, 0, 1);
	return (keep);
}

/* Relay a batch of t's records to the client. */
static void
operation_relay_records(struct operation *op, struct task *t,
    struct evbuffer *from, size_t bytes, int32_t records)
{
	struct evbuffer		*out;

	if (op->limit_reached) {
		evbuffer_drain(from, bytes);	/* past options.limit */
		return;
	}
	if (op->limit > 0 && records >= op->limit - op->records_sent) {
		records = (int32_t)(op->limit - op->records_sent);
		bytes = operation_limit_batch(op, from, bytes, records);
	}
	out = connection_output(op->conn);
	if (!op->partition_open) {
		evbuffer_add_int32(out, EMBER_STREAM_PARTITION);
		op->partition_open = 1;
	}
	if (op->retry != NULL) {
		/* The buffer keeps the chains; the output shares them. */
		retry_append(op->retry, from, bytes, records, out);
		retry_trim(op->retry, (size_t)ember_conf.stream_retry_buffer +
		    evbuffer_get_length(out));
	} else if (evbuffer_remove_buffer(from, out, bytes) != (int)bytes)
		fatalx("evbuffer_remove_buffer came up short");
	/* (Either way whole chains move: the records are not copied.) */
	op->delivered += records;
	op->attached_bytes += bytes;
	if (t->records == 0 && records > 0)
		metrics_task_first_record(t);
	t->records += records;
	op->records_sent += records;
	op->bytes_sent += bytes;
	ember_counters.records_sent += (uint64_t)records;
	ember_counters.bytes_sent += bytes;
}

/* Keep a batch of a stalled stream's records in t's spool. */
static int
operation_spool_batch(struct operation *op, struct task *t,
    struct evbuffer *from, size_t bytes, int32_t records, char **err)
{
	char	*e;

	if (op->limit_reached) {
		evbuffer_drain(from, bytes);	/* past options.limit */
		return (0);
	}
	if (spool_append(t->spool, from, bytes, records, &e) == -1) {
		xasprintf(err, "LIMIT_EXCEEDED: %s (spooling the partition for "
		    "a client that read nothing for stream.stall_timeout)", e);
		free(e);
		return (-2);
	}
	return (0);
}

/* Relay a batch of t's records to the client, spool them, or merge
 * them. */
int
operation_relay_batch(struct operation *op, struct task *t,
    struct evbuffer *from, size_t bytes, int32_t records, char **err)
{
	if (!ACTION_STREAMS(op->action)) {
		if (op->result == NULL && op->result_error == NULL)
			return (-1);	/* count and save send no records */
		t->merged = 1;		/* run again, it would count twice */
		return (operation_absorb(op, from, bytes));
	}
	if (t->spool != NULL && (spool_pending(t->spool) > 0 ||
	    !operation_can_deliver(op, t)))
		return (operation_spool_batch(op, t, from, bytes, records,
		    err));
	operation_relay_records(op, t, from, bytes, records);
	return (0);
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
	    &sum) || __builtin_add_overflow(op->task_ns,
	    m[EMBER_METRIC_ELAPSED_NS], &sum))
		return (-1);
	return (0);
}

/* A task ended cleanly: deliver it, or count it and go on. */
void
operation_task_finished(struct operation *op, struct task *t)
{
	if (ACTION_STREAMS(op->action)) {
		if (TAILQ_FIRST(&op->tasks) == t)
			operation_pump(op);
		return;
	}
	op->count += t->metrics[EMBER_METRIC_RECORDS_OUT];
	op->task_ns += t->metrics[EMBER_METRIC_ELAPSED_NS];
	op->done++;
	if (op->ckpt != NULL && op->result_error == NULL &&
	    checkpoint_written(op->ckpt, t->metrics[EMBER_METRIC_RECORDS_OUT],
	    t->metrics[EMBER_METRIC_BYTES_OUT], &op->result_error) == -1)
		op->result_class = "LIMIT_EXCEEDED";
	operation_retire(op, t);
	if (op->result_error != NULL) {
		ember_counters.operations_failed++;
		if (op->conn != NULL)
			connection_reply_error(op->conn, op->result_class,
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

static void	operation_save_failed(struct operation *, const char *,
		    const char *, ...) __attribute__((format(printf, 3, 4)));

/* A task failed: a stream fails at its partition, a reply at once. */
void
operation_task_failed(struct operation *op, struct task *t)
{
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
		connection_reply_error(op->conn, "TASK_FAILED", "%s", t->error);
	operation_end(op);
}

/* The save's abort has answered (or there was nothing to undo): send the
 * error that failed it, and end. */
static void
operation_failed(struct operation *op)
{
	if (op->conn != NULL)
		connection_reply_error(op->conn, op->fail_class, "%s",
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

static void	operation_reply_send(struct operation *, json_t *);

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
static void
operation_reply_deliver(struct operation *op, struct connection *c,
    json_t *reply)
{
	char	*err;

	operation_drop_result(op);
	if (connection_reply_held(c, reply, &err) == -1) {
		log_info("operation %s: %s", op->id, err);
		connection_reply_error(c, "LIMIT_EXCEEDED", "%s (the reply of "
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

/* Stop: the client wrote 0, between partitions or inside one, which then
 * ends at once (its tasks stop where they are). */
static void
operation_stop(struct operation *op)
{
	struct evbuffer	*out = connection_output(op->conn);

	log_debug("operation %s: stopped by the client after %d of %d "
	    "partitions", op->id, op->next_deliver, op->npartitions);
	if (op->partition_open)
		evbuffer_add_int32(out, EMBER_END_OF_DATA_SECTION);
	op->partition_open = 0;
	evbuffer_add_int32(out, EMBER_STREAM_DONE);
	ember_counters.operations_interrupted++;
	operation_bury(op, "OPERATION_FINISHED", "operation %s was stopped by "
	    "its client", op->id);
	operation_end(op);
}

int
operation_stream_waiting(const struct operation *op)
{
	return (op->action == ACTION_ITERATE && !op->requested);
}

int
operation_stream_input(struct operation *op, struct evbuffer *in)
{
	unsigned char	b[4];
	int32_t		request;

	/* Requests come between partitions, but a stop may come inside
	 * one: the client wants no more of it.  collect takes none. */
	if (op->action != ACTION_ITERATE)
		return (0);
	if (evbuffer_get_length(in) < sizeof b)
		return (0);
	evbuffer_copyout(in, b, sizeof b);
	request = be32_get(b);
	if (op->requested && request != EMBER_REQUEST_STOP)
		return (0);
	evbuffer_drain(in, sizeof b);
	if (request == EMBER_REQUEST_STOP) {
		operation_stop(op);
		return (1);
	}
	op->requested = 1;
	operation_pump(op);
	return (1);
}

void
operation_stream_writable(struct operation *op)
{
	struct task	*t = TAILQ_FIRST(&op->tasks);

	if (t == NULL)
		return;
	if (t->state == TASK_PARKED ||
	    (t->spool != NULL && spool_pending(t->spool) > 0))
		operation_pump_later(op);
	else
		task_kick(t);
}

/* The options each action takes, besides reattachable. */
static const char *const *
operation_option_keys(enum action action)
{
	static const char *const iterate[] = { "prefetch", "limit",
	    "reattachable", NULL };
	static const char *const collect[] = { "limit", "reattachable", NULL };
	static const char *const reduce[] = { "fn", "reattachable", NULL };
	static const char *const save[] = { "path", "overwrite",
	    "reattachable", NULL };
	static const char *const checkpoint[] = { "local", "eager",
	    "reattachable", NULL };
	static const char *const other[] = { "reattachable", NULL };

	switch (action) {
	case ACTION_ITERATE:
		return (iterate);
	case ACTION_COLLECT:
		return (collect);
	case ACTION_REDUCE:
		return (reduce);
	case ACTION_SAVE:
		return (save);
	case ACTION_CHECKPOINT:
		return (checkpoint);
	default:
		return (other);
	}
}

/* An option of another action: name the action it belongs to.  -1 with
 * *err when options holds one, else 0. */
static int
operation_foreign_option(enum action action, json_t *options, char **err)
{
	const char *const	*mine = operation_option_keys(action), *const *k;
	const char		*key;
	json_t			*v;
	size_t			 a;

	json_object_foreach(options, key, v) {
		for (k = mine; *k != NULL && strcmp(*k, key) != 0; k++)
			;
		if (*k != NULL)
			continue;
		for (a = 0; a < sizeof action_names / sizeof *action_names;
		    a++) {
			for (k = operation_option_keys((enum action)a);
			    *k != NULL && strcmp(*k, key) != 0; k++)
				;
			if (*k != NULL)
				return (jread_fail(err, NULL, "options.%s "
				    "belongs to action %s, not %s", key,
				    action_names[a], action_names[action]));
		}
	}
	return (0);
}

/* Read the options of an action; -1 with *err.  *path, *overwrite: save. */
static int
operation_read_options(struct operation *op, json_t *options,
    const char **path, int *overwrite, char **err)
{
	json_int_t	 prefetch = -1, limit = 0;
	int		 reattachable = 1, local = 0, eager = 1;
	const char	*fn = NULL;

	if (options == NULL)
		options = json_object();
	else
		json_incref(options);
	if (operation_foreign_option(op->action, options, err) == -1 ||
	    jread_only(options, "options", operation_option_keys(op->action),
	    err) == -1 ||
	    jread_int(options, "options", "prefetch", JREAD_OPTIONAL,
	    &prefetch, err) == -1 ||
	    jread_int(options, "options", "limit", JREAD_OPTIONAL,
	    &limit, err) == -1 ||
	    jread_bool(options, "options", "reattachable", JREAD_OPTIONAL,
	    &reattachable, err) == -1 ||
	    jread_string(options, "options", "fn", op->action == ACTION_REDUCE,
	    &fn, err) == -1 ||
	    jread_string(options, "options", "path", op->action == ACTION_SAVE,
	    path, err) == -1 ||
	    jread_bool(options, "options", "overwrite", JREAD_OPTIONAL,
	    overwrite, err) == -1 ||
	    jread_bool(options, "options", "local", JREAD_OPTIONAL, &local,
	    err) == -1 ||
	    jread_bool(options, "options", "eager", JREAD_OPTIONAL, &eager,
	    err) == -1)
		goto fail;
	op->ckpt_local = local;
	op->ckpt_eager = eager;
	if (json_object_get(options, "prefetch") != NULL && (prefetch < 0 ||
	    prefetch > OPERATION_MAX_PREFETCH)) {
		jread_fail(err, "options.prefetch", "must be from 0 to %d",
		    OPERATION_MAX_PREFETCH);
		goto fail;
	}
	if (fn != NULL && reduce_fn_from_string(fn, &op->fn) == -1) {
		jread_fail(err, "options.fn", "expected \"sum\", \"min\" or "
		    "\"max\", not \"%s\"", fn);
		goto fail;
	}
	if (limit < 0) {
		jread_fail(err, "options.limit", "must not be negative");
		goto fail;
	}
	/* Only the text: the path itself is the user's, looked at by a
	 * helper as the user (commit.c). */
	if (*path != NULL && **path != '/') {
		jread_fail(err, "options.path", "\"%s\" is not an absolute "
		    "path", *path);
		goto fail;
	}
	op->prefetch = (int)prefetch;
	op->reattachable = reattachable;
	op->limit = limit;
	json_decref(options);
	return (0);
fail:
	json_decref(options);
	return (-1);
}

/* Set the class and message of a refused request; returns -1. */
static int
operation_refuse(const char **class, char **err, const char *c,
    const char *fmt, ...)
{
	va_list	ap;

	*class = c;
	va_start(ap, fmt);
	xvasprintf(err, fmt, ap);
	va_end(ap);
	return (-1);
}

/* Read the request's members but the plan: its action, options and id. */
static int
operation_read_head(struct operation *op, uid_t uid, json_t *req,
    const char **save_path, int *overwrite, const char **class, char **err)
{
	static const char *const keys[] = { "op", "plan", "action", "options",
	    "operation", NULL };
	const char	*action = NULL, *id = NULL;
	json_t		*options = NULL;
	char		*e = NULL;
	uuid_t		 u;
	size_t		 i;

	if (jread_only(req, "", keys, &e) == -1 ||
	    jread_string(req, "", "action", JREAD_REQUIRED, &action,
	    &e) == -1 ||
	    jread_object(req, "", "options", JREAD_OPTIONAL, &options,
	    &e) == -1 ||
	    jread_string(req, "", "operation", JREAD_OPTIONAL, &id, &e) == -1) {
		operation_refuse(class, err, "REQUEST_INVALID", "execute: %s",
		    e);
		free(e);
		return (-1);
	}
	if (id != NULL && (uuid_parse(id, u) == -1 || strlen(id) != 36))
		return (operation_refuse(class, err, "REQUEST_INVALID",
		    "operation: \"%s\" is not a UUID", id));
	if (id != NULL && (operation_find(uid, id) != NULL ||
	    operation_find_tombstone(uid, id) != NULL))
		return (operation_refuse(class, err, "OPERATION_ALREADY_EXISTS",
		    "operation %s already exists", id));
	for (i = 0; i < sizeof action_names / sizeof action_names[0]; i++) {
		if (strcmp(action, action_names[i]) == 0)
			break;
	}
	if (i == sizeof action_names / sizeof action_names[0])
		return (operation_refuse(class, err, "ACTION_INVALID",
		    "action: unknown action \"%s\" (expected iterate, collect, "
		    "count, count_by_value, reduce, save or checkpoint)",
		    action));
	op->action = (enum action)i;
	*class = "ACTION_INVALID";
	if (operation_read_options(op, options, save_path, overwrite,
	    err) == -1)
		return (-1);
	if (id != NULL)
		strcpy(op->id, id);
	else {
		uuid_generate(u);
		uuid_unparse_lower(u, op->id);
	}
	return (0);
}

/* Count the operation in daemon.max_operations_per_uid and
 * daemon.max_operations. */
static int
operation_count_in(struct operation *op, struct session *s,
    const char **class, char **err)
{
	*class = "LIMIT_EXCEEDED";
	if (limit_charge(session_uid(s), LIMIT_OPERATIONS, 1, err) == -1)
		return (-1);
	op->uid = session_uid(s);
	op->counted = 1;
	return (0);
}

/* A checkpoint source: the uid's checkpoint, whose partitions the plan
 * has (CHECKPOINT_NOT_FOUND for any other id). */
static int
operation_find_source(struct operation *op, struct session *s,
    json_t *plan_json, const char **class, char **err)
{
	struct checkpoint	*c;

	if (op->plan->source != PLAN_SOURCE_CHECKPOINT)
		return (0);
	if ((c = checkpoint_find(session_uid(s), op->plan->checkpoint)) ==
	    NULL)
		return (operation_refuse(class, err, "CHECKPOINT_NOT_FOUND",
		    "plan.source.checkpoint: no checkpoint %s%s",
		    op->plan->checkpoint, checkpoint_scanning(session_uid(s)) ?
		    " (emberd is still reading checkpoint.dir)" : ""));
	if (json_object_get(plan_json, "partitions") != NULL &&
	    op->plan->partitions != checkpoint_partitions(c))
		return (operation_refuse(class, err, "PLAN_INVALID",
		    "plan.partitions: checkpoint %s has %d partitions, not %d",
		    op->plan->checkpoint, checkpoint_partitions(c),
		    op->plan->partitions));
	op->plan->partitions = checkpoint_partitions(c);
	op->source = c;
	checkpoint_use(c);
	return (0);
}

/* Read and check the plan, and find the broadcasts and the checkpoint it
 * uses.  What it names outside itself is checked later, by a helper. */
static int
operation_read_plan(struct operation *op, struct session *s, json_t *req,
    const char **class, char **err)
{
	json_t	*plan_json = json_object_get(req, "plan");

	*class = "PLAN_INVALID";
	if (plan_json == NULL)
		return (operation_refuse(class, err, "PLAN_INVALID",
		    "plan: missing"));
	if (plan_parse(plan_json, &op->plan, err) == -1 ||
	    operation_find_broadcasts(op, s, err) == -1 ||
	    operation_find_source(op, s, plan_json, class, err) == -1)
		return (-1);
	op->plan_json = json_incref(plan_json);
	return (0);
}

/* The plan is checked: fix its partitions and the text tasks carry. */
static void
operation_plan_done(struct operation *op)
{
	plan_set_partitions(op->plan, ember_workers_max());
	op->npartitions = op->plan->partitions;
	op->plan_text = taskdesc_encode_plan(op->plan_json,
	    op->plan->source == PLAN_SOURCE_TEXT ?
	    plan_files_to_json(op->plan) : NULL, op->source != NULL ?
	    checkpoint_dir(op->source) : NULL);
	json_decref(op->plan_json);
	op->plan_json = NULL;
}

/*
 * Take what the helper found: the text files with their sizes, and
 * whether each udf is deterministic.  -1 with *class and *err: the
 * user's files are not right (PLAN_INVALID), or the reply does not fit
 * the plan (INTERNAL).
 */
static int
operation_take_check(struct operation *op, json_t *reply, const char **class,
    char **err)
{
	const char	*error;
	json_t		*udfs, *files;
	char		*e = NULL;
	size_t		 i, j = 0;
	int		 det;

	if ((error = json_string_value(json_object_get(reply,
	    "error"))) != NULL)
		return (operation_refuse(class, err, "PLAN_INVALID", "%s",
		    error));
	files = json_object_get(reply, "files");
	udfs = json_object_get(reply, "udfs");
	if (op->plan->source == PLAN_SOURCE_TEXT &&
	    plan_files_from_json(op->plan, files, &e) == -1) {
		log_error("operation %s: plan_check reply: %s", op->id, e);
		free(e);
		return (operation_refuse(class, err, "INTERNAL", "plan: its "
		    "check answered files that do not fit it"));
	}
	for (i = 0; i < op->plan->nops; i++) {
		if (op->plan->ops[i].type != PLAN_OP_UDF)
			continue;
		det = jread_bool(json_array_get(udfs, j++), "udfs",
		    "deterministic", JREAD_REQUIRED, &op->plan->ops[i].
		    udf_deterministic, &e);
		if (det == -1) {
			log_error("operation %s: plan_check reply: %s", op->id,
			    e);
			free(e);
			return (operation_refuse(class, err, "INTERNAL",
			    "plan: its check answered udfs that do not fit "
			    "it"));
		}
	}
	if (j != json_array_size(udfs))
		return (operation_refuse(class, err, "INTERNAL", "plan: its "
		    "check answered %zu udfs for %zu", json_array_size(udfs),
		    j));
	return (0);
}

/* Make what the action gathers: the result, or the save's commit. */
static void
operation_prepare(struct operation *op, struct session *s)
{
	if (op->action == ACTION_COUNT_BY_VALUE)
		op->result = result_create(RESULT_COUNT_BY_VALUE, op->fn);
	else if (op->action == ACTION_REDUCE)
		op->result = result_create(RESULT_REDUCE, op->fn);
	else if (op->action == ACTION_SAVE)
		op->commit = commit_create(op->save_path, op->overwrite,
		    op->id, session_uid(s), session_gid(s));
}

/* The checkpoint action: the checkpoint its tasks write (a lazy one keeps
 * the plan, and its text files as the check found them, for its first
 * read).  -1 with *class and *err. */
static int
operation_prepare_checkpoint(struct operation *op, struct session *s,
    json_t *plan, const char **class, char **err)
{
	json_t	*files;

	if (op->action != ACTION_CHECKPOINT)
		return (0);
	files = op->plan->source == PLAN_SOURCE_TEXT ?
	    plan_files_to_json(op->plan) : NULL;
	op->ckpt = checkpoint_create(s, op, op->ckpt_local, op->ckpt_eager,
	    plan, files, op->npartitions, class, err);
	if (files != NULL)
		json_decref(files);
	return (op->ckpt == NULL ? -1 : 0);
}

/* The source is a checkpoint not computed yet: wait for it. */
static int
operation_wait_source(struct operation *op, struct session *s,
    const char **class, char **err)
{
	if (op->source == NULL || checkpoint_ready(op->source))
		return (0);
	op->waiting = 1;
	if (checkpoint_wait(op->source, op, s, err) == -1) {
		op->waiting = 0;
		*class = "CHECKPOINT_FAILED";
		return (-1);
	}
	return (0);
}

/* A checkpoint action's reply fields. */
static json_t *
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
			connection_reply_error(op->conn, "CHECKPOINT_FAILED",
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

struct operation *
operation_materialize(struct session *s, struct checkpoint *c, json_t *plan,
    json_t *files, char **err)
{
	struct operation	*op;
	const char		*class;
	json_t			*req;
	uuid_t			 u;

	op = xcalloc(1, sizeof *op);
	TAILQ_INIT(&op->tasks);
	op->action = ACTION_CHECKPOINT;
	op->internal = 1;
	uuid_generate(u);
	uuid_unparse_lower(u, op->id);
	/* Its files were checked, and sized, when it was asked for. */
	req = json_pack("{s:O}", "plan", plan);
	if (operation_read_plan(op, s, req, &class, err) == -1 ||
	    (files != NULL && plan_files_from_json(op->plan, files,
	    err) == -1)) {
		json_decref(req);
		operation_free(op);
		return (NULL);
	}
	json_decref(req);
	operation_plan_done(op);
	if (op->npartitions != checkpoint_partitions(c)) {
		xasprintf(err, "its plan now has %d partitions, not %d",
		    op->npartitions, checkpoint_partitions(c));
		operation_free(op);
		return (NULL);
	}
	if (operation_wait_source(op, s, &class, err) == -1) {
		operation_free(op);
		return (NULL);
	}
	op->ckpt = c;
	operation_start(op, NULL, s);
	return (op);
}

/* Start a checked operation: list it, answer or hold the connection, and
 * start its first tasks. */
static void
operation_start(struct operation *op, struct connection *c,
    struct session *s)
{
	op->serial = operation_next_serial++;
	op->session = s;
	op->conn = c;
	op->requested = op->action == ACTION_COLLECT;
	op->started_ms = ember_now_ms();
	op->attached_ms = op->started_ms;
	op->deterministic = plan_is_deterministic(op->plan);
	if (op->reattachable && ACTION_STREAMS(op->action))
		op->retry = retry_create(op->npartitions);
	TAILQ_INSERT_TAIL(&operations, op, entry);
	noperations++;
	session_add_operation(s, op);
	ember_counters.operations++;
	log_debug("operation %s: %s of %d partitions for pid %ld", op->id,
	    action_names[op->action], op->npartitions,
	    c != NULL ? (long)connection_pid(c) : -1L);

	if (!ACTION_STREAMS(op->action)) {
		if (c != NULL)
			connection_busy_begin(c, op);
		operation_fill(op);
		return;
	}
	connection_reply_ok(c, json_pack("{s:s,s:i,s:b}", "operation", op->id,
	    "partitions", op->npartitions, "reattachable", op->reattachable));
	connection_stream_begin(c, op);
	operation_fill(op);
	operation_pump(op);
}

/* Refuse an operation that has not started, and free it. */
static void
operation_refused(struct operation *op, struct connection *c,
    const char *class, char *err)
{
	connection_reply_error(c, class, "%s", err);
	free(err);
	operation_free(op);
}

/*
 * Between execute and start the operation is in no list: before it starts,
 * check that it may still (its session open, emberd not draining, its id
 * still free).  0, or -1 with *class and *err.
 */
static int
operation_still_wanted(struct operation *op, struct session *s,
    const char *while_what, const char **class, char **err)
{
	if (session_closed(s))
		return (operation_refuse(class, err, "INTERRUPTED", "the "
		    "session was closed while %s", while_what));
	if (ember_draining)
		return (operation_refuse(class, err, "SHUTTING_DOWN", "emberd "
		    "is shutting down"));
	if (operation_find(session_uid(s), op->id) != NULL ||
	    operation_find_tombstone(session_uid(s), op->id) != NULL)
		return (operation_refuse(class, err,
		    "OPERATION_ALREADY_EXISTS", "operation %s already exists",
		    op->id));
	return (0);
}

/* Hold the connection while a helper works for an operation not started:
 * the reply waits for its answer. */
static void
operation_wait_helper(struct operation *op, struct connection *c,
    struct session *s)
{
	op->planned_for = s;
	op->conn = c;
	connection_busy_begin(c, op);
}

/* The helper answered: give the connection back; it was op's. */
static struct connection *
operation_helper_done(struct operation *op)
{
	struct connection	*c = op->conn;

	op->conn = NULL;
	connection_busy_end(c);
	return (c);
}

/*
 * save_begin answered: PATH is checked and the operation's directory made,
 * as the user, or the save is refused.  Only then does the save start.
 */
static void
operation_begun_cb(const char *hclass, const char *herr, void *arg)
{
	struct operation	*op = arg;
	struct session		*s = op->planned_for;
	struct connection	*c;
	const char		*class = NULL;
	char			*err = NULL;

	op->beginning = 0;
	c = operation_helper_done(op);
	if (hclass != NULL && strcmp(hclass, "ACTION_INVALID") == 0)
		operation_refuse(&class, &err, hclass, "%s", herr);
	else if (hclass != NULL)
		operation_refuse(&class, &err, hclass, "options.path: checking "
		    "it as uid %ld: %s", (long)session_uid(s), herr);
	else
		operation_still_wanted(op, s, "the save began", &class, &err);
	if (class != NULL) {
		operation_refused(op, c, class, err);	/* undoes the begin */
		return;
	}
	operation_start(op, c, s);
}

/* The plan is checked: prepare what the action gathers and start; a save
 * begins first. */
static void
operation_launch(struct operation *op, struct connection *c,
    struct session *s)
{
	const char	*class = NULL;
	char		*err = NULL;
	json_t		*plan = json_incref(op->plan_json);

	operation_plan_done(op);
	if (operation_prepare_checkpoint(op, s, plan, &class, &err) == -1 ||
	    operation_wait_source(op, s, &class, &err) == -1) {
		json_decref(plan);
		operation_refused(op, c, class, err);
		return;
	}
	json_decref(plan);
	if (op->action == ACTION_CHECKPOINT && !op->ckpt_eager) {
		/* Lazy: computed by the first operation that reads it. */
		connection_reply_ok(c, operation_checkpoint_reply(op));
		op->ckpt = NULL;
		operation_free(op);
		return;
	}
	operation_prepare(op, s);
	if (op->commit == NULL) {
		operation_start(op, c, s);
		return;
	}
	if (commit_begin(op->commit, operation_begun_cb, op, &class,
	    &err) == -1) {
		operation_refused(op, c, class, err);
		return;
	}
	op->beginning = 1;
	operation_wait_helper(op, c, s);
}

/*
 * The helper checked the plan's files and plugins as the user, or could
 * not.  Meanwhile the connection was busy; it is handed back before the
 * refusal, or the operation starts on it.
 */
static void
operation_checked_cb(json_t *reply, int *fds, size_t nfds, const char *hclass,
    const char *herr, void *arg)
{
	struct operation	*op = arg;
	struct session		*s = op->planned_for;
	struct connection	*c;
	const char		*class = NULL;
	char			*err = NULL;

	op->planning = NULL;
	while (nfds > 0)
		close(fds[--nfds]);
	c = operation_helper_done(op);
	if (hclass != NULL)
		operation_refuse(&class, &err, hclass, "plan: checking what it "
		    "names as uid %ld: %s", (long)session_uid(s), herr);
	else if (operation_take_check(op, reply, &class, &err) == -1)
		;
	else
		operation_still_wanted(op, s, "the plan was checked", &class,
		    &err);
	if (class != NULL) {
		operation_refused(op, c, class, err);
		return;
	}
	operation_launch(op, c, s);
}

/* execute: read and check the request, then start the operation; when
 * the plan names files or plugins, a helper checks them first. */
void
operation_execute(struct connection *c, struct session *s, json_t *req)
{
	struct operation	*op;
	const char		*class = NULL, *save_path = NULL;
	int			 overwrite = 0;
	char			*err = NULL;
	json_t			*args;

	op = xcalloc(1, sizeof *op);
	TAILQ_INIT(&op->tasks);
	if (operation_read_head(op, session_uid(s), req, &save_path,
	    &overwrite, &class, &err) == -1 ||
	    operation_read_plan(op, s, req, &class, &err) == -1 ||
	    operation_count_in(op, s, &class, &err) == -1) {
		operation_refused(op, c, class, err);
		return;
	}
	op->save_path = save_path != NULL ? xstrdup(save_path) : NULL;
	op->overwrite = overwrite;
	if (!plan_names_resources(op->plan)) {
		operation_launch(op, c, s);
		return;
	}
	args = json_pack("{s:O}", "plan", op->plan_json);
	op->planning = helper_run(session_uid(s), session_gid(s), "plan_check",
	    args, -1, operation_checked_cb, op, &class, &err);
	json_decref(args);
	if (op->planning == NULL) {
		operation_refused(op, c, class, err);
		return;
	}
	operation_wait_helper(op, c, s);
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

/*
 * Find the operation a reattach, release or interrupt names: uid's own,
 * in session s.  NULL after an error reply: OPERATION_NOT_FOUND (also to
 * another uid), the tombstone's class for one that is gone, or
 * SESSION_MISMATCH.  With gone_ok, a tombstone answers ok instead.
 */
static struct operation *
operation_lookup(struct connection *c, struct session *s, json_t *req,
    const char *what, const char *const *keys, int gone_ok)
{
	struct operation	*op;
	struct tombstone	*ts;
	const char		*id = NULL;
	char			*err;

	if (jread_only(req, "", keys, &err) == -1 ||
	    jread_string(req, "", "operation", JREAD_REQUIRED, &id,
	    &err) == -1) {
		connection_reply_error(c, "REQUEST_INVALID", "%s: %s", what,
		    err);
		free(err);
		return (NULL);
	}
	if ((op = operation_find(session_uid(s), id)) == NULL) {
		if ((ts = operation_find_tombstone(session_uid(s), id)) == NULL)
			connection_reply_error(c, "OPERATION_NOT_FOUND",
			    "%s: no operation %s", what, id);
		else if (gone_ok)
			connection_reply_ok(c, NULL);
		else
			connection_reply_error(c, ts->class, "%s: %s", what,
			    ts->message);
		return (NULL);
	}
	if (op->session != s) {
		connection_reply_error(c, "SESSION_MISMATCH", "%s: operation "
		    "%s belongs to another session of this user (hello with "
		    "session %s first)", what, id, session_id(op->session));
		return (NULL);
	}
	return (op);
}

/* Read a request's position; -1 after an error reply. */
static int
operation_read_position(struct connection *c, json_t *req, const char *what,
    int required, struct position *pos)
{
	json_int_t	 partition = 0, offset = 0;
	char		*err;

	if (jread_int(req, "", "partition", required, &partition,
	    &err) == -1 ||
	    jread_int(req, "", "offset", required, &offset, &err) == -1) {
		connection_reply_error(c, "REQUEST_INVALID", "%s: %s", what,
		    err);
		free(err);
		return (-1);
	}
	pos->partition = partition;
	pos->offset = offset;
	return (0);
}

/*
 * Check a stream position for op; -1 after an error reply.  One that left
 * the buffer is recomputed when the plan allows (*rewind), else refused.
 */
static int
operation_check_position(struct connection *c, struct operation *op,
    const char *what, const struct position *pos, int *rewind)
{
	char	why[256];

	if (rewind != NULL)
		*rewind = 0;
	switch (retry_check(op->retry, pos, why, sizeof why)) {
	case POSITION_BUFFERED:
		return (0);
	case POSITION_RELEASED:
		if (rewind != NULL && op->deterministic) {
			*rewind = 1;
			return (0);
		}
		if (rewind == NULL)
			return (0);
		connection_reply_error(c, "POSITION_NOT_AVAILABLE", "%s: "
		    "operation %s: %s, and its plan cannot be computed again "
		    "(it has a pipe, or a udf not marked deterministic)", what,
		    op->id, why);
		return (-1);
	default:
		connection_reply_error(c, "POSITION_INVALID", "%s: operation "
		    "%s: %s", what, op->id, why);
		return (-1);
	}
}

/* Restart op's stream at pos, computed again from the plan: every task
 * goes, and the task of pos's partition skips pos's offset records. */
static void
operation_rewind(struct operation *op, const struct position *pos)
{
	struct task	*t;

	log_debug("operation %s: recomputing from partition %lld, offset %lld",
	    op->id, (long long)pos->partition, (long long)pos->offset);
	while ((t = TAILQ_FIRST(&op->tasks)) != NULL)
		operation_retire(op, t);
	retry_rewind(op->retry, pos);
	op->next_start = (int)pos->partition;
	op->skip_partition = (int)pos->partition;
	op->skip = pos->offset;
	op->complete = 0;
}

/* Take op's stream away from the connection that carries it: that
 * connection is closed, as its client is presumably gone. */
static void
operation_take(struct operation *op)
{
	struct connection	*old = op->conn;

	log_debug("operation %s: reattached elsewhere; closing connection %p",
	    op->id, (void *)old);
	connection_close_now(old);	/* detaches op */
	if (op->conn != NULL)
		fatalx("operation %s: still attached", op->id);
}

/* Reattach a reply action: its reply now, or when it comes. */
static void
operation_reattach_reply(struct connection *c, struct operation *op)
{
	if (op->reply != NULL) {
		operation_reply_deliver(op, c, json_incref(op->reply));
		return;
	}
	op->conn = c;
	connection_busy_begin(c, op);
}

void
operation_reattach(struct connection *c, struct session *s, json_t *req)
{
	static const char *const keys[] = { "op", "operation", "partition",
	    "offset", NULL };
	struct operation	*op;
	struct position		 pos;
	int			 rewind = 0;

	if ((op = operation_lookup(c, s, req, "reattach", keys, 0)) == NULL)
		return;
	if (!op->reattachable) {
		connection_reply_error(c, "OPERATION_NOT_REATTACHABLE",
		    "reattach: operation %s was executed with "
		    "options.reattachable false", op->id);
		return;
	}
	if (operation_read_position(c, req, "reattach",
	    ACTION_STREAMS(op->action), &pos) == -1)
		return;
	if (ACTION_STREAMS(op->action) && operation_check_position(c, op,
	    "reattach", &pos, &rewind) == -1)
		return;
	if (op->conn != NULL) {
		/* Its detach may trim the buffer: check the position again. */
		operation_take(op);
		if (ACTION_STREAMS(op->action) && operation_check_position(c,
		    op, "reattach", &pos, &rewind) == -1)
			return;
	}
	if (op->completed_on != NULL) {
		connection_set_completed(op->completed_on, NULL);
		op->completed_on = NULL;
	}
	log_debug("operation %s: reattached by pid %ld at partition %lld, "
	    "offset %lld", op->id, (long)connection_pid(c),
	    (long long)pos.partition, (long long)pos.offset);
	if (!ACTION_STREAMS(op->action)) {
		operation_reattach_reply(c, op);
		return;
	}
	if (rewind)
		operation_rewind(op, &pos);
	op->conn = c;
	op->next_deliver = (int)pos.partition;
	op->delivered = pos.offset;
	op->partition_open = 0;
	op->requested = op->action == ACTION_COLLECT;
	op->attached_ms = ember_now_ms();
	op->attached_bytes = 0;
	connection_reply_ok(c, json_pack("{s:s,s:i,s:I,s:I}", "operation",
	    op->id, "partitions", op->npartitions, "partition",
	    (json_int_t)pos.partition, "offset", (json_int_t)pos.offset));
	connection_stream_begin(c, op);
	operation_fill(op);
	operation_pump(op);
}

void
operation_release(struct connection *c, struct session *s, json_t *req)
{
	static const char *const keys[] = { "op", "operation", "partition",
	    "offset", "all", NULL };
	struct operation	*op;
	struct position		 pos;
	int			 all = 0;
	char			*err;

	if (jread_bool(req, "", "all", JREAD_OPTIONAL, &all, &err) == -1) {
		connection_reply_error(c, "REQUEST_INVALID", "release: %s",
		    err);
		free(err);
		return;
	}
	if ((op = operation_lookup(c, s, req, "release", keys, all)) == NULL)
		return;
	if (all) {
		log_debug("operation %s: released", op->id);
		op->reattachable = 0;	/* no tombstone: its id is gone */
		if (op->conn != NULL && op->conn != c)
			operation_abort(op, "INTERRUPTED", "released");
		else {
			if (op->conn == c)
				op->conn = NULL;	/* cannot be: busy */
			operation_end(op);
		}
		connection_reply_ok(c, NULL);
		return;
	}
	if (operation_read_position(c, req, "release", JREAD_REQUIRED,
	    &pos) == -1)
		return;
	if (op->retry != NULL) {
		if (operation_check_position(c, op, "release", &pos,
		    NULL) == -1)
			return;
		retry_release(op->retry, &pos);
	}
	connection_reply_ok(c, NULL);
}

void
operation_interrupt(struct connection *c, struct session *s, json_t *req)
{
	static const char *const keys[] = { "op", "operation", NULL };
	struct operation	*op;

	if ((op = operation_lookup(c, s, req, "interrupt", keys, 0)) == NULL)
		return;
	log_debug("operation %s: interrupted by pid %ld", op->id,
	    (long)connection_pid(c));
	operation_abort(op, "INTERRUPTED", "interrupted by the client");
	connection_reply_ok(c, NULL);
}

/* Remove the operations detached for operation.detached_timeout. */
static void
operation_reap(uint64_t now)
{
	struct operation	*op, *next;
	uint64_t		 timeout;

	if (ember_conf.operation_detached_timeout == 0)
		return;
	timeout = (uint64_t)ember_conf.operation_detached_timeout;
	TAILQ_FOREACH_SAFE(op, &operations, entry, next) {
		if (op->conn != NULL || !op->reattachable ||
		    now - op->detached_ms < timeout)
			continue;
		log_info("operation %s: removed after %llums detached", op->id,
		    (unsigned long long)(now - op->detached_ms));
		operation_bury(op, "OPERATION_ABANDONED", "operation %s was "
		    "removed after %llums without a client "
		    "(operation.detached_timeout)", op->id,
		    (unsigned long long)(now - op->detached_ms));
		if (!op->complete)
			ember_counters.operations_interrupted++;
		operation_end(op);
	}
}

/* The earliest deadline of a detached operation, or UINT64_MAX. */
static uint64_t
operation_next_reap(void)
{
	struct operation	*op;
	uint64_t		 due = UINT64_MAX;

	if (ember_conf.operation_detached_timeout == 0)
		return (due);
	TAILQ_FOREACH(op, &operations, entry) {
		if (op->conn == NULL && op->reattachable &&
		    op->detached_ms < due)
			due = op->detached_ms;
	}
	if (due != UINT64_MAX)
		due += (uint64_t)ember_conf.operation_detached_timeout;
	return (due);
}

/* Arm the maintenance timer for due (ms, ember_now_ms's clock). */
static void
operation_maintenance_arm(uint64_t due)
{
	struct timeval	tv;
	uint64_t	now = ember_now_ms();
	uint64_t	ms = due > now ? due - now : 0;

	tv.tv_sec = (time_t)(ms / 1000);
	tv.tv_usec = (suseconds_t)(ms % 1000) * 1000;
	operation_timer_due = due;
	evtimer_add(operation_timer, &tv);
}

void
operation_maintenance_due(uint64_t due)
{
	if (operation_timer != NULL && due < operation_timer_due)
		operation_maintenance_arm(due);
}

static void
operation_maintenance_cb(evutil_socket_t fd, short events, void *arg)
{
	uint64_t	now = ember_now_ms();
	uint64_t	due, next;

	(void)fd; (void)events; (void)arg;
	operation_reap(now);
	session_expire(now);
	/* The next tick, or sooner: a timeout ends at its own time. */
	due = now + (uint64_t)ember_conf.operation_maintenance_interval;
	if ((next = operation_next_reap()) < due)
		due = next;
	if ((next = session_next_expiry()) < due)
		due = next;
	operation_maintenance_arm(due);
}

void
operation_maintenance_start(void)
{
	operation_timer = evtimer_new(ember_base, operation_maintenance_cb,
	    NULL);
	operation_maintenance_arm(ember_now_ms() +
	    (uint64_t)ember_conf.operation_maintenance_interval);
}

void
operation_maintenance_stop(void)
{
	struct tomb_user	*tu;

	if (operation_timer != NULL)
		event_free(operation_timer);
	operation_timer = NULL;
	while ((tu = TAILQ_FIRST(&tomb_users)) != NULL) {
		while (tu->n > 0)
			operation_drop_tombstone(tu);
		TAILQ_REMOVE(&tomb_users, tu, entry);
		free(tu);
	}
}
