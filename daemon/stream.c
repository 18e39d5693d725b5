/*
 * An operation's result stream: replay from the retry buffer, the pump
 * that delivers partitions in order, the batches a worker relays
 * (absorbed, cut at the limit, spooled), the client's requests and its
 * stop.
 */
#include <stdlib.h>
#include <string.h>

#include <event2/buffer.h>
#include <event2/event.h>

#include "connection.h"
#include "emberd.h"
#include "frame.h"
#include "limit.h"
#include "log.h"
#include "metrics.h"
#include "retry.h"
#include "scheduler.h"
#include "session.h"
#include "spool.h"
#include "utf8.h"
#include "xmalloc.h"

#include "operation_private.h"

static void	operation_relay_records(struct operation *op, struct task *t,
		    struct evbuffer *from, size_t bytes, int32_t records);

/* End a stream with an error: -1 before the partition's first record,
 * -2 (EXCEPTION_THROWN) after it, then the message frame. */
void
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
void
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
		if (operation_in_map_stage(op))
			return;		/* its stages pump when done */
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
			/* Computed again once the client has room for it
			 * (and its input is there again). */
			if (!t->waiting_input &&
			    !connection_output_full(op->conn))
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
	size_t	keep;

	if (frame_skip_records(from, n, &keep) == -1)
		fatalx("operation %s: short batch", op->id);
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
