#include <sys/socket.h>
#include <sys/uio.h>

#include <errno.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include <event2/buffer.h>
#include <event2/event.h>

#include "channel.h"
#include "emberd.h"
#include "log.h"
#include "xmalloc.h"

/* The least worth a read() call, and reads per event before yielding. */
#define CHANNEL_MIN_READ	(16 * 1024)
#define CHANNEL_READS		4

struct channel {
	int		  fd;
	struct evbuffer	 *in, *out;
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

void
channel_free(struct channel *ch)
{
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
		n = evbuffer_write(ch->out, ch->fd);
		if (n == -1 && errno == EINTR)
			continue;
		if (n == -1 && errno == EAGAIN)
			break;
		if (n <= 0) {
			/* The reader notices the end too; drop what is left. */
			evbuffer_drain(ch->out, evbuffer_get_length(ch->out));
			return;
		}
	}
	if (evbuffer_get_length(ch->out) > 0)
		event_add(ch->wev, NULL);
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
