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
#include "closer.h"
#include "emberd.h"
#include "fdpass.h"
#include "log.h"
#include "xmalloc.h"

/* The least worth a read() call, and reads per event before yielding. */
#define CHANNEL_MIN_READ	(16 * 1024)
/* The first read after the socket ran dry: a chain of 4 KiB (libevent
 * rounds a chain with its header up to a power of two), so that a peer
 * that sends a frame's first bytes and stops makes emberd hold a page, not
 * a chain the size of the mark.  Reads that fill it double, to the mark. */
#define CHANNEL_FIRST_READ	(4096 - 256)
#define CHANNEL_READS		4
/* Packets read per event: a burst of small ones cannot starve others. */
#define CHANNEL_PACKETS		64
/* A channel whose peer passed descriptors nobody took reads no more while
 * the closer has this many to close, any channel (a new one's first read
 * may bring as many) while it has the second, and they look again this
 * often: peers cannot pile descriptors up in emberd faster than it
 * closes them. */
#define CHANNEL_CLOSER_HIGH	32
#define CHANNEL_CLOSER_HIGHEST	128
#define CHANNEL_CLOSER_WAIT_MS	10
/* Descriptors one read can bring: the most one message can carry (the
 * kernel's SCM_MAX_FD), so that none is refused by the kernel, whose
 * close of a refused one would run on emberd's loop (closer.h). */
#define CHANNEL_CMSG_FDS	253

static void	channel_write(struct channel *, int);

/* A descriptor and the byte it goes (or came) with. */
struct channel_fd {
	uint64_t	  at;
	int		  fd;
};

struct channel {
	int		  fd;
	struct evbuffer	 *in, *out;
	uint64_t	  written;	/* bytes of out sent so far */
	uint64_t	  read;		/* bytes read so far */
	struct channel_fd *fds;		/* to pass, in order */
	size_t		  nfds;
	struct channel_fd *rfds;	/* received, not taken */
	size_t		  nrfds, max_rfds, refused;
	size_t		  packet;	/* a packet's size, or 0: a stream */
	size_t		  out_packet;	/* the size of those written */
	size_t		  packet_fds;	/* descriptors one packet may bring */
	struct event	 *rev, *wev, *kick;
	struct event	 *throttle;	/* reading again after the closer */
	size_t		  high, default_high;
	size_t		  rsize;	/* the next read's size, at most */
	size_t		  low;		/* for write_cb */
	int		  reading;
	int		  held;
	int		  eof;
	int		  stopped;
	int		  corked;	/* output waits for channel_uncork */
	int		  error;	/* for error_cb, from kick */
	void		(*read_cb)(void *);
	void		(*write_cb)(void *);
	void		(*error_cb)(void *, int);
	void		 *arg;
};

/* Keep the descriptors of a read that started at offset at. */
static void
channel_keep_fds(struct channel *ch, struct msghdr *mh, uint64_t at)
{
	struct cmsghdr	*c;
	int		*p;
	size_t		 k, i, kept = 0;

	if (mh->msg_flags & MSG_CTRUNC)
		ch->refused++;
	for (c = CMSG_FIRSTHDR(mh); c != NULL; c = CMSG_NXTHDR(mh, c)) {
		if (c->cmsg_level != SOL_SOCKET || c->cmsg_type != SCM_RIGHTS)
			continue;
		p = (int *)CMSG_DATA(c);
		k = (c->cmsg_len - CMSG_LEN(0)) / sizeof(int);
		for (i = 0; i < k; i++) {
			if (ch->nrfds >= ch->max_rfds ||
			    (ch->packet && kept >= ch->packet_fds)) {
				closer_close_drained(p[i]);
				ch->refused++;
				continue;
			}
			ch->rfds = xreallocarray(ch->rfds, ch->nrfds + 1,
			    sizeof *ch->rfds);
			ch->rfds[ch->nrfds].at = at;
			ch->rfds[ch->nrfds++].fd = p[i];
			kept++;
		}
	}
}

/* One read into iov, by recvmsg even where no descriptor is wanted: a
 * peer may send some anyway, and they go to the closer. */
static ssize_t
channel_recv(struct channel *ch, struct iovec *iov, int nvec)
{
	struct msghdr	mh;
	union {
		struct cmsghdr	hdr;
		char		buf[CMSG_SPACE(sizeof(int) *
				    CHANNEL_CMSG_FDS)];
	} cmsg;
	ssize_t		n;

	memset(&mh, 0, sizeof mh);
	mh.msg_iov = iov;
	mh.msg_iovlen = (size_t)nvec;
	mh.msg_control = cmsg.buf;
	mh.msg_controllen = sizeof cmsg.buf;
	n = recvmsg(ch->fd, &mh, MSG_CMSG_CLOEXEC | MSG_DONTWAIT);
	if (n >= 0)
		channel_keep_fds(ch, &mh, ch->read);
	if (n > 0 && (mh.msg_flags & MSG_TRUNC))
		n = (ssize_t)ch->packet + 1;	/* too long: refused below */
	return (n);
}

/* The channel ended with error (0: the peer's end) after got bytes were
 * read in this turn: tell the owner. */
static void
channel_end(struct channel *ch, int error, size_t got)
{
	if (error != 0)
		log_debug("channel: %s", strerror(error));
	ch->eof = 1;
	channel_stop(ch);
	if (ch->error_cb == NULL) {
		ch->read_cb(ch->arg);
		return;
	}
	if (got == 0) {
		ch->error_cb(ch->arg, error);
		return;
	}
	/* The input first; the end a turn later, if the owner is still
	 * there (freeing the channel cancels it). */
	ch->error = error;
	event_active(ch->kick, EV_READ, 1);
	ch->read_cb(ch->arg);
}

/* Read again once the closer has caught up (channel_throttle). */
static void
channel_throttle_cb(evutil_socket_t fd, short events, void *arg)
{
	(void)fd; (void)events;
	channel_resume(arg);
}

/* Stop reading for a while: the peer passed descriptors nobody took, and
 * the closer has many to close. */
static void
channel_throttle(struct channel *ch)
{
	struct timeval	tv = { 0, CHANNEL_CLOSER_WAIT_MS * 1000 };

	event_del(ch->rev);
	ch->reading = 0;
	evtimer_add(ch->throttle, &tv);
}

/* Read what the socket holds, up to the mark (or a few packets). */
static void
channel_read_cb(evutil_socket_t fd, short events, void *arg)
{
	struct channel		*ch = arg;
	struct evbuffer_iovec	 vec[2];
	struct iovec		 iov[2];
	size_t			 len, want, room, got = 0;
	ssize_t			 n, left;
	int			 nvec, i, reads, error = -1;

	(void)fd; (void)events;
	for (reads = 0; reads < (ch->packet ? CHANNEL_PACKETS :
	    CHANNEL_READS); reads++) {
		len = evbuffer_get_length(ch->in);
		if (len >= ch->high) {
			/* At the mark: stop reading only if the owner left it
			 * there since (the event came again), not each time
			 * it is reached.  An owner that takes a message and
			 * lowers the mark at once (a worker's batch) leaves
			 * the event as it is: no epoll_ctl pair a message. */
			if (reads == 0) {
				event_del(ch->rev);
				ch->reading = 0;
			}
			break;
		}
		if (ch->packet)
			want = ch->packet + 1;	/* one more: a longer one */
		else if ((want = ch->high - len) < CHANNEL_MIN_READ &&
		    ch->high <= ch->default_high)
			want = CHANNEL_MIN_READ;
		if (!ch->packet && ch->high <= ch->default_high &&
		    want > ch->rsize)
			want = ch->rsize;
		/* (Up to a mark channel_want raised, exactly: the owner
		 * wants a message's end, and no byte past it in its chains.) */
		nvec = evbuffer_reserve_space(ch->in, (ev_ssize_t)want, vec,
		    ch->packet ? 1 : 2);
		if (nvec <= 0)
			fatalx("evbuffer_reserve_space failed");
		/* The space may be more than asked for: read no more. */
		for (i = 0, room = want; i < nvec; i++) {
			iov[i].iov_base = vec[i].iov_base;
			iov[i].iov_len = vec[i].iov_len < room ?
			    vec[i].iov_len : room;
			room -= iov[i].iov_len;
		}
		if (closer_backlog() >= (ch->refused > 0 ?
		    CHANNEL_CLOSER_HIGH : CHANNEL_CLOSER_HIGHEST)) {
			channel_throttle(ch);
			break;
		}
		n = channel_recv(ch, iov, nvec);
		if (n == -1 && (errno == EAGAIN || errno == EINTR))
			break;
		if (n <= 0) {
			error = n == 0 ? 0 : errno;
			break;
		}
		if (ch->packet && (size_t)n != ch->packet) {
			error = EBADMSG;
			break;
		}
		for (i = 0, left = n; i < nvec; i++) {
			if ((size_t)left < vec[i].iov_len)
				vec[i].iov_len = (size_t)left;
			left -= (ssize_t)vec[i].iov_len;
		}
		evbuffer_commit_space(ch->in, vec, nvec);
		ch->read += (uint64_t)n;
		got += (size_t)n;
		if (!ch->packet && (size_t)n < want) {
			ch->rsize = CHANNEL_FIRST_READ;
			break;		/* the socket is empty */
		}
		if (!ch->packet && ch->rsize < ch->default_high)
			ch->rsize *= 2;
	}
	if (error != -1)
		channel_end(ch, error, got);
	else
		ch->read_cb(ch->arg);
}

void
channel_read(struct channel *ch)
{
	if (!ch->stopped)
		channel_read_cb(ch->fd, EV_READ, ch);
}

static void
channel_write_cb(evutil_socket_t fd, short events, void *arg)
{
	struct channel	*ch = arg;
	size_t		 before = evbuffer_get_length(ch->out);

	(void)fd; (void)events;
	if (before == 0) {
		/* Left armed when the output ran dry; nothing came since. */
		event_del(ch->wev);
		return;
	}
	channel_write(ch, 1);
	if (ch->write_cb != NULL && !ch->stopped &&
	    evbuffer_get_length(ch->out) < before &&
	    evbuffer_get_length(ch->out) <= ch->low)
		ch->write_cb(ch->arg);
}

/* Tell the owner of the end a call into the channel met. */
static void
channel_kick_cb(evutil_socket_t fd, short events, void *arg)
{
	struct channel	*ch = arg;

	(void)fd; (void)events;
	if (ch->error_cb != NULL)
		ch->error_cb(ch->arg, ch->error);
}

/* Output was queued: with a write_cb, the loop writes it. */
static void
channel_output_cb(struct evbuffer *out, const struct evbuffer_cb_info *info,
    void *arg)
{
	struct channel	*ch = arg;

	(void)out;
	if (info->n_added > 0 && ch->write_cb != NULL && !ch->stopped &&
	    !ch->corked && !event_pending(ch->wev, EV_WRITE, NULL))
		event_add(ch->wev, NULL);
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
	ch->rsize = CHANNEL_FIRST_READ;
	ch->read_cb = read_cb;
	ch->arg = arg;
	ch->rev = event_new(ember_base, fd, EV_READ | EV_PERSIST,
	    channel_read_cb, ch);
	/* Persistent while output waits: a stream's writes turn after turn
	 * cost no epoll_ctl each. */
	ch->wev = event_new(ember_base, fd, EV_WRITE | EV_PERSIST,
	    channel_write_cb, ch);
	ch->kick = event_new(ember_base, -1, 0, channel_kick_cb, ch);
	ch->throttle = evtimer_new(ember_base, channel_throttle_cb, ch);
	evbuffer_add_cb(ch->out, channel_output_cb, ch);
	event_add(ch->rev, NULL);
	ch->reading = 1;
	return (ch);
}

struct channel *
channel_create_packets(int fd, size_t size, size_t out_size, size_t max_fds,
    void (*read_cb)(void *), void *arg)
{
	struct channel	*ch;

	/* Room for the packets of a turn. */
	ch = channel_create(fd, size * CHANNEL_PACKETS, read_cb, arg);
	ch->packet = size;
	ch->out_packet = out_size;
	ch->packet_fds = max_fds;
	ch->max_rfds = max_fds * CHANNEL_PACKETS;
	return (ch);
}

void
channel_set_error_cb(struct channel *ch, void (*error_cb)(void *, int))
{
	ch->error_cb = error_cb;
}

void
channel_set_write_cb(struct channel *ch, size_t low, void (*write_cb)(void *))
{
	ch->write_cb = write_cb;
	ch->low = low;
	if (write_cb != NULL && evbuffer_get_length(ch->out) > 0 &&
	    !ch->stopped)
		event_add(ch->wev, NULL);
}

void
channel_accept_fds(struct channel *ch, size_t max)
{
	ch->max_rfds = max;
}

int
channel_take_fd(struct channel *ch)
{
	int	fd;

	if (ch->nrfds == 0)
		return (-1);
	fd = ch->rfds[0].fd;
	memmove(ch->rfds, ch->rfds + 1, --ch->nrfds * sizeof *ch->rfds);
	return (fd);
}

int
channel_take_fd_with(struct channel *ch, size_t len)
{
	uint64_t	head = ch->read - evbuffer_get_length(ch->in);

	while (ch->nrfds > 0 && ch->rfds[0].at < head)
		closer_close_drained(channel_take_fd(ch));
	if (ch->nrfds == 0 || ch->rfds[0].at >= head + len)
		return (-1);
	return (channel_take_fd(ch));
}

size_t
channel_fds_refused(const struct channel *ch)
{
	return (ch->refused);
}

enum frame_status
channel_frame(struct channel *ch, size_t max, int32_t *len)
{
	enum frame_status	st = frame_peek(ch->in, max, len);

	if (st == FRAME_INCOMPLETE && evbuffer_get_length(ch->in) >= 4)
		channel_want(ch, 4 + (size_t)*len);
	return (st);
}

/* Forget the descriptors not passed, and those not taken. */
static void
channel_drop_fds(struct channel *ch)
{
	while (ch->nfds > 0)
		closer_close(ch->fds[--ch->nfds].fd);
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

/* Send the byte a descriptor rides on (on a packet channel, the packet):
 * 1, 0 when the socket is full, -1 on an error. */
static int
channel_send_fd(struct channel *ch)
{
	size_t		 len = ch->packet ? ch->out_packet : 1;
	unsigned char	*data = evbuffer_pullup(ch->out, (ev_ssize_t)len);
	ssize_t		 n;

	n = fd_send_many(ch->fd, data, len, &ch->fds[0].fd, 1);
	if (n == -1)
		return (errno == EAGAIN || errno == EWOULDBLOCK ? 0 : -1);
	closer_close(ch->fds[0].fd);
	memmove(ch->fds, ch->fds + 1, --ch->nfds * sizeof *ch->fds);
	evbuffer_drain(ch->out, (size_t)n);
	ch->written += (uint64_t)n;
	return (1);
}

void
channel_free(struct channel *ch)
{
	channel_drop_fds(ch);
	while (ch->nrfds > 0)
		closer_close_drained(ch->rfds[--ch->nrfds].fd);
	free(ch->rfds);
	event_free(ch->rev);
	event_free(ch->wev);
	event_free(ch->kick);
	event_free(ch->throttle);
	evbuffer_free(ch->in);
	evbuffer_free(ch->out);
	/* Descriptors the peer sent that were not read yet go with it. */
	closer_close_drained(ch->fd);
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

/* Write once: up to the next descriptor's byte, or one packet. */
static int
channel_write_some(struct channel *ch)
{
	if (ch->packet)
		return (evbuffer_write_atmost(ch->out, ch->fd,
		    (ev_ssize_t)ch->out_packet));
	if (ch->nfds > 0)
		return (evbuffer_write_atmost(ch->out, ch->fd,
		    (ev_ssize_t)(ch->fds[0].at - ch->written)));
	return (evbuffer_write(ch->out, ch->fd));
}

/*
 * Write what is queued until the socket is full, or, with once, in one
 * write (the loop's writes: the event comes again while output waits,
 * so no write is spent learning that the socket is full).
 */
static void
channel_write(struct channel *ch, int once)
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
		n = channel_write_some(ch);
		if (n == -1 && errno == EINTR)
			continue;
		if (n == -1 && errno == EAGAIN)
			break;
		if (n <= 0)
			goto broken;
		ch->written += (uint64_t)n;
		if (once)
			break;
	}
	/* Run dry, the event stays for a turn: output queued meanwhile (a
	 * stream's next batch) costs no epoll_ctl pair. */
	if (evbuffer_get_length(ch->out) > 0 &&
	    !event_pending(ch->wev, EV_WRITE, NULL))
		event_add(ch->wev, NULL);
	return;
broken:
	ch->error = n == -1 ? errno : EPIPE;
	channel_drop_fds(ch);
	if (ch->error_cb == NULL) {
		/* Drop what is left: the reader sees the end too. */
		evbuffer_drain(ch->out, evbuffer_get_length(ch->out));
		return;
	}
	/* The owner hears of it from the loop.  What is queued stays until
	 * then: it was never sent, and the owner may count on knowing that
	 * (a stream's retry buffer keeps what the output still holds). */
	log_debug("channel: %s", strerror(ch->error));
	channel_stop(ch);
	event_active(ch->kick, EV_WRITE, 1);
}

void
channel_flush(struct channel *ch)
{
	channel_write(ch, 0);
}

void
channel_cork(struct channel *ch)
{
	ch->corked = 1;
}

void
channel_uncork(struct channel *ch)
{
	ch->corked = 0;
	channel_write(ch, 0);
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
	if (!ch->reading && !ch->stopped && !ch->held &&
	    evbuffer_get_length(ch->in) < ch->high) {
		event_add(ch->rev, NULL);
		ch->reading = 1;
	}
}

void
channel_hold(struct channel *ch)
{
	ch->held = 1;
	ch->reading = 0;
	event_del(ch->rev);
}

void
channel_stop(struct channel *ch)
{
	ch->stopped = 1;
	ch->reading = 0;
	event_del(ch->rev);
	event_del(ch->wev);
}

void
channel_shut(struct channel *ch)
{
	channel_stop(ch);
	(void)shutdown(ch->fd, SHUT_RDWR);
}
