/*
 * Operations that outlive their connection: detach, reattach, release,
 * interrupt, the tombstones a late reattach finds, and the maintenance
 * timer that reaps detached operations and expires sessions.
 */
#include <stdarg.h>
#include <stdlib.h>
#include <string.h>

#include <event2/event.h>

#include "connection.h"
#include "emberd.h"
#include "jread.h"
#include "log.h"
#include "retry.h"
#include "session.h"
#include "xmalloc.h"

#include "operation_private.h"


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
struct tombstone *
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
void
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
 * Find the operation a reattach, release or interrupt names: uid's own,
 * in session s.  NULL with *a the answer: OPERATION_NOT_FOUND (also to
 * another uid), the tombstone's class for one that is gone, or
 * SESSION_MISMATCH.  With gone_ok, a tombstone answers ok instead.
 */
static struct operation *
operation_lookup(struct session *s, json_t *req, const char *what,
    const char *const *keys, int gone_ok, struct request_answer *a)
{
	struct operation	*op;
	struct tombstone	*ts;
	const char		*id = NULL;
	char			*err;

	if (jread_only(req, "", keys, &err) == -1 ||
	    jread_string(req, "", "operation", JREAD_REQUIRED, &id,
	    &err) == -1) {
		request_answer_error(a, "REQUEST_INVALID", "%s: %s", what,
		    err);
		free(err);
		return (NULL);
	}
	if ((op = operation_find(session_uid(s), id)) == NULL) {
		if ((ts = operation_find_tombstone(session_uid(s), id)) == NULL)
			request_answer_error(a, "OPERATION_NOT_FOUND",
			    "%s: no operation %s", what, id);
		else if (gone_ok)
			request_answer_ok(a, NULL);
		else
			request_answer_error(a, ts->class, "%s: %s", what,
			    ts->message);
		return (NULL);
	}
	if (op->session != s) {
		request_answer_error(a, "SESSION_MISMATCH", "%s: operation "
		    "%s belongs to another session of this user (hello with "
		    "session %s first)", what, id, session_id(op->session));
		return (NULL);
	}
	return (op);
}

/* Read a request's position; -1 with *a the answer. */
static int
operation_read_position(json_t *req, const char *what, int required,
    struct position *pos, struct request_answer *a)
{
	json_int_t	 partition = 0, offset = 0;
	char		*err;

	if (jread_int(req, "", "partition", required, &partition,
	    &err) == -1 ||
	    jread_int(req, "", "offset", required, &offset, &err) == -1) {
		request_answer_error(a, "REQUEST_INVALID", "%s: %s", what,
		    err);
		free(err);
		return (-1);
	}
	pos->partition = partition;
	pos->offset = offset;
	return (0);
}

/*
 * Check a stream position for op; -1 with *a the answer.  One that left
 * the buffer is recomputed when the plan allows (*rewind), else refused.
 */
static int
operation_check_position(struct operation *op, const char *what,
    const struct position *pos, int *rewind, struct request_answer *a)
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
		return (request_answer_error(a, "POSITION_NOT_AVAILABLE",
		    "%s: operation %s: %s, and its plan cannot be computed "
		    "again (it has a pipe, or a udf not marked deterministic)",
		    what, op->id, why));
	default:
		return (request_answer_error(a, "POSITION_INVALID", "%s: "
		    "operation %s: %s", what, op->id, why));
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
operation_reattach(struct connection *c, struct session *s, json_t *req,
    struct request_answer *a)
{
	static const char *const keys[] = { "op", "operation", "partition",
	    "offset", NULL };
	struct operation	*op;
	struct position		 pos;
	int			 rewind = 0;

	if ((op = operation_lookup(s, req, "reattach", keys, 0, a)) == NULL)
		return;
	if (!op->reattachable) {
		request_answer_error(a, "OPERATION_NOT_REATTACHABLE",
		    "reattach: operation %s was executed with "
		    "options.reattachable false", op->id);
		return;
	}
	if (operation_read_position(req, "reattach",
	    ACTION_STREAMS(op->action), &pos, a) == -1)
		return;
	if (ACTION_STREAMS(op->action) && operation_check_position(op,
	    "reattach", &pos, &rewind, a) == -1)
		return;
	if (op->conn != NULL) {
		/* Its detach may trim the buffer: check the position again. */
		operation_take(op);
		if (ACTION_STREAMS(op->action) && operation_check_position(op,
		    "reattach", &pos, &rewind, a) == -1)
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
		memset(a, 0, sizeof *a);
		a->kind = REQUEST_ANSWER_LATER;
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
	request_answer_ok(a, json_pack("{s:s,s:i,s:I,s:I}", "operation",
	    op->id, "partitions", op->npartitions, "partition",
	    (json_int_t)pos.partition, "offset", (json_int_t)pos.offset));
	a->kind = REQUEST_ANSWER_STREAM;
	a->op = op;
}

void
operation_stream_resume(struct operation *op)
{
	operation_fill(op);
	operation_pump(op);
}

void
operation_release(struct connection *c, struct session *s, json_t *req,
    struct request_answer *a)
{
	static const char *const keys[] = { "op", "operation", "partition",
	    "offset", "all", NULL };
	struct operation	*op;
	struct position		 pos;
	int			 all = 0;
	char			*err;

	if (jread_bool(req, "", "all", JREAD_OPTIONAL, &all, &err) == -1) {
		request_answer_error(a, "REQUEST_INVALID", "release: %s", err);
		free(err);
		return;
	}
	if ((op = operation_lookup(s, req, "release", keys, all, a)) == NULL)
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
		request_answer_ok(a, NULL);
		return;
	}
	if (operation_read_position(req, "release", JREAD_REQUIRED, &pos,
	    a) == -1)
		return;
	if (op->retry != NULL) {
		if (operation_check_position(op, "release", &pos, NULL,
		    a) == -1)
			return;
		retry_release(op->retry, &pos);
	}
	request_answer_ok(a, NULL);
}

void
operation_interrupt(struct session *s, json_t *req, pid_t pid,
    struct request_answer *a)
{
	static const char *const keys[] = { "op", "operation", NULL };
	struct operation	*op;

	if ((op = operation_lookup(s, req, "interrupt", keys, 0, a)) == NULL)
		return;
	log_debug("operation %s: interrupted by pid %ld", op->id, (long)pid);
	operation_abort(op, "INTERRUPTED", "interrupted by the client");
	request_answer_ok(a, NULL);
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
