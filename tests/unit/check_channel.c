/*
 * Tests for daemon/channel.c, emberd's end of a worker's socketpair: reads
 * up to the high mark and no further, the mark raised for a big message,
 * writes that go at once and the rest when the socket takes it, descriptors
 * passed on given bytes, the end of file, and the liveness probe; and what
 * the other peers need of it: the end told to an error callback, output
 * the loop writes with a low mark, or at once when corked output is
 * uncorked, descriptors received, packets of one size, frames over a
 * maximum refused.
 */
#include <sys/socket.h>

#include <errno.h>
#include <fcntl.h>
#include <poll.h>
#include <signal.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include <event2/buffer.h>
#include <event2/event.h>

#include "channel.h"
#include "fdpass.h"
#include "emberd.h"
#include "suites.h"

#define HIGH		(64 * 1024)

static struct channel	*ch;
static int		 peer;		/* the worker's end */
static int		 calls;		/* of read_cb */

static void
read_cb(void *arg)
{
	ck_assert_ptr_eq(arg, &calls);
	calls++;
}

static void
channel_setup(void)
{
	int	sv[2];

	ck_assert_ptr_nonnull(ember_base = event_base_new());
	ck_assert_int_eq(socketpair(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0, sv),
	    0);
	ck_assert_int_ne(fcntl(sv[1], F_SETFL, O_NONBLOCK), -1);
	peer = sv[1];
	calls = 0;
	ch = channel_create(sv[0], HIGH, read_cb, &calls);
}

static void
channel_teardown(void)
{
	if (ch != NULL)
		channel_free(ch);
	if (peer != -1)
		close(peer);
	event_base_free(ember_base);
	ember_base = NULL;
}

/* Run the loop over what is ready now, a few times. */
static void
run_loop(void)
{
	int	i;

	for (i = 0; i < 8; i++)
		ck_assert_int_ne(event_base_loop(ember_base, EVLOOP_NONBLOCK),
		    -1);
}

/* Write as much as the peer's socket takes, up to len; what it took. */
static size_t
peer_fill(size_t len)
{
	static char	buf[64 * 1024];
	size_t		done = 0;
	ssize_t		n;

	memset(buf, 'w', sizeof buf);
	while (done < len) {
		n = write(peer, buf, len - done < sizeof buf ? len - done :
		    sizeof buf);
		if (n == -1 && errno == EAGAIN)
			break;
		ck_assert_int_gt(n, 0);
		done += (size_t)n;
	}
	return (done);
}

/* Read what the peer has, up to len bytes, into buf. */
static size_t
peer_read(char *buf, size_t len)
{
	ssize_t	n = read(peer, buf, len);

	if (n == -1 && errno == EAGAIN)
		return (0);
	ck_assert_int_ge(n, 0);
	return ((size_t)n);
}

START_TEST(test_channel_reads_input)
{
	char	got[16];

	ck_assert_int_eq(write(peer, "hello", 5), 5);
	run_loop();
	ck_assert_int_ge(calls, 1);
	ck_assert_uint_eq(evbuffer_get_length(channel_input(ch)), 5);
	evbuffer_copyout(channel_input(ch), got, 5);
	ck_assert_mem_eq(got, "hello", 5);
	ck_assert_int_eq(channel_eof(ch), 0);
	ck_assert_int_eq(channel_alive(ch), 1);
}
END_TEST

/* Past the high mark the channel stops reading, so the worker's writes
 * block, and it reads again once the input is consumed. */
START_TEST(test_channel_high_mark)
{
	struct evbuffer	*in = channel_input(ch);
	size_t		 sent, len;

	sent = peer_fill(16 * HIGH);
	run_loop();
	len = evbuffer_get_length(in);
	ck_assert_uint_ge(len, HIGH);
	ck_assert_uint_lt(len, sent);		/* the rest waits */
	sent += peer_fill(16 * HIGH);
	run_loop();
	ck_assert_uint_eq(evbuffer_get_length(in), len);	/* stopped */

	evbuffer_drain(in, len);
	channel_resume(ch);
	run_loop();
	ck_assert_uint_ge(evbuffer_get_length(in), sent - len < HIGH ?
	    sent - len : HIGH);
	ck_assert_int_eq(channel_eof(ch), 0);
}
END_TEST

/* channel_want raises the mark for a message bigger than it; 0 puts the
 * default back. */
START_TEST(test_channel_want)
{
	struct evbuffer	*in = channel_input(ch);
	size_t		 sent, len;

	channel_want(ch, 3 * HIGH);
	sent = peer_fill(16 * HIGH);
	run_loop();
	sent += peer_fill(16 * HIGH);
	run_loop();
	len = evbuffer_get_length(in);
	ck_assert_uint_ge(len, 3 * HIGH);
	ck_assert_uint_lt(len, sent);

	/* Back to the default: HIGH / 2 left is below it, so it reads. */
	channel_want(ch, 0);
	evbuffer_drain(in, len - HIGH / 2);
	sent += peer_fill(16 * HIGH);
	channel_resume(ch);
	run_loop();
	len = evbuffer_get_length(in);
	ck_assert_uint_ge(len, HIGH);
	ck_assert_uint_lt(len, 3 * HIGH);
	run_loop();
	ck_assert_uint_eq(evbuffer_get_length(in), len);
}
END_TEST

/* A raised mark is a message's end: the channel reads to it exactly, even
 * when the last piece is smaller than the least read and the buffer has
 * more room than asked, so that no byte of the next message shares the
 * message's chains (emberd moves a worker's batch on without a copy). */
START_TEST(test_channel_want_exact)
{
	struct evbuffer	*in = channel_input(ch);
	size_t		 end = 3 * HIGH + 7, sent;

	channel_want(ch, end);
	sent = peer_fill(16 * HIGH);
	run_loop();
	sent += peer_fill(16 * HIGH);
	run_loop();
	ck_assert_uint_gt(sent, end);
	ck_assert_uint_eq(evbuffer_get_length(in), end);
}
END_TEST

/* A few bytes are held in a chain of about their size, not in one the
 * size of the mark: a peer that sends the start of a frame and stops makes
 * emberd hold what it sent, not 64 KiB more.  (The room left in the chain
 * the bytes went into is what the next reservation offers first.) */
START_TEST(test_channel_small_read_small_chain)
{
	struct evbuffer		*in = channel_input(ch);
	struct evbuffer_iovec	 v;

	ck_assert_int_eq(write(peer, "\0\0\0\144hello", 9), 9);
	run_loop();
	ck_assert_uint_eq(evbuffer_get_length(in), 9);
	ck_assert_int_eq(evbuffer_reserve_space(in, 1, &v, 1), 1);
	ck_assert_uint_lt(v.iov_len, 8 * 1024);
}
END_TEST

/* A peer that keeps the socket full is still read in big steps: what it
 * sent is in within a few turns of the loop. */
START_TEST(test_channel_big_reads_grow)
{
	size_t	sent;

	sent = peer_fill(HIGH);
	ck_assert_uint_eq(sent, HIGH);
	run_loop();
	ck_assert_uint_eq(evbuffer_get_length(channel_input(ch)), sent);
}
END_TEST

/* A small message is written by channel_flush itself, not a loop turn
 * later. */
START_TEST(test_channel_flush_now)
{
	char	got[16];

	evbuffer_add(channel_output(ch), "task", 4);
	channel_flush(ch);
	ck_assert_uint_eq(evbuffer_get_length(channel_output(ch)), 0);
	ck_assert_uint_eq(peer_read(got, sizeof got), 4);
	ck_assert_mem_eq(got, "task", 4);
}
END_TEST

/* What the socket does not take at once goes, in order, as the peer
 * reads. */
START_TEST(test_channel_flush_rest)
{
	const size_t	 total = 4 * 1024 * 1024;
	unsigned char	*data, *got;
	size_t		 i, n = 0;
	int		 rounds;

	data = malloc(total);
	got = malloc(total);
	ck_assert(data != NULL && got != NULL);
	for (i = 0; i < total; i++)
		data[i] = (unsigned char)(i * 7 + i / 4096);
	evbuffer_add(channel_output(ch), data, total);
	channel_flush(ch);
	ck_assert_uint_gt(evbuffer_get_length(channel_output(ch)), 0);
	for (rounds = 0; n < total && rounds < 100000; rounds++) {
		n += peer_read((char *)got + n, total - n);
		run_loop();
	}
	ck_assert_uint_eq(n, total);
	ck_assert(memcmp(got, data, total) == 0);
	ck_assert_uint_eq(evbuffer_get_length(channel_output(ch)), 0);
	free(data);
	free(got);
}
END_TEST

/* Descriptors passed with the output ride, one per byte and in order, on
 * the bytes queued after them, behind bytes queued before; the peer gets
 * every byte in order and each descriptor once. */
START_TEST(test_channel_pass_fds)
{
	int	 p1[2], p2[2], fds[8], overflow = 0;
	size_t	 nfds = 0, n = 0;
	char	 got[64], c;
	ssize_t	 r;
	int	 rounds;

	ck_assert_int_eq(pipe(p1), 0);
	ck_assert_int_eq(pipe(p2), 0);
	evbuffer_add(channel_output(ch), "before", 6);
	channel_pass_fd(ch, p1[0]);
	channel_pass_fd(ch, p2[0]);
	/* The channel holds its own copies: ours may go at once. */
	close(p1[0]);
	close(p2[0]);
	evbuffer_add(channel_output(ch), "descriptor", 10);
	channel_flush(ch);
	for (rounds = 0; n < 16 && rounds < 1000; rounds++) {
		r = fd_recv_many(peer, got + n, sizeof got - n, fds, 8, &nfds,
		    &overflow);
		if (r > 0)
			n += (size_t)r;
		run_loop();
	}
	ck_assert_uint_eq(n, 16);
	ck_assert_mem_eq(got, "beforedescriptor", 16);
	ck_assert_int_eq(overflow, 0);
	ck_assert_uint_eq(nfds, 2);
	/* In order: the first passed is p1's read end. */
	ck_assert_int_eq(write(p1[1], "1", 1), 1);
	ck_assert_int_eq(write(p2[1], "2", 1), 1);
	ck_assert_int_eq(read(fds[0], &c, 1), 1);
	ck_assert_int_eq(c, '1');
	ck_assert_int_eq(read(fds[1], &c, 1), 1);
	ck_assert_int_eq(c, '2');
	close(fds[0]);
	close(fds[1]);
	close(p1[1]);
	close(p2[1]);
}
END_TEST

/* Descriptors not passed when the channel goes are closed, not leaked. */
START_TEST(test_channel_free_closes_fds)
{
	int	p[2], i;
	char	c = 0;

	ck_assert_int_eq(pipe(p), 0);
	channel_pass_fd(ch, p[0]);
	close(p[0]);
	channel_free(ch);
	ch = NULL;
	/* The read end is gone with the channel, closed by the closer's
	 * thread: the writer soon sees EPIPE. */
	signal(SIGPIPE, SIG_IGN);
	for (i = 0; i < 200 && write(p[1], &c, 1) == 1; i++)
		usleep(10000);
	ck_assert_int_eq(write(p[1], &c, 1), -1);
	ck_assert_int_eq(errno, EPIPE);
	close(p[1]);
}
END_TEST

/* The worker's end closing: read_cb runs once more, with channel_eof. */
START_TEST(test_channel_eof)
{
	ck_assert_int_eq(write(peer, "last", 4), 4);
	close(peer);
	peer = -1;
	run_loop();
	ck_assert_int_ge(calls, 1);
	ck_assert_int_eq(channel_eof(ch), 1);
	ck_assert_uint_eq(evbuffer_get_length(channel_input(ch)), 4);
	ck_assert_int_eq(channel_alive(ch), 0);
}
END_TEST

/* channel_alive asks the socket: a peer that is gone is not alive even
 * before the loop has seen it, nor is one that has something to say. */
START_TEST(test_channel_alive)
{
	ck_assert_int_eq(channel_alive(ch), 1);
	ck_assert_int_eq(write(peer, "x", 1), 1);
	ck_assert_int_eq(channel_alive(ch), 0);
	run_loop();
	ck_assert_int_eq(channel_alive(ch), 1);
	close(peer);
	peer = -1;
	ck_assert_int_eq(channel_alive(ch), 0);
	ck_assert_int_eq(calls, 1);
}
END_TEST

/* A stopped channel neither reads nor writes; freeing it closes the
 * socket. */
START_TEST(test_channel_stop)
{
	struct pollfd	pfd;
	char		got[4];
	ssize_t		n;

	channel_stop(ch);
	ck_assert_int_eq(channel_alive(ch), 0);
	ck_assert_int_eq(write(peer, "late", 4), 4);
	run_loop();
	ck_assert_int_eq(calls, 0);
	ck_assert_uint_eq(evbuffer_get_length(channel_input(ch)), 0);
	evbuffer_add(channel_output(ch), "kept", 4);
	channel_flush(ch);
	ck_assert_uint_eq(evbuffer_get_length(channel_output(ch)), 4);
	ck_assert_uint_eq(peer_read(got, sizeof got), 0);

	/* Closed (by the closer's thread, soon): an end of file, or a
	 * reset for the unread "late". */
	channel_free(ch);
	ch = NULL;
	pfd.fd = peer;
	pfd.events = POLLIN;
	ck_assert_int_eq(poll(&pfd, 1, 2000), 1);
	n = read(peer, got, sizeof got);
	ck_assert_msg(n == 0 || (n == -1 && errno == ECONNRESET),
	    "read %zd (%s) from a closed channel's peer", n, strerror(errno));
}
END_TEST

static int	 errors, last_error = -1, writes;

static void
error_cb(void *arg, int error)
{
	ck_assert_ptr_eq(arg, &calls);
	errors++;
	last_error = error;
}

static void
write_cb(void *arg)
{
	ck_assert_ptr_eq(arg, &calls);
	writes++;
}

/* With an error_cb, the end goes there once: after the input that came
 * before it, which read_cb sees first. */
START_TEST(test_channel_error_cb_eof)
{
	errors = 0;
	channel_set_error_cb(ch, error_cb);
	ck_assert_int_eq(write(peer, "last", 4), 4);
	close(peer);
	peer = -1;
	run_loop();
	ck_assert_int_ge(calls, 1);
	ck_assert_int_eq(errors, 1);
	ck_assert_int_eq(last_error, 0);
	ck_assert_uint_eq(evbuffer_get_length(channel_input(ch)), 4);
	ck_assert_int_eq(channel_eof(ch), 1);
}
END_TEST

/* A write that fails is told to error_cb from the loop, not from inside
 * channel_flush. */
START_TEST(test_channel_error_cb_write)
{
	errors = 0;
	signal(SIGPIPE, SIG_IGN);	/* as emberd does */
	channel_set_error_cb(ch, error_cb);
	ck_assert_int_eq(shutdown(peer, SHUT_RD), 0);
	evbuffer_add(channel_output(ch), "lost", 4);
	channel_flush(ch);
	ck_assert_int_eq(errors, 0);
	run_loop();
	ck_assert_int_eq(errors, 1);
	ck_assert_int_eq(last_error, EPIPE);
	/* Never sent: still queued, for the owner to know. */
	ck_assert_uint_eq(evbuffer_get_length(channel_output(ch)), 4);
}
END_TEST

/* With a write_cb the loop writes what is queued, and calls it once no
 * more than the low mark is left. */
START_TEST(test_channel_write_cb)
{
	static char	buf[256 * 1024];
	char		got[4];
	size_t		queued;

	writes = 0;
	channel_set_write_cb(ch, 1024, write_cb);
	evbuffer_add(channel_output(ch), "auto", 4);
	run_loop();
	ck_assert_uint_eq(evbuffer_get_length(channel_output(ch)), 0);
	ck_assert_uint_eq(peer_read(got, sizeof got), 4);
	ck_assert_mem_eq(got, "auto", 4);
	ck_assert_int_eq(writes, 1);

	/* More than the socket takes: no write_cb until the peer reads. */
	writes = 0;
	evbuffer_add(channel_output(ch), buf, sizeof buf);
	evbuffer_add(channel_output(ch), buf, sizeof buf);
	evbuffer_add(channel_output(ch), buf, sizeof buf);
	run_loop();
	queued = evbuffer_get_length(channel_output(ch));
	ck_assert_uint_gt(queued, 1024);
	ck_assert_int_eq(writes, 0);
	while (evbuffer_get_length(channel_output(ch)) > 0) {
		while (peer_read(buf, sizeof buf) > 0)
			;
		run_loop();
	}
	ck_assert_int_ge(writes, 1);
}
END_TEST

/* The events the loop waits on. */
static int
loop_events(void)
{
	return (event_base_get_num_events(ember_base,
	    EVENT_BASE_COUNT_ADDED));
}

/* The events added when read_mark_cb last found the input at the mark;
 * whether it takes the input then. */
static int	at_mark_events;
static int	take_at_mark;

static void
read_mark_cb(void *arg)
{
	struct evbuffer	*in = channel_input(*(struct channel **)arg);

	if (evbuffer_get_length(in) < HIGH)
		return;
	at_mark_events = loop_events();
	if (take_at_mark)
		evbuffer_drain(in, evbuffer_get_length(in));
}

/* A channel that read to its mark keeps its read event while its owner
 * takes the input (a worker's batch after batch: no epoll_ctl pair a
 * batch); one whose owner leaves the input there stops reading at the
 * next turn, so the loop does not spin on a readable socket. */
START_TEST(test_channel_read_event_at_mark)
{
	struct channel	*c;
	size_t		 len;
	int		 sv[2], idle;

	channel_free(ch);
	ch = NULL;
	idle = loop_events();
	ck_assert_int_eq(socketpair(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0, sv),
	    0);
	close(peer);
	peer = sv[1];
	ck_assert_int_ne(fcntl(peer, F_SETFL, O_NONBLOCK), -1);
	ch = c = channel_create(sv[0], HIGH, read_mark_cb, &ch);
	ck_assert_int_eq(loop_events(), idle + 1);

	take_at_mark = 1;
	at_mark_events = 0;
	peer_fill(16 * HIGH);
	run_loop();
	ck_assert_int_eq(at_mark_events, idle + 1);	/* still reading */
	ck_assert_int_eq(loop_events(), idle + 1);

	take_at_mark = 0;
	peer_fill(16 * HIGH);
	run_loop();
	len = evbuffer_get_length(channel_input(c));
	ck_assert_uint_ge(len, HIGH);
	ck_assert_int_eq(loop_events(), idle);		/* stopped */
	run_loop();
	ck_assert_uint_eq(evbuffer_get_length(channel_input(c)), len);
	evbuffer_drain(channel_input(c), len);
	channel_resume(c);
	ck_assert_int_eq(loop_events(), idle + 1);
}
END_TEST

/* Output that ran dry leaves the write event for a turn, so a stream's
 * next batch queued meanwhile is written on it; a turn with nothing to
 * write removes it, and the loop does not spin on a writable socket. */
START_TEST(test_channel_write_event_dry)
{
	char	got[8];
	int	idle = loop_events();

	writes = 0;
	channel_set_write_cb(ch, 1024, write_cb);
	evbuffer_add(channel_output(ch), "one", 3);
	ck_assert_int_eq(loop_events(), idle + 1);
	ck_assert_int_eq(event_base_loop(ember_base, EVLOOP_ONCE |
	    EVLOOP_NONBLOCK), 0);
	ck_assert_uint_eq(evbuffer_get_length(channel_output(ch)), 0);
	ck_assert_int_eq(loop_events(), idle + 1);	/* left for a turn */
	evbuffer_add(channel_output(ch), "two", 3);
	ck_assert_int_eq(loop_events(), idle + 1);
	run_loop();
	ck_assert_uint_eq(peer_read(got, sizeof got), 6);
	ck_assert_mem_eq(got, "onetwo", 6);
	ck_assert_int_eq(loop_events(), idle);	/* gone when dry */
	run_loop();
	ck_assert_int_eq(loop_events(), idle);
	ck_assert_int_eq(writes, 2);
}
END_TEST

/* Corked, output queued with a write_cb arms no write event; uncorked,
 * it is written at once, with no event left armed, and what the socket
 * does not take is left to the loop. */
START_TEST(test_channel_cork)
{
	static char	buf[256 * 1024];
	char		got[8];
	int		armed;

	channel_set_write_cb(ch, 0, write_cb);
	armed = event_base_get_num_events(ember_base, EVENT_BASE_COUNT_ADDED);
	channel_cork(ch);
	evbuffer_add(channel_output(ch), "reply", 5);
	ck_assert_int_eq(event_base_get_num_events(ember_base,
	    EVENT_BASE_COUNT_ADDED), armed);
	ck_assert_uint_eq(peer_read(got, sizeof got), 0);
	channel_uncork(ch);
	ck_assert_uint_eq(peer_read(got, sizeof got), 5);
	ck_assert_mem_eq(got, "reply", 5);
	ck_assert_uint_eq(evbuffer_get_length(channel_output(ch)), 0);
	ck_assert_int_eq(event_base_get_num_events(ember_base,
	    EVENT_BASE_COUNT_ADDED), armed);

	/* More than the socket takes: the rest waits for the loop. */
	channel_cork(ch);
	evbuffer_add(channel_output(ch), buf, sizeof buf);
	evbuffer_add(channel_output(ch), buf, sizeof buf);
	channel_uncork(ch);
	ck_assert_uint_gt(evbuffer_get_length(channel_output(ch)), 0);
	ck_assert_int_eq(event_base_get_num_events(ember_base,
	    EVENT_BASE_COUNT_ADDED), armed + 1);
	while (evbuffer_get_length(channel_output(ch)) > 0) {
		while (peer_read(buf, sizeof buf) > 0)
			;
		run_loop();
	}
}
END_TEST

/* Descriptors that come with the input are kept up to the bound, in
 * order; more are closed and counted. */
START_TEST(test_channel_accept_fds)
{
	int	p[2], q[2], fd;
	char	c;

	channel_accept_fds(ch, 1);
	ck_assert_int_eq(pipe(p), 0);
	ck_assert_int_eq(pipe(q), 0);
	ck_assert_int_eq(fd_send_with(peer, "a", 1, p[0]), 1);
	ck_assert_int_eq(fd_send_with(peer, "b", 1, q[0]), 1);
	run_loop();
	ck_assert_uint_eq(evbuffer_get_length(channel_input(ch)), 2);
	ck_assert_uint_eq(channel_fds_refused(ch), 1);
	fd = channel_take_fd(ch);
	ck_assert_int_ge(fd, 0);
	ck_assert_int_eq(write(p[1], "x", 1), 1);	/* it is p[0] */
	ck_assert_int_eq(read(fd, &c, 1), 1);
	close(fd);
	ck_assert_int_eq(channel_take_fd(ch), -1);
	close(p[0]); close(p[1]); close(q[0]); close(q[1]);
}
END_TEST

/* A frame's length over the maximum is refused and the mark stays; one
 * under it raises the mark to hold the whole frame. */
START_TEST(test_channel_frame)
{
	unsigned char	hdr[4];
	int32_t		len;

	be32_put(hdr, 3 * HIGH);
	ck_assert_int_eq(write(peer, hdr, 4), 4);
	run_loop();
	ck_assert_int_eq(channel_frame(ch, 2 * HIGH, &len), FRAME_TOO_LARGE);
	ck_assert_int_eq(len, 3 * HIGH);
	peer_fill(16 * HIGH);
	run_loop();
	ck_assert_uint_lt(evbuffer_get_length(channel_input(ch)), 2 * HIGH);
	ck_assert_int_eq(channel_frame(ch, 4 * HIGH, &len), FRAME_INCOMPLETE);
	peer_fill(16 * HIGH);
	run_loop();
	peer_fill(16 * HIGH);
	run_loop();
	ck_assert_int_eq(channel_frame(ch, 4 * HIGH, &len), FRAME_OK);
}
END_TEST

/* Once held, a channel reads no more, whatever is consumed, and still
 * writes. */
START_TEST(test_channel_hold)
{
	char	got[4];

	channel_hold(ch);
	ck_assert_int_eq(write(peer, "late", 4), 4);
	channel_resume(ch);
	channel_want(ch, 4 * HIGH);
	run_loop();
	ck_assert_uint_eq(evbuffer_get_length(channel_input(ch)), 0);
	evbuffer_add(channel_output(ch), "sent", 4);
	channel_flush(ch);
	ck_assert_uint_eq(peer_read(got, sizeof got), 4);
}
END_TEST

static struct channel	*pch;
static int		 ppeer;

static void
packet_setup(void)
{
	int	sv[2];

	ck_assert_ptr_nonnull(ember_base = event_base_new());
	ck_assert_int_eq(socketpair(AF_UNIX, SOCK_SEQPACKET | SOCK_CLOEXEC,
	    0, sv), 0);
	ppeer = sv[1];
	calls = errors = 0;
	last_error = -1;
	pch = channel_create_packets(sv[0], 8, 8, 1, read_cb, &calls);
	channel_set_error_cb(pch, error_cb);
}

static void
packet_teardown(void)
{
	if (pch != NULL)
		channel_free(pch);
	pch = NULL;
	close(ppeer);
	event_base_free(ember_base);
	ember_base = NULL;
}

/* Packets of the size line up in the input; a descriptor is taken with
 * the packet it came with, one that came with a packet consumed before
 * is closed. */
START_TEST(test_channel_packets)
{
	int	p[2], fd;
	char	got[8];

	ck_assert_int_eq(pipe(p), 0);
	ck_assert_int_eq(write(ppeer, "packet-1", 8), 8);
	ck_assert_int_eq(fd_send_with(ppeer, "packet-2", 8, p[0]), 8);
	ck_assert_int_eq(write(ppeer, "packet-3", 8), 8);
	ck_assert_int_eq(fd_send_with(ppeer, "packet-4", 8, p[1]), 8);
	run_loop();
	ck_assert_uint_eq(evbuffer_get_length(channel_input(pch)), 32);
	ck_assert_uint_eq(channel_fds_refused(pch), 0);
	ck_assert_int_eq(channel_take_fd_with(pch, 8), -1);
	evbuffer_drain(channel_input(pch), 8);
	fd = channel_take_fd_with(pch, 8);
	ck_assert_int_ge(fd, 0);
	close(fd);
	evbuffer_drain(channel_input(pch), 8);
	ck_assert_int_eq(channel_take_fd_with(pch, 8), -1);
	evbuffer_drain(channel_input(pch), 8);
	fd = channel_take_fd_with(pch, 8);	/* the second one waits too */
	ck_assert_int_ge(fd, 0);
	close(fd);
	evbuffer_drain(channel_input(pch), 8);

	/* Each write is one packet. */
	evbuffer_add(channel_output(pch), "answer-1answer-2", 16);
	channel_flush(pch);
	ck_assert_int_eq(read(ppeer, got, sizeof got), 8);
	ck_assert_int_eq(read(ppeer, got, sizeof got), 8);
	ck_assert_mem_eq(got, "answer-2", 8);
	ck_assert_int_eq(errors, 0);
	close(p[0]); close(p[1]);
}
END_TEST

/* A packet of another size ends the channel. */
START_TEST(test_channel_packet_size)
{
	ck_assert_int_eq(write(ppeer, "too-long!", 9), 9);
	run_loop();
	ck_assert_int_eq(errors, 1);
	ck_assert_int_eq(last_error, EBADMSG);
}
END_TEST

Suite *
channel_suite(void)
{
	Suite	*s = suite_create("channel");
	TCase	*tc;

	tc = tcase_create("input");
	tcase_add_checked_fixture(tc, channel_setup, channel_teardown);
	tcase_add_test(tc, test_channel_reads_input);
	tcase_add_test(tc, test_channel_high_mark);
	tcase_add_test(tc, test_channel_want);
	tcase_add_test(tc, test_channel_want_exact);
	tcase_add_test(tc, test_channel_small_read_small_chain);
	tcase_add_test(tc, test_channel_big_reads_grow);
	tcase_add_test(tc, test_channel_eof);
	suite_add_tcase(s, tc);

	tc = tcase_create("output");
	tcase_set_timeout(tc, 10);
	tcase_add_checked_fixture(tc, channel_setup, channel_teardown);
	tcase_add_test(tc, test_channel_flush_now);
	tcase_add_test(tc, test_channel_flush_rest);
	tcase_add_test(tc, test_channel_pass_fds);
	tcase_add_test(tc, test_channel_free_closes_fds);
	suite_add_tcase(s, tc);

	tc = tcase_create("state");
	tcase_add_checked_fixture(tc, channel_setup, channel_teardown);
	tcase_add_test(tc, test_channel_alive);
	tcase_add_test(tc, test_channel_stop);
	tcase_add_test(tc, test_channel_hold);
	suite_add_tcase(s, tc);

	tc = tcase_create("peers");
	tcase_set_timeout(tc, 10);
	tcase_add_checked_fixture(tc, channel_setup, channel_teardown);
	tcase_add_test(tc, test_channel_error_cb_eof);
	tcase_add_test(tc, test_channel_error_cb_write);
	tcase_add_test(tc, test_channel_write_cb);
	tcase_add_test(tc, test_channel_write_event_dry);
	tcase_add_test(tc, test_channel_read_event_at_mark);
	tcase_add_test(tc, test_channel_cork);
	tcase_add_test(tc, test_channel_accept_fds);
	tcase_add_test(tc, test_channel_frame);
	suite_add_tcase(s, tc);

	tc = tcase_create("packets");
	tcase_add_checked_fixture(tc, packet_setup, packet_teardown);
	tcase_add_test(tc, test_channel_packets);
	tcase_add_test(tc, test_channel_packet_size);
	suite_add_tcase(s, tc);

	return (s);
}
