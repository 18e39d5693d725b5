#include "queue.h"
#include <sys/socket.h>

#include <errno.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include <event2/buffer.h>
#include <event2/event.h>

#include "broadcast.h"
#include "channel.h"
#include "checkpoint.h"
#include "closer.h"
#include "connection.h"
#include "emberd.h"
#include "heap.h"
#include "frame.h"
#include "jread.h"
#include "jwrite.h"
#include "limit.h"
#include "log.h"
#include "operation.h"
#include "parser.h"
#include "protocol.h"
#include "request.h"
#include "session.h"
#include "status.h"
#include "userdb.h"
#include "utf8.h"
#include "xmalloc.h"

/* Frames handled per read event before yielding to other connections. */
#define CONNECTION_BATCH	64
/*
 * Descriptors a client may pass ahead of the request that takes them: one,
 * so that a connection costs emberd two descriptors at most (more are
 * closed as they come), which daemon.max_connections "auto" counts on.
 */
#define CONNECTION_FDS		1
/* Input read beyond the frame being read, whose bytes are reserved. */
#define CONNECTION_READ_AHEAD	(64 * 1024)
/* Timeouts are looked at this often, at most. */
#define CONNECTION_TICK_MS	50

enum connection_state {
	CONN_CONTROL,	/* reading control frames */
	CONN_PARSING,	/* a big frame is parsed off the loop (parser.c) */
	CONN_BUSY,	/* a request is running; its reply comes later */
	CONN_STREAM,	/* carrying an operation's result stream */
	CONN_UPLOAD,	/* reading a broadcast's bytes */
	CONN_CLOSING,	/* flushing a last reply, then closing */
};

struct connection {
	uint64_t		 id;
	struct channel		*ch;		/* the client's socket */
	struct event		*kick;		/* resume reading input */
	enum connection_state	 state;
	struct event		*timer;		/* request and idle timeouts */
	uint64_t		 active_ms;	/* last input, output or change */
	uint64_t		 frame_ms;	/* input waiting to complete */
	uint64_t		 wrote_ms;	/* output last taken by the client,
						   or queued when there was none */
	struct evbuffer_cb_entry *out_cb;
	int64_t			 held;		/* bytes of queued replies held
						   against daemon.max_results */
	int64_t			 reserved;	/* bytes of the frame being read,
						   held against daemon.max_input */
	struct parser_job	*parse;		/* CONN_PARSING */
	int64_t			 parsing;	/* its bytes, still held */
	int			 parse_wait;	/* a big frame waits for room in
						   the parser */
	int			 counted;	/* in daemon.max_connections */
	uid_t			 uid;
	gid_t			 gid;
	pid_t			 pid;
	struct session		*session;	/* after hello */
	struct operation	*op;		/* CONN_BUSY, CONN_STREAM */
	struct operation	*completed;	/* its stream ended here; the
						   next request confirms it */
	struct broadcast	*upload;	/* CONN_UPLOAD */
	struct userdb_wait	*lookup;	/* CONN_BUSY: hello waits for */
	json_t			*hello;		/* the user, off the loop */
	TAILQ_ENTRY(connection)	 entry;
};
static TAILQ_HEAD(, connection) connections =
    TAILQ_HEAD_INITIALIZER(connections);
static size_t	connection_count;
static uint64_t connection_next_id = 1;

struct connection_request {
	const char	*op;
	int		 needs_hello;
	void		(*handle)(struct connection *, json_t *);
};

static void	connection_free(struct connection *);
static void	connection_process(struct connection *);
static void	connection_process_input(struct connection *);
static void	connection_upload_done(struct connection *);
static void	connection_arm(struct connection *);
static void	connection_write_cb(void *);

pid_t
connection_pid(const struct connection *c)
{
	return (c->pid);
}

struct evbuffer *
connection_output(struct connection *c)
{
	return (channel_output(c->ch));
}

int
connection_output_full(struct connection *c)
{
	return (evbuffer_get_length(channel_output(c->ch)) >=
	    (size_t)ember_conf.stream_buffer);
}

/* Write one reply frame, {"ok":ok} and the members of fields (taken, may
 * be NULL); with held, charge its bytes to the uid's results until the
 * client took them: 0, or -1 with *err. */
static int
connection_send_charged(struct connection *c, int ok, json_t *fields,
    int held, char **err)
{
	char	*text;
	size_t	 len;
	int	 alone;

	/* Written without json_dumps, whose loop check alone costs more
	 * than the rest of a job's reply. */
	if ((text = jwrite_reply_dumps(ok, fields)) == NULL)
		fatalx("%s: out of memory", __func__);
	if (fields != NULL)
		json_decref(fields);
	len = strlen(text);
	if (held && limit_charge(c->uid, LIMIT_RESULTS, (int64_t)len + 4,
	    err) == -1) {
		free(text);
		return (-1);
	}
	/* A reply alone in the output goes now, not a loop pass later (an
	 * epoll_ctl, an epoll_wait and another epoll_ctl).  Behind queued
	 * bytes it waits its turn; a failed write reaches the owner from the
	 * loop. */
	if ((alone = evbuffer_get_length(channel_output(c->ch)) == 0))
		channel_cork(c->ch);
	evbuffer_add_frame(channel_output(c->ch), text, len);
	free(text);
	if (held)
		c->held += (int64_t)len + 4;
	if (alone)
		channel_uncork(c->ch);
	return (0);
}

/* Write one reply frame, {"ok":ok} and fields (taken, may be NULL). */
static void
connection_send(struct connection *c, int ok, json_t *fields)
{
	connection_send_charged(c, ok, fields, 0, NULL);
}

/* Reply ok with fields (stolen, may be NULL): exactly one reply per
 * request, and only this file writes them. */
static void
connection_reply_ok(struct connection *c, json_t *fields)
{
	connection_send(c, 1, fields);
}

int
connection_reply_held(struct connection *c, json_t *fields, char **err)
{
	return (connection_send_charged(c, 1, fields, 1, err));
}

/*
 * The output changed.  The client took some of it (or it was empty): the
 * write timeout starts again.  What queued replies hold of the results is
 * given back once no more than that is left: the held bytes may not be
 * the first out, so this never gives back early, if sometimes late.
 */
static void
connection_output_cb(struct evbuffer *out, const struct evbuffer_cb_info *info,
    void *arg)
{
	struct connection	*c = arg;
	int64_t			 left;

	(void)out;
	if (info->n_deleted > 0 || info->orig_size == 0)
		c->wrote_ms = ember_now_ms();
	left = (int64_t)(info->orig_size + info->n_added - info->n_deleted);
	if (c->held > left) {
		limit_release(c->uid, LIMIT_RESULTS, c->held - left);
		c->held = left;
	}
}

/* Write an error reply, its message made from fmt and ap. */
static void __attribute__((format(printf, 3, 0)))
connection_reply_verror(struct connection *c, const char *class,
    const char *fmt, va_list ap)
{
	char	*msg, *explained;

	xvasprintf(&msg, fmt, ap);
	if ((explained = session_explain_denied(c->uid, msg)) != NULL) {
		free(msg);
		msg = explained;
	}
	/* A reply holds UTF-8 alone, and json_pack refuses anything else. */
	if (!utf8_valid(msg, strlen(msg))) {
		explained = utf8_clean(msg, strlen(msg), SIZE_MAX / 4);
		free(msg);
		msg = explained;
	}
	ember_counters.request_errors++;
	log_debug("connection %llu (pid %ld): %s: %s",
	    (unsigned long long)c->id, (long)c->pid, class, msg);
	connection_send(c, 0, json_pack("{s:{s:s,s:s}}", "error", "class",
	    class, "message", msg));
	free(msg);
}

/* Reply with an error of class, its message made from fmt. */
static void __attribute__((format(printf, 3, 4)))
connection_reply_error(struct connection *c, const char *class,
    const char *fmt, ...)
{
	va_list	ap;

	va_start(ap, fmt);
	connection_reply_verror(c, class, fmt, ap);
	va_end(ap);
}

/* Let go of what the frame being read holds of daemon.max_input. */
static void
connection_release_frame(struct connection *c)
{
	if (c->reserved > 0) {
		limit_release(c->uid, LIMIT_INPUT, c->reserved);
		channel_want(c->ch, 0);
	}
	c->reserved = 0;
}

/* Close once the output is flushed; what the client sent is dropped. */
static void
connection_close_after_flush(struct connection *c)
{
	c->state = CONN_CLOSING;
	c->active_ms = ember_now_ms();
	evbuffer_drain(channel_input(c->ch),
	    evbuffer_get_length(channel_input(c->ch)));
	connection_release_frame(c);
	channel_hold(c->ch);
	channel_set_write_cb(c->ch, 0, connection_write_cb);
	event_active(c->kick, EV_WRITE, 1);
	connection_arm(c);
}

/* Reply with an error, then close: the framing is broken, or a limit
 * leaves no way to go on. */
static void __attribute__((format(printf, 3, 4)))
connection_fail(struct connection *c, const char *class, const char *fmt, ...)
{
	va_list	ap;

	va_start(ap, fmt);
	connection_reply_verror(c, class, fmt, ap);
	va_end(ap);
	connection_close_after_flush(c);
}

/* How much input may be buffered: the frame being read, whose bytes are
 * reserved, and a little more. */
static size_t
connection_input_room(const struct connection *c)
{
	return ((size_t)c->reserved + 4 + CONNECTION_READ_AHEAD);
}

/* The client sent something: a frame that starts now must be whole
 * within daemon.request_timeout. */
static void
connection_read_cb(void *arg)
{
	struct connection	*c = arg;

	c->active_ms = ember_now_ms();
	if (c->frame_ms == 0 && evbuffer_get_length(channel_input(c->ch)) > 0)
		c->frame_ms = c->active_ms;
	connection_process(c);
}

/* The client is gone, or its socket failed. */
static void
connection_error_cb(void *arg, int error)
{
	struct connection	*c = arg;

	if (error != 0)
		log_debug("connection %llu: %s", (unsigned long long)c->id,
		    strerror(error));
	connection_free(c);
}

enum connection_frame {
	CONN_FRAME_WAIT,	/* not all of it is here yet */
	CONN_FRAME_READY,	/* 4 + len bytes are buffered (or a special
				   length) */
	CONN_FRAME_REFUSED,	/* the connection is failing */
};

/*
 * Look at the frame at the head of the input.  From the moment its header
 * is in, its bytes are held against daemon.max_input_per_uid and
 * daemon.max_input, and emberd reads no more of it than those allow.
 */
static enum connection_frame
connection_peek_frame(struct connection *c, int32_t *len)
{
	struct evbuffer		*in = channel_input(c->ch);
	enum frame_status	 st;
	char			*err;

	st = frame_peek(in, (size_t)ember_conf.daemon_max_frame, len);
	if (st == FRAME_TOO_LARGE) {
		connection_fail(c, "FRAME_INVALID", "frame of %ld bytes is over "
		    "daemon.max_frame (%lld)", (long)*len,
		    (long long)ember_conf.daemon_max_frame);
		return (CONN_FRAME_REFUSED);
	}
	if (evbuffer_get_length(in) >= 4 && *len > 0 && c->reserved == 0) {
		if (limit_charge(c->uid, LIMIT_INPUT, *len, &err) == -1) {
			connection_fail(c, "LIMIT_EXCEEDED", "%s; a frame of "
			    "%ld bytes refused, closing the connection", err,
			    (long)*len);
			free(err);
			return (CONN_FRAME_REFUSED);
		}
		c->reserved = *len;
		channel_want(c->ch, connection_input_room(c));
	}
	return (st == FRAME_OK ? CONN_FRAME_READY : CONN_FRAME_WAIT);
}

/* The frame at the head of the input is taken (len bytes with its
 * header): release what it held. */
static void
connection_take_frame(struct connection *c, size_t len)
{
	struct evbuffer	*in = channel_input(c->ch);

	evbuffer_drain(in, len);
	connection_release_frame(c);
	c->frame_ms = evbuffer_get_length(in) > 0 ? ember_now_ms() : 0;
}

void
connection_stream_begin(struct connection *c, struct operation *op)
{
	c->state = CONN_STREAM;
	c->op = op;
	c->active_ms = ember_now_ms();
}

void
connection_stream_end(struct connection *c)
{
	c->state = CONN_CONTROL;
	c->op = NULL;
	/* What the client sent meanwhile is waited for from now on. */
	c->active_ms = ember_now_ms();
	c->frame_ms = evbuffer_get_length(channel_input(c->ch)) > 0 ?
	    c->active_ms : 0;
	event_active(c->kick, EV_READ, 1);
}

void
connection_set_completed(struct connection *c, struct operation *op)
{
	c->completed = op;
}

void
connection_busy_begin(struct connection *c, struct operation *op)
{
	c->state = CONN_BUSY;
	c->op = op;
	c->active_ms = ember_now_ms();
}

void
connection_busy_end(struct connection *c)
{
	connection_stream_end(c);
}

static void	connection_hello(struct connection *, json_t *);

/* The user hello waited for is looked up: say hello again. */
static void
connection_user_cb(void *arg)
{
	struct connection	*c = arg;
	json_t			*req = c->hello;

	c->lookup = NULL;
	c->hello = NULL;
	connection_stream_end(c);	/* back to control frames */
	connection_hello(c, req);
	json_decref(req);
}

/*
 * Have the users a client's jobs need (its own; for root,
 * workers.root_user) looked up off the loop before its session starts, so
 * that nothing after waits for a lookup on the loop: 1 if hello waits,
 * the connection busy meanwhile.
 */
static int
connection_wait_user(struct connection *c, json_t *req)
{
	c->lookup = userdb_wait_uid(c->uid, connection_user_cb, c);
	if (c->lookup == NULL && c->uid == 0 && geteuid() == 0)
		c->lookup = userdb_wait_name(ember_conf.workers_root_user,
		    connection_user_cb, c);
	if (c->lookup == NULL)
		return (0);
	c->hello = json_incref(req);
	c->state = CONN_BUSY;
	c->active_ms = ember_now_ms();
	return (1);
}

/* hello: version check, then a new or resumed session. */
static void
connection_hello(struct connection *c, json_t *req)
{
	static const char *const keys[] = { "op", "version", "session",
	    "client", NULL };
	json_int_t	 version = 0;
	const char	*sid = NULL, *client = NULL;
	struct session	*s;
	char		*err;

	if (jread_only(req, "", keys, &err) == -1 ||
	    jread_int(req, "", "version", JREAD_REQUIRED, &version, &err) == -1 ||
	    jread_string(req, "", "session", JREAD_OPTIONAL, &sid, &err) == -1 ||
	    jread_string(req, "", "client", JREAD_OPTIONAL, &client,
	    &err) == -1) {
		connection_reply_error(c, "REQUEST_INVALID", "hello: %s", err);
		free(err);
		return;
	}
	if (version != EMBER_PROTOCOL_VERSION) {
		connection_send(c, 0, json_pack("{s:i,s:{s:s,s:s}}",
		    "version", EMBER_PROTOCOL_VERSION, "error", "class",
		    "VERSION_MISMATCH", "message",
		    "this emberd speaks protocol version 1"));
		ember_counters.request_errors++;
		return;
	}
	if (connection_wait_user(c, req))
		return;
	if (sid != NULL) {
		if ((s = session_resume(sid, c->uid)) == NULL) {
			connection_reply_error(c, "SESSION_NOT_FOUND",
			    "no session %s", sid);
			return;
		}
	} else if ((s = session_create(c->uid, c->gid, &err)) == NULL) {
		connection_reply_error(c, "LIMIT_EXCEEDED", "%s", err);
		free(err);
		return;
	}
	if (c->session != NULL)
		session_release(c->session);
	c->session = s;
	log_debug("connection %llu: hello from %s (pid %ld, uid %ld), "
	    "session %s", (unsigned long long)c->id,
	    client != NULL ? client : "a client", (long)c->pid, (long)c->uid,
	    session_id(s));
	connection_reply_ok(c, json_pack("{s:i,s:s,s:s}", "version",
	    EMBER_PROTOCOL_VERSION, "session", session_id(s), "server",
	    "emberd " PACKAGE_VERSION));
}

void
connection_answer(struct connection *c, struct request_answer *a)
{
	switch (a->kind) {
	case REQUEST_ANSWER_OK:
		connection_reply_ok(c, a->fields);
		break;
	case REQUEST_ANSWER_ERROR:
		connection_reply_error(c, a->class, "%s", a->message);
		free(a->message);
		break;
	case REQUEST_ANSWER_STREAM:
		connection_reply_ok(c, a->fields);
		connection_stream_begin(c, a->op);
		operation_stream_resume(a->op);
		break;
	case REQUEST_ANSWER_LATER:
		break;
	}
}

static void
connection_execute(struct connection *c, json_t *req)
{
	struct request_answer	a;

	if (ember_draining) {
		connection_reply_error(c, "SHUTTING_DOWN",
		    "emberd is shutting down and takes no new work");
		return;
	}
	operation_execute(c, c->session, req, &a);
	connection_answer(c, &a);
}

/* A broadcast's bytes are in and indexed, or something failed. */
static void
connection_upload_cb(struct broadcast *b, const char *class,
    const char *err, void *arg)
{
	struct connection	*c = arg;

	c->upload = NULL;
	if (class == NULL) {
		ember_counters.broadcasts++;
		connection_reply_ok(c, json_pack("{s:I,s:I,s:I}", "broadcast",
		    (json_int_t)broadcast_id(b), "size",
		    (json_int_t)broadcast_size(b), "index",
		    (json_int_t)broadcast_index_size(b)));
	} else {
		broadcast_abandon(b);
		if (strcmp(class, "LIMIT_EXCEEDED") == 0)
			connection_reply_error(c, class, "%s", err);
		else
			connection_reply_error(c, class, "broadcast_put: %s",
			    err);
	}
	connection_stream_end(c);	/* back to control frames */
}

/* A broadcast passed by descriptor was read, or could not be. */
static void
connection_upload_read_cb(struct broadcast *b, const char *class,
    const char *err, void *arg)
{
	struct connection	*c = arg;

	if (class == NULL)
		connection_upload_done(c);
	else
		connection_upload_cb(b, class, err, arg);
}

/*
 * broadcast_put: the bytes follow as raw frames, and the reply comes when
 * they are all in; or, with "fd": true, they are the file whose descriptor
 * came with the request (SCM_RIGHTS), read through that descriptor, so
 * with the client's access and never through the socket.  "index": false
 * puts the bytes without their set index (a pickled object has no lines).
 */
static void
connection_broadcast_put(struct connection *c, json_t *req)
{
	static const char *const keys[] = { "op", "size", "fd", "index",
	    NULL };
	json_int_t	 size = 0;
	int		 use_fd = 0, index = 1, fd;
	const char	*class = "REQUEST_INVALID";
	char		*err;

	if (jread_only(req, "", keys, &err) == -1 ||
	    jread_bool(req, "", "fd", JREAD_OPTIONAL, &use_fd, &err) == -1 ||
	    jread_int(req, "", "size", !use_fd, &size, &err) == -1 ||
	    jread_bool(req, "", "index", JREAD_OPTIONAL, &index, &err) == -1)
		goto fail;
	if (use_fd) {
		if ((fd = channel_take_fd(c->ch)) == -1) {
			err = xstrdup("fd: no descriptor came with the request");
			goto fail;
		}
		if ((c->upload = broadcast_create(c->session, 0, &class,
		    &err)) == NULL) {
			closer_close(fd);
			goto fail;
		}
		if (!index)
			broadcast_skip_index(c->upload);
		/* Read by a helper, as the user and off the loop; no other
		 * request is read meanwhile. */
		if (broadcast_read_fd(c->upload, fd, connection_upload_read_cb,
		    c, &class, &err) == -1) {
			closer_close(fd);
			broadcast_abandon(c->upload);
			c->upload = NULL;
			goto fail;
		}
		/* The helper holds it now: ours may still be the last, if
		 * the helper is gone already. */
		closer_close(fd);
		c->state = CONN_BUSY;
		c->active_ms = ember_now_ms();
		return;
	}
	if ((c->upload = broadcast_create(c->session, size, &class,
	    &err)) == NULL)
		goto fail;
	if (!index)
		broadcast_skip_index(c->upload);
	c->state = CONN_UPLOAD;
	if (size == 0)
		connection_upload_done(c);
	return;
fail:
	if (strcmp(class, "LIMIT_EXCEEDED") == 0)
		connection_reply_error(c, class, "%s", err);
	else
		connection_reply_error(c, class, "broadcast_put: %s", err);
	free(err);
}

static void
connection_broadcast_drop(struct connection *c, json_t *req)
{
	static const char *const keys[] = { "op", "broadcast", NULL };
	json_int_t	 id = 0;
	char		*err;

	if (jread_only(req, "", keys, &err) == -1 ||
	    jread_int(req, "", "broadcast", JREAD_REQUIRED, &id, &err) == -1) {
		connection_reply_error(c, "REQUEST_INVALID", "broadcast_drop: "
		    "%s", err);
		free(err);
		return;
	}
	if (broadcast_drop(c->session, id) == -1) {
		connection_reply_error(c, "BROADCAST_NOT_FOUND", "no broadcast "
		    "%lld in this session", (long long)id);
		return;
	}
	connection_reply_ok(c, NULL);
}

static void
connection_status(struct connection *c, json_t *req)
{
	(void)req;
	connection_reply_ok(c, status_build(c->uid));
}

static void
connection_reattach(struct connection *c, json_t *req)
{
	struct request_answer	a;

	operation_reattach(c, c->session, req, &a);
	connection_answer(c, &a);
}

static void
connection_release(struct connection *c, json_t *req)
{
	struct request_answer	a;

	operation_release(c, c->session, req, &a);
	connection_answer(c, &a);
}

static void
connection_interrupt(struct connection *c, json_t *req)
{
	struct request_answer	a;

	operation_interrupt(c->session, req, c->pid, &a);
	connection_answer(c, &a);
}

static void
connection_checkpoint_drop(struct connection *c, json_t *req)
{
	struct request_answer	a;

	checkpoint_drop_request(c->session, req, &a);
	connection_answer(c, &a);
}

static void
connection_close_session(struct connection *c, json_t *req)
{
	(void)req;
	session_close(c->session, "session closed");
	session_release(c->session);
	c->session = NULL;
	connection_reply_ok(c, NULL);
}

static const struct connection_request connection_requests[] = {
	{ "hello", 0, connection_hello },
	{ "execute", 1, connection_execute },
	{ "reattach", 1, connection_reattach },
	{ "release", 1, connection_release },
	{ "interrupt", 1, connection_interrupt },
	{ "status", 1, connection_status },
	{ "close_session", 1, connection_close_session },
	{ "broadcast_put", 1, connection_broadcast_put },
	{ "broadcast_drop", 1, connection_broadcast_drop },
	{ "checkpoint_drop", 1, connection_checkpoint_drop },
};

/* Handle a request, its log lines about the connection's session. */
static void
connection_handle(struct connection *c, const struct connection_request *r,
    json_t *req)
{
	struct log_context		 ctx;
	const struct log_context	*prev;

	log_context_fill(&ctx, c->session != NULL ? session_id(c->session) :
	    NULL, NULL, -1, 0);
	prev = log_set_context(&ctx);
	r->handle(c, req);
	log_set_context(prev);
}

/* Answer one request, parsed; req is still the caller's. */
static void
connection_dispatch_request(struct connection *c, json_t *req)
{
	const struct connection_request	*r;
	json_t				*op;
	size_t				 i;

	op = json_object_get(req, "op");
	for (i = 0; i < sizeof connection_requests /
	    sizeof connection_requests[0]; i++) {
		r = &connection_requests[i];
		if (strcmp(r->op, json_string_value(op)) != 0)
			continue;
		/* A request after a stream's end shows the end arrived;
		 * release and reattach name their operation themselves. */
		if (c->completed != NULL && strcmp(r->op, "release") != 0 &&
		    strcmp(r->op, "reattach") != 0)
			operation_confirm(c->completed);
		if (r->needs_hello && c->session != NULL &&
		    session_closed(c->session)) {
			/* Closed from another connection, or expired. */
			session_release(c->session);
			c->session = NULL;
			connection_reply_error(c, "HELLO_REQUIRED",
			    "%s: the session was closed; say hello again",
			    r->op);
		} else if (r->needs_hello && c->session == NULL)
			connection_reply_error(c, "HELLO_REQUIRED",
			    "%s: say hello first", r->op);
		else
			connection_handle(c, r, req);
		return;
	}
	connection_reply_error(c, "REQUEST_INVALID", "unknown op \"%s\"",
	    json_string_value(op));
}

/* Parse and answer one control frame. */
static void
connection_dispatch(struct connection *c, const char *data, size_t len)
{
	json_t	*req;
	char	*err;

	ember_counters.requests++;
	if ((req = request_parse(data, len,
	    (size_t)ember_conf.daemon_max_frame_values, &err)) == NULL) {
		connection_reply_error(c, "REQUEST_INVALID", "%s", err);
		free(err);
		return;
	}
	connection_dispatch_request(c, req);
	json_decref(req);
}

/* Let go of what a frame in the parser holds: the parse, and its bytes
 * held against daemon.max_input. */
static void
connection_parse_end(struct connection *c)
{
	if (c->parse != NULL)
		parser_cancel(c->parse);
	c->parse = NULL;
	if (c->parsing > 0)
		limit_release(c->uid, LIMIT_INPUT, c->parsing);
	c->parsing = 0;
}

/* A big frame is parsed (or refused): answer it as any other, then read
 * on. */
static void
connection_parsed_cb(json_t *req, char *err, void *arg)
{
	struct connection	*c = arg;

	c->parse = NULL;
	connection_parse_end(c);
	c->state = CONN_CONTROL;
	c->active_ms = ember_now_ms();
	ember_counters.requests++;
	if (req == NULL) {
		connection_reply_error(c, "REQUEST_INVALID", "%s", err);
		free(err);
	} else {
		connection_dispatch_request(c, req);
		/* Its tree may be big: freed by the parser's thread, and its
		 * pages given back once the heap is still. */
		parser_drop(req);
		heap_check_soon();
	}
	if (c->state == CONN_CLOSING)
		return;
	/* What the client sent meanwhile waits no more. */
	c->frame_ms = evbuffer_get_length(channel_input(c->ch)) > 0 ?
	    c->active_ms : 0;
	event_active(c->kick, EV_READ, 1);
	connection_arm(c);
}

/*
 * Hand the big frame of len bytes at the head of the input to the parser,
 * its bytes still held against daemon.max_input; no more frames are read
 * until it is answered.  When the uid has its share of the parser, the
 * frame waits in the input (and the socket) until there is room: 1 if it
 * went.
 */
static int
connection_parse_later(struct connection *c, size_t len)
{
	struct evbuffer	*in = channel_input(c->ch), *frame;

	if (parser_full(c->uid)) {
		c->parse_wait = 1;
		return (0);
	}
	c->parse_wait = 0;
	frame = evbuffer_new();
	evbuffer_drain(in, 4);
	/* Moved, not copied. */
	if (evbuffer_remove_buffer(in, frame, len) != (int)len)
		fatalx("%s: evbuffer_remove_buffer", __func__);
	c->parsing = c->reserved;
	c->reserved = 0;
	channel_want(c->ch, 0);
	c->state = CONN_PARSING;
	c->active_ms = ember_now_ms();
	c->frame_ms = 0;
	c->parse = parser_parse(c->uid, frame,
	    (size_t)ember_conf.daemon_max_frame_values, connection_parsed_cb,
	    c);
	return (1);
}

/* A frame of uid's left the parser: its connections whose big frame
 * waited for room try again. */
static void
connection_parser_room_cb(uid_t uid)
{
	struct connection	*c;

	TAILQ_FOREACH(c, &connections, entry) {
		if (c->parse_wait && c->uid == uid)
			event_active(c->kick, EV_READ, 1);
	}
}

void
connection_init(void)
{
	parser_init(connection_parser_room_cb);
}

/* Handle one control frame if a whole one is buffered: 1 if handled. */
static int
connection_read_control(struct connection *c)
{
	struct evbuffer	*in = channel_input(c->ch);
	int32_t		 len;
	unsigned char	*data;

	/* A client that does not read its replies gets no more of them. */
	if (connection_output_full(c))
		return (0);
	if (connection_peek_frame(c, &len) != CONN_FRAME_READY)
		return (0);
	if (len < 0) {
		connection_fail(c, "FRAME_INVALID", "expected a control frame, "
		    "got length %ld", (long)len);
		return (0);
	}
	if ((size_t)len >= PARSER_THRESHOLD)
		return (connection_parse_later(c, (size_t)len));
	data = evbuffer_pullup(in, len + 4);
	connection_dispatch(c, (const char *)data + 4, (size_t)len);
	connection_take_frame(c, (size_t)len + 4);
	return (1);
}

/*
 * The last byte of an upload is in: seal it and have it indexed; the
 * answer with its id comes then, and no other request is read meanwhile.
 */
static void
connection_upload_done(struct connection *c)
{
	const char	*class;
	char		*err;

	c->state = CONN_BUSY;
	c->active_ms = ember_now_ms();
	if (broadcast_seal(c->upload, connection_upload_cb, c, &class,
	    &err) == -1) {
		connection_upload_cb(c->upload, class, err, c);
		free(err);
	}
}

/* Take one raw frame of an upload: 1 if taken. */
static int
connection_read_upload(struct connection *c)
{
	struct evbuffer	*in = channel_input(c->ch);
	int32_t		 len;
	char		*err;

	switch (connection_peek_frame(c, &len)) {
	case CONN_FRAME_WAIT:
		return (0);
	case CONN_FRAME_REFUSED:
		broadcast_abandon(c->upload);
		c->upload = NULL;
		return (0);
	case CONN_FRAME_READY:
		break;
	}
	if (len < 0 || len > broadcast_missing(c->upload)) {
		broadcast_abandon(c->upload);
		c->upload = NULL;
		connection_fail(c, "FRAME_INVALID", "a broadcast's bytes come as "
		    "frames adding up to its size");
		return (0);
	}
	if (broadcast_write(c->upload, evbuffer_pullup(in, len + 4) + 4,
	    (size_t)len, &err) == -1) {
		connection_take_frame(c, (size_t)len + 4);
		broadcast_abandon(c->upload);
		c->upload = NULL;
		c->state = CONN_CONTROL;
		connection_reply_error(c, "INTERNAL", "broadcast_put: %s", err);
		free(err);
		return (1);
	}
	connection_take_frame(c, (size_t)len + 4);
	if (broadcast_missing(c->upload) == 0)
		connection_upload_done(c);
	return (1);
}

/* Work through buffered input as far as the state allows, then read on
 * if there is room. */
static void
connection_process(struct connection *c)
{
	connection_process_input(c);
	if (c->state == CONN_CLOSING)
		return;
	connection_arm(c);
	channel_resume(c->ch);
}

static void
connection_process_input(struct connection *c)
{
	struct evbuffer	*in = channel_input(c->ch);
	int		 n, handled;

	for (n = 0; n < CONNECTION_BATCH; n++) {
		switch (c->state) {
		case CONN_CONTROL:
			handled = connection_read_control(c);
			break;
		case CONN_STREAM:
			handled = operation_stream_input(c->op, in);
			break;
		case CONN_UPLOAD:
			handled = connection_read_upload(c);
			break;
		default:
			return;
		}
		if (!handled)
			return;
	}
	/* More may be buffered: come back after others had their turn. */
	event_active(c->kick, EV_READ, 1);
}


/* Is it the client's turn to send: no request of its runs, and a stream
 * waits for its next request? */
static int
connection_clients_turn(struct connection *c)
{
	switch (c->state) {
	case CONN_CONTROL:
		/* Replies are not read: the next request waits for room. */
		return (!connection_output_full(c));
	case CONN_UPLOAD:
		return (1);
	case CONN_STREAM:
		return (operation_stream_waiting(c->op));
	default:
		return (0);
	}
}

/* Is it the client's turn, with nothing of emberd's left to write or to
 * read?  Such a connection is closed after daemon.idle_timeout. */
static int
connection_idle(struct connection *c)
{
	return (evbuffer_get_length(channel_output(c->ch)) == 0 &&
	    evbuffer_get_length(channel_input(c->ch)) == 0 &&
	    connection_clients_turn(c));
}

/* Does emberd wait for the rest of something the client started to send?
 * It must come within daemon.request_timeout. */
static int
connection_waits_input(struct connection *c)
{
	/* Not when a whole frame waits for the parser: emberd's turn. */
	return (c->frame_ms != 0 && !c->parse_wait &&
	    evbuffer_get_length(channel_input(c->ch)) > 0 &&
	    connection_clients_turn(c));
}

/* Does emberd have output the client takes none of?  It is closed after
 * daemon.write_timeout. */
static int
connection_write_stalled(struct connection *c)
{
	return (evbuffer_get_length(channel_output(c->ch)) > 0);
}

/* Set the timer for the next deadline: the frame being read, a last reply
 * the client does not take, output it does not read, or idleness; else
 * look again later, as a stream or a request may end meanwhile. */
static void
connection_arm(struct connection *c)
{
	uint64_t	now = ember_now_ms(), at;
	uint64_t	rt = (uint64_t)ember_conf.daemon_request_timeout;
	uint64_t	it = (uint64_t)ember_conf.daemon_idle_timeout;
	uint64_t	wt = (uint64_t)ember_conf.daemon_write_timeout;
	struct timeval	tv;

	if (c->state == CONN_CLOSING)
		at = c->active_ms + rt;
	else if (connection_waits_input(c))
		at = c->frame_ms + rt;
	else if (it > 0 && connection_idle(c))
		at = c->active_ms + it;
	else
		at = now + (it > 0 && it < rt ? it : rt);
	if (connection_write_stalled(c) && c->wrote_ms + wt < at)
		at = c->wrote_ms + wt;
	if (at < now + CONNECTION_TICK_MS)
		at = now + CONNECTION_TICK_MS;
	tv.tv_sec = (time_t)((at - now) / 1000);
	tv.tv_usec = (suseconds_t)((at - now) % 1000) * 1000;
	evtimer_add(c->timer, &tv);
}

/* A deadline passed, perhaps. */
static void
connection_timer_cb(evutil_socket_t fd, short events, void *arg)
{
	struct connection	*c = arg;
	uint64_t		 now = ember_now_ms();
	uint64_t		 rt = (uint64_t)ember_conf.daemon_request_timeout;
	uint64_t		 it = (uint64_t)ember_conf.daemon_idle_timeout;
	uint64_t		 wt = (uint64_t)ember_conf.daemon_write_timeout;

	(void)fd; (void)events;
	if (connection_write_stalled(c) && now - c->wrote_ms >= wt) {
		ember_counters.connections_timed_out++;
		log_info("connection %llu (pid %ld, uid %ld): the client took "
		    "none of its %zu bytes of output in daemon.write_timeout "
		    "(%llums); closed", (unsigned long long)c->id, (long)c->pid,
		    (long)c->uid, evbuffer_get_length(channel_output(
		    c->ch)), (unsigned long long)wt);
		connection_free(c);
		return;
	}
	if (c->state == CONN_CLOSING) {
		if (now - c->active_ms >= rt) {
			log_info("connection %llu (pid %ld): the client took not "
			    "its last reply in daemon.request_timeout; closed",
			    (unsigned long long)c->id, (long)c->pid);
			connection_free(c);
			return;
		}
	} else if (connection_waits_input(c) && now - c->frame_ms >= rt) {
		ember_counters.connections_timed_out++;
		log_info("connection %llu (pid %ld, uid %ld): a frame incomplete "
		    "after daemon.request_timeout; closing",
		    (unsigned long long)c->id, (long)c->pid, (long)c->uid);
		connection_fail(c, "LIMIT_EXCEEDED", "daemon.request_timeout is "
		    "%llums: a frame took longer to arrive; closing the "
		    "connection", (unsigned long long)rt);
	} else if (it > 0 && connection_idle(c) && now - c->active_ms >= it) {
		ember_counters.connections_timed_out++;
		log_info("connection %llu (pid %ld, uid %ld): idle past "
		    "daemon.idle_timeout (%llums); closed",
		    (unsigned long long)c->id, (long)c->pid, (long)c->uid,
		    (unsigned long long)it);
		connection_free(c);
		return;
	}
	connection_arm(c);
}

/* Output drained below the low mark (or empty, when closing). */
static void
connection_write_cb(void *arg)
{
	struct connection	*c = arg;

	if (c->state == CONN_CLOSING) {
		if (evbuffer_get_length(channel_output(c->ch)) == 0)
			connection_free(c);
		return;
	}
	c->active_ms = ember_now_ms();
	if (c->state == CONN_STREAM)
		operation_stream_writable(c->op);
	else if (c->state == CONN_CONTROL)
		event_active(c->kick, EV_READ, 1);	/* room for replies */
	connection_arm(c);
}

static void
connection_kick_cb(evutil_socket_t fd, short events, void *arg)
{
	struct connection	*c = arg;

	(void)fd;
	if (c->state == CONN_CLOSING) {
		if (evbuffer_get_length(channel_output(c->ch)) == 0)
			connection_free(c);
		return;
	}
	if (events & EV_READ)
		connection_process(c);
}

void
connection_create(int fd)
{
	struct connection	*c;
	struct ucred		 cred;
	socklen_t		 len = sizeof cred;
	char			*err;

	if (getsockopt(fd, SOL_SOCKET, SO_PEERCRED, &cred, &len) == -1) {
		log_warn("SO_PEERCRED: %s", strerror(errno));
		closer_close_drained(fd);
		return;
	}
	c = xcalloc(1, sizeof *c);
	c->id = connection_next_id++;
	c->uid = cred.uid;
	c->gid = cred.gid;
	c->pid = cred.pid;
	c->state = CONN_CONTROL;
	c->ch = channel_create(fd, 4 + CONNECTION_READ_AHEAD, connection_read_cb,
	    c);
	channel_set_error_cb(c->ch, connection_error_cb);
	/* Kept for the request that takes them (broadcast_put). */
	channel_accept_fds(c->ch, CONNECTION_FDS);
	/* The loop writes the output, and wakes the writer when the client
	 * has taken half of what a stream may queue. */
	channel_set_write_cb(c->ch, (size_t)ember_conf.stream_buffer / 2,
	    connection_write_cb);
	c->kick = event_new(ember_base, -1, 0, connection_kick_cb, c);
	c->timer = evtimer_new(ember_base, connection_timer_cb, c);
	c->active_ms = ember_now_ms();
	c->wrote_ms = c->active_ms;
	c->out_cb = evbuffer_add_cb(channel_output(c->ch),
	    connection_output_cb, c);
	TAILQ_INSERT_TAIL(&connections, c, entry);
	connection_count++;
	ember_counters.connections++;

	if (limit_charge(c->uid, LIMIT_CONNECTIONS, 1, &err) == -1) {
		ember_counters.connections_refused++;
		log_warn("refusing a connection of pid %ld: %s", (long)c->pid,
		    err);
		connection_fail(c, "LIMIT_EXCEEDED", "%s", err);
		free(err);
		return;
	}
	c->counted = 1;
	log_debug("connection %llu from pid %ld uid %ld",
	    (unsigned long long)c->id, (long)c->pid, (long)c->uid);
	connection_arm(c);
}

static void
connection_free(struct connection *c)
{
	log_debug("connection %llu closed", (unsigned long long)c->id);
	if (c->op != NULL)
		operation_detach(c->op);
	if (c->completed != NULL)
		operation_forget_connection(c->completed);
	if (c->upload != NULL)
		broadcast_abandon(c->upload);
	if (c->lookup != NULL)
		userdb_cancel(c->lookup);
	if (c->hello != NULL)
		json_decref(c->hello);
	if (c->session != NULL)
		session_release(c->session);
	connection_parse_end(c);
	connection_release_frame(c);
	evbuffer_remove_cb_entry(channel_output(c->ch), c->out_cb);
	if (c->held > 0)
		limit_release(c->uid, LIMIT_RESULTS, c->held);
	if (c->counted)
		limit_release(c->uid, LIMIT_CONNECTIONS, 1);
	TAILQ_REMOVE(&connections, c, entry);
	connection_count--;
	event_free(c->timer);
	event_free(c->kick);
	channel_free(c->ch);
	free(c);
	heap_check_soon();
	ember_check_drained();
}

void
connection_close_now(struct connection *c)
{
	connection_free(c);
}

void
connection_close_all(void)
{
	struct connection	*c;

	while ((c = TAILQ_FIRST(&connections)) != NULL) {
		/* A last error frame is worth a try: it may fit. */
		channel_flush(c->ch);
		connection_free(c);
	}
}

/* Shutting down: a frame in the parser, or read whole and waiting for
 * room in it, is not answered but refused. */
static void
connection_shutdown_parse(struct connection *c)
{
	if (c->state == CONN_PARSING) {
		connection_parse_end(c);
		c->state = CONN_CONTROL;
	} else if (!c->parse_wait)
		return;
	c->parse_wait = 0;
	connection_reply_error(c, "SHUTTING_DOWN", "emberd is shutting down; "
	    "the request was not read");
}

void
connection_shutdown(void)
{
	struct connection	*c;

	TAILQ_FOREACH(c, &connections, entry) {
		if (c->state == CONN_UPLOAD) {
			broadcast_abandon(c->upload);
			c->upload = NULL;
			c->state = CONN_CONTROL;
			connection_reply_error(c, "SHUTTING_DOWN", "emberd is "
			    "shutting down; the broadcast was not kept");
		}
		if (c->state == CONN_BUSY && c->op != NULL)
			operation_shutdown_unstarted(c->op);
		connection_shutdown_parse(c);
		if (c->state == CONN_CONTROL)
			connection_close_after_flush(c);
	}
}

size_t
connection_close_flushed(void)
{
	struct connection	*c;

	TAILQ_FOREACH(c, &connections, entry) {
		connection_shutdown_parse(c);
		if (c->state == CONN_CONTROL)
			connection_close_after_flush(c);
	}
	return (connection_count);
}
