/*
 * libember: a small blocking client for emberd (docs/protocol.md).
 *
 * A struct ember is one connection to emberd, past its hello.  Requests and
 * replies are JSON text; nothing of jansson or libevent shows here.  A handle
 * is not thread-safe: use one per thread, or lock around it.
 *
 * Every function that can fail returns -1 (or NULL) and leaves a message and
 * an error class behind, read with ember_error and ember_error_class.  The
 * class is either one of emberd's (PLAN_INVALID, TASK_FAILED, ...) or one of
 * the library's own:
 *
 *	IO_ERROR	the socket failed or emberd closed it
 *	PROTOCOL_ERROR	emberd sent something the protocol does not allow
 *	STREAM_ACTIVE	a control request while a result stream is open
 *	NO_STREAM	ember_next or ember_stop without a result stream
 *	KEYED_RECORD	ember_next at a pair or a group (ember_next_item
 *			reads it)
 *	DETACHED	emberd ended the stream early (response 2) of an
 *			operation that is not reattachable
 *	NO_MEMORY	out of memory
 *
 * After IO_ERROR or PROTOCOL_ERROR the connection is unusable: every later
 * call fails with the same error; close it and connect again.
 *
 * Reattach.  The result stream of a reattachable operation (the default)
 * survives a broken connection and emberd's graceful cuts: ember_next
 * connects again, resumes the session and reattaches after the last record
 * it returned, with exponential, jittered backoff (ember_set_reattach);
 * past that budget it fails with IO_ERROR ("gave up reattaching").  If
 * emberd refuses the reattach (OPERATION_ABANDONED, POSITION_NOT_AVAILABLE,
 * ...) the stream ends with emberd's class.  As the caller consumes
 * records, the library releases them on a second connection of the
 * session, without waiting, so that emberd's retry buffer stays small.
 *
 * The library never changes the process's signal dispositions: it writes
 * with MSG_NOSIGNAL, so a closed socket is an IO_ERROR, not a SIGPIPE.
 */
#ifndef EMBER_H
#define EMBER_H

#include <stddef.h>
#include <stdint.h>

#define EMBER_DEFAULT_SOCKET	"/run/ember/emberd.sock"
#define EMBER_SOCKET_ENV	"EMBER_SOCKET"

struct ember;

/*
 * Connect to emberd and say hello.  socket_path NULL means $EMBER_SOCKET,
 * else EMBER_DEFAULT_SOCKET.  On failure, NULL and, if errmsg is not NULL,
 * *errmsg is an allocated message for the caller to free:
 * "connect /run/ember/emberd.sock: No such file or directory (is emberd
 * running?)", or "hello: VERSION_MISMATCH: ..." when emberd refuses.
 */
struct ember	*ember_connect(const char *socket_path, char **errmsg);

/*
 * Interrupt operation, of session (an id from ember_session, or the
 * status reply), on a connection of its own that leaves the session open:
 * emberd stops the operation's tasks and frees their workers, and its
 * stream or pending reply ends with INTERRUPTED.  For a program's Ctrl-C,
 * say, from another thread than the one reading the stream.  0, or -1 and,
 * if errmsg is not NULL, an allocated message ("OPERATION_NOT_FOUND: ...").
 */
int		 ember_interrupt(const char *socket_path, const char *session,
		     const char *operation, char **errmsg);

/* Close the connection; an open result stream ends its operation (it is
 * released), as does a finished one emberd keeps for a reattach.  The
 * session ends too, with the broadcasts it holds. */
void		 ember_close(struct ember *);

/*
 * How hard ember_next tries to reattach a broken stream: attempts per
 * outage (0: never reattach), the first wait and the longest, in
 * milliseconds; each wait doubles, jittered to between half and all of
 * it.  The defaults are 10 attempts, 20 ms, 1000 ms.
 */
void		 ember_set_reattach(struct ember *, int attempts, int first_ms,
		     int max_ms);

/*
 * The last error's message and class, as errno: meaningful after a call
 * failed, left as they are by calls that succeed; "" before any error.
 */
const char	*ember_error(const struct ember *);
const char	*ember_error_class(const struct ember *);

/* The session id emberd gave at hello. */
const char	*ember_session(const struct ember *);

/*
 * Send one control request (a JSON object with "op") and wait for its reply.
 * 0 on {"ok":true}; -1 on {"ok":false} with the error's class and message
 * set, or on a local failure.  If reply_json is not NULL, *reply_json gets
 * the reply text (caller frees) whenever one arrived, NULL otherwise.  An
 * "execute" of iterate or collect opens the result stream, as ember_execute.
 */
int		 ember_request(struct ember *, const char *request_json,
		     char **reply_json);

/*
 * Execute a plan (JSON text) with an action ("iterate", "collect", "count",
 * ...) and options (a JSON object as text, or NULL).  Relative paths (the
 * text source's, a udf's library, a save's options.path) are made
 * absolute against the working directory first, as for an execute sent
 * with ember_request: emberd refuses relative ones.  Returns as
 * ember_request.  For iterate and collect, a successful execute opens the
 * result stream: read it with ember_next until it returns 0 or -1, or end it
 * with ember_stop; no other request is allowed meanwhile.
 */
int		 ember_execute(struct ember *, const char *plan_json,
		     const char *action, const char *options_json,
		     char **reply_json);

/*
 * Read the next record of the result stream.
 *  1	a record: *data and *len point into the library's buffer and stay
 *	valid until the next call on the handle; *data is NULL (and *len 0)
 *	for a null record.  A record is a pointer and a length, not a C
 *	string: it may hold NUL bytes and is not NUL-terminated.
 *  0	the stream is complete; once a stream has ended, either way,
 *	every further call returns 0.
 * -1	an error.  A worker's failure is class TASK_FAILED with the worker's
 *	message; the stream is over and the connection usable again.
 * In iterate mode the library asks for each partition when it needs it.
 */
int		 ember_next(struct ember *, const void **data, size_t *len);

/*
 * Keyed records (docs/protocol.md, "Pairs and groups").  A plan with keyed
 * ops (key_by, reduce_by_key, group_by_key, join, ...) gives pairs, a key
 * and a value, or groups, a key and a list of values.  ember_next reads
 * plain records only: at a pair or a group it returns -1 with class
 * KEYED_RECORD and leaves it unread, for ember_next_item.
 */
enum ember_kind {
	EMBER_KIND_RECORD,	/* a plain record */
	EMBER_KIND_PAIR,	/* a key and a value */
	EMBER_KIND_GROUP,	/* a key and a list of values */
};

/* Bytes in the library's buffer: not NUL-terminated, may hold NUL
 * bytes; data NULL (and len 0) for a null. */
struct ember_bytes {
	const void	*data;
	size_t		 len;
};

struct ember_item {
	enum ember_kind			 kind;
	struct ember_bytes		 key;	 /* RECORD: the record */
	struct ember_bytes		 value;	 /* PAIR: the value */
	const struct ember_bytes	*values; /* GROUP: nvalues values */
	size_t				 nvalues;
};

/*
 * Read the next record of the result stream, of any kind, into *item.
 * Returns as ember_next; every pointer of *item stays valid until the next
 * call on the handle.  A pair or a group counts as one record (in
 * positions, limits and reattach).  A key is never null.
 */
int		 ember_next_item(struct ember *, struct ember_item *item);

/*
 * Stop the result stream early: tell emberd to stop (inside a partition
 * it ends that partition at once), read and drop what it sent before, and
 * wait until it has stopped.  The connection then takes
 * control requests again.  0 once stopped (a task failing meanwhile counts
 * as stopped; ember_error has it), -1 if the connection broke.  Without an
 * open stream, 0.
 *
 * A collect stream takes no requests, so stopping it reads (and drops)
 * everything up to its end.  To abandon a collect at once, ember_close the
 * connection instead: emberd then ends the operation.
 */
int		 ember_stop(struct ember *);

/*
 * Upload bytes as a broadcast of this connection's session: every worker
 * that runs a task using it gets it once.  *id names it in plans
 * ({"filter": {"in_broadcast": id}}).  0 or -1.
 */
int		 ember_broadcast_put(struct ember *, const void *, size_t,
		     int64_t *id);
/* The same, with the bytes of the file open on fd: emberd reads them
 * through the descriptor, passed with the request, never through the
 * socket.  0 or -1. */
int		 ember_broadcast_put_fd(struct ember *, int fd, int64_t *id);
/* Drop a broadcast: new plans can no longer use it.  0 or -1. */
int		 ember_broadcast_drop(struct ember *, int64_t id);

/*
 * Checkpoint the dataset of plan_json (the checkpoint action): local (kept
 * with this session) or reliable (kept under checkpoint.dir until dropped),
 * eager (written now) or lazy (written by the first plan that reads it).
 * id (37 bytes) gets its id, which a plan names as its source:
 * {"source": {"checkpoint": id}}.  0 or -1.
 */
int		 ember_checkpoint(struct ember *, const char *plan_json,
		     int local, int eager, char id[37]);
/* Drop a checkpoint and remove its files (a read in progress finishes
 * first).  0 or -1 (CHECKPOINT_NOT_FOUND). */
int		 ember_checkpoint_drop(struct ember *, const char *id);

/* The partition the open stream is in, from 0; -1 before the first. */
int64_t		 ember_partition(const struct ember *);

/* Execute plan_json with action count and set *count.  0 or -1. */
int		 ember_count(struct ember *, const char *plan_json,
		     int64_t *count);

/* The status reply as JSON text (caller frees), or NULL on error. */
char		*ember_status(struct ember *);

/*
 * count_by_value's result, read: each distinct record with its count, and
 * how many records were null.  A record is a pointer and a length, never a
 * C string: it may hold NUL bytes, and is not NUL-terminated.  Records
 * that are not valid UTF-8 arrive with their bad bytes replaced by U+FFFD
 * (docs/protocol.md).  The records are sorted by their bytes (memcmp, a
 * prefix first), unless read by ember_request_counts in count order.
 */
struct ember_counts;

/* The orders a count_by_value result's records can be read in. */
enum ember_counts_order {
	EMBER_COUNTS_BY_RECORD,	/* by their bytes (memcmp, a prefix first) */
	EMBER_COUNTS_BY_COUNT	/* the largest count first, then by record */
};

/* Execute plan_json with action count_by_value (options_json: NULL, or a
 * JSON object as text) and read the reply.  0 or -1. */
int		 ember_count_by_value(struct ember *, const char *plan_json,
		     const char *options_json, struct ember_counts **);
/* Read a count_by_value reply (from ember_execute); NULL with the error set
 * (PROTOCOL_ERROR) if it is not one. */
struct ember_counts *ember_counts_parse(struct ember *,
		     const char *reply_json);
/* Send an execute request with action count_by_value, given as JSON text
 * (as ember_request), and read its result with the records in order: the
 * reply parsed once and sorted once.  0, or -1 with the error set. */
int		 ember_request_counts(struct ember *, const char *request_json,
		     enum ember_counts_order order, struct ember_counts **);
/* How many distinct non-null records. */
size_t		 ember_counts_size(const struct ember_counts *);
/* The i-th record (i < ember_counts_size) and its count: *data and *len
 * stay valid until ember_counts_free. */
int64_t		 ember_counts_get(const struct ember_counts *, size_t i,
		     const void **data, size_t *len);
/* The count of one record, 0 if it did not occur (a binary search in
 * record order, a walk of them all in count order). */
int64_t		 ember_counts_find(const struct ember_counts *,
		     const void *data, size_t len);
/* How many records were null (a null is not an empty record). */
int64_t		 ember_counts_nulls(const struct ember_counts *);
void		 ember_counts_free(struct ember_counts *);

/*
 * reduce's result (docs/protocol.md): the sum, min or max, an integer while
 * exact, else a real (real also holds an integer's value); none when no
 * record was reduced.
 */
enum ember_value_type {
	EMBER_VALUE_NONE,
	EMBER_VALUE_INTEGER,
	EMBER_VALUE_REAL,
};
struct ember_reduced {
	enum ember_value_type	 type;
	int64_t			 integer;	/* EMBER_VALUE_INTEGER */
	double			 real;		/* EMBER_VALUE_REAL */
	int64_t			 count;		/* records reduced */
};

/* Execute plan_json with action reduce and fn "sum", "min" or "max", and
 * read the reply into *out.  0 or -1. */
int		 ember_reduce(struct ember *, const char *plan_json,
		     const char *fn, struct ember_reduced *out);
/* Read a reduce reply (from ember_execute).  0, or -1 with the error set
 * (PROTOCOL_ERROR). */
int		 ember_reduced_parse(struct ember *, const char *reply_json,
		     struct ember_reduced *out);

#endif
