#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/wait.h>

#include <errno.h>
#include <fcntl.h>
#include <libgen.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include <event2/event.h>

#include "emberd.h"
#include "fdpass.h"
#include "forkserver.h"
#include "log.h"
#include "pool.h"
#include "xmalloc.h"

static pid_t		 forkserver_pid = -1;
static int		 forkserver_fd = -1;
static struct event	*forkserver_event;
static struct event	*forkserver_restart;
static char		*forkserver_path;
static int		 forkserver_failures;	/* restarts without a hello */

/* ember-worker: the conf's path, else beside emberd, else libexecdir. */
static char *
forkserver_find_worker(void)
{
	char	 self[4096], *dir, *path;
	ssize_t	 n;

	if (*ember_conf.daemon_worker_path != '\0')
		return (xstrdup(ember_conf.daemon_worker_path));
	n = readlink("/proc/self/exe", self, sizeof self - 1);
	if (n > 0) {
		self[n] = '\0';
		dir = dirname(self);
		xasprintf(&path, "%s/ember-worker", dir);
		if (access(path, X_OK) == 0)
			return (path);
		free(path);
	}
	return (xstrdup(EMBER_LIBEXECDIR "/ember-worker"));
}

static void
forkserver_read_cb(evutil_socket_t fd, short events, void *arg)
{
	struct fs_msg	m;
	int		passed, n, i;

	(void)events; (void)arg;
	/* A few messages per turn, so a burst of exits cannot starve clients. */
	for (i = 0; i < 64; i++) {
		n = fs_msg_recv(fd, &m, &passed);
		if (n == -1 && (errno == EAGAIN || errno == EWOULDBLOCK))
			return;
		if (n <= 0) {
			if (n == -1)
				log_error("fork-server channel: %s",
				    strerror(errno));
			/* The exit itself comes with SIGCHLD. */
			event_del(forkserver_event);
			return;
		}
		if (m.type != FS_FORKED && passed != -1)
			close(passed);
		switch (m.type) {
		case FS_HELLO:
			log_info("fork-server %ld ready (protocol %d)",
			    (long)m.pid, m.id);
			forkserver_failures = 0;
			break;
		case FS_FORKED:
			if (passed == -1) {
				log_error("fork-server sent worker %ld without "
				    "its socket", (long)m.pid);
				forkserver_kill(m.pid, SIGKILL);
				pool_fork_failed(m.id, EBADMSG);
				break;
			}
			pool_worker_forked(m.id, m.pid, passed);
			break;
		case FS_FORK_FAILED:
			pool_fork_failed(m.id, m.value);
			break;
		case FS_EXIT:
			pool_worker_exited(m.pid, m.value);
			break;
		default:
			log_error("fork-server sent message type %d; killing it",
			    m.type);
			kill(forkserver_pid, SIGKILL);
			event_del(forkserver_event);
			return;
		}
	}
}

static void
forkserver_restart_cb(evutil_socket_t fd, short events, void *arg)
{
	(void)fd; (void)events; (void)arg;
	if (forkserver_start() == 0)
		ember_counters.forkserver_restarts++;
}

int
forkserver_start(void)
{
	char		 level[16];
	int		 sv[2];
	sigset_t	 all, old;
	pid_t		 pid;

	if (forkserver_path == NULL)
		forkserver_path = forkserver_find_worker();
	if (access(forkserver_path, X_OK) == -1) {
		log_error("ember-worker: %s: %s (set daemon.worker_path)",
		    forkserver_path, strerror(errno));
		return (-1);
	}
	if (socketpair(AF_UNIX, SOCK_SEQPACKET | SOCK_CLOEXEC, 0, sv) == -1) {
		log_error("socketpair: %s", strerror(errno));
		return (-1);
	}
	snprintf(level, sizeof level, "%s", ember_conf.daemon_log_level);

	/* Block signals so none reaches libevent's handlers in the child. */
	sigfillset(&all);
	sigprocmask(SIG_BLOCK, &all, &old);
	pid = fork();
	if (pid == 0) {
		int	sig;

		for (sig = 1; sig < NSIG; sig++)
			signal(sig, SIG_DFL);
		sigprocmask(SIG_SETMASK, &old, NULL);
		if (dup2(sv[1], 3) == -1)
			_exit(127);
		close_range(4, ~0U, 0);
		execl(forkserver_path, "ember-worker", "--fork-server",
		    "--log-level", level, (char *)NULL);
		fprintf(stderr, "emberd: exec %s: %s\n", forkserver_path,
		    strerror(errno));
		_exit(127);
	}
	sigprocmask(SIG_SETMASK, &old, NULL);
	close(sv[1]);
	if (pid == -1) {
		log_error("fork: %s", strerror(errno));
		close(sv[0]);
		return (-1);
	}
	forkserver_pid = pid;
	forkserver_fd = sv[0];
	evutil_make_socket_nonblocking(forkserver_fd);
	forkserver_event = event_new(ember_base, forkserver_fd,
	    EV_READ | EV_PERSIST, forkserver_read_cb, NULL);
	event_add(forkserver_event, NULL);
	log_debug("started fork-server %ld (%s)", (long)pid, forkserver_path);
	pool_grow(0);
	return (0);
}

int
forkserver_running(void)
{
	return (forkserver_fd != -1);
}

/* Forget the fork-server's channel. */
static void
forkserver_close(void)
{
	if (forkserver_event != NULL)
		event_free(forkserver_event);
	forkserver_event = NULL;
	if (forkserver_fd != -1)
		close(forkserver_fd);
	forkserver_fd = -1;
}

void
forkserver_reap(void)
{
	struct timeval	 tv;
	int		 status;
	pid_t		 pid;
	char		 why[128];
	int64_t		 delay;

	while ((pid = waitpid(-1, &status, WNOHANG)) > 0) {
		if (pid != forkserver_pid)
			continue;
		if (WIFSIGNALED(status))
			snprintf(why, sizeof why, "the fork-server was killed "
			    "by signal %d (%s)", WTERMSIG(status),
			    sigabbrev_np(WTERMSIG(status)));
		else
			snprintf(why, sizeof why, "the fork-server exited with "
			    "status %d", WEXITSTATUS(status));
		forkserver_pid = -1;
		forkserver_close();
		if (ember_draining) {
			log_info("%s", why);
			pool_forkserver_lost(why);
			continue;
		}
		/* Back off when it keeps dying before it even said hello. */
		delay = ember_conf.workers_fork_backoff << (forkserver_failures <
		    5 ? forkserver_failures : 5);
		forkserver_failures++;
		log_error("%s; restarting it in %lldms", why, (long long)delay);
		pool_forkserver_lost(why);
		tv.tv_sec = delay / 1000;
		tv.tv_usec = (delay % 1000) * 1000;
		if (forkserver_restart == NULL)
			forkserver_restart = evtimer_new(ember_base,
			    forkserver_restart_cb, NULL);
		evtimer_add(forkserver_restart, &tv);
	}
}

int
forkserver_fork(int32_t request)
{
	struct fs_msg	m = { FS_FORK, request, 0, 0 };

	if (forkserver_fd == -1)
		return (-1);
	if (fs_msg_send(forkserver_fd, &m, -1) == -1) {
		log_error("fork request: %s", strerror(errno));
		return (-1);
	}
	return (0);
}

void
forkserver_kill(pid_t pid, int sig)
{
	struct fs_msg	m = { FS_KILL, 0, pid, sig };

	if (forkserver_fd != -1 && fs_msg_send(forkserver_fd, &m, -1) == -1)
		log_error("kill request for %ld: %s", (long)pid,
		    strerror(errno));
}

/* Closing the channel makes the fork-server kill its workers and exit. */
void
forkserver_stop(void)
{
	int	status, i;

	if (forkserver_restart != NULL)
		event_free(forkserver_restart);
	forkserver_restart = NULL;
	forkserver_close();
	if (forkserver_pid != -1) {
		for (i = 0; i < 200; i++) {	/* up to 2 s */
			if (waitpid(forkserver_pid, &status, WNOHANG) != 0)
				break;
			usleep(10000);
		}
		if (i == 200) {
			log_warn("fork-server %ld did not exit; killing it",
			    (long)forkserver_pid);
			kill(forkserver_pid, SIGKILL);
			waitpid(forkserver_pid, &status, 0);
		}
		forkserver_pid = -1;
	}
	free(forkserver_path);
	forkserver_path = NULL;
}
