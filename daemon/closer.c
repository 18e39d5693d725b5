#include <sys/types.h>
#include <sys/socket.h>

#include <errno.h>
#include <pthread.h>
#include <signal.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "closer.h"
#include "emberd.h"
#include "log.h"
#include "ring.h"

/* A close this long is worth a warning: descriptors wait behind it. */
#define CLOSER_SLOW_MS		10000
/* Descriptors one message can carry (the kernel's SCM_MAX_FD). */
#define CLOSER_CMSG_FDS		253
/* Reads of a socket being drained, at most: its queue is bounded by its
 * peer's send buffer, and no more comes once it is shut for reading. */
#define CLOSER_DRAIN_READS	1024
/* Sockets within sockets drained, at most (the kernel allows four). */
#define CLOSER_DEPTH		5
/* Threads, at most: another starts when every one has been on one close
 * this long, so that a close that waits (FUSE) holds back no other. */
#define CLOSER_THREADS		8
#define CLOSER_STUCK_MS		500

struct closer_fd {
	int	fd;
	int	drain;
};

static pthread_mutex_t	 closer_lock = PTHREAD_MUTEX_INITIALIZER;
static pthread_cond_t	 closer_wake = PTHREAD_COND_INITIALIZER;
/* Queued descriptors (struct closer_fd), first in first out. */
static struct ring	 closer_fds = { NULL, sizeof(struct closer_fd), 0, 0, 0 };
static int		 closer_threads;
static int		 closer_idle;		/* threads waiting for work */
/* When each thread's close under way began, or 0. */
static uint64_t		 closer_busy_ms[CLOSER_THREADS];
static int		 closer_warned;

static void	closer_close_one(int, int, int);
static void	closer_queue_locked(int, int);

/*
 * Read what a Unix socket holds, closing the descriptors in flight in it
 * one by one.  With zero_ends, a read of nothing ends it (the end of a
 * socket shut for reading); without, only EAGAIN does, as a datagram may
 * be empty.  0 once it is empty, -1 if more is left after
 * CLOSER_DRAIN_READS reads.
 */
static int
closer_drain_reads(int fd, int depth, int zero_ends)
{
	union {
		struct cmsghdr	hdr;
		char		buf[CMSG_SPACE(sizeof(int) * CLOSER_CMSG_FDS)];
	} cmsg;
	char		 junk[4096];
	struct msghdr	 mh;
	struct iovec	 iov;
	struct cmsghdr	*c;
	int		 *p, i;
	ssize_t		 n;
	size_t		 k, j;

	for (i = 0; i < CLOSER_DRAIN_READS; i++) {
		iov.iov_base = junk;
		iov.iov_len = sizeof junk;
		memset(&mh, 0, sizeof mh);
		mh.msg_iov = &iov;
		mh.msg_iovlen = 1;
		mh.msg_control = cmsg.buf;
		mh.msg_controllen = sizeof cmsg.buf;
		n = recvmsg(fd, &mh, MSG_DONTWAIT | MSG_CMSG_CLOEXEC);
		if (n == -1 && errno == EINTR)
			continue;
		if (n == -1)
			return (0);	/* EAGAIN: nothing is left */
		for (c = CMSG_FIRSTHDR(&mh); c != NULL;
		    c = CMSG_NXTHDR(&mh, c)) {
			if (c->cmsg_level != SOL_SOCKET ||
			    c->cmsg_type != SCM_RIGHTS)
				continue;
			p = (int *)CMSG_DATA(c);
			k = (c->cmsg_len - CMSG_LEN(0)) / sizeof(int);
			for (j = 0; j < k; j++)
				closer_close_one(p[j], 1, depth + 1);
		}
		if (n == 0 && mh.msg_controllen == 0 && zero_ends)
			return (0);
	}
	return (-1);
}

/*
 * Shut a Unix socket for reading and read what it holds, closing the
 * descriptors in flight in it one by one: its close would release them
 * all at once, unseen, each maybe a socket set to linger.  0 once it is
 * empty, -1 if more is left.
 */
static int
closer_drain(int fd, int depth)
{
	int		 domain, type, listening, off = 0, i, conn;
	socklen_t	 len;

	len = sizeof domain;
	if (getsockopt(fd, SOL_SOCKET, SO_DOMAIN, &domain, &len) == -1 ||
	    domain != AF_UNIX)
		return (0);
	len = sizeof type;
	if (getsockopt(fd, SOL_SOCKET, SO_TYPE, &type, &len) == -1)
		type = SOCK_STREAM;
	len = sizeof listening;
	if (getsockopt(fd, SOL_SOCKET, SO_ACCEPTCONN, &listening,
	    &len) == -1)
		listening = 0;
	/* A listener's close releases its connections not accepted, and what
	 * is in flight in them: take each, and drain it. */
	if (listening) {
		(void)shutdown(fd, SHUT_RD);	/* no more connect */
		for (i = 0; i < CLOSER_DRAIN_READS; i++) {
			conn = accept4(fd, NULL, NULL, SOCK_NONBLOCK |
			    SOCK_CLOEXEC);
			if (conn == -1 && errno == EINTR)
				continue;
			if (conn == -1)
				return (0);
			closer_close_one(conn, 1, depth + 1);
		}
		return (-1);
	}
	/* Nothing but descriptors may come with what is read: credentials
	 * or a security label would take room from them, and the kernel
	 * would release the ones cut off, here. */
	(void)setsockopt(fd, SOL_SOCKET, SO_PASSCRED, &off, sizeof off);
	(void)setsockopt(fd, SOL_SOCKET, SO_PASSSEC, &off, sizeof off);
#ifdef SO_PASSPIDFD
	(void)setsockopt(fd, SOL_SOCKET, SO_PASSPIDFD, &off, sizeof off);
#endif
	/* A datagram may be empty, and reads as the end of a socket shut for
	 * reading does: read to EAGAIN first, then shut it and take what
	 * came in between. */
	if (type != SOCK_STREAM)
		(void)closer_drain_reads(fd, depth, 0);
	(void)shutdown(fd, SHUT_RD);
	return (closer_drain_reads(fd, depth, 1));
}

/* Close one descriptor: a socket is told not to linger first, so that
 * only a peer that sets SO_LINGER again in between can hold this thread;
 * with drain, what a Unix socket holds is taken out first. */
static void
closer_close_one(int fd, int drain, int depth)
{
	struct linger	no = { 0, 0 };

	(void)setsockopt(fd, SOL_SOCKET, SO_LINGER, &no, sizeof no);
	if (drain && depth < CLOSER_DEPTH && closer_drain(fd, depth) == -1) {
		/* Shut, it takes no more: drain the rest later. */
		pthread_mutex_lock(&closer_lock);
		closer_queue_locked(fd, 1);
		pthread_mutex_unlock(&closer_lock);
		return;
	}
	close(fd);
}

/* Take the queued descriptors and close them, for as long as emberd runs. */
static void *
closer_main(void *arg)
{
	struct closer_fd	one;
	int			self = (int)(intptr_t)arg;

	for (;;) {
		pthread_mutex_lock(&closer_lock);
		closer_idle++;
		while (closer_fds.n == 0)
			pthread_cond_wait(&closer_wake, &closer_lock);
		closer_idle--;
		one = *(struct closer_fd *)ring_first(&closer_fds);
		ring_pop(&closer_fds);
		closer_busy_ms[self] = ember_now_ms();
		pthread_mutex_unlock(&closer_lock);
		closer_close_one(one.fd, one.drain, 0);
		pthread_mutex_lock(&closer_lock);
		closer_busy_ms[self] = 0;
		pthread_mutex_unlock(&closer_lock);
	}
	return (NULL);
}

/* Start the thread, with every signal blocked: the loop takes them. */
static void
closer_start(void)
{
	pthread_t	t;
	sigset_t	all, old;
	int		error;

	sigfillset(&all);
	pthread_sigmask(SIG_SETMASK, &all, &old);
	error = pthread_create(&t, NULL, closer_main,
	    (void *)(intptr_t)closer_threads);
	pthread_sigmask(SIG_SETMASK, &old, NULL);
	if (error != 0) {
		/* The threads there are go on; the first is a must. */
		if (closer_threads == 0)
			fatalx("closer: pthread_create: %s", strerror(error));
		log_warn("closer: pthread_create: %s", strerror(error));
		return;
	}
	pthread_detach(t);
	closer_threads++;
}

/* The longest a thread has been on its close, in ms; 0 if one is free. */
static uint64_t
closer_stuck_ms(uint64_t now)
{
	uint64_t	least = UINT64_MAX;
	int		i;

	if (closer_idle > 0)
		return (0);
	for (i = 0; i < closer_threads; i++) {
		if (closer_busy_ms[i] == 0)
			return (0);
		if (now - closer_busy_ms[i] < least)
			least = now - closer_busy_ms[i];
	}
	return (closer_threads > 0 ? least : 0);
}

/* Queue fd last; the lock is held. */
static void
closer_queue_locked(int fd, int drain)
{
	struct closer_fd	*one = ring_push(&closer_fds);

	one->fd = fd;
	one->drain = drain;
	pthread_cond_signal(&closer_wake);
}

/* Queue fd for the threads; start one more if every one is held. */
static void
closer_queue(int fd, int drain)
{
	uint64_t	now, stuck;

	if (fd == -1)
		return;
	pthread_mutex_lock(&closer_lock);
	now = ember_now_ms();
	stuck = closer_stuck_ms(now);
	if (closer_threads == 0 || (stuck >= CLOSER_STUCK_MS &&
	    closer_threads < CLOSER_THREADS))
		closer_start();
	closer_queue_locked(fd, drain);
	/* Descriptors wait while every close does: say so, once. */
	if (stuck >= CLOSER_SLOW_MS && closer_threads == CLOSER_THREADS &&
	    !closer_warned) {
		closer_warned = 1;
		log_warn("closer: all %d threads have waited %llums or more "
		    "on a close (a file on FUSE, or a socket a peer set to "
		    "linger again), %zu descriptors behind them",
		    closer_threads, (unsigned long long)stuck, closer_fds.n);
	} else if (stuck < CLOSER_SLOW_MS)
		closer_warned = 0;
	pthread_mutex_unlock(&closer_lock);
}

size_t
closer_backlog(void)
{
	size_t	n;
	int	i;

	pthread_mutex_lock(&closer_lock);
	n = closer_fds.n;
	for (i = 0; i < closer_threads; i++)
		n += closer_busy_ms[i] != 0;
	pthread_mutex_unlock(&closer_lock);
	return (n);
}

void
closer_close(int fd)
{
	closer_queue(fd, 0);
}

void
closer_close_drained(int fd)
{
	closer_queue(fd, 1);
}
