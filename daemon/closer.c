#include <sys/types.h>
#include <sys/socket.h>

#include <errno.h>
#include <pthread.h>
#include <signal.h>
#include <string.h>
#include <unistd.h>

#include "closer.h"
#include "emberd.h"
#include "log.h"
#include "xmalloc.h"

/* A close this long is worth a warning: descriptors wait behind it. */
#define CLOSER_SLOW_MS		10000
/* Descriptors one message can carry (the kernel's SCM_MAX_FD). */
#define CLOSER_CMSG_FDS		253
/* Reads of a socket being drained, at most: its queue is bounded by its
 * peer's send buffer, and no more comes once it is shut for reading. */
#define CLOSER_DRAIN_READS	1024
/* Sockets within sockets drained, at most (the kernel allows four). */
#define CLOSER_DEPTH		5

struct closer_fd {
	int	fd;
	int	drain;
};

static pthread_mutex_t	 closer_lock = PTHREAD_MUTEX_INITIALIZER;
static pthread_cond_t	 closer_wake = PTHREAD_COND_INITIALIZER;
static struct closer_fd	*closer_fds;
static size_t		 closer_nfds, closer_size;
static int		 closer_started;
static uint64_t		 closer_busy_ms;	/* when the close under way
						   began, or 0 */
static int		 closer_warned;		/* of the one under way */
static char		 closer_junk[64 * 1024];	/* what drains read */

static void	closer_close_one(int, int, int);

/*
 * Shut a Unix socket for reading and read what it holds, closing the
 * descriptors in flight in it one by one: its close would release them
 * all at once, unseen, each maybe a socket set to linger.
 */
static void
closer_drain(int fd, int depth)
{
	union {
		struct cmsghdr	hdr;
		char		buf[CMSG_SPACE(sizeof(int) * CLOSER_CMSG_FDS)];
	} cmsg;
	struct msghdr	 mh;
	struct iovec	 iov;
	struct cmsghdr	*c;
	int		 domain, *p, i;
	socklen_t	 len = sizeof domain;
	ssize_t		 n;
	size_t		 k, j;

	if (getsockopt(fd, SOL_SOCKET, SO_DOMAIN, &domain, &len) == -1 ||
	    domain != AF_UNIX)
		return;
	(void)shutdown(fd, SHUT_RD);
	for (i = 0; i < CLOSER_DRAIN_READS; i++) {
		iov.iov_base = closer_junk;
		iov.iov_len = sizeof closer_junk;
		memset(&mh, 0, sizeof mh);
		mh.msg_iov = &iov;
		mh.msg_iovlen = 1;
		mh.msg_control = cmsg.buf;
		mh.msg_controllen = sizeof cmsg.buf;
		n = recvmsg(fd, &mh, MSG_DONTWAIT | MSG_CMSG_CLOEXEC);
		if (n == -1 && errno == EINTR)
			continue;
		if (n == -1)
			break;
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
		if (n == 0 && mh.msg_controllen == 0)
			break;
	}
}

/* Close one descriptor: a socket is told not to linger first, so that
 * only a peer that sets SO_LINGER again in between can hold this thread;
 * with drain, what a Unix socket holds is taken out first. */
static void
closer_close_one(int fd, int drain, int depth)
{
	struct linger	no = { 0, 0 };

	(void)setsockopt(fd, SOL_SOCKET, SO_LINGER, &no, sizeof no);
	if (drain && depth < CLOSER_DEPTH)
		closer_drain(fd, depth);
	close(fd);
}

/* Take the queued descriptors and close them, for as long as emberd runs. */
static void *
closer_main(void *arg)
{
	struct closer_fd	one;

	(void)arg;
	for (;;) {
		pthread_mutex_lock(&closer_lock);
		while (closer_nfds == 0)
			pthread_cond_wait(&closer_wake, &closer_lock);
		one = closer_fds[--closer_nfds];
		closer_busy_ms = ember_now_ms();
		closer_warned = 0;
		pthread_mutex_unlock(&closer_lock);
		closer_close_one(one.fd, one.drain, 0);
		pthread_mutex_lock(&closer_lock);
		closer_busy_ms = 0;
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
	error = pthread_create(&t, NULL, closer_main, NULL);
	pthread_sigmask(SIG_SETMASK, &old, NULL);
	if (error != 0)
		fatalx("closer: pthread_create: %s", strerror(error));
	pthread_detach(t);
	closer_started = 1;
}

/* Queue fd for the thread. */
static void
closer_queue(int fd, int drain)
{
	if (fd == -1)
		return;
	pthread_mutex_lock(&closer_lock);
	if (!closer_started)
		closer_start();
	if (closer_nfds == closer_size) {
		closer_size = closer_size == 0 ? 64 : closer_size * 2;
		closer_fds = xreallocarray(closer_fds, closer_size,
		    sizeof *closer_fds);
	}
	closer_fds[closer_nfds].fd = fd;
	closer_fds[closer_nfds++].drain = drain;
	/* Descriptors wait while a close does: say so, once a close. */
	if (closer_busy_ms != 0 && !closer_warned &&
	    ember_now_ms() - closer_busy_ms >= CLOSER_SLOW_MS) {
		closer_warned = 1;
		log_warn("closer: a close has waited %llums (a file on FUSE, or "
		    "a socket a peer set to linger again), %zu descriptors "
		    "behind it", (unsigned long long)(ember_now_ms() -
		    closer_busy_ms), closer_nfds);
	}
	pthread_cond_signal(&closer_wake);
	pthread_mutex_unlock(&closer_lock);
}

size_t
closer_backlog(void)
{
	size_t	n;

	pthread_mutex_lock(&closer_lock);
	n = closer_nfds + (closer_busy_ms != 0);
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
