/*
 * Client connections.  A connection is an explicit state machine: it reads
 * control frames, waits while a request is answered later, or carries one
 * operation's result stream.  The operation owns the stream's position; the
 * connection only carries bytes, so a stream can move to another connection.
 */
#ifndef EMBER_CONNECTION_H
#define EMBER_CONNECTION_H

#include <sys/types.h>

#include <jansson.h>

struct connection;
struct evbuffer;
struct operation;

/* Start what connections share: the parser of their big frames. */
void		 connection_init(void);
void		 connection_create(int fd);
/* Close a connection now; its operation, if any, is detached. */
void		 connection_close_now(struct connection *);
/* Close every connection now (exit), writing what the socket takes of
 * their output first. */
void		 connection_close_all(void);
/* The shutdown grace is over: refuse uploads in progress (SHUTTING_DOWN)
 * and close every connection once its output is flushed. */
void		 connection_shutdown(void);
/* Drain: close connections with nothing running once their output is
 * flushed; returns how many connections are left. */
size_t		 connection_close_flushed(void);

pid_t		 connection_pid(const struct connection *);

/* Answer a request with what its handler came to (request.h), at once or
 * when it comes (an execute whose plan a helper checked, an operation's
 * failure); only connection.c writes a reply's bytes. */
struct request_answer;
void		 connection_answer(struct connection *,
		     struct request_answer *);
/* An ok reply that carries a result: until the client has taken its bytes
 * they are held against the uid's daemon.max_results_per_uid and
 * daemon.max_results.  0, or -1 with *err (allocated) naming the limit;
 * nothing is sent then.  fields is stolen. */
int		 connection_reply_held(struct connection *, json_t *fields,
		     char **err);

/*
 * The result stream.  After stream_begin the connection's output belongs to
 * op (connection_output) and stream input goes to operation_stream_input;
 * stream_end hands the connection back to control frames.  busy_begin and
 * busy_end bracket a request whose reply comes later (count).
 */
void		 connection_stream_begin(struct connection *, struct operation *);
void		 connection_stream_end(struct connection *);
void		 connection_busy_begin(struct connection *, struct operation *);
void		 connection_busy_end(struct connection *);
struct evbuffer	*connection_output(struct connection *);
/* The operation whose stream ended on the connection and waits for a sign
 * that its end arrived (NULL: none). */
void		 connection_set_completed(struct connection *,
		     struct operation *);
/* Has the client fallen behind by more than stream.buffer? */
int		 connection_output_full(struct connection *);

#endif
