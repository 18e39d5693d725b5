#include <sys/types.h>
#include <sys/socket.h>

#include <errno.h>
#include <pthread.h>
#include <signal.h>
#include <string.h>
#include <unistd.h>

#include "closer.h"
#include "log.h"
#include "xmalloc.h"

static pthread_mutex_t	 closer_lock = PTHREAD_MUTEX_INITIALIZER;
static pthread_cond_t	 closer_wake = PTHREAD_COND_INITIALIZER;
static int		*closer_fds;
static size_t		 closer_nfds, closer_size;
static int		 closer_started;

/* Close one descriptor: a socket is told not to linger first, so that
 * only a peer that sets SO_LINGER again in between can hold this thread. */
static void
closer_close_one(int fd)
{
	struct linger	no = { 0, 0 };

	(void)setsockopt(fd, SOL_SOCKET, SO_LINGER, &no, sizeof no);
	close(fd);
}

/* Take the queued descriptors and close them, for as long as emberd runs. */
static void *
closer_main(void *arg)
{
	int	fd;

	(void)arg;
	for (;;) {
		pthread_mutex_lock(&closer_lock);
		while (closer_nfds == 0)
			pthread_cond_wait(&closer_wake, &closer_lock);
		fd = closer_fds[--closer_nfds];
		pthread_mutex_unlock(&closer_lock);
		closer_close_one(fd);
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

void
closer_close(int fd)
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
	closer_fds[closer_nfds++] = fd;
	pthread_cond_signal(&closer_wake);
	pthread_mutex_unlock(&closer_lock);
}
