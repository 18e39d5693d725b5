/*
 * emberd as a system service.  Without -f, emberd checks what it can (the
 * conf, the pidfile, the socket, the local directory) in the process that
 * was started, so that a failure is a message and a non-zero exit; then it
 * forks twice and the first process waits on a pipe until the daemon is
 * ready: one line "R" then, or "E message" lines before it gives up.
 */
#include <sys/types.h>
#include <sys/file.h>
#include <sys/stat.h>
#include <sys/wait.h>

#include <errno.h>
#include <fcntl.h>
#include <limits.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include <event2/event.h>

#ifdef HAVE_LIBSYSTEMD
#include <systemd/sd-daemon.h>
#endif

#include "emberd.h"
#include "keeper.h"
#include "log.h"
#include "operation.h"
#include "pool.h"
#include "service.h"
#include "xmalloc.h"

/* How often STATUS= is refreshed when something changed. */
#define SERVICE_STATUS_MS	2000

static int		 service_pidfd = -1;
static char		*service_pidpath;
static int		 service_pipe = -1;	/* to the waiting parent */
static int		 service_need_pool;
static int		 service_ready;
static int		 service_failed_start;
static struct event	*service_status_ev;
static char		 service_last_status[256];

/* Send a notification to systemd, when it listens. */
static void
service_notify(const char *msg)
{
#ifdef HAVE_LIBSYSTEMD
	int	rc;

	if (keeper_notify(msg))
		return;
	if ((rc = sd_notify(0, msg)) < 0)
		log_debug("sd_notify: %s", strerror(-rc));
#else
	(void)keeper_notify(msg);
#endif
}

/* Say STATUS= when workers or operations changed since the last time. */
static void
service_status_cb(evutil_socket_t fd, short events, void *arg)
{
	char		 status[256];
	uint64_t	 workers;

	(void)fd; (void)events; (void)arg;
	workers = ember_counters.workers_forked - ember_counters.workers_exited;
	snprintf(status, sizeof status, "STATUS=%s on %s: %llu worker(s), "
	    "%zu operation(s), %llu done", ember_draining ? "draining" :
	    "ready", ember_conf.daemon_socket, (unsigned long long)workers,
	    operation_count(),
	    (unsigned long long)ember_counters.operations_completed);
	if (strcmp(status, service_last_status) == 0)
		return;
	snprintf(service_last_status, sizeof service_last_status, "%s",
	    status);
	service_notify(status);
}

/* The pidfile's path: the conf's; without -f and none set, the socket's
 * path with ".pid". */
static const char *
service_pidfile_path(int foreground)
{
	if (*ember_conf.daemon_pidfile != '\0')
		return (ember_conf.daemon_pidfile);
	if (foreground)
		return (NULL);
	xasprintf(&service_pidpath, "%s.pid", ember_conf.daemon_socket);
	return (service_pidpath);
}

int
service_open_pidfile(int foreground)
{
	const char	*path = service_pidfile_path(foreground);
	char		 buf[32];
	ssize_t		 n;

	if (path == NULL)
		return (0);
	if (service_pidpath == NULL)
		service_pidpath = xstrdup(path);
	service_pidfd = open(path, O_RDWR | O_CREAT | O_NOFOLLOW | O_CLOEXEC |
	    O_NOCTTY, 0644);
	if (service_pidfd == -1) {
		log_error("daemon.pidfile: %s: %s", path, strerror(errno));
		return (-1);
	}
	if (flock(service_pidfd, LOCK_EX | LOCK_NB) == -1) {
		n = pread(service_pidfd, buf, sizeof buf - 1, 0);
		buf[n > 0 ? n : 0] = '\0';
		buf[strcspn(buf, "\n")] = '\0';
		log_error("daemon.pidfile: %s: another emberd (pid %s) is "
		    "running", path, *buf != '\0' ? buf : "unknown");
		close(service_pidfd);
		service_pidfd = -1;
		return (-1);
	}
	return (0);
}

/* Write our pid into the locked pidfile. */
static void
service_write_pidfile(void)
{
	char	buf[32];
	int	len;

	if (service_pidfd == -1)
		return;
	len = snprintf(buf, sizeof buf, "%ld\n", (long)getpid());
	if (ftruncate(service_pidfd, 0) == -1 ||
	    pwrite(service_pidfd, buf, (size_t)len, 0) != len)
		log_warn("daemon.pidfile: %s: %s", service_pidpath,
		    strerror(errno));
}

/* Make one conf path absolute against the working directory. */
static void
service_absolute(char **path)
{
	char	cwd[PATH_MAX], *abs;

	if (**path == '\0' || **path == '/')
		return;
	if (getcwd(cwd, sizeof cwd) == NULL)
		fatal("getcwd");
	xasprintf(&abs, "%s/%s", cwd, *path);
	free(*path);
	*path = abs;
}

void
service_absolute_paths(void)
{
	service_absolute(&ember_conf.daemon_socket);
	service_absolute(&ember_conf.daemon_local_dir);
	service_absolute(&ember_conf.daemon_pidfile);
	service_absolute(&ember_conf.daemon_worker_path);
	service_absolute(&ember_conf.checkpoint_dir);
}

/* In the first process: relay the daemon's errors, exit as it says. */
static void __attribute__((noreturn))
service_wait_ready(int fd)
{
	FILE	*f = fdopen(fd, "r");
	char	*line = NULL;
	size_t	 size = 0;
	ssize_t	 n;
	int	 said = 0;

	if (f == NULL)
		_exit(1);
	while ((n = getline(&line, &size, f)) != -1) {
		if (n > 0 && line[n - 1] == '\n')
			line[--n] = '\0';
		if (strcmp(line, "R") == 0)
			_exit(0);
		if (*line == 'E') {
			fprintf(stderr, "emberd: %s\n", line + 1);
			said = 1;
		}
	}
	if (!said)
		fprintf(stderr, "emberd: exited before it was ready\n");
	_exit(1);
}

/* Put /dev/null on the standard descriptors. */
static void
service_null_stdio(void)
{
	int	fd;

	if ((fd = open("/dev/null", O_RDWR | O_NOCTTY)) == -1)
		fatal("/dev/null");
	dup2(fd, STDIN_FILENO);
	dup2(fd, STDOUT_FILENO);
	dup2(fd, STDERR_FILENO);
	if (fd > STDERR_FILENO)
		close(fd);
}

void
service_detach(void)
{
	int	p[2];
	pid_t	pid;

	if (pipe2(p, O_CLOEXEC) == -1)
		fatal("pipe");
	fflush(NULL);
	switch ((pid = fork())) {
	case -1:
		fatal("fork");
	case 0:
		break;
	default:
		close(p[1]);
		waitpid(pid, NULL, 0);
		service_wait_ready(p[0]);
	}
	close(p[0]);
	if (setsid() == -1)
		fatal("setsid");
	/* The session leader goes: the daemon can never get a terminal. */
	switch (fork()) {
	case -1:
		fatal("fork");
	case 0:
		break;
	default:
		_exit(0);
	}
	if (chdir("/") == -1)
		fatal("chdir /");
	if (event_reinit(ember_base) == -1)
		fatalx("event_reinit failed");
	service_pipe = p[1];
	service_write_pidfile();
	/* From now on errors reach the waiting process, and the log syslog. */
	log_copy_errors(service_pipe);
	service_null_stdio();
}

void
service_started(int need_pool)
{
	struct timeval	tv = { SERVICE_STATUS_MS / 1000,
			    (SERVICE_STATUS_MS % 1000) * 1000 };

	if (service_pidfd != -1 && service_pipe == -1)
		service_write_pidfile();	/* -f with a pidfile */
	service_need_pool = need_pool;
	service_status_ev = event_new(ember_base, -1, EV_PERSIST,
	    service_status_cb, NULL);
	evtimer_add(service_status_ev, &tv);
	service_check_ready();
}

void
service_check_ready(void)
{
	char	msg[64];

	if (service_ready || service_status_ev == NULL)
		return;
	if (service_need_pool && !pool_first_warm())
		return;
	service_ready = 1;
	log_info("emberd %s ready on %s (pid %ld, workers.max %d)",
	    PACKAGE_VERSION, ember_conf.daemon_socket, (long)getpid(),
	    ember_workers_max());
	if (service_pipe != -1) {
		if (write(service_pipe, "R\n", 2) != 2)
			log_warn("telling the parent emberd is ready: %s",
			    strerror(errno));
		log_copy_errors(-1);
		close(service_pipe);
		service_pipe = -1;
		snprintf(msg, sizeof msg, "READY=1\nMAINPID=%ld",
		    (long)getpid());
		service_notify(msg);
	} else
		service_notify("READY=1");
	service_status_cb(-1, 0, NULL);
}

void
service_start_failed(const char *why)
{
	if (service_ready || service_failed_start)
		return;
	log_error("start failed: %s", why);
	service_failed_start = 1;
	event_base_loopexit(ember_base, NULL);
}

int
service_failed(void)
{
	return (service_failed_start);
}

void
service_reloading(void)
{
	char	msg[64];

	snprintf(msg, sizeof msg, "RELOADING=1\nMONOTONIC_USEC=%llu",
	    (unsigned long long)ember_now_ms() * 1000);
	service_notify(msg);
}

void
service_reloaded(void)
{
	service_notify("READY=1");
	service_last_status[0] = '\0';
	service_status_cb(-1, 0, NULL);
}

void
service_stopping(void)
{
	service_notify("STOPPING=1");
	service_status_cb(-1, 0, NULL);
}

void
service_exit(void)
{
	if (service_status_ev != NULL)
		event_free(service_status_ev);
	service_status_ev = NULL;
	if (service_pidfd != -1) {
		unlink(service_pidpath);
		close(service_pidfd);
		service_pidfd = -1;
	}
	free(service_pidpath);
	service_pidpath = NULL;
}
