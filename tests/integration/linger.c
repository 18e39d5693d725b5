/*
 * A worker that does not go when emberd closes its socket, preloaded by
 * test_corrupt_worker.py into emberd and, through workers.env, its
 * workers: where a worker's recvmsg finds the end of file it sleeps
 * instead, as a worker the user's code has taken over could.  The
 * fork-server, and every other process, is left alone.
 */
#include <sys/socket.h>
#include <sys/syscall.h>

#include <fcntl.h>
#include <string.h>
#include <unistd.h>

ssize_t	recvmsg(int, struct msghdr *, int);

/* Is this process a worker (its title, /proc/self/cmdline)? */
static int
linger_is_worker(void)
{
	char	title[64];
	ssize_t	n;
	int	fd;

	if ((fd = open("/proc/self/cmdline", O_RDONLY | O_CLOEXEC)) == -1)
		return (0);
	n = read(fd, title, sizeof title - 1);
	close(fd);
	if (n <= 0)
		return (0);
	title[n] = '\0';
	return (strcmp(title, "ember-worker: worker") == 0);
}

ssize_t
recvmsg(int fd, struct msghdr *mh, int flags)
{
	ssize_t	n;

	n = syscall(SYS_recvmsg, fd, mh, flags);
	if (n == 0 && linger_is_worker())
		for (;;)
			pause();
	return (n);
}
