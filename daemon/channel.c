#include <sys/socket.h>
#include <sys/uio.h>

#include <errno.h>
#include <fcntl.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include <event2/buffer.h>
#include <event2/event.h>

#include "channel.h"
#include "emberd.h"
#include "fdpass.h"
#include "log.h"
#include "xmalloc.h"

/* The least worth a read() call, and reads per event before yielding. */
#define CHANNEL_MIN_READ	(16 * 1024)
#define CHANNEL_READS		4

/* A descriptor to pass with the output byte at offset at. */
struct channel_fd {
	uint64_t	  at;
	int		  fd;
};

struct channel {
	int		  fd;
	struct evbuffer	 *in, *out;
	uint64_t	  written;	/* bytes of out sent so far */
	struct channel_fd *fds;		/* to pass, in order */
	size_t		  nfds;
	struct event	 *rev, *wev;
	size_t		  high, default_high;
	int		  reading;
	int		  eof;
	int		  stopped;
	void		(*read_cb)(void *);
	void		 *arg;
};

/* Read what the socket holds, up to the mark. */
static void
channel_read_cb(evutil_socket_t fd, short events, void *arg)
{
	struct channel		*ch = arg;
	struct evbuffer_iovec	 vec[2];
	struct iovec		 iov[2];
	size_t			 len, want;
	ssize_t			 n, left;
	int			 nvec, i, reads;

	(void)events;
	for (reads = 0; reads < CHANNEL_READS; reads++) {
		len = evbuffer_get_length(ch->in);
		if (len >= ch->high) {
			event_del(ch->rev);
			ch->reading = 0;
			break;
		}
		want = ch->high - len;
		if (want < CHANNEL_MIN_READ)
			want = CHANNEL_MIN_READ;
		nvec = evbuffer_reserve_space(ch->in, (ev_ssize_t)want, vec, 2);
		if (nvec <= 0)
			fatalx("evbuffer_reserve_space failed");
		for (i = 0; i < nvec; i++) {
			iov[i].iov_base = vec[i].iov_base;
			iov[i].iov_len = vec[i].iov_len;
		}
		n = readv(fd, iov, nvec);
		if (n == -1 && (errno == EAGAIN || errno == EINTR))
			break;
		if (n <= 0) {
			if (n == -1)
				log_debug("channel read: %s", strerror(errno));
			ch->eof = 1;
			channel_stop(ch);
			break;
		}
		for (i = 0, left = n; i < nvec; i++) {
			if ((size_t)left < vec[i].iov_len)
				vec[i].iov_len = (size_t)left;
			left -= (ssize_t)vec[i].iov_len;
		}
		evbuffer_commit_space(ch->in, vec, nvec);
		if ((size_t)n < want)
			break;		/* the socket is empty */
	}
	ch->read_cb(ch->arg);
}

static void
channel_write_cb(evutil_socket_t fd, short events, void *arg)
{
	(void)fd; (void)events;
	channel_flush(arg);
}

struct channel *
channel_create(int fd, size_t high, void (*read_cb)(void *), void *arg)
{
	struct channel	*ch = xcalloc(1, sizeof *ch);

	evutil_make_socket_nonblocking(fd);
	ch->fd = fd;
	ch->in = evbuffer_new();
	ch->out = evbuffer_new();
	ch->high = ch->default_high = high;
	ch->read_cb = read_cb;
	ch->arg = arg;
	ch->rev = event_new(ember_base, fd, EV_READ | EV_PERSIST,
	    channel_read_cb, ch);
	ch->wev = event_new(ember_base, fd, EV_WRITE, channel_write_cb, ch);
	event_add(ch->rev, NULL);
	ch->reading = 1;
	return (ch);
}

/* Forget the descriptors not passed. */
static void
channel_drop_fds(struct channel *ch)
{
	while (ch->nfds > 0)
		close(ch->fds[--ch->nfds].fd);
	free(ch->fds);
	ch->fds = NULL;
}

void
channel_pass_fd(struct channel *ch, int fd)
{
	uint64_t	at;
	int		dup;

	if ((dup = fcntl(fd, F_DUPFD_CLOEXEC, 3)) == -1)
		fatal("channel: dup");
	at = ch->written + evbuffer_get_length(ch->out);
	/* One descriptor per byte: the next ones ride on the bytes after
	 * (a descriptor is longer than the descriptors passed with it). */
	if (ch->nfds > 0 && ch->fds[ch->nfds - 1].at >= at)
		at = ch->fds[ch->nfds - 1].at + 1;
	ch->fds = xreallocarray(ch->fds, ch->nfds + 1, sizeof *ch->fds);
	ch->fds[ch->nfds].at = at;
	ch->fds[ch->nfds++].fd = dup;
}

/* Send the byte a descriptor rides on: 1, 0 when the socket is full, -1
 * on an error. */
static int
channel_send_fd(struct channel *ch)
{
	unsigned char	*byte = evbuffer_pullup(ch->out, 1);
	ssize_t		 n;

	n = fd_send_many(ch->fd, byte, 1, &ch->fds[0].fd, 1);
	if (n == -1)
		return (errno == EAGAIN || errno == EWOULDBLOCK ? 0 : -1);
	close(ch->fds[0].fd);
	memmove(ch->fds, ch->fds + 1, --ch->nfds * sizeof *ch->fds);
	evbuffer_drain(ch->out, 1);
	ch->written++;
	return (1);
}

void
channel_free(struct channel *ch)
{
	channel_drop_fds(ch);
	event_free(ch->rev);
	event_free(ch->wev);
	evbuffer_free(ch->in);
	evbuffer_free(ch->out);
	close(ch->fd);
	free(ch);
}

struct evbuffer *
channel_input(struct channel *ch)
{
	return (ch->in);
}

struct evbuffer *
channel_output(struct channel *ch)
{
	return (ch->out);
}

int
channel_eof(const struct channel *ch)
{
	return (ch->eof);
}

void
channel_flush(struct channel *ch)
{
	int	n;

	if (ch->stopped)
		return;
	while (evbuffer_get_length(ch->out) > 0) {
		if (ch->nfds > 0 && ch->fds[0].at == ch->written) {
			if ((n = channel_send_fd(ch)) == 0)
				break;
			if (n == -1)
				goto broken;
			continue;
		}
		if (ch->nfds > 0)
			n = evbuffer_write_atmost(ch->out, ch->fd,
			    (ev_ssize_t)(ch->fds[0].at - ch->written));
		else
			n = evbuffer_write(ch->out, ch->fd);
		if (n == -1 && errno == EINTR)
			continue;
		if (n == -1 && errno == EAGAIN)
			break;
		if (n <= 0)
			goto broken;
		ch->written += (uint64_t)n;
	}
	if (evbuffer_get_length(ch->out) > 0)
		event_add(ch->wev, NULL);
	return;
broken:
	/* The reader notices the end too; drop what is left. */
	evbuffer_drain(ch->out, evbuffer_get_length(ch->out));
	channel_drop_fds(ch);
}

int
channel_alive(struct channel *ch)
{
	char	c;
	ssize_t	n;

	if (ch->eof || ch->stopped)
		return (0);
	n = recv(ch->fd, &c, 1, MSG_PEEK | MSG_DONTWAIT);
	return (n == -1 && (errno == EAGAIN || errno == EWOULDBLOCK));
}

void
channel_want(struct channel *ch, size_t len)
{
	size_t	high = len > ch->default_high ? len : ch->default_high;

	if (high == ch->high)
		return;
	ch->high = high;
	channel_resume(ch);
}

void
channel_resume(struct channel *ch)
{
	if (!ch->reading && !ch->stopped &&
	    evbuffer_get_length(ch->in) < ch->high) {
		event_add(ch->rev, NULL);
		ch->reading = 1;
	}
}

void
channel_stop(struct channel *ch)
{
	ch->stopped = 1;
	ch->reading = 0;
	event_del(ch->rev);
	event_del(ch->wev);
}
