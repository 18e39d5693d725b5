/*
 * A client's control request, from the bytes of its frame to a JSON object
 * with a string "op": the part of reading a connection that needs no
 * socket, so that tests and fuzzers can call it alone; and an execute
 * request's members but the plan, read into a plain struct, which needs
 * no session or operation either.
 */
#ifndef EMBER_REQUEST_H
#define EMBER_REQUEST_H

#include <stddef.h>
#include <stdint.h>

#include <jansson.h>

#include "taskdesc.h"

/*
 * Count the values of the len bytes of a JSON text without parsing it, in
 * one pass over its bytes: one, and one more for each comma, colon and
 * opening bracket outside strings.  Every value but the first follows
 * one of these, so the count is at least the values; it is about the
 * values and keys, a container counting once more.  Counting stops past
 * max.  Any bytes are safe: an unclosed string ends the count.
 */
size_t	 request_count_values(const void *data, size_t len, size_t max);
/*
 * Parse the len bytes of a control frame (NULs allowed in strings,
 * duplicate keys refused), unless they hold more than max_values values
 * and keys (0: no limit).  NULL and *err (the REQUEST_INVALID message) if
 * they are not a JSON object with a string "op".
 */
json_t	*request_parse(const void *data, size_t len, size_t max_values,
	     char **err);
/* Make a random (version 4) UUID in id, lower case: a new operation's. */
void	 request_new_id(char id[37]);
/* options.prefetch's largest value. */
#define OPERATION_MAX_PREFETCH	1024

enum action {
	ACTION_ITERATE,		/* pull: a partition per client request */
	ACTION_COLLECT,		/* push: every partition in order */
	ACTION_COUNT,		/* the rest answer with one reply */
	ACTION_COUNT_BY_VALUE,
	ACTION_REDUCE,
	ACTION_SAVE,
	ACTION_CHECKPOINT,
};
/* Each action's name on the wire. */
extern const char *const action_names[ACTION_CHECKPOINT + 1];
/* What a task of each action is asked to send back (docs/protocol.md). */
extern const enum taskdesc_mode action_modes[ACTION_CHECKPOINT + 1];

/* An execute request's members but the plan, checked. */
struct execute_request {
	enum action	 action;
	char		 id[37];	/* the client's, else made */
	int		 prefetch;	/* -1: as many as fit */
	int64_t		 limit;		/* records in all, 0: no limit */
	int		 reattachable;
	enum reduce_fn	 fn;		/* reduce */
	const char	*save_path;	/* save: the request's string */
	int		 overwrite;	/* save */
	int		 ckpt_local;	/* checkpoint */
	int		 ckpt_eager;
};

/*
 * Read execute request req (an object with "op") but its plan into *er:
 * its action, options and operation id.  taken (may be NULL) says
 * whether a client-chosen id is in use.  -1 with *class (REQUEST_INVALID,
 * OPERATION_ALREADY_EXISTS, ACTION_INVALID) and *err, which names the
 * field.  er->save_path points into req.
 */
int	 request_read_execute(json_t *req, int (*taken)(const char *id,
	     void *arg), void *arg, struct execute_request *er,
	     const char **class, char **err);
/*
 * What a request handler comes to, which connection.c answers with: the
 * handlers of daemon/ decide, only the connection writes replies.
 */
enum request_answer_kind {
	REQUEST_ANSWER_OK,	/* {"ok": true} and fields */
	REQUEST_ANSWER_ERROR,	/* {"ok": false, "error": {...}} */
	REQUEST_ANSWER_STREAM,	/* ok and fields, then op's stream */
	REQUEST_ANSWER_LATER,	/* nothing yet: op answers when it can */
};

struct operation;

struct request_answer {
	enum request_answer_kind kind;
	json_t			*fields; /* OK, STREAM: stolen, or NULL */
	const char		*class;		/* ERROR */
	char			*message;	/* ERROR: allocated */
	struct operation	*op;		/* STREAM */
};

/* Answer ok with fields (stolen, may be NULL); 0. */
int	 request_answer_ok(struct request_answer *, json_t *fields);
/* Answer with an error of class c, its message made from fmt; -1. */
int	 request_answer_error(struct request_answer *, const char *c,
	     const char *fmt, ...) __attribute__((format(printf, 3, 4)));

/* Set *class to c and *err to the message; returns -1. */
int	 request_refuse(const char **class, char **err, const char *c,
	     const char *fmt, ...) __attribute__((format(printf, 4, 5)));

#endif
