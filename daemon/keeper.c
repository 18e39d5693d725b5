/*
 * The keeper: emberd -f started as a session leader (by systemd, or by
 * setsid) would be able to gain a controlling terminal.  A session leader
 * cannot stop being one, so it stays behind as a small keeper and emberd
 * runs in its child, which never leads a session.  The keeper is what its
 * starter sees: it passes on the signals a service manager sends, passes on
 * emberd's sd_notify messages (systemd takes them only from the process it
 * started), and ends as emberd ends, with the same status or signal.
 * emberd dies with it (PR_SET_PDEATHSIG), so a SIGKILL of the keeper is
 * still a SIGKILL of emberd.
 */
#include <sys/types.h>
#include <sys/prctl.h>
#include <sys/resource.h>
#include <sys/socket.h>
#include <sys/syscall.h>
#include <sys/wait.h>

#include <errno.h>
#include <poll.h>
#include <signal.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#ifdef HAVE_LIBSYSTEMD
#include <systemd/sd-daemon.h>
#endif

#include "keeper.h"
#include "log.h"
#include "proctitle.h"

/* The signals a service manager or an operator sends to emberd. */
static const int	keeper_signals[] = {
	SIGTERM, SIGINT, SIGHUP, SIGQUIT, SIGUSR1, SIGUSR2
};
#define KEEPER_NSIGNALS	(sizeof keeper_signals / sizeof keeper_signals[0])

static volatile pid_t	keeper_child = -1;	/* in the keeper */
static int		keeper_fd = -1;		/* in emberd: to the keeper */

/*
 * Pass a signal on.  One the terminal sent (^C, a hangup: the kernel's
 * own, SI_KERNEL) reached emberd too, as it is in the keeper's foreground
 * process group: a second one would end its drain at once.
 */
static void
keeper_forward(int sig, siginfo_t *si, void *uc)
{
	(void)uc;
	if (keeper_child > 0 && si->si_code != SI_KERNEL)
		kill(keeper_child, sig);
}

/* In the keeper: pass on what emberd's socket holds; -1 at its end. */
static int
keeper_relay(int fd)
{
	char	msg[4096];
	ssize_t	n;

	while ((n = recv(fd, msg, sizeof msg - 1, MSG_DONTWAIT)) > 0) {
		msg[n] = '\0';
#ifdef HAVE_LIBSYSTEMD
		(void)sd_notify(0, msg);
#endif
	}
	return (n == 0 || (errno != EAGAIN && errno != EINTR) ? -1 : 0);
}

/*
 * In the keeper: relay notifications until emberd is gone; exit as it did.
 * emberd's end is watched through a pidfd rather than the socket's end: a
 * child of emberd's between fork and exec may hold the socket a while.
 */
static void __attribute__((noreturn))
keeper_run(int fd, pid_t child)
{
	struct rlimit	nocore = { 0, 0 };
	struct pollfd	pfd[2];
	int		pidfd, status, sig;

	pidfd = (int)syscall(SYS_pidfd_open, child, 0);
	pfd[0].fd = fd;
	pfd[0].events = POLLIN;
	pfd[1].fd = pidfd;
	pfd[1].events = POLLIN;
	for (;;) {
		/* Without pidfds (Linux before 5.3), look once a second. */
		if (poll(pfd, 2, pidfd == -1 ? 1000 : -1) == -1 &&
		    errno != EINTR)
			fatal("poll");
		if (pfd[0].fd != -1 && keeper_relay(pfd[0].fd) == -1) {
			close(pfd[0].fd);
			pfd[0].fd = -1;
		}
		if (waitpid(child, &status, WNOHANG) == child)
			break;
	}
	if (pfd[0].fd != -1)
		(void)keeper_relay(pfd[0].fd);	/* said just before its end */
	if (WIFSIGNALED(status)) {
		/* Die of the same signal, without a core of the keeper's own:
		 * emberd's core, if any, is the one to read. */
		sig = WTERMSIG(status);
		(void)setrlimit(RLIMIT_CORE, &nocore);
		signal(sig, SIG_DFL);
		raise(sig);
	}
	_exit(WIFEXITED(status) ? WEXITSTATUS(status) : 1);
}

void
keeper_start(void)
{
	struct sigaction	 sa;
	sigset_t		 block, old;
	pid_t			 keeper = getpid(), pid;
	int			 sv[2];
	size_t			 i;

	if (getsid(0) != keeper)
		return;
	if (socketpair(AF_UNIX, SOCK_SEQPACKET | SOCK_CLOEXEC, 0, sv) == -1)
		fatal("socketpair");

	/* No signal may be lost between the fork and the handlers. */
	sigemptyset(&block);
	for (i = 0; i < KEEPER_NSIGNALS; i++)
		sigaddset(&block, keeper_signals[i]);
	sigprocmask(SIG_BLOCK, &block, &old);
	switch ((pid = fork())) {
	case -1:
		fatal("fork");
	case 0:
		close(sv[0]);
		if (prctl(PR_SET_PDEATHSIG, SIGKILL) == -1)
			fatal("prctl");
		if (getppid() != keeper)
			_exit(1);	/* the keeper died before the prctl */
		sigprocmask(SIG_SETMASK, &old, NULL);
		unsetenv("NOTIFY_SOCKET");
		keeper_fd = sv[1];
		return;
	}
	close(sv[1]);
	keeper_child = pid;
	/* Nothing reads argv here any more: ps can tell the two apart. */
	proctitle_set("emberd", "emberd: keeper");
	memset(&sa, 0, sizeof sa);
	sa.sa_sigaction = keeper_forward;
	sa.sa_flags = SA_RESTART | SA_SIGINFO;
	sigemptyset(&sa.sa_mask);
	for (i = 0; i < KEEPER_NSIGNALS; i++)
		sigaction(keeper_signals[i], &sa, NULL);
	sigprocmask(SIG_SETMASK, &old, NULL);
	keeper_run(sv[0], pid);
}

int
keeper_notify(const char *msg)
{
	if (keeper_fd == -1)
		return (0);
	if (send(keeper_fd, msg, strlen(msg), MSG_NOSIGNAL | MSG_DONTWAIT) ==
	    -1)
		log_debug("notify through the keeper: %s", strerror(errno));
	return (1);
}
