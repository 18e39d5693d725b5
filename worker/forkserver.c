#include <sys/types.h>
#include <sys/prctl.h>
#include <sys/resource.h>
#include <sys/signalfd.h>
#include <sys/socket.h>
#include <sys/wait.h>

#include <dlfcn.h>
#include <errno.h>
#include <fcntl.h>
#include <grp.h>
#include <poll.h>
#include <pwd.h>
#include <signal.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#include <jansson.h>

#include "held.h"
#include "fdpass.h"
#include "forkserver.h"
#include "helper.h"
#include "log.h"
#include "proctitle.h"
#include "python.h"
#include "protocol.h"
#include "serve.h"
#include "xmalloc.h"

/* Seconds to wait for the children to die when exiting. */
#define FORKSERVER_EXIT_WAIT	2

/*
 * A worker forked ahead, for a pool whose workers are not reused: set up
 * and waiting in its first read, it is handed to emberd at the next fork
 * request, and the next one is forked while that worker's task runs
 * (bench/README.md, "Fresh worker, forked ahead").  It runs nothing and
 * holds nothing of a task until emberd sends one; it is emberd's to know
 * of only once handed out, so it is killed, not reported, when stale.
 */
struct forkserver_spare {
	pid_t		pid;		/* 0: none */
	int		fd;		/* emberd's end of its socketpair */
	int32_t		gen;		/* fs->gen when it was forked */
	struct timespec	until;		/* let go when no request came by */
	int32_t		wanted;		/* ms to keep the next, once the
					 * loop has nothing else to do */
};

struct forkserver {
	int				 ctl;
	pid_t				 pid;
	pid_t				*children;	/* live workers, not yet
							 * reported */
	size_t				 nchildren, size;
	const struct forkserver_options	*options;
	int32_t				 gen;	/* loads and drops done */
	struct forkserver_spare		 spare;
};

/* The fork-server, for a SIGTERM that comes while Python loads. */
static struct forkserver *volatile forkserver_loading;

/* Signals arrive as bytes on this pipe, read by the poll loop. */
static int	forkserver_signal_pipe[2] = { -1, -1 };

/* SIGCHLD, blocked, is read from this descriptor by the poll loop: no
 * handler interrupts the poll to write to the pipe for the pass after,
 * and no signal frame is pushed on a stack a fork has just shared. */
static int	forkserver_sigchld_fd = -1;

/* A worker that had to start Python itself sends a byte on this pair (a
 * socket: a worker whose fork-server has closed its end gets EPIPE, not
 * SIGPIPE): the fork-server then starts it for the workers after.  Closed
 * once it has. */
static int	forkserver_python_pipe[2] = { -1, -1 };

/* The signals whose disposition is not the default once the fork-server
 * is set up: what a new worker resets. */
static int	forkserver_handled[NSIG];
static int	forkserver_nhandled;

/* Note a signal for the loop. */
static void
forkserver_signal_cb(int sig)
{
	struct forkserver	*fs = forkserver_loading;
	unsigned char		 c = (unsigned char)sig;
	int			 saved = errno;
	ssize_t			 n;
	size_t			 i;

	/* The loop does not run until the load returns, which the user's
	 * pickle may put off for ever: go now, with the workers. */
	if (fs != NULL && sig == SIGTERM) {
		for (i = 0; i < fs->nchildren; i++)
			kill(-fs->children[i], SIGKILL);
		if (fs->spare.pid > 0)
			kill(-fs->spare.pid, SIGKILL);
		_exit(0);
	}
	n = write(forkserver_signal_pipe[1], &c, 1);
	(void)n;
	errno = saved;
}

/* Set up the signal pipe, the SIGCHLD descriptor and the handlers. */
static void
forkserver_signals(void)
{
	struct sigaction	sa;
	sigset_t		chld;
	int			i;

	if (pipe2(forkserver_signal_pipe, O_CLOEXEC | O_NONBLOCK) == -1)
		fatal("pipe2");
	sigemptyset(&chld);
	sigaddset(&chld, SIGCHLD);
	if (sigprocmask(SIG_BLOCK, &chld, NULL) == -1)
		fatal("sigprocmask");
	if ((forkserver_sigchld_fd = signalfd(-1, &chld, SFD_CLOEXEC |
	    SFD_NONBLOCK)) == -1)
		fatal("signalfd");
	memset(&sa, 0, sizeof sa);
	sigemptyset(&sa.sa_mask);
	sa.sa_flags = SA_RESTART;
	sa.sa_handler = forkserver_signal_cb;
	if (sigaction(SIGTERM, &sa, NULL) == -1)
		fatal("sigaction");
	/* A terminal's ^C or hangup is emberd's to handle: it closes fd 3. */
	sa.sa_handler = SIG_IGN;
	sa.sa_flags = 0;
	for (i = 0; i < 3; i++) {
		int sig = i == 0 ? SIGPIPE : i == 1 ? SIGINT : SIGHUP;
		if (sigaction(sig, &sa, NULL) == -1)
			fatal("sigaction");
	}
}

/*
 * Note which signals a worker must reset: those that are not SIG_DFL once
 * the handlers, the preloaded plugins and Python are set up (nothing
 * changes them after).  A worker then resets a few, not every signal.
 */
static void
forkserver_note_handled(void)
{
	struct sigaction	sa;
	int			i;

	forkserver_nhandled = 0;
	for (i = 1; i < NSIG; i++) {
		if (sigaction(i, NULL, &sa) == 0 && sa.sa_handler != SIG_DFL)
			forkserver_handled[forkserver_nhandled++] = i;
	}
}

/* Find a live child; its index, or -1. */
static ssize_t
forkserver_find(struct forkserver *fs, pid_t pid)
{
	size_t	i;

	for (i = 0; i < fs->nchildren; i++) {
		if (fs->children[i] == pid)
			return ((ssize_t)i);
	}
	return (-1);
}

/* Remember a live child. */
static void
forkserver_add(struct forkserver *fs, pid_t pid)
{
	if (fs->nchildren == fs->size) {
		fs->size = fs->size == 0 ? 16 : fs->size * 2;
		fs->children = xreallocarray(fs->children, fs->size,
		    sizeof *fs->children);
	}
	fs->children[fs->nchildren++] = pid;
}

/*
 * Kill every worker's process group, reap them and exit.  Their commands
 * are orphaned to us as they die, so reap until no child is left, but give
 * up after a while on one that escaped its group.
 */
static __attribute__((noreturn)) void
forkserver_exit(struct forkserver *fs, int code)
{
	struct timespec	 now, end, pause = { 0, 1000000 };
	size_t		 i;
	int		 status;
	pid_t		 pid;

	for (i = 0; i < fs->nchildren; i++)
		kill(-fs->children[i], SIGKILL);
	if (fs->spare.pid > 0)
		kill(-fs->spare.pid, SIGKILL);
	clock_gettime(CLOCK_MONOTONIC, &end);
	end.tv_sec += FORKSERVER_EXIT_WAIT;
	for (;;) {
		pid = waitpid(-1, &status, WNOHANG);
		if (pid > 0 || (pid == -1 && errno == EINTR))
			continue;
		if (pid == -1)
			break;
		clock_gettime(CLOCK_MONOTONIC, &now);
		if (now.tv_sec > end.tv_sec || (now.tv_sec == end.tv_sec &&
		    now.tv_nsec >= end.tv_nsec)) {
			log_warn("exiting with children left");
			break;
		}
		nanosleep(&pause, NULL);
	}
	log_debug("exiting, %zu workers killed", fs->nchildren);
	exit(code);
}

/* Send a message to emberd; if it is gone, so are we. */
static void
forkserver_send(struct forkserver *fs, const struct fs_msg *m, int fd)
{
	if (fs_msg_send(fs->ctl, m, fd) == -1) {
		log_info("send to emberd: %s", strerror(errno));
		forkserver_exit(fs, 0);
	}
}

/* An allocation failed in a worker under its address-space limit: exit
 * with the status that tells emberd it was workers.max_memory. */
static void
forkserver_worker_nomem(size_t size)
{
	log_error("worker %ld: an allocation of %zu bytes failed under its "
	    "address-space limit (workers.max_memory)", (long)getpid(), size);
	_exit(EMBER_EXIT_NOMEM);
}

/*
 * Set up a new worker, or helper, in the child; never returns.  The memory
 * limit is a hard one too, so that no plugin can raise it again; it counts
 * the worker's whole address space, broadcasts mapped included.
 */
static __attribute__((noreturn)) void
forkserver_child(struct forkserver *fs, int sv[2], int helper)
{
	struct rlimit	rl;
	sigset_t	set;
	int		i, rc;

	setpgid(0, 0);
	/* If the fork-server died before this, nobody would kill us. */
	if (prctl(PR_SET_PDEATHSIG, SIGKILL) == -1 || getppid() != fs->pid)
		_exit(1);
	for (i = 0; i < forkserver_nhandled; i++)
		signal(forkserver_handled[i], SIG_DFL);
	close(fs->ctl);
	close(sv[0]);
	/* The socket of a worker forked ahead is emberd's, once handed. */
	if (fs->spare.fd != -1)
		close(fs->spare.fd);
	close(forkserver_signal_pipe[0]);
	close(forkserver_signal_pipe[1]);
	close(forkserver_sigchld_fd);
	if (forkserver_python_pipe[0] != -1)
		close(forkserver_python_pipe[0]);
	/* Only a worker runs python ops. */
	if (helper && forkserver_python_pipe[1] != -1)
		close(forkserver_python_pipe[1]);
	if (fs->options->memory_limit != 0) {
		rl.rlim_cur = rl.rlim_max = fs->options->memory_limit;
		if (setrlimit(RLIMIT_AS, &rl) == -1) {
			log_error("worker %ld: setrlimit RLIMIT_AS %llu: %s",
			    (long)getpid(), (unsigned long long)rl.rlim_cur,
			    strerror(errno));
			_exit(1);
		}
		xmalloc_on_nomem(forkserver_worker_nomem);
	}
	sigemptyset(&set);
	sigprocmask(SIG_SETMASK, &set, NULL);
	if (helper) {
		proctitle_set("ember-worker", "ember-worker: helper");
		_exit(helper_main(sv[1]));
	}
	proctitle_set("ember-worker", "ember-worker: worker");
	rc = serve_main(sv[1]);
	held_clear();
	_exit(rc);
}

/*
 * Fork a worker, or a helper, set up and in its own group: its pid and
 * emberd's end of its socketpair in *fd, or -1 with errno set.
 */
static pid_t
forkserver_spawn(struct forkserver *fs, int helper, int *fd)
{
	sigset_t	all, old;
	int		sv[2], saved;
	pid_t		pid;

	if (socketpair(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0, sv) == -1)
		return (-1);

	/*
	 * Block signals across fork: until the child has reset its handlers,
	 * a signal would run ours there and write to our signal pipe.
	 */
	sigfillset(&all);
	sigprocmask(SIG_SETMASK, &all, &old);
	python_fork_before();
	pid = fork();
	if (pid == 0) {
		python_fork_child();
		forkserver_child(fs, sv, helper);
	}
	saved = errno;
	python_fork_parent();
	sigprocmask(SIG_SETMASK, &old, NULL);
	close(sv[1]);

	if (pid == -1) {
		close(sv[0]);
		errno = saved;
		return (-1);
	}
	/* Both sides set the group, so it is set before either goes on. */
	setpgid(pid, pid);
	*fd = sv[0];
	return (pid);
}

/* Forget the worker forked ahead: emberd's end of its socket is
 * returned, for the caller to close or hand out. */
static int
forkserver_spare_forget(struct forkserver *fs)
{
	int	fd = fs->spare.fd;

	fs->spare.pid = 0;
	fs->spare.fd = -1;
	return (fd);
}

/* Kill the worker forked ahead, if any: what it was forked from has
 * changed, or no request wanted it.  Reaped, unreported, as it exits. */
static void
forkserver_spare_discard(struct forkserver *fs, const char *why)
{
	if (fs->spare.pid <= 0)
		return;
	log_debug("worker %ld forked ahead let go: %s", (long)fs->spare.pid,
	    why);
	kill(-fs->spare.pid, SIGKILL);
	close(forkserver_spare_forget(fs));
}

/* Fork the next worker ahead, kept ms milliseconds at most for a
 * request; none if the fork fails (the user's process limit, say): the
 * next request forks its own. */
static void
forkserver_spare_fork(struct forkserver *fs, int32_t ms)
{
	pid_t	pid;
	int	fd;

	if ((pid = forkserver_spawn(fs, 0, &fd)) == -1) {
		log_debug("forking a worker ahead: %s", strerror(errno));
		return;
	}
	fs->spare.pid = pid;
	fs->spare.fd = fd;
	fs->spare.gen = fs->gen;
	clock_gettime(CLOCK_MONOTONIC, &fs->spare.until);
	fs->spare.until.tv_sec += ms / 1000;
	fs->spare.until.tv_nsec += (long)(ms % 1000) * 1000000;
	if (fs->spare.until.tv_nsec >= 1000000000) {
		fs->spare.until.tv_sec++;
		fs->spare.until.tv_nsec -= 1000000000;
	}
}

/* Milliseconds until the worker forked ahead is let go (0 if it is
 * due), or -1 without one: poll's timeout. */
static int
forkserver_spare_timeout(struct forkserver *fs)
{
	struct timespec	now;
	int64_t		ms;

	if (fs->spare.pid <= 0)
		return (fs->spare.wanted > 0 ? 0 : -1);
	clock_gettime(CLOCK_MONOTONIC, &now);
	ms = (int64_t)(fs->spare.until.tv_sec - now.tv_sec) * 1000 +
	    (fs->spare.until.tv_nsec - now.tv_nsec) / 1000000;
	if (ms <= 0)
		return (0);
	return (ms > INT32_MAX ? INT32_MAX : (int)ms);
}

/*
 * Fork a worker, or a helper, for request id; for a worker, ahead > 0 asks
 * for the next one to be forked ahead and kept that many milliseconds.
 */
static void
forkserver_fork(struct forkserver *fs, int32_t id, int helper, int32_t ahead)
{
	struct fs_msg	m = { helper ? FS_HELPER_FAILED : FS_FORK_FAILED, id,
			    0, 0 };
	const char	*what = helper ? "helper" : "worker";
	pid_t		pid;
	int		fd;

	/* One forked ahead, if it has what a fork now would: every load
	 * and drop lets it go, this only makes sure. */
	if (fs->spare.pid > 0 && fs->spare.gen != fs->gen)
		forkserver_spare_discard(fs, "stale");
	if (!helper && fs->spare.pid > 0) {
		pid = fs->spare.pid;
		fd = forkserver_spare_forget(fs);
	} else if ((pid = forkserver_spawn(fs, helper, &fd)) == -1) {
		m.value = errno;
		log_warn("fork request %d: %s", id, strerror(errno));
		forkserver_send(fs, &m, -1);
		return;
	}
	forkserver_add(fs, pid);
	log_debug("fork request %d: %s %ld", id, what, (long)pid);

	m.type = helper ? FS_HELPER_FORKED : FS_FORKED;
	m.pid = pid;
	m.value = fs->gen;
	forkserver_send(fs, &m, fd);
	close(fd);
	/* Once nothing else waits (an exit to report, a request), while
	 * emberd gives that one its task. */
	if (!helper)
		fs->spare.wanted = ahead;
}

/* Signal a worker's process group, if it is one of ours. */
static void
forkserver_kill(struct forkserver *fs, pid_t pid, int sig)
{
	if (pid <= 0 || forkserver_find(fs, pid) == -1) {
		log_debug("kill %ld: not a live worker", (long)pid);
		return;
	}
	log_debug("kill %ld with signal %d", (long)pid, sig);
	if (kill(-pid, sig) == -1)
		log_warn("kill %ld with signal %d: %s", (long)pid, sig,
		    strerror(errno));
}

/*
 * Reap exited children and report each worker once; the others are
 * commands of dead workers, orphaned to us as the subreaper.  waitid with WNOWAIT
 * looks before reaping: while the worker is an unreaped zombie its pid
 * cannot be reused, so killing its group (whatever its commands left
 * behind) cannot hit anyone else.
 */
static void
forkserver_reap(struct forkserver *fs)
{
	struct fs_msg	 m = { FS_EXIT, 0, 0, 0 };
	siginfo_t	 si;
	ssize_t		 i;
	int		 status;
	pid_t		 pid;

	for (;;) {
		memset(&si, 0, sizeof si);
		if (waitid(P_ALL, 0, &si, WEXITED | WNOHANG | WNOWAIT) == -1) {
			if (errno == EINTR)
				continue;
			if (errno != ECHILD)
				log_warn("waitid: %s", strerror(errno));
			return;
		}
		if ((pid = si.si_pid) == 0)
			return;
		i = forkserver_find(fs, pid);
		if (i != -1)
			kill(-pid, SIGKILL);
		/* Gone before it was handed out (its user killed it, say). */
		if (pid == fs->spare.pid)
			close(forkserver_spare_forget(fs));
		while (waitpid(pid, &status, 0) == -1) {
			if (errno != EINTR)
				fatal("waitpid %ld", (long)pid);
		}
		if (i == -1)
			continue;
		fs->children[i] = fs->children[--fs->nchildren];
		log_debug("child %ld (a worker or a helper) exited with status "
		    "%#x", (long)pid, status);
		m.pid = pid;
		m.value = status;
		forkserver_send(fs, &m, -1);
	}
}

/* Act on the signals noted by the handler. */
static void
forkserver_dispatch_signals(struct forkserver *fs)
{
	unsigned char	buf[64];
	ssize_t		n, i;

	while ((n = read(forkserver_signal_pipe[0], buf, sizeof buf)) > 0) {
		for (i = 0; i < n; i++) {
			if (buf[i] == SIGTERM) {
				log_info("terminated");
				forkserver_exit(fs, 0);
			}
		}
	}
}

/*
 * Take the pending SIGCHLD and reap.  One read is enough: SIGCHLD is not
 * queued, so at most one is pending, and the reap takes every exited
 * child, whichever exit it was sent for.
 */
static void
forkserver_dispatch_sigchld(struct forkserver *fs)
{
	struct signalfd_siginfo	si[4];

	if (read(forkserver_sigchld_fd, si, sizeof si) == -1 &&
	    errno != EAGAIN && errno != EINTR)
		fatal("read signalfd");
	forkserver_reap(fs);
}

/* Python was started (or tried): note what it did to the signals, and
 * stop listening for workers that want it. */
static void
forkserver_python_started(struct forkserver *fs)
{
	if (forkserver_python_pipe[0] == -1)
		return;
	forkserver_spare_discard(fs, "Python started");
	forkserver_note_handled();
	close(forkserver_python_pipe[0]);
	close(forkserver_python_pipe[1]);
	forkserver_python_pipe[0] = forkserver_python_pipe[1] = -1;
	log_debug("Python started: the workers forked from now have it");
}

/*
 * Unpickle broadcast id from its memfd, as the user, for the workers
 * forked after (docs/design.md, "Broadcasts of Python objects").  The
 * loop waits meanwhile: a fork asked for after the load gets the object.
 */
static void
forkserver_pyload(struct forkserver *fs, int32_t id, int fd)
{
	if (fd == -1) {
		log_error("FS_PYLOAD %d without its descriptor", id);
		forkserver_exit(fs, 1);
	}
	forkserver_loading = fs;
	python_broadcast_load(id, fd, fs->options->memory_limit);
	/* The load started Python if nothing had: no worker has to. */
	forkserver_python_started(fs);
	forkserver_loading = NULL;
	close(fd);
	fs->gen++;
	forkserver_spare_discard(fs, "a broadcast loaded");
}

/*
 * A worker wanted Python: start the interpreter here, once, so that the
 * workers forked after have it from the fork.  The loop waits meanwhile,
 * as for a broadcast's load.
 */
static void
forkserver_python(struct forkserver *fs)
{
	log_debug("a worker wanted Python: starting it");
	forkserver_loading = fs;
	python_start();
	forkserver_loading = NULL;
	forkserver_python_started(fs);
}

/* Let go of a broadcast forkserver_pyload loaded. */
static void
forkserver_pydrop(struct forkserver *fs, int32_t id)
{
	python_broadcast_unload(id);
	fs->gen++;
	forkserver_spare_discard(fs, "a broadcast dropped");
}

/* Handle one message from emberd. */
static void
forkserver_dispatch(struct forkserver *fs)
{
	struct fs_msg	m;
	int		fd, rc;

	rc = fs_msg_recv(fs->ctl, &m, &fd);
	if (rc == 0) {
		log_debug("emberd closed the control channel");
		forkserver_exit(fs, 0);
	}
	if (rc == -1) {
		if (errno == EAGAIN)
			return;
		if (errno == EBADMSG) {
			log_error("malformed packet from emberd");
			forkserver_exit(fs, 1);
		}
		log_info("receive from emberd: %s", strerror(errno));
		forkserver_exit(fs, 0);
	}
	if (fd != -1 && m.type != FS_PYLOAD) {
		log_error("unexpected descriptor from emberd (%s)",
		    fs_msg_type_name(m.type));
		close(fd);
		forkserver_exit(fs, 1);
	}
	switch (m.type) {
	case FS_FORK:
		forkserver_fork(fs, m.id, 0, m.value);
		break;
	case FS_HELPER:
		forkserver_fork(fs, m.id, 1, 0);
		break;
	case FS_KILL:
		forkserver_kill(fs, m.pid, m.value);
		break;
	case FS_PYLOAD:
		forkserver_pyload(fs, m.id, fd);
		break;
	case FS_PYDROP:
		forkserver_pydrop(fs, m.id);
		break;
	default:
		log_error("unexpected message type %d from emberd", m.type);
		forkserver_exit(fs, 1);
	}
}

/* Write all of len bytes, or exit the child that writes them. */
static void
forkserver_lookup_write(int fd, const void *p, size_t len)
{
	ssize_t	n;

	while (len > 0) {
		if ((n = write(fd, p, len)) == -1) {
			if (errno == EINTR)
				continue;
			_exit(1);
		}
		p = (const char *)p + n;
		len -= (size_t)n;
	}
}

/* In the lookup's child: write the user's groups' count (-1 without a
 * passwd entry), the gids and the name, and exit. */
static __attribute__((noreturn)) void
forkserver_lookup_child(int fd, uid_t uid, gid_t gid)
{
	struct passwd	*pw;
	gid_t		*groups = NULL;
	int		 n = 16, want;

	if ((pw = getpwuid(uid)) == NULL) {
		n = -1;
		forkserver_lookup_write(fd, &n, sizeof n);
		_exit(0);
	}
	for (;;) {
		groups = xreallocarray(groups, (size_t)n, sizeof *groups);
		want = n;
		if (getgrouplist(pw->pw_name, gid, groups, &want) != -1)
			break;
		if (want <= n)
			_exit(1);
		n = want;
	}
	n = want;
	forkserver_lookup_write(fd, &n, sizeof n);
	forkserver_lookup_write(fd, groups, (size_t)n * sizeof *groups);
	forkserver_lookup_write(fd, pw->pw_name, strlen(pw->pw_name));
	_exit(0);
}

/*
 * Look uid up: its name (NULL without a passwd entry) and the groups of
 * uid:gid in *groups, their count returned.  In a child of ours, which
 * exits: the name service's modules (libnss_systemd, and libcap and libm
 * with it: 15 of the fork-server's mappings) are loaded there, never
 * here, where every fork() would copy their page tables and every
 * worker's exit unmap them (bench/README.md, "Fresh worker").
 */
static int
forkserver_lookup(uid_t uid, gid_t gid, gid_t **groups, char **name)
{
	char	*buf = NULL;
	size_t	 len = 0, size = 0;
	ssize_t	 r;
	pid_t	 pid;
	int	 p[2], status, n;

	if (pipe2(p, O_CLOEXEC) == -1)
		fatal("pipe2");
	if ((pid = fork()) == -1)
		fatal("fork");
	if (pid == 0) {
		close(p[0]);
		forkserver_lookup_child(p[1], uid, gid);
	}
	close(p[1]);
	for (;;) {
		if (len == size) {
			size = size == 0 ? 4096 : size * 2;
			buf = xrealloc(buf, size + 1);
		}
		if ((r = read(p[0], buf + len, size - len)) == -1) {
			if (errno == EINTR)
				continue;
			fatal("read the user's lookup");
		}
		if (r == 0)
			break;
		len += (size_t)r;
	}
	close(p[0]);
	while (waitpid(pid, &status, 0) == -1) {
		if (errno != EINTR)
			fatal("waitpid the user's lookup");
	}
	if (!WIFEXITED(status) || WEXITSTATUS(status) != 0 ||
	    len < sizeof n)
		fatalx("the lookup of uid %lu failed (status %#x)",
		    (unsigned long)uid, status);
	memcpy(&n, buf, sizeof n);
	*groups = NULL;
	*name = NULL;
	if (n == -1) {
		free(buf);
		return (0);
	}
	if (n < 0 || len < sizeof n + (size_t)n * sizeof **groups)
		fatalx("the lookup of uid %lu: a short answer",
		    (unsigned long)uid);
	*groups = xreallocarray(NULL, (size_t)n + 1, sizeof **groups);
	memcpy(*groups, buf + sizeof n, (size_t)n * sizeof **groups);
	len -= sizeof n + (size_t)n * sizeof **groups;
	buf[sizeof n + (size_t)n * sizeof **groups + len] = '\0';
	*name = xstrdup(buf + sizeof n + (size_t)n * sizeof **groups);
	free(buf);
	return (n);
}

/*
 * Become uid:gid for good, before anything a job brings (a plugin) runs:
 * supplementary groups first, while we may still set them, then the gids
 * and uids, real, effective and saved.  No new privileges after that, so
 * that nothing a job execs (a set-uid program, a file capability) can
 * lead back to root.  Any failure is fatal: emberd reports the
 * fork-server's exit and runs nothing for this user.
 */
static void
forkserver_drop(uid_t uid, gid_t gid)
{
	uid_t		 ruid, euid, suid;
	gid_t		 rgid, egid, sgid, *groups;
	char		*name;
	int		 ngroups;

	if (uid == 0)
		fatalx("--user 0:%lu: a job is never run as root",
		    (unsigned long)gid);
	/* As initgroups(3) would, without the name service in this process. */
	ngroups = forkserver_lookup(uid, gid, &groups, &name);
	if (setgroups((size_t)ngroups, groups) == -1)
		fatal("setgroups for %s", name != NULL ? name : "no passwd "
		    "entry");
	free(groups);
	if (setresgid(gid, gid, gid) == -1)
		fatal("setresgid %lu", (unsigned long)gid);
	if (setresuid(uid, uid, uid) == -1)
		fatal("setresuid %lu", (unsigned long)uid);

	if (getresuid(&ruid, &euid, &suid) == -1 ||
	    getresgid(&rgid, &egid, &sgid) == -1)
		fatal("getresuid");
	if (ruid != uid || euid != uid || suid != uid || rgid != gid ||
	    egid != gid || sgid != gid)
		fatalx("could not drop root: uids %lu %lu %lu, gids %lu %lu "
		    "%lu", (unsigned long)ruid, (unsigned long)euid,
		    (unsigned long)suid, (unsigned long)rgid,
		    (unsigned long)egid, (unsigned long)sgid);
	if (setuid(0) != -1)
		fatalx("could not drop root: setuid(0) succeeded");
	if (prctl(PR_SET_NO_NEW_PRIVS, 1, 0, 0, 0) == -1)
		fatal("prctl PR_SET_NO_NEW_PRIVS");

	log_debug("running as uid %lu (%s) gid %lu with %d supplementary "
	    "groups, no new privileges", (unsigned long)uid,
	    name != NULL ? name : "no passwd entry", (unsigned long)gid,
	    ngroups);
	free(name);
}

/*
 * Start in the user's home, the HOME emberd set: if the user can enter it
 * (chdir checks that with the user's rights, as it runs after the drop),
 * else in /.  Never in emberd's working directory.
 */
static void
forkserver_chdir(void)
{
	const char	*home = getenv("HOME");

	if (home != NULL && home[0] == '/' && chdir(home) == 0)
		return;
	if (chdir("/") == -1)
		fatal("chdir /");
}

/*
 * Load the plugins every worker will use, so that a new worker has them
 * from the fork and never loads them again: a later dlopen of the same
 * path returns the loaded object.  Each is loaded RTLD_LOCAL, so two
 * plugins cannot bind each other's symbols.  One that fails to load is
 * logged and left out; the jobs that name it get the loader's error.
 */
static void
forkserver_preload(const struct forkserver_options *o)
{
	size_t	i;

	for (i = 0; i < o->npreload; i++) {
		if (dlopen(o->preload[i], RTLD_NOW | RTLD_LOCAL) == NULL) {
			log_error("preload %s: %s", o->preload[i], dlerror());
			continue;
		}
		log_debug("preloaded %s", o->preload[i]);
	}
}

/*
 * Bound the user's processes where no cgroup of theirs does: the kernel
 * refuses a fork of this user's past the limit, counting every process
 * the user has, not only ember's.  Set once the fork-server is the user,
 * so that the workers inherit it.
 */
static void
forkserver_limit_nproc(uint64_t limit)
{
	struct rlimit	rl;

	if (limit == 0)
		return;
	rl.rlim_cur = rl.rlim_max = limit;
	if (setrlimit(RLIMIT_NPROC, &rl) == -1)
		fatal("setrlimit RLIMIT_NPROC %llu", (unsigned long long)limit);
	log_debug("RLIMIT_NPROC %llu", (unsigned long long)limit);
}

/*
 * Start Python now if python.preload names modules (they are wanted in
 * every worker, imported once here); else when it is first wanted, by a
 * worker's python op or a broadcast's load: until then a worker forks
 * from a fork-server without the interpreter's heap, which fork() copies
 * the page tables of and malloc() touches the free chunks of.
 */
static void
forkserver_python_defer(const struct forkserver_options *o)
{
	if (o->npypreload == 0 && socketpair(AF_UNIX, SOCK_DGRAM |
	    SOCK_CLOEXEC | SOCK_NONBLOCK, 0, forkserver_python_pipe) == -1)
		fatal("socketpair");
	python_defer(o->pypreload, o->npypreload, forkserver_python_pipe[1]);
	if (o->npypreload > 0)
		python_start();
}

/* Run the fork-server. */
int
forkserver_main(int ctl, const struct forkserver_options *options)
{
	struct forkserver	 fs;
	struct fs_msg		 hello = { FS_HELLO,
				    EMBER_WORKER_PROTOCOL_VERSION, 0, 0 };
	struct pollfd		 pfd[4];
	pid_t			 parent;
	int			 n;

	memset(&fs, 0, sizeof fs);
	fs.ctl = ctl;
	fs.pid = getpid();
	fs.options = options;
	fs.spare.fd = -1;

	/* First of all, and before the parent-death signal, which a change
	 * of credentials clears. */
	if (options->drop) {
		forkserver_drop(options->uid, options->gid);
		proctitle_set("ember-worker", "ember-worker: fork-server "
		    "uid %lu", (unsigned long)options->uid);
	} else
		proctitle_set("ember-worker", "ember-worker: fork-server");
	forkserver_chdir();
	forkserver_limit_nproc(options->nproc_limit);

	/* Die with emberd; if it is already gone, do not start. */
	parent = getppid();
	if (prctl(PR_SET_PDEATHSIG, SIGTERM) == -1)
		fatal("prctl");
	if (parent == 1 || getppid() != parent) {
		log_info("emberd is gone");
		return (0);
	}
	/* Commands orphaned by a dead worker come to us to be reaped. */
	if (prctl(PR_SET_CHILD_SUBREAPER, 1) == -1)
		log_warn("prctl PR_SET_CHILD_SUBREAPER: %s", strerror(errno));
	forkserver_signals();
	forkserver_preload(options);
	/* jansson seeds its hashes from /dev/urandom at the first object:
	 * once here, not an open and a read in every worker. */
	json_object_seed(0);
	forkserver_python_defer(options);
	forkserver_note_handled();

	hello.pid = fs.pid;
	forkserver_send(&fs, &hello, -1);
	log_debug("fork-server %ld ready", (long)fs.pid);

	pfd[0].fd = ctl;
	pfd[0].events = POLLIN;
	pfd[1].fd = forkserver_signal_pipe[0];
	pfd[1].events = POLLIN;
	pfd[2].events = POLLIN;
	pfd[3].fd = forkserver_sigchld_fd;
	pfd[3].events = POLLIN;
	for (;;) {
		/* -1 once Python is up: poll ignores it. */
		pfd[2].fd = forkserver_python_pipe[0];
		if ((n = poll(pfd, 4, forkserver_spare_timeout(&fs))) == -1) {
			if (errno == EINTR)
				continue;
			fatal("poll");
		}
		if (n == 0 && fs.spare.pid <= 0 && fs.spare.wanted > 0) {
			forkserver_spare_fork(&fs, fs.spare.wanted);
			fs.spare.wanted = 0;
		} else if (fs.spare.pid > 0 && forkserver_spare_timeout(&fs) == 0)
			forkserver_spare_discard(&fs, "no request came");
		if (pfd[1].revents != 0)
			forkserver_dispatch_signals(&fs);
		if (pfd[3].revents != 0)
			forkserver_dispatch_sigchld(&fs);
		if (pfd[2].revents != 0 && forkserver_python_pipe[0] != -1)
			forkserver_python(&fs);
		if (pfd[0].revents != 0)
			forkserver_dispatch(&fs);
	}
}
