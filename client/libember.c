#include <sys/types.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/un.h>

#include <errno.h>
#include <grp.h>
#include <poll.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#include <jansson.h>

#include "ember.h"
#include "fdpass.h"
#include "frame.h"
#include "framebuf.h"
#include "jwrite.h"
#include "protocol.h"

#ifndef PACKAGE_VERSION
#define PACKAGE_VERSION "unknown"
#endif

/*
 * Everything emberd sends goes through one read buffer: control replies and
 * the result stream alike.  Records are returned as pointers into it, so a
 * stream costs one read() per buffer and no copy or allocation per record.
 * The buffer grows for a frame that does not fit and shrinks back when the
 * stream ends.
 */
#define EMBER_BUFFER_SIZE	(1024 * 1024)
#define EMBER_MAX_REPLY		(64 * 1024 * 1024)
/* Broadcast bytes go in frames of this size, under daemon.max_frame. */
#define EMBER_BROADCAST_FRAME	(1024 * 1024)
/* A record travels inside a worker's batch, so it is never bigger. */
#define EMBER_MAX_RECORD	EMBER_MAX_BATCH
/* emberd adds context (partition, worker) to a worker's message. */
#define EMBER_MAX_ERROR		(1024 * 1024)
/* Release what the caller consumed once this much of it is unreleased. */
#define EMBER_RELEASE_EVERY	(1024 * 1024)
/* Reattach: attempts per outage, and the backoff between them. */
#define EMBER_RETRY_ATTEMPTS	10
#define EMBER_RETRY_FIRST_MS	20
#define EMBER_RETRY_MAX_MS	1000

enum ember_state {
	EMBER_CONTROL,		/* control requests and replies */
	EMBER_BETWEEN,		/* stream: a response (1, 0, -1, 2) is next */
	EMBER_RECORDS,		/* stream: inside a partition */
	EMBER_BROKEN,		/* the connection failed; only close is left */
};

struct ember {
	int			 fd;
	enum ember_state	 state;
	char			*socket_path;

	char			*session;
	char			*operation;	/* of the open stream */

	/*
	 * Reattach.  The position is what the caller was given: offset
	 * records of partition, or, once its end was read (ended), all of
	 * it.  resume: the next "1" continues that partition.
	 */
	int			 reattachable;
	int			 in_stream;
	int			 resume;
	int			 ended;
	int64_t			 offset;
	size_t			 unreleased;	/* bytes given since a release */
	int			 unconfirmed;	/* a stream ended here with 0 */
	int			 rfd;		/* for releases, or -1 */
	int			 attempts, first_ms, max_ms;

	int			 push;		/* collect: no requests */
	int			 requested;	/* iterate: a request is unanswered */
	int			 stopping;	/* ember_stop is draining */
	int			 stop_early;	/* its 0 went mid-partition */
	int			 streamed;	/* a stream has ended */
	int64_t			 partition;	/* current partition, from 0 */

	struct framebuf		 in;	/* read, not yet taken */

	struct ember_bytes	*values;	/* of the last group read */
	size_t			 values_room;	/* its length */

	char			*error;
	char			*error_class;

	/*
	 * The last execute's plan as the caller gave it (plan_in) and as
	 * the request carried it (plan_out), when no path in it was made
	 * absolute, so that the working directory does not matter: the
	 * same plan again (a client polling a count) is sent without being
	 * parsed and written anew.
	 */
	char			*plan_in;
	char			*plan_out;
};

static int	ember_call(struct ember *, json_t *, char **, json_t **);
static int	ember_call_text(struct ember *, char *, int, int, char **,
		    json_t **);
static int	ember_reply(struct ember *, int, int, char **, json_t **);
static int	ember_dial(const char *, char **);
static int	ember_resume(struct ember *);
static int	ember_reconnect(struct ember *);
static void	ember_release_consumed(struct ember *);

/* Set the error to class and a formatted message. */
static void __attribute__((format(printf, 3, 0)))
ember_vfail(struct ember *e, const char *class, const char *fmt, va_list ap)
{
	char	*msg;

	if (vasprintf(&msg, fmt, ap) == -1)
		msg = NULL;
	free(e->error);
	free(e->error_class);
	e->error = msg;
	e->error_class = strdup(class);
}

/* Fail this call; the connection stays usable. */
static int __attribute__((format(printf, 3, 4)))
ember_fail(struct ember *e, const char *class, const char *fmt, ...)
{
	va_list	ap;

	va_start(ap, fmt);
	ember_vfail(e, class, fmt, ap);
	va_end(ap);
	return (-1);
}

/* Fail for good: the connection can no longer be trusted. */
static int __attribute__((format(printf, 3, 4)))
ember_break(struct ember *e, const char *class, const char *fmt, ...)
{
	va_list	ap;

	va_start(ap, fmt);
	ember_vfail(e, class, fmt, ap);
	va_end(ap);
	e->state = EMBER_BROKEN;
	return (-1);
}

/* Fail with an I/O error from errno (0 for end of file). */
static int
ember_break_io(struct ember *e, const char *what)
{
	if (errno == 0)
		return (ember_break(e, "IO_ERROR", "%s: connection closed by "
		    "emberd", what));
	return (ember_break(e, "IO_ERROR", "%s: %s", what, strerror(errno)));
}

/* Refuse a call the state does not allow; 0 if it is allowed. */
static int
ember_check_control(struct ember *e)
{
	switch (e->state) {
	case EMBER_CONTROL:
		return (0);
	case EMBER_BROKEN:
		return (-1);	/* the error stays what broke it */
	default:
		return (ember_fail(e, "STREAM_ACTIVE", "a result stream is "
		    "open: read it to the end or stop it first"));
	}
}

/* Send an iovec array in full, without SIGPIPE. */
static int
ember_sendv(struct ember *e, struct iovec *iov, int iovcnt)
{
	struct msghdr	mh;
	ssize_t		n;

	memset(&mh, 0, sizeof mh);
	while (iovcnt > 0) {
		mh.msg_iov = iov;
		mh.msg_iovlen = (size_t)iovcnt;
		n = sendmsg(e->fd, &mh, MSG_NOSIGNAL);
		if (n == -1) {
			if (errno == EINTR)
				continue;
			return (ember_break_io(e, "write"));
		}
		while (iovcnt > 0 && (size_t)n >= iov->iov_len) {
			n -= (ssize_t)iov->iov_len;
			iov++;
			iovcnt--;
		}
		if (iovcnt > 0) {
			iov->iov_base = (char *)iov->iov_base + n;
			iov->iov_len -= (size_t)n;
		}
	}
	return (0);
}

/* Send one int32. */
static int
ember_send_int32(struct ember *e, int32_t v)
{
	unsigned char	b[4];
	struct iovec	iov = { b, sizeof b };

	be32_put(b, v);
	return (ember_sendv(e, &iov, 1));
}

/* Send one frame. */
static int
ember_send_frame(struct ember *e, const void *data, size_t len)
{
	unsigned char	hdr[4];
	struct iovec	iov[2];

	if (len > INT32_MAX)
		return (ember_fail(e, "REQUEST_INVALID", "request of %zu bytes "
		    "is too large", len));
	be32_put(hdr, (int32_t)len);
	iov[0].iov_base = hdr;
	iov[0].iov_len = sizeof hdr;
	iov[1].iov_base = (void *)data;
	iov[1].iov_len = len;
	return (ember_sendv(e, iov, 2));
}

/* Read from the socket, for framebuf_fill. */
static ssize_t
ember_read_cb(void *arg, void *p, size_t len)
{
	struct ember	*e = arg;

	return (read(e->fd, p, len));
}

/* Read until at least need bytes are unread. */
static int
ember_fill(struct ember *e, size_t need)
{
	int	rc;

	if (framebuf_len(&e->in) >= need)
		return (0);
	/* Room for the frame, and for reading ahead past it. */
	rc = framebuf_fill(&e->in, need, EMBER_BUFFER_SIZE, ember_read_cb, e);
	if (rc == 1)
		return (0);
	if (rc == -1 && errno == ENOMEM)
		return (ember_break(e, "NO_MEMORY", "buffer for %zu bytes: %s",
		    need, strerror(errno)));
	if (rc == 0)
		errno = 0;
	return (ember_break_io(e, "read"));
}

/* Read one int32. */
static int
ember_read_int32(struct ember *e, int32_t *v)
{
	if (ember_fill(e, 4) == -1)
		return (-1);
	*v = be32_get(framebuf_data(&e->in));
	framebuf_take(&e->in, 4);
	return (0);
}

/*
 * Read one frame of at most max bytes; *data points into the buffer.  A
 * negative length breaks the connection: callers read special values
 * themselves.
 */
static int
ember_read_frame(struct ember *e, size_t max, const char *what,
    const unsigned char **data, size_t *len)
{
	int32_t	n;

	if (ember_fill(e, 4) == -1)
		return (-1);
	n = be32_get(framebuf_data(&e->in));
	if (n < 0 || (size_t)n > max)
		return (ember_break(e, "PROTOCOL_ERROR", "%s: bad frame length "
		    "%d", what, n));
	if (ember_fill(e, 4 + (size_t)n) == -1)
		return (-1);
	*data = framebuf_data(&e->in) + 4;
	*len = (size_t)n;
	framebuf_take(&e->in, 4 + (size_t)n);
	return (0);
}

/* End the stream: back to control frames. */
static void
ember_end_stream(struct ember *e)
{
	e->state = EMBER_CONTROL;
	e->streamed = 1;
	e->stopping = 0;
	e->stop_early = 0;
	e->requested = 0;
	e->in_stream = 0;

	/* Give back what a big record made the buffer grow to. */
	framebuf_shrink(&e->in, EMBER_BUFFER_SIZE);
}

/* Read the error frame after -1 or -2 and end the stream with it. */
static int
ember_stream_error(struct ember *e)
{
	const unsigned char	*msg;
	size_t			 len;
	int			 early = e->stop_early;

	if (ember_read_frame(e, EMBER_MAX_ERROR, "error frame", &msg,
	    &len) == -1)
		return (-1);
	/* msg is in the buffer, which ending the stream may shrink. */
	ember_fail(e, "TASK_FAILED", "%.*s", (int)len, (const char *)msg);
	ember_end_stream(e);
	/* The stream ended before emberd took the stop, which it read as an
	 * (empty, so refused) control frame: drop that reply. */
	if (early && ember_read_frame(e, EMBER_MAX_ERROR, "reply", &msg,
	    &len) == -1)
		return (-1);
	return (-1);
}

/* Start a result stream after a successful execute. */
static void
ember_start_stream(struct ember *e, int push, json_t *reply)
{
	const char	*id;

	free(e->operation);
	id = json_string_value(json_object_get(reply, "operation"));
	e->operation = strdup(id != NULL ? id : "?");
	e->state = EMBER_BETWEEN;
	e->push = push;
	e->requested = 0;
	e->stopping = 0;
	e->streamed = 0;
	e->partition = -1;
	e->reattachable = json_is_true(json_object_get(reply,
	    "reattachable")) && e->attempts > 0;
	e->in_stream = 1;
	e->resume = 0;
	e->ended = 1;
	e->offset = 0;
	e->unreleased = 0;
}

/* Read a response between partitions; 1 (records follow), 0 or -1. */
static int
ember_next_partition(struct ember *e)
{
	int32_t	resp;

	/*
	 * Iterate asks for each partition, or to stop.  Collect takes no
	 * requests at all: a stop there has to read to the end, and a 0
	 * written anyway would be read later as an empty control frame.
	 */
	if (!e->push && !e->requested) {
		if (ember_send_int32(e, e->stopping ? EMBER_REQUEST_STOP :
		    EMBER_REQUEST_NEXT) == -1)
			return (-1);
		e->requested = 1;
	}
	if (ember_read_int32(e, &resp) == -1)
		return (-1);
	e->requested = 0;
	switch (resp) {
	case EMBER_STREAM_PARTITION:
		e->state = EMBER_RECORDS;
		if (e->resume)
			e->resume = 0;	/* the rest of the same partition */
		else {
			e->partition++;
			e->offset = 0;
		}
		e->ended = 0;
		return (1);
	case EMBER_STREAM_DONE:
		ember_end_stream(e);
		e->unconfirmed = e->reattachable;
		return (0);
	case EMBER_STREAM_ERROR:
		return (ember_stream_error(e));
	case EMBER_STREAM_DETACHED:
		if (e->reattachable) {
			/* A graceful cut: reattach on this connection. */
			e->state = EMBER_CONTROL;
			return (ember_resume(e) == 0 ? 2 : -1);
		}
		ember_end_stream(e);
		return (ember_fail(e, "DETACHED", "operation %s: emberd "
		    "detached the stream after partition %lld",
		    e->operation != NULL ? e->operation : "?",
		    (long long)e->partition));
	default:
		return (ember_break(e, "PROTOCOL_ERROR", "unexpected stream "
		    "response %d", resp));
	}
}

int64_t
ember_partition(const struct ember *e)
{
	return (e->partition);
}

/*
 * Measure the frame at off bytes past start (reading it in): its length,
 * -1 for a null, into *n; the offset past it into *next.  0 or -1.
 */
static int
ember_measure_frame(struct ember *e, size_t off, int nullable, int32_t *n,
    size_t *next)
{
	if (ember_fill(e, off + 4) == -1)
		return (-1);
	*n = be32_get(framebuf_data(&e->in) + off);
	if (*n == EMBER_NULL && nullable) {
		*next = off + 4;
		return (0);
	}
	if (*n < 0 || *n > EMBER_MAX_RECORD || off + 4 + (size_t)*n >
	    4 + (size_t)EMBER_MAX_RECORD)
		return (ember_break(e, "PROTOCOL_ERROR", "partition %lld: "
		    "keyed record with a frame of length %d at byte %zu",
		    (long long)e->partition, *n, off));
	*next = off + 4 + (size_t)*n;
	return (ember_fill(e, *next));
}

/* Point b at the frame at off bytes past start, already read in. */
static size_t
ember_frame_at(struct ember *e, size_t off, struct ember_bytes *b)
{
	int32_t	n = be32_get(framebuf_data(&e->in) + off);

	if (n == EMBER_NULL) {
		b->data = NULL;
		b->len = 0;
		return (off + 4);
	}
	b->data = framebuf_data(&e->in) + off + 4;
	b->len = (size_t)n;
	return (off + 4 + (size_t)n);
}

/* Make room for n group values.  0 or -1. */
static int
ember_grow_values(struct ember *e, size_t n)
{
	struct ember_bytes	*nv;
	size_t			 want = e->values_room > 0 ? e->values_room : 16;

	if (n <= e->values_room)
		return (0);
	while (want < n)
		want *= 2;
	if ((nv = reallocarray(e->values, want, sizeof *nv)) == NULL)
		return (ember_break(e, "NO_MEMORY", "group of %zu values: %s",
		    n, strerror(errno)));
	e->values = nv;
	e->values_room = want;
	return (0);
}

/*
 * Read a pair (-7, key frame, value frame) or a group (-8, key frame,
 * int32 n, n value frames) whose marker is at start.  Every frame is read
 * in before any pointer is taken: reading may move the buffer.
 */
static int
ember_read_keyed(struct ember *e, int32_t marker, struct ember_item *it)
{
	size_t	 off, i, total;
	int32_t	 n, count = 1;

	if (ember_measure_frame(e, 4, 0, &n, &off) == -1)
		return (-1);
	if (marker == EMBER_GROUP) {
		if (ember_fill(e, off + 4) == -1)
			return (-1);
		count = be32_get(framebuf_data(&e->in) + off);
		if (count < 0 || (size_t)count > EMBER_MAX_RECORD / 4)
			return (ember_break(e, "PROTOCOL_ERROR", "partition "
			    "%lld: group of %d values", (long long)e->partition,
			    count));
		off += 4;
	}
	for (i = 0; i < (size_t)count; i++)
		if (ember_measure_frame(e, off, 1, &n, &off) == -1)
			return (-1);
	total = off;
	if (marker == EMBER_GROUP && ember_grow_values(e, (size_t)count) == -1)
		return (-1);

	memset(it, 0, sizeof *it);
	off = ember_frame_at(e, 4, &it->key);
	if (marker == EMBER_PAIR) {
		it->kind = EMBER_KIND_PAIR;
		(void)ember_frame_at(e, off, &it->value);
	} else {
		it->kind = EMBER_KIND_GROUP;
		off += 4;
		for (i = 0; i < (size_t)count; i++)
			off = ember_frame_at(e, off, &e->values[i]);
		it->values = e->values;
		it->nvalues = (size_t)count;
	}
	framebuf_take(&e->in, total);
	e->offset++;
	e->unreleased += total;
	return (1);
}

/* Take the plain record of n bytes whole at the buffer's start: its
 * bytes, which stay where they are until the next read. */
static const unsigned char *
ember_take_plain(struct ember *e, size_t n)
{
	const unsigned char	*data = framebuf_data(&e->in) + 4;

	framebuf_take(&e->in, 4 + n);
	e->offset++;
	e->unreleased += 4 + n;
	return (data);
}

/*
 * Read a plain record whose length n >= 0 is at start.
 */
static int
ember_read_plain(struct ember *e, int32_t n, struct ember_item *it)
{
	if (n > EMBER_MAX_RECORD)
		return (ember_break(e, "PROTOCOL_ERROR", "partition %lld: "
		    "record of %d bytes is too large", (long long)e->partition,
		    n));
	if (ember_fill(e, 4 + (size_t)n) == -1)
		return (-1);
	memset(it, 0, sizeof *it);
	it->kind = EMBER_KIND_RECORD;
	it->key.data = ember_take_plain(e, (size_t)n);
	it->key.len = (size_t)n;
	return (1);
}

/*
 * Read the next record, or a stream response; 2: reattached, go on.  With
 * plain, a pair or a group is refused and left unread.
 */
static int
ember_next_once(struct ember *e, struct ember_item *it, int plain)
{
	int32_t	n;
	int	rc;

	for (;;) {
		switch (e->state) {
		case EMBER_RECORDS:
			break;
		case EMBER_BETWEEN:
			if ((rc = ember_next_partition(e)) != 1)
				return (rc);
			continue;
		case EMBER_CONTROL:
			if (e->streamed)
				return (0);
			return (ember_fail(e, "NO_STREAM", "no result stream is "
			    "open"));
		case EMBER_BROKEN:
			return (-1);
		}

		if (ember_fill(e, 4) == -1)
			return (-1);
		n = be32_get(framebuf_data(&e->in));
		if (n >= 0)
			return (ember_read_plain(e, n, it));
		if (n == EMBER_PAIR || n == EMBER_GROUP) {
			if (plain)
				return (ember_fail(e, "KEYED_RECORD",
				    "partition %lld: a %s: read it with "
				    "ember_next_item", (long long)e->partition,
				    n == EMBER_PAIR ? "pair" : "group"));
			return (ember_read_keyed(e, n, it));
		}
		framebuf_take(&e->in, 4);
		switch (n) {
		case EMBER_NULL:
			memset(it, 0, sizeof *it);
			it->kind = EMBER_KIND_RECORD;
			e->offset++;
			e->unreleased += 4;
			return (1);
		case EMBER_END_OF_DATA_SECTION:
			e->state = EMBER_BETWEEN;
			e->ended = 1;
			continue;
		case EMBER_EXCEPTION_THROWN:
			return (ember_stream_error(e));
		default:
			return (ember_break(e, "PROTOCOL_ERROR", "partition "
			    "%lld: unexpected length %d", (long long)e->partition,
			    n));
		}
	}
}

/* Is a release of what the caller consumed due? */
static inline int
ember_release_due(const struct ember *e)
{
	return (e->in_stream && e->reattachable &&
	    e->unreleased >= EMBER_RELEASE_EVERY);
}

/* Read the next record of the result stream, reattaching as needed. */
static int
ember_next_any(struct ember *e, struct ember_item *it, int plain)
{
	int	rc;

	/* What the caller was given before this call, it has consumed. */
	if (ember_release_due(e))
		ember_release_consumed(e);
	for (;;) {
		rc = ember_next_once(e, it, plain);
		if (rc == 2)
			continue;
		if (rc == -1 && e->state == EMBER_BROKEN && e->in_stream &&
		    e->reattachable && e->error_class != NULL &&
		    strcmp(e->error_class, "IO_ERROR") == 0) {
			if (ember_reconnect(e) == -1)
				return (-1);
			continue;
		}
		return (rc);
	}
}

/* Read the next plain record of the result stream. */
int
ember_next(struct ember *e, const void **data, size_t *len)
{
	struct ember_item	it;
	const unsigned char	*p;
	size_t			 have;
	int32_t			 n;
	int			 rc;

	/* The common case first: a whole plain record already read in and
	 * no release due; everything else takes the general path. */
	have = framebuf_len(&e->in);
	if (e->state == EMBER_RECORDS && have >= 4 && !ember_release_due(e)) {
		p = framebuf_data(&e->in);
		n = be32_get(p);
		if (n >= 0 && n <= EMBER_MAX_RECORD && have - 4 >= (size_t)n) {
			*data = ember_take_plain(e, (size_t)n);
			*len = (size_t)n;
			return (1);
		}
	}
	if ((rc = ember_next_any(e, &it, 1)) == 1) {
		*data = it.key.data;
		*len = it.key.len;
	}
	return (rc);
}

/* Read the next record of the result stream, of any kind. */
int
ember_next_item(struct ember *e, struct ember_item *it)
{
	return (ember_next_any(e, it, 0));
}

/* Stop the result stream early. */
int
ember_stop(struct ember *e)
{
	struct ember_item	it;
	int			rc;

	switch (e->state) {
	case EMBER_CONTROL:
		return (0);
	case EMBER_BROKEN:
		return (-1);
	default:
		break;
	}
	e->stopping = 1;
	/* Inside a partition, say so at once: emberd ends it there. */
	if (!e->push && e->state == EMBER_RECORDS && !e->requested) {
		if (ember_send_int32(e, EMBER_REQUEST_STOP) == -1)
			return (-1);
		e->requested = 1;
		e->stop_early = 1;
	}
	while ((rc = ember_next_item(e, &it)) == 1)
		/* drain */;
	if (rc == -1 && e->state == EMBER_BROKEN)
		return (-1);
	return (0);
}

/*
 * Say why connecting to path failed, and what to do about it: a file that
 * is not a socket, a socket only its group may use, no emberd listening.
 */
static void
ember_dial_failed(const char *path, int err, char **why)
{
	struct stat	 st;
	struct group	*gr;
	char		 hint[256];

	hint[0] = '\0';
	if ((err == ECONNREFUSED || err == ENOTSOCK) && stat(path, &st) == 0 &&
	    !S_ISSOCK(st.st_mode)) {
		if (asprintf(why, "%s is not a socket (--socket names "
		    "emberd's socket, daemon.socket in its conf)", path) == -1)
			*why = NULL;
		return;
	}
	if (err == EACCES) {
		if (stat(path, &st) == 0 &&
		    (gr = getgrgid(st.st_gid)) != NULL && st.st_gid != 0)
			snprintf(hint, sizeof hint, " (only members of group "
			    "%s may connect: ask to be added to it, then log "
			    "in again)", gr->gr_name);
		else
			snprintf(hint, sizeof hint, " (emberd's "
			    "daemon.socket_group and socket_mode say who may "
			    "connect)");
	} else if (err == ENOENT || err == ECONNREFUSED)
		snprintf(hint, sizeof hint, " (is emberd running? start it "
		    "with `systemctl start emberd`, or run `emberd`)");
	if (asprintf(why, "connect %s: %s%s", path, strerror(err), hint) == -1)
		*why = NULL;
}

/* Connect the socket; -1 with a message in *why. */
static int
ember_dial(const char *path, char **why)
{
	struct sockaddr_un	 sun;
	struct pollfd		 pfd;
	socklen_t		 sl;
	int			 fd, err, saved;

	memset(&sun, 0, sizeof sun);
	sun.sun_family = AF_UNIX;
	if (strlen(path) >= sizeof sun.sun_path) {
		if (asprintf(why, "connect %s: %s", path,
		    strerror(ENAMETOOLONG)) == -1)
			*why = NULL;
		return (-1);
	}
	strcpy(sun.sun_path, path);

	if ((fd = socket(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0)) == -1) {
		if (asprintf(why, "socket: %s", strerror(errno)) == -1)
			*why = NULL;
		return (-1);
	}
	if (connect(fd, (struct sockaddr *)&sun, sizeof sun) == 0)
		return (fd);
	err = errno;
	if (err == EINTR) {
		/* The connection goes on; wait for its outcome. */
		pfd.fd = fd;
		pfd.events = POLLOUT;
		while (poll(&pfd, 1, -1) == -1 && errno == EINTR)
			/* nothing */;
		sl = sizeof err;
		if (getsockopt(fd, SOL_SOCKET, SO_ERROR, &err, &sl) == -1)
			err = errno;
		if (err == 0)
			return (fd);
	}
	saved = err;
	close(fd);
	ember_dial_failed(path, saved, why);
	return (-1);
}

static void	ember_free(struct ember *);

/* Connect to emberd and say hello, into session if not NULL. */
static struct ember *
ember_open(const char *socket_path, const char *session, char **errmsg)
{
	struct ember	*e;
	json_t		*req, *reply;
	char		*why = NULL;
	const char	*s;
	int		 fd;

	if (errmsg != NULL)
		*errmsg = NULL;
	if (socket_path == NULL || *socket_path == '\0') {
		socket_path = getenv(EMBER_SOCKET_ENV);
		if (socket_path == NULL || *socket_path == '\0')
			socket_path = EMBER_DEFAULT_SOCKET;
	}
	if ((fd = ember_dial(socket_path, &why)) == -1)
		goto fail;

	if ((e = calloc(1, sizeof *e)) == NULL ||
	    framebuf_init(&e->in, EMBER_BUFFER_SIZE) == -1) {
		free(e);
		close(fd);
		why = strdup("out of memory");
		goto fail;
	}
	e->fd = fd;
	e->state = EMBER_CONTROL;
	e->rfd = -1;
	e->attempts = EMBER_RETRY_ATTEMPTS;
	e->first_ms = EMBER_RETRY_FIRST_MS;
	e->max_ms = EMBER_RETRY_MAX_MS;
	if ((e->socket_path = strdup(socket_path)) == NULL) {
		ember_fail(e, "NO_MEMORY", "out of memory");
		goto fail_hello;
	}

	req = json_pack("{s:s,s:i,s:s}", "op", "hello", "version",
	    EMBER_PROTOCOL_VERSION, "client", "libember/" PACKAGE_VERSION);
	if (req != NULL && session != NULL &&
	    json_object_set_new(req, "session", json_string(session)) == -1) {
		json_decref(req);
		req = NULL;
	}
	if (req == NULL) {
		ember_fail(e, "NO_MEMORY", "out of memory");
		goto fail_hello;
	}
	if (ember_call(e, req, NULL, &reply) == -1) {
		json_decref(reply);
		goto fail_hello;
	}
	if ((s = json_string_value(json_object_get(reply, "session"))) != NULL)
		e->session = strdup(s);
	json_decref(reply);
	return (e);

fail_hello:
	if (asprintf(&why, "hello: %s: %s", ember_error_class(e),
	    ember_error(e)) == -1)
		why = NULL;
	if (session != NULL)
		ember_free(e);	/* the session is not ours to close */
	else
		ember_close(e);
fail:
	if (errmsg != NULL)
		*errmsg = why != NULL ? why : strdup("out of memory");
	else
		free(why);
	return (NULL);
}

/* Connect to emberd and say hello. */
struct ember *
ember_connect(const char *socket_path, char **errmsg)
{
	return (ember_open(socket_path, NULL, errmsg));
}

/* Interrupt an operation of a session, on a connection of its own. */
int
ember_interrupt(const char *socket_path, const char *session,
    const char *operation, char **errmsg)
{
	struct ember	*e;
	json_t		*req;
	int		 rc = -1;

	if (errmsg != NULL)
		*errmsg = NULL;
	if ((e = ember_open(socket_path, session, errmsg)) == NULL)
		return (-1);
	req = json_pack("{s:s,s:s}", "op", "interrupt", "operation",
	    operation);
	if (req == NULL)
		ember_fail(e, "NO_MEMORY", "out of memory");
	else
		rc = ember_call(e, req, NULL, NULL);
	if (rc == -1 && errmsg != NULL && asprintf(errmsg, "%s: %s",
	    ember_error_class(e), ember_error(e)) == -1)
		*errmsg = NULL;
	ember_free(e);
	return (rc);
}

/* Send a frame without waiting, and without blocking: 0, or -1. */
static int
ember_send_nowait(int fd, const char *text)
{
	unsigned char	hdr[4];
	struct iovec	iov[2];
	struct msghdr	mh;
	size_t		len = strlen(text);

	be32_put(hdr, (int32_t)len);
	iov[0].iov_base = hdr;
	iov[0].iov_len = sizeof hdr;
	iov[1].iov_base = (void *)text;
	iov[1].iov_len = len;
	memset(&mh, 0, sizeof mh);
	mh.msg_iov = iov;
	mh.msg_iovlen = 2;
	return (sendmsg(fd, &mh, MSG_NOSIGNAL | MSG_DONTWAIT) ==
	    (ssize_t)(len + 4) ? 0 : -1);
}

/* The release connection, made on first use: a second connection of the
 * session, written to without waiting for its replies. */
static int
ember_release_fd(struct ember *e)
{
	char	*why = NULL, *hello;
	int	 fd;

	if (e->rfd != -1)
		return (e->rfd);
	if ((fd = ember_dial(e->socket_path, &why)) == -1) {
		free(why);
		return (-1);
	}
	if (asprintf(&hello, "{\"op\":\"hello\",\"version\":%d,"
	    "\"session\":\"%s\",\"client\":\"libember/" PACKAGE_VERSION
	    " (release)\"}", EMBER_PROTOCOL_VERSION, ember_session(e)) == -1) {
		close(fd);
		return (-1);
	}
	if (ember_send_nowait(fd, hello) == -1) {
		free(hello);
		close(fd);
		return (-1);
	}
	free(hello);
	e->rfd = fd;
	return (fd);
}

/* Send a release on the release connection; its reply is not waited
 * for (and dropped, as the replies before it). */
static void
ember_release_send(struct ember *e, const char *text)
{
	char	buf[4096];
	ssize_t	n;
	int	fd;

	if ((fd = ember_release_fd(e)) == -1)
		return;
	if (ember_send_nowait(fd, text) == -1) {
		close(fd);
		e->rfd = -1;
		return;
	}
	while ((n = recv(fd, buf, sizeof buf, MSG_DONTWAIT)) > 0)
		/* drop */;
	if (n == 0) {
		close(fd);
		e->rfd = -1;
	}
}

/* The position of what the caller was given. */
static void
ember_position(const struct ember *e, int64_t *partition, int64_t *offset)
{
	if (e->ended) {
		*partition = e->partition + 1;
		*offset = 0;
	} else {
		*partition = e->partition;
		*offset = e->offset;
	}
}

/* Release what the caller has consumed, so that emberd's buffer stays
 * small. */
static void
ember_release_consumed(struct ember *e)
{
	int64_t	 p, k;
	char	*text;

	ember_position(e, &p, &k);
	if (asprintf(&text, "{\"op\":\"release\",\"operation\":\"%s\","
	    "\"partition\":%lld,\"offset\":%lld}", e->operation,
	    (long long)p, (long long)k) == -1)
		return;
	ember_release_send(e, text);
	free(text);
	e->unreleased = 0;
}

/* Reattach to the stream's operation on the connection, after the
 * position.  0; or -1, the stream ended with the error if emberd refused. */
static int
ember_resume(struct ember *e)
{
	json_t	*req;
	int64_t	 p, k;
	char	*msg;

	ember_position(e, &p, &k);
	req = json_pack("{s:s,s:s,s:I,s:I}", "op", "reattach", "operation",
	    e->operation, "partition", (json_int_t)p, "offset", (json_int_t)k);
	if (req == NULL)
		return (ember_fail(e, "NO_MEMORY", "out of memory"));
	if (ember_call(e, req, NULL, NULL) == -1) {
		if (e->state == EMBER_BROKEN)
			return (-1);
		msg = e->error;
		e->error = NULL;
		ember_end_stream(e);
		ember_fail(e, ember_error_class(e), "operation %s: reattach "
		    "at partition %lld, offset %lld: %s", e->operation,
		    (long long)p, (long long)k, msg != NULL ? msg : "");
		free(msg);
		return (-1);
	}
	e->state = EMBER_BETWEEN;
	e->requested = 0;
	e->resume = !e->ended;
	return (0);
}

/* Wait before reattach attempt n (from 1): exponential, jittered. */
static void
ember_backoff(struct ember *e, int n)
{
	static uint64_t	 seed;
	struct timespec	 ts;
	uint64_t	 ms;

	if (seed == 0) {
		clock_gettime(CLOCK_MONOTONIC, &ts);
		seed = ((uint64_t)getpid() << 32 ^ (uint64_t)ts.tv_nsec) | 1;
	}
	seed ^= seed << 13;
	seed ^= seed >> 7;
	seed ^= seed << 17;
	ms = (uint64_t)e->first_ms << (n - 1 < 20 ? n - 1 : 20);
	if (ms > (uint64_t)e->max_ms)
		ms = (uint64_t)e->max_ms;
	ms = ms / 2 + seed % (ms / 2 + 1);
	ts.tv_sec = (time_t)(ms / 1000);
	ts.tv_nsec = (long)(ms % 1000) * 1000000;
	while (nanosleep(&ts, &ts) == -1 && errno == EINTR)
		/* go on */;
}

/* The connection broke mid-stream: connect again, resume the session and
 * reattach after the last record given to the caller.  0, or -1 with the
 * error (past the budget, or emberd's refusal). */
static int
ember_reconnect(struct ember *e)
{
	json_t	*req;
	char	*last = NULL, *why;
	int	 i, fd;

	if (e->rfd != -1) {
		close(e->rfd);
		e->rfd = -1;
	}
	e->stop_early = 0;	/* that connection is gone */
	for (i = 0; i < e->attempts; i++) {
		if (i > 0)
			ember_backoff(e, i);
		if (e->fd != -1)
			close(e->fd);
		e->fd = -1;
		e->in.start = e->in.end = 0;
		free(last);
		last = e->error != NULL ? strdup(e->error) : NULL;
		if ((fd = ember_dial(e->socket_path, &why)) == -1) {
			free(last);
			last = why;
			continue;
		}
		e->fd = fd;
		e->state = EMBER_CONTROL;
		req = json_pack("{s:s,s:i,s:s,s:s}", "op", "hello", "version",
		    EMBER_PROTOCOL_VERSION, "session", ember_session(e),
		    "client", "libember/" PACKAGE_VERSION);
		if (req == NULL)
			break;
		if (ember_call(e, req, NULL, NULL) == -1) {
			if (e->state == EMBER_BROKEN)
				continue;
			free(last);
			ember_end_stream(e);
			return (ember_fail(e, ember_error_class(e), "operation "
			    "%s: resuming session %s to reattach: %s",
			    e->operation, ember_session(e), ember_error(e)));
		}
		if (ember_resume(e) == 0) {
			free(last);
			return (0);
		}
		if (e->state != EMBER_BROKEN) {
			free(last);
			return (-1);
		}
	}
	ember_break(e, "IO_ERROR", "operation %s: gave up reattaching after "
	    "%d attempts: %s", e->operation, e->attempts,
	    last != NULL ? last : "out of memory");
	free(last);
	e->in_stream = 0;
	return (-1);
}

/* Set how hard to try reattaching. */
void
ember_set_reattach(struct ember *e, int attempts, int first_ms, int max_ms)
{
	e->attempts = attempts < 0 ? 0 : attempts;
	e->first_ms = first_ms < 1 ? 1 : first_ms;
	e->max_ms = max_ms < e->first_ms ? e->first_ms : max_ms;
}

/* Tell emberd the handle is done with its operation: its end arrived, or
 * the caller stops reading. */
static void
ember_let_go(struct ember *e)
{
	char	*text;

	if (e->operation == NULL || (!e->unconfirmed && !(e->in_stream &&
	    e->reattachable)))
		return;
	if (asprintf(&text, "{\"op\":\"release\",\"operation\":\"%s\","
	    "\"all\":true}", e->operation) == -1)
		return;
	if (e->unconfirmed && e->fd != -1)
		(void)ember_send_nowait(e->fd, text);
	else
		ember_release_send(e, text);
	free(text);
}

/* Close the connection and free the handle. */
void
ember_close(struct ember *e)
{
	if (e == NULL)
		return;
	ember_let_go(e);
	/* Nothing can resume the session after this: end it now rather than
	 * after session.timeout, with what it holds (broadcasts). */
	if (e->fd != -1 && e->state != EMBER_BROKEN && !e->in_stream)
		(void)ember_send_nowait(e->fd, "{\"op\":\"close_session\"}");
	ember_free(e);
}

/* Close the connection and free the handle, leaving its session be. */
static void
ember_free(struct ember *e)
{
	if (e->rfd != -1)
		close(e->rfd);
	if (e->fd != -1)
		close(e->fd);
	free(e->socket_path);
	framebuf_free(&e->in);
	free(e->values);
	free(e->session);
	free(e->operation);
	free(e->error);
	free(e->error_class);
	free(e->plan_in);
	free(e->plan_out);
	free(e);
}

/* Return the last error message. */
const char *
ember_error(const struct ember *e)
{
	if (e->error_class != NULL && e->error == NULL)
		return ("out of memory");
	return (e->error != NULL ? e->error : "");
}

/* Return the last error class. */
const char *
ember_error_class(const struct ember *e)
{
	if (e->error != NULL && e->error_class == NULL)
		return ("NO_MEMORY");
	return (e->error_class != NULL ? e->error_class : "");
}

/* Return the session id. */
const char *
ember_session(const struct ember *e)
{
	return (e->session != NULL ? e->session : "");
}

/*
 * Send request (a reference is taken) and read its reply.  0 on ok:true,
 * -1 otherwise.  *reply_json gets the text and *reply_out the parsed
 * object, each if asked for and whenever a reply arrived.  An execute of
 * iterate or collect that succeeds opens the stream.
 */
static int
ember_call(struct ember *e, json_t *req, char **reply_json, json_t **reply_out)
{
	const char		*op, *action;
	char			*text;
	int			 stream = 0, push = 0;

	if (reply_json != NULL)
		*reply_json = NULL;
	if (reply_out != NULL)
		*reply_out = NULL;
	if (ember_check_control(e) == -1) {
		json_decref(req);
		return (-1);
	}
	e->unconfirmed = 0;	/* a request shows the stream's end arrived */

	op = json_string_value(json_object_get(req, "op"));
	action = json_string_value(json_object_get(req, "action"));
	if (op != NULL && strcmp(op, "execute") == 0 && action != NULL) {
		if (strcmp(action, "iterate") == 0)
			stream = 1;
		else if (strcmp(action, "collect") == 0)
			stream = push = 1;
	}

	/* json_dumps's bytes, for a tenth of its instructions. */
	text = jwrite_dumps(req);
	json_decref(req);
	return (ember_call_text(e, text, stream, push, reply_json, reply_out));
}

/* Send request text (taken; NULL: out of memory) and read its reply; as
 * ember_call, stream and push saying what an ok reply opens. */
static int
ember_call_text(struct ember *e, char *text, int stream, int push,
    char **reply_json, json_t **reply_out)
{
	if (text == NULL)
		return (ember_fail(e, "NO_MEMORY", "out of memory"));
	if (ember_send_frame(e, text, strlen(text)) == -1) {
		free(text);
		return (-1);
	}
	free(text);
	return (ember_reply(e, stream, push, reply_json, reply_out));
}

/* Read the reply to a request sent; as ember_call. */
static int
ember_reply(struct ember *e, int stream, int push, char **reply_json,
    json_t **reply_out)
{
	const unsigned char	*data;
	const char		*class, *msg;
	json_t			*reply, *ok, *error;
	json_error_t		 jerr;
	size_t			 len;

	if (reply_json != NULL)
		*reply_json = NULL;
	if (reply_out != NULL)
		*reply_out = NULL;
	if (ember_read_frame(e, EMBER_MAX_REPLY, "reply", &data, &len) == -1)
		return (-1);
	reply = json_loadb((const char *)data, len, JSON_ALLOW_NUL, &jerr);
	if (reply == NULL || !json_is_object(reply) ||
	    !json_is_boolean(ok = json_object_get(reply, "ok"))) {
		json_decref(reply);
		return (ember_break(e, "PROTOCOL_ERROR", "reply is not a JSON "
		    "object with \"ok\": %s", reply == NULL ? jerr.text :
		    "wrong shape"));
	}
	if (reply_json != NULL && (*reply_json = strndup((const char *)data,
	    len)) == NULL) {
		json_decref(reply);
		return (ember_fail(e, "NO_MEMORY", "out of memory"));
	}

	if (json_is_true(ok)) {
		if (stream)
			ember_start_stream(e, push, reply);
		if (reply_out != NULL)
			*reply_out = reply;
		else
			json_decref(reply);
		return (0);
	}
	error = json_object_get(reply, "error");
	class = json_string_value(json_object_get(error, "class"));
	msg = json_string_value(json_object_get(error, "message"));
	ember_fail(e, class != NULL ? class : "INTERNAL", "%s",
	    msg != NULL ? msg : "request failed without a message");
	if (reply_out != NULL)
		*reply_out = reply;
	else
		json_decref(reply);
	return (-1);
}

/* Parse JSON text for a request; NULL with the error set. */
static json_t *
ember_parse(struct ember *e, const char *text, const char *what,
    const char *class)
{
	json_t		*j;
	json_error_t	 jerr;

	if (text == NULL) {
		ember_fail(e, class, "%s: missing", what);
		return (NULL);
	}
	j = json_loads(text, JSON_DECODE_ANY | JSON_ALLOW_NUL, &jerr);
	if (j == NULL)
		ember_fail(e, class, "%s: line %d column %d: %s", what,
		    jerr.line, jerr.column, jerr.text);
	return (j);
}

/* Make the string at j[key] absolute against dir, if it is relative. */
static int
ember_absolute_one(json_t *j, const char *key, const char *dir, int *made)
{
	json_t		*v = json_object_get(j, key);
	const char	*path = json_string_value(v);
	char		*full;
	int		 rc;

	if (path == NULL || *path == '/' || *path == '\0')
		return (0);
	(*made)++;
	if (asprintf(&full, "%s/%s", dir, path) == -1)
		return (-1);
	rc = json_object_set_new(j, key, json_string(full));
	free(full);
	return (rc);
}

/*
 * Make the paths of an execute request absolute against our working
 * directory: emberd refuses relative ones, as it cannot know where the
 * client stands.  The text source's paths, each udf's library, and a
 * save's options.path.  0, or -1 with the error set; *made (may be NULL)
 * counts the paths made absolute.
 */
static int
ember_make_absolute(struct ember *e, json_t *req, int *made)
{
	json_t	*plan = json_object_get(req, "plan"), *paths, *ops, *op, *p;
	char	*dir, *full;
	size_t	 i;
	int	 rc = 0, n = 0;

	if ((dir = getcwd(NULL, 0)) == NULL)
		return (ember_fail(e, "PLAN_INVALID", "cannot make the plan's "
		    "paths absolute: getcwd: %s", strerror(errno)));
	paths = json_object_get(json_object_get(json_object_get(plan,
	    "source"), "text"), "paths");
	json_array_foreach(paths, i, p) {
		if (!json_is_string(p) || *json_string_value(p) == '/' ||
		    *json_string_value(p) == '\0')
			continue;
		n++;
		if (asprintf(&full, "%s/%s", dir, json_string_value(p)) == -1) {
			rc = -1;
			break;
		}
		rc |= json_array_set_new(paths, i, json_string(full));
		free(full);
	}
	ops = json_object_get(plan, "ops");
	json_array_foreach(ops, i, op)
		rc |= ember_absolute_one(json_object_get(op, "udf"), "library",
		    dir, &n);
	rc |= ember_absolute_one(json_object_get(req, "options"), "path", dir,
	    &n);
	free(dir);
	if (made != NULL)
		*made = n;
	if (rc != 0)
		return (ember_fail(e, "NO_MEMORY", "out of memory"));
	return (0);
}

/* Read a control request given as JSON text, an execute's relative paths
 * made absolute; NULL with the error set. */
static json_t *
ember_request_parse(struct ember *e, const char *request_json)
{
	json_t	*req;

	if (ember_check_control(e) == -1)
		return (NULL);
	if ((req = ember_parse(e, request_json, "request",
	    "REQUEST_INVALID")) == NULL)
		return (NULL);
	if (!json_is_object(req)) {
		json_decref(req);
		ember_fail(e, "REQUEST_INVALID", "request: expected a JSON "
		    "object");
		return (NULL);
	}
	if (json_is_string(json_object_get(req, "op")) &&
	    strcmp(json_string_value(json_object_get(req, "op")),
	    "execute") == 0 && ember_make_absolute(e, req, NULL) == -1) {
		json_decref(req);
		return (NULL);
	}
	return (req);
}

/* Send a control request given as JSON text. */
int
ember_request(struct ember *e, const char *request_json, char **reply_json)
{
	json_t	*req;

	if (reply_json != NULL)
		*reply_json = NULL;
	if ((req = ember_request_parse(e, request_json)) == NULL)
		return (-1);
	return (ember_call(e, req, reply_json, NULL));
}

/* Build an execute request; NULL with the error set. */
static json_t *
ember_execute_request(struct ember *e, const char *plan_json,
    const char *action, const char *options_json, int *made)
{
	json_t	*req, *plan, *options = NULL;

	if (action == NULL) {
		ember_fail(e, "ACTION_INVALID", "action: missing");
		return (NULL);
	}
	if ((plan = ember_parse(e, plan_json, "plan", "PLAN_INVALID")) == NULL)
		return (NULL);
	if (options_json != NULL && (options = ember_parse(e, options_json,
	    "options", "ACTION_INVALID")) == NULL) {
		json_decref(plan);
		return (NULL);
	}
	req = json_pack("{s:s,s:o,s:s}", "op", "execute", "plan", plan,
	    "action", action);
	if (req != NULL && options != NULL &&
	    json_object_set_new(req, "options", options) == -1) {
		json_decref(req);
		req = NULL;
	} else if (req == NULL)
		json_decref(options);
	if (req == NULL)
		ember_fail(e, "NO_MEMORY", "out of memory");
	else if (ember_make_absolute(e, req, made) == -1) {
		json_decref(req);
		req = NULL;
	}
	return (req);
}

/* The most bytes of a plan kept for the next execute. */
#define EMBER_PLAN_KEPT_MAX	16384

/* Forget the kept plan. */
static void
ember_plan_forget(struct ember *e)
{
	free(e->plan_in);
	free(e->plan_out);
	e->plan_in = e->plan_out = NULL;
}

/* Keep the plan of req, an execute request made of plan_json without
 * options, in which made paths were made absolute. */
static void
ember_plan_keep(struct ember *e, const char *plan_json, json_t *req,
    int made)
{
	ember_plan_forget(e);
	if (made > 0 || strlen(plan_json) > EMBER_PLAN_KEPT_MAX)
		return;
	e->plan_out = jwrite_dumps(json_object_get(req, "plan"));
	e->plan_in = strdup(plan_json);
	if (e->plan_in == NULL || e->plan_out == NULL)
		ember_plan_forget(e);
}

/* The text of an execute request of the kept plan and action, without
 * options: the bytes ember_call would write for it.  NULL if there is
 * none (out of memory, or an action json_string refuses). */
static char *
ember_plan_request(struct ember *e, const char *action)
{
	json_t	*a = json_string(action);
	char	*quoted, *text;

	if (a == NULL)
		return (NULL);
	quoted = jwrite_dumps(a);
	json_decref(a);
	if (quoted == NULL)
		return (NULL);
	if (asprintf(&text, "{\"op\":\"execute\",\"plan\":%s,\"action\":%s}",
	    e->plan_out, quoted) == -1)
		text = NULL;
	free(quoted);
	return (text);
}

/* Execute a plan as ember_call would; the plan of the last execute
 * without options, given again, is not parsed again. */
static int
ember_execute_call(struct ember *e, const char *plan_json, const char *action,
    const char *options_json, char **reply_json, json_t **reply_out)
{
	json_t	*req;
	char	*text;
	int	 made = 0;

	if (reply_json != NULL)
		*reply_json = NULL;
	if (reply_out != NULL)
		*reply_out = NULL;
	if (options_json == NULL && plan_json != NULL && action != NULL &&
	    e->plan_in != NULL && strcmp(plan_json, e->plan_in) == 0 &&
	    (text = ember_plan_request(e, action)) != NULL) {
		e->unconfirmed = 0;
		return (ember_call_text(e, text, strcmp(action, "iterate") == 0 ||
		    strcmp(action, "collect") == 0, strcmp(action, "collect") ==
		    0, reply_json, reply_out));
	}
	if ((req = ember_execute_request(e, plan_json, action, options_json,
	    &made)) == NULL)
		return (-1);
	if (options_json == NULL)
		ember_plan_keep(e, plan_json, req, made);
	return (ember_call(e, req, reply_json, reply_out));
}

/* Execute a plan. */
int
ember_execute(struct ember *e, const char *plan_json, const char *action,
    const char *options_json, char **reply_json)
{
	if (reply_json != NULL)
		*reply_json = NULL;
	if (ember_check_control(e) == -1)
		return (-1);
	return (ember_execute_call(e, plan_json, action, options_json,
	    reply_json, NULL));
}

/* Count the records of a plan. */
int
ember_count(struct ember *e, const char *plan_json, int64_t *count)
{
	json_t	*reply = NULL, *n;

	if (ember_check_control(e) == -1)
		return (-1);
	if (ember_execute_call(e, plan_json, "count", NULL, NULL,
	    &reply) == -1) {
		json_decref(reply);
		return (-1);
	}
	n = json_object_get(reply, "count");
	if (!json_is_integer(n)) {
		json_decref(reply);
		return (ember_fail(e, "PROTOCOL_ERROR", "count reply has no "
		    "\"count\""));
	}
	*count = json_integer_value(n);
	json_decref(reply);
	return (0);
}

/* Upload a broadcast: the request, then the bytes as raw frames. */
int
ember_broadcast_put(struct ember *e, const void *data, size_t len,
    int64_t *id)
{
	const char	*p = data;
	json_t		*reply;
	char		 req[96];
	size_t		 n;

	if (ember_check_control(e) == -1)
		return (-1);
	snprintf(req, sizeof req, "{\"op\":\"broadcast_put\",\"size\":%zu}",
	    len);
	if (ember_send_frame(e, req, strlen(req)) == -1)
		return (-1);
	while (len > 0) {
		n = len > EMBER_BROADCAST_FRAME ? EMBER_BROADCAST_FRAME : len;
		if (ember_send_frame(e, p, n) == -1)
			return (-1);
		p += n;
		len -= n;
	}
	if (ember_reply(e, 0, 0, NULL, &reply) == -1) {
		json_decref(reply);
		return (-1);
	}
	*id = json_integer_value(json_object_get(reply, "broadcast"));
	json_decref(reply);
	return (0);
}

/* Upload the file behind fd as a broadcast: emberd reads it through the
 * descriptor, which goes with the request (SCM_RIGHTS). */
int
ember_broadcast_put_fd(struct ember *e, int fd, int64_t *id)
{
	static const char	 req[] = "{\"op\":\"broadcast_put\",\"fd\":true}";
	unsigned char		 frame[4 + sizeof req - 1];
	json_t			*reply = NULL;
	ssize_t			 n;

	if (ember_check_control(e) == -1)
		return (-1);
	be32_put(frame, (int32_t)(sizeof req - 1));
	memcpy(frame + 4, req, sizeof req - 1);
	n = fd_send_with(e->fd, frame, sizeof frame, fd);
	if (n != (ssize_t)sizeof frame)
		return (ember_break(e, "IO_ERROR", "broadcast_put: %s",
		    n == -1 ? strerror(errno) : "short write"));
	if (ember_reply(e, 0, 0, NULL, &reply) == -1) {
		json_decref(reply);
		return (-1);
	}
	*id = json_integer_value(json_object_get(reply, "broadcast"));
	json_decref(reply);
	return (0);
}

/* Drop a broadcast of this session. */
int
ember_broadcast_drop(struct ember *e, int64_t id)
{
	json_t	*req;

	if ((req = json_pack("{s:s,s:I}", "op", "broadcast_drop", "broadcast",
	    (json_int_t)id)) == NULL)
		return (ember_fail(e, "NO_MEMORY", "out of memory"));
	return (ember_call(e, req, NULL, NULL));
}

/* Checkpoint a plan's dataset. */
int
ember_checkpoint(struct ember *e, const char *plan_json, int local, int eager,
    char id[37])
{
	json_t		*req, *reply, *options;
	const char	*s;
	char		*text;

	if (ember_check_control(e) == -1)
		return (-1);
	options = json_pack("{s:b,s:b}", "local", local, "eager", eager);
	text = options != NULL ? json_dumps(options, JSON_COMPACT) : NULL;
	json_decref(options);
	if (text == NULL)
		return (ember_fail(e, "NO_MEMORY", "out of memory"));
	req = ember_execute_request(e, plan_json, "checkpoint", text, NULL);
	free(text);
	if (req == NULL)
		return (-1);
	if (ember_call(e, req, NULL, &reply) == -1) {
		json_decref(reply);
		return (-1);
	}
	s = json_string_value(json_object_get(reply, "checkpoint"));
	if (s == NULL || strlen(s) != 36) {
		json_decref(reply);
		return (ember_fail(e, "PROTOCOL_ERROR", "checkpoint reply has "
		    "no \"checkpoint\""));
	}
	memcpy(id, s, 37);
	json_decref(reply);
	return (0);
}

/* Drop a checkpoint. */
int
ember_checkpoint_drop(struct ember *e, const char *id)
{
	json_t	*req;

	if ((req = json_pack("{s:s,s:s}", "op", "checkpoint_drop",
	    "checkpoint", id)) == NULL)
		return (ember_fail(e, "NO_MEMORY", "out of memory"));
	return (ember_call(e, req, NULL, NULL));
}

/* Ask for the status. */
char *
ember_status(struct ember *e)
{
	json_t	*req;
	char	*reply;

	if ((req = json_pack("{s:s}", "op", "status")) == NULL) {
		ember_fail(e, "NO_MEMORY", "out of memory");
		return (NULL);
	}
	if (ember_call(e, req, &reply, NULL) == -1) {
		free(reply);
		return (NULL);
	}
	return (reply);
}

struct ember_count_entry {
	const char	*data;		/* in the counts' bytes */
	size_t		 len;
	int64_t		 count;
};

struct ember_counts {
	struct ember_count_entry	*entries;	/* in order's order */
	char				*bytes;		/* every record's */
	size_t				 n;
	int64_t				 nulls;
	enum ember_counts_order		 order;
};

/* Order records by their bytes, a prefix first. */
static int
ember_count_cmp(const void *a, const void *b)
{
	const struct ember_count_entry	*x = a, *y = b;
	int				 c;

	c = memcmp(x->data, y->data, x->len < y->len ? x->len : y->len);
	if (c != 0)
		return (c);
	return (x->len < y->len ? -1 : x->len > y->len);
}

/* Order records by their count, the largest first, then by their bytes. */
static int
ember_count_cmp_count(const void *a, const void *b)
{
	const struct ember_count_entry	*x = a, *y = b;

	if (x->count != y->count)
		return (x->count < y->count ? 1 : -1);
	return (ember_count_cmp(a, b));
}

/* Add one record and its count, its bytes copied to *bytes (which moves
 * on past them and a NUL, for safety only). */
static void
ember_counts_add(struct ember_counts *c, char **bytes, const char *data,
    size_t len, json_int_t count)
{
	struct ember_count_entry	*ent = &c->entries[c->n++];

	memcpy(*bytes, data, len);
	(*bytes)[len] = '\0';
	ent->data = *bytes;
	ent->len = len;
	ent->count = count;
	*bytes += len + 1;
}

/* Check a count_by_value reply's shape: "counts" an object of integers,
 * "pairs" (the records with a NUL byte) absent or an array of [record,
 * count], "nulls" an integer.  The bytes its records need (a NUL each
 * added), or a message in *why. */
static size_t
ember_counts_check(json_t *reply, const char **why)
{
	json_t		*counts, *pairs, *v, *pair;
	const char	*key;
	size_t		 keylen, i, bytes = 0;

	*why = NULL;
	counts = json_object_get(reply, "counts");
	pairs = json_object_get(reply, "pairs");
	if (!json_is_object(counts) ||
	    !json_is_integer(json_object_get(reply, "nulls")) ||
	    (pairs != NULL && !json_is_array(pairs))) {
		*why = "count_by_value reply without \"counts\" and \"nulls\"";
		return (0);
	}
	json_object_keylen_foreach(counts, key, keylen, v) {
		if (!json_is_integer(v)) {
			*why = "count_by_value reply: a count is not an "
			    "integer";
			return (0);
		}
		bytes += keylen + 1;
	}
	json_array_foreach(pairs, i, pair) {
		if (json_array_size(pair) != 2 ||
		    !json_is_string(json_array_get(pair, 0)) ||
		    !json_is_integer(json_array_get(pair, 1))) {
			*why = "count_by_value reply: \"pairs\" holds "
			    "something else than [record, count]";
			return (0);
		}
		bytes += json_string_length(json_array_get(pair, 0)) + 1;
	}
	return (bytes);
}

/* Fill c from a count_by_value reply, sorted in c->order.  A message, or
 * NULL. */
static const char *
ember_counts_read(struct ember_counts *c, json_t *reply)
{
	json_t		*counts, *pairs, *v, *pair, *rec;
	const char	*key, *why;
	char		*p;
	size_t		 keylen, i, total, bytes;

	if ((bytes = ember_counts_check(reply, &why)) == 0 && why != NULL)
		return (why);
	counts = json_object_get(reply, "counts");
	pairs = json_object_get(reply, "pairs");
	c->nulls = json_integer_value(json_object_get(reply, "nulls"));
	total = json_object_size(counts) + json_array_size(pairs);
	if ((c->entries = calloc(total + 1, sizeof *c->entries)) == NULL ||
	    (c->bytes = malloc(bytes + 1)) == NULL)
		return ("out of memory");
	p = c->bytes;
	json_object_keylen_foreach(counts, key, keylen, v)
		ember_counts_add(c, &p, key, keylen, json_integer_value(v));
	json_array_foreach(pairs, i, pair) {
		rec = json_array_get(pair, 0);
		ember_counts_add(c, &p, json_string_value(rec),
		    json_string_length(rec),
		    json_integer_value(json_array_get(pair, 1)));
	}
	qsort(c->entries, c->n, sizeof *c->entries,
	    c->order == EMBER_COUNTS_BY_COUNT ? ember_count_cmp_count :
	    ember_count_cmp);
	return (NULL);
}

/* Read a count_by_value reply already parsed (the caller's still), its
 * records sorted in order. */
static struct ember_counts *
ember_counts_from(struct ember *e, json_t *reply,
    enum ember_counts_order order)
{
	struct ember_counts	*c;
	const char		*why;

	if ((c = calloc(1, sizeof *c)) == NULL) {
		ember_fail(e, "NO_MEMORY", "out of memory");
		return (NULL);
	}
	c->order = order;
	if ((why = ember_counts_read(c, reply)) != NULL) {
		ember_counts_free(c);
		ember_fail(e, strcmp(why, "out of memory") == 0 ? "NO_MEMORY" :
		    "PROTOCOL_ERROR", "%s", why);
		return (NULL);
	}
	return (c);
}

/* Read a count_by_value reply. */
struct ember_counts *
ember_counts_parse(struct ember *e, const char *reply_json)
{
	struct ember_counts	*c;
	json_t			*reply;
	json_error_t		 jerr;

	if (reply_json == NULL ||
	    (reply = json_loads(reply_json, JSON_ALLOW_NUL, &jerr)) == NULL) {
		ember_fail(e, "PROTOCOL_ERROR", "count_by_value reply: %s",
		    reply_json == NULL ? "missing" : jerr.text);
		return (NULL);
	}
	c = ember_counts_from(e, reply, EMBER_COUNTS_BY_RECORD);
	json_decref(reply);
	return (c);
}

/* Send a count_by_value execute and read its result from the one parse
 * of the reply (ember_reply's), sorted in order. */
static int
ember_counts_call(struct ember *e, json_t *req, enum ember_counts_order order,
    struct ember_counts **out)
{
	json_t	*reply;

	if (ember_call(e, req, NULL, &reply) == -1) {
		json_decref(reply);
		return (-1);
	}
	*out = ember_counts_from(e, reply, order);
	json_decref(reply);
	return (*out == NULL ? -1 : 0);
}

/* Execute a plan with count_by_value and read its result. */
int
ember_count_by_value(struct ember *e, const char *plan_json,
    const char *options_json, struct ember_counts **out)
{
	json_t	*req;

	*out = NULL;
	if (ember_check_control(e) == -1 ||
	    (req = ember_execute_request(e, plan_json, "count_by_value",
	    options_json, NULL)) == NULL)
		return (-1);
	return (ember_counts_call(e, req, EMBER_COUNTS_BY_RECORD, out));
}

/* Send a count_by_value execute given as JSON text and read its result. */
int
ember_request_counts(struct ember *e, const char *request_json,
    enum ember_counts_order order, struct ember_counts **out)
{
	json_t		*req;
	const char	*op, *action;

	*out = NULL;
	if (order != EMBER_COUNTS_BY_RECORD && order != EMBER_COUNTS_BY_COUNT) {
		ember_fail(e, "REQUEST_INVALID", "count order: %d", (int)order);
		return (-1);
	}
	if ((req = ember_request_parse(e, request_json)) == NULL)
		return (-1);
	/* Anything else would run (a save writes its files) or open a
	 * stream before its reply was found not to be counts. */
	op = json_string_value(json_object_get(req, "op"));
	action = json_string_value(json_object_get(req, "action"));
	if (op == NULL || strcmp(op, "execute") != 0 || action == NULL ||
	    strcmp(action, "count_by_value") != 0) {
		json_decref(req);
		ember_fail(e, "ACTION_INVALID", "ember_request_counts takes an "
		    "execute of count_by_value");
		return (-1);
	}
	return (ember_counts_call(e, req, order, out));
}

size_t
ember_counts_size(const struct ember_counts *c)
{
	return (c->n);
}

int64_t
ember_counts_get(const struct ember_counts *c, size_t i, const void **data,
    size_t *len)
{
	if (i >= c->n) {
		*data = NULL;
		*len = 0;
		return (0);
	}
	*data = c->entries[i].data;
	*len = c->entries[i].len;
	return (c->entries[i].count);
}

/* Find a record: a binary search in record order, a walk in count order. */
int64_t
ember_counts_find(const struct ember_counts *c, const void *data, size_t len)
{
	struct ember_count_entry	 key, *found;
	size_t				 i;

	key.data = data != NULL ? data : "";
	key.len = len;
	if (c->order == EMBER_COUNTS_BY_RECORD) {
		found = bsearch(&key, c->entries, c->n, sizeof *c->entries,
		    ember_count_cmp);
		return (found != NULL ? found->count : 0);
	}
	for (i = 0; i < c->n; i++)
		if (ember_count_cmp(&key, &c->entries[i]) == 0)
			return (c->entries[i].count);
	return (0);
}

int64_t
ember_counts_nulls(const struct ember_counts *c)
{
	return (c->nulls);
}

void
ember_counts_free(struct ember_counts *c)
{
	if (c == NULL)
		return;
	free(c->bytes);
	free(c->entries);
	free(c);
}

/* Read a reduce reply. */
int
ember_reduced_parse(struct ember *e, const char *reply_json,
    struct ember_reduced *out)
{
	json_t		*reply, *value, *count;
	json_error_t	 jerr;

	memset(out, 0, sizeof *out);
	if (reply_json == NULL ||
	    (reply = json_loads(reply_json, JSON_ALLOW_NUL, &jerr)) == NULL)
		return (ember_fail(e, "PROTOCOL_ERROR", "reduce reply: %s",
		    reply_json == NULL ? "missing" : jerr.text));
	value = json_object_get(reply, "value");
	count = json_object_get(reply, "count");
	if (value == NULL || !json_is_integer(count) || (!json_is_null(value) &&
	    !json_is_number(value))) {
		json_decref(reply);
		return (ember_fail(e, "PROTOCOL_ERROR", "reduce reply without "
		    "a number or null \"value\" and a \"count\""));
	}
	out->count = json_integer_value(count);
	if (json_is_integer(value)) {
		out->type = EMBER_VALUE_INTEGER;
		out->integer = json_integer_value(value);
		out->real = (double)out->integer;
	} else if (json_is_real(value)) {
		out->type = EMBER_VALUE_REAL;
		out->real = json_real_value(value);
	} else
		out->type = EMBER_VALUE_NONE;
	json_decref(reply);
	return (0);
}

/* Execute a plan with reduce and read its result. */
int
ember_reduce(struct ember *e, const char *plan_json, const char *fn,
    struct ember_reduced *out)
{
	json_t	*options;
	char	*text, *reply;
	int	 rc;

	memset(out, 0, sizeof *out);
	if (fn == NULL)
		return (ember_fail(e, "ACTION_INVALID", "fn: missing"));
	if ((options = json_pack("{s:s}", "fn", fn)) == NULL ||
	    (text = json_dumps(options, JSON_COMPACT)) == NULL) {
		json_decref(options);
		return (ember_fail(e, "NO_MEMORY", "out of memory"));
	}
	json_decref(options);
	rc = ember_execute(e, plan_json, "reduce", text, &reply);
	free(text);
	if (rc == 0)
		rc = ember_reduced_parse(e, reply, out);
	free(reply);
	return (rc);
}
