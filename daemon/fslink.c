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

#include <event2/buffer.h>
#include <event2/event.h>

#include "cgroup.h"
#include "channel.h"
#include "closer.h"
#include "emberd.h"
#include "fdpass.h"
#include "frame.h"
#include "fslink.h"
#include "jobenv.h"
#include "joblog.h"
#include "log.h"
#include "queue.h"
#include "ring.h"
#include "service.h"
#include "xmalloc.h"

/*
 * Requests queued for a fork-server that reads none: more are refused
 * (its requests fail as if it were not running), so one stopped by its
 * user costs emberd no more than this.
 */
#define FSLINK_MAX_QUEUED	(4096 * FS_MSG_SIZE)

struct fslink {
	struct pool		*pool;
	uid_t			 uid;
	gid_t			 gid;
	pid_t			 pid;
	struct channel		*ch;		/* its packets, NULL if none */
	struct joblog		*joblog;	/* its stdout and stderr */
	struct event		*restart;
	struct event		*hello_timer;	/* workers.start_timeout */
	int			 failures;	/* restarts without a hello */
	int			 hello;		/* said hello since it started */
	int			 asked[FSLINK_KINDS]; /* forks not answered */
	uint64_t		 asked_ms;	/* since then none answered */
	/*
	 * Python loads sent, and for each request not answered, oldest
	 * first (the fork-server answers in order), the loads sent before
	 * it: a request waits for those, each given its own allowance.
	 */
	uint64_t		 loads_sent;
	uint64_t		 loads_done;	/* before the last answer */
	struct ring		 ask_loads;	/* of uint64_t */
	char			*refused;	/* why it was killed, if it was */
	TAILQ_ENTRY(fslink)	 entry;
};
static TAILQ_HEAD(, fslink) fslinks =
    TAILQ_HEAD_INITIALIZER(fslinks);
static char	*fslink_path;

static int	fslink_start(struct fslink *);

static const struct fslink_peer	*fslink_peers[FSLINK_KINDS];

void
fslink_add_peer(enum fslink_kind kind, const struct fslink_peer *peer)
{
	fslink_peers[kind] = peer;
}

struct pool *
fslink_pool(const struct fslink *fs)
{
	return (fs->pool);
}

/* The peer of kind, if it has call (a member of struct fslink_peer). */
#define FSLINK_PEER(kind, call)						\
	(fslink_peers[kind] != NULL && fslink_peers[kind]->call != NULL ?	\
	fslink_peers[kind] : NULL)

/* A fork request of kind was answered: the child, or why not. */
static void
fslink_forked(struct fslink *fs, enum fslink_kind kind, const struct fs_msg *m,
    int passed)
{
	const struct fslink_peer	*p;

	if (passed == -1) {
		log_error("fork-server sent %s %ld without its socket",
		    kind == FSLINK_WORKERS ? "worker" : "helper", (long)m->pid);
		fslink_kill(fs, m->pid, SIGKILL);
		if ((p = FSLINK_PEER(kind, fork_failed)) != NULL)
			p->fork_failed(fs, m->id, EBADMSG);
		return;
	}
	if ((p = FSLINK_PEER(kind, forked)) != NULL)
		p->forked(fs, m->id, m->pid, passed, m->value);
	else
		closer_close_drained(passed);
}

/* A fork request of kind failed. */
static void
fslink_fork_failed(struct fslink *fs, enum fslink_kind kind,
    const struct fs_msg *m)
{
	const struct fslink_peer	*p;

	if ((p = FSLINK_PEER(kind, fork_failed)) != NULL)
		p->fork_failed(fs, m->id, m->value);
}

/* A child exited: the helpers', else the workers'. */
static void
fslink_child_exited(struct fslink *fs, const struct fs_msg *m)
{
	const struct fslink_peer	*p;
	int				 k;

	for (k = FSLINK_KINDS - 1; k >= 0; k--) {
		if ((p = FSLINK_PEER(k, exited)) != NULL &&
		    p->exited(fs, m->pid, m->value))
			return;
	}
}

/* ember-worker: the conf's path, else beside emberd, else libexecdir. */
static char *
fslink_find_worker(void)
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

int
fslink_init(void)
{
	if (fslink_path == NULL)
		fslink_path = fslink_find_worker();
	if (access(fslink_path, X_OK) == -1) {
		log_error("ember-worker: %s: %s (set daemon.worker_path)",
		    fslink_path, strerror(errno));
		return (-1);
	}
	return (0);
}

/* Forget a fork-server's channel. */
static void
fslink_close(struct fslink *fs)
{
	if (fs->ch != NULL)
		channel_free(fs->ch);
	fs->ch = NULL;
}

/* The next message of the input, and the descriptor that came with it
 * (or -1): 1, or 0 if none is left. */
static int
fslink_next(struct fslink *fs, struct fs_msg *m, int *passed)
{
	struct evbuffer	*in = channel_input(fs->ch);
	unsigned char	*buf;

	if (evbuffer_get_length(in) < FS_MSG_SIZE)
		return (0);
	*passed = channel_take_fd_with(fs->ch, FS_MSG_SIZE);
	buf = evbuffer_pullup(in, FS_MSG_SIZE);
	m->type = be32_get(buf);
	m->id = be32_get(buf + 4);
	m->pid = be32_get(buf + 8);
	m->value = be32_get(buf + 12);
	evbuffer_drain(in, FS_MSG_SIZE);
	return (1);
}

/* Its channel ended: a corrupt packet kills it; the exit itself comes
 * with SIGCHLD, and a new one is started then. */
static void
fslink_error_cb(void *arg, int error)
{
	struct fslink	*fs = arg;

	if (error == EBADMSG) {
		log_error("fork-server %ld sent a malformed packet; killing it",
		    (long)fs->pid);
		kill(fs->pid, SIGKILL);
	} else if (error != 0)
		log_error("fork-server channel: %s", strerror(error));
}

/*
 * Refuse a fork-server that broke the link's contract: kill it and take
 * no more of its packets.  Its exit, reaped as any, fails what waits on
 * it with why (for the clients) and restarts it after the back-off: one
 * refused before its hello does not reset fs->failures.
 */
static void
fslink_refuse(struct fslink *fs, const char *why)
{
	free(fs->refused);
	fs->refused = xstrdup(why);
	kill(fs->pid, SIGKILL);
	fslink_close(fs);
}

/* A fork-server took past workers.start_timeout to say hello: what
 * waits on it must not wait for ever (a name service that hangs, a
 * preload that does not return). */
static void
fslink_hello_timeout_cb(evutil_socket_t fd, short events, void *arg)
{
	struct fslink	*fs = arg;
	char		*why;

	(void)fd; (void)events;
	if (fs->hello || fs->ch == NULL)
		return;
	log_error("fork-server %ld for uid %ld did not say hello within "
	    "%lldms (workers.start_timeout); killing it", (long)fs->pid,
	    (long)fs->uid, (long long)ember_conf.workers_start_timeout);
	xasprintf(&why, "the fork-server did not start within "
	    "workers.start_timeout (%lldms)",
	    (long long)ember_conf.workers_start_timeout);
	fslink_refuse(fs, why);
	free(why);
}

/* Its hello: 0 if it speaks emberd's worker protocol, else -1 (refused,
 * and logged for the operator, who has a restart to do). */
static int
fslink_hello(struct fslink *fs, const struct fs_msg *m)
{
	char	*why;

	if (fs->hello) {
		log_error("fork-server %ld said hello twice; killing it",
		    (long)fs->pid);
		fslink_refuse(fs, "the fork-server said hello twice");
		return (-1);
	}
	if (m->id == EMBER_WORKER_PROTOCOL_VERSION)
		return (0);
	log_error("fork-server %ld for uid %ld: %s speaks worker protocol %d, "
	    "this emberd %d: restart emberd after upgrading ember, or set "
	    "daemon.worker_path to the ember-worker of its build; killing it",
	    (long)fs->pid, (long)fs->uid, fslink_path, m->id,
	    EMBER_WORKER_PROTOCOL_VERSION);
	xasprintf(&why, "the fork-server (%s) speaks worker protocol %d, "
	    "emberd %d: emberd must be restarted after ember is upgraded",
	    fslink_path, m->id, EMBER_WORKER_PROTOCOL_VERSION);
	fslink_refuse(fs, why);
	free(why);
	return (-1);
}

/* Is fd an AF_UNIX stream socket, as a child's end of its socketpair? */
static int
fslink_is_unix_stream(int fd)
{
	int		type, domain;
	socklen_t	len = sizeof type;

	if (getsockopt(fd, SOL_SOCKET, SO_TYPE, &type, &len) == -1 ||
	    type != SOCK_STREAM)
		return (0);
	len = sizeof domain;
	return (getsockopt(fd, SOL_SOCKET, SO_DOMAIN, &domain, &len) == 0 &&
	    domain == AF_UNIX);
}

/*
 * Check an answer to a fork request of kind: one was asked for and not
 * yet answered, and a child comes with its end of an AF_UNIX stream.  A
 * fork-server runs its user's code (a Python broadcast unpickles in it):
 * one that sent children emberd never asked for would have emberd hold
 * their descriptors and count them past workers.max, for good once
 * retired (their exits never come).  0, or -1 when the fork-server is
 * refused (and passed closed).
 */
static int
fslink_check_answer(struct fslink *fs, enum fslink_kind kind,
    const struct fs_msg *m, int passed)
{
	const char	*what = kind == FSLINK_WORKERS ? "worker" : "helper";
	uint64_t	*loads;
	char		 why[128];

	if (fs->asked[kind] == 0)
		snprintf(why, sizeof why, "the fork-server sent %s for a %s "
		    "emberd did not ask for", fs_msg_type_name(m->type), what);
	else if (passed != -1 && !fslink_is_unix_stream(passed))
		snprintf(why, sizeof why, "the fork-server sent %s %ld with a "
		    "descriptor that is not its socket", what, (long)m->pid);
	else {
		fs->asked[kind]--;
		fs->asked_ms = ember_now_ms();
		if ((loads = ring_first(&fs->ask_loads)) != NULL) {
			fs->loads_done = *loads;
			ring_pop(&fs->ask_loads);
		}
		return (0);
	}
	if (passed != -1)
		closer_close_drained(passed);
	log_error("%s (fork-server %ld, uid %ld); killing it", why,
	    (long)fs->pid, (long)fs->uid);
	fslink_refuse(fs, why);
	return (-1);
}

/* The packets of a turn (a few: a burst of exits cannot starve
 * clients). */
static void
fslink_read_cb(void *arg)
{
	struct fslink			*fs = arg;
	const struct fslink_peer	*p;
	struct fs_msg			 m;
	int				 passed, k;
	char				 why[96];

	while (fs->ch != NULL && fslink_next(fs, &m, &passed)) {
		log_debug("fork-server %ld: %s id %d pid %d value %d",
		    (long)fs->pid, fs_msg_type_name(m.type), m.id, m.pid,
		    m.value);
		if (m.type != FS_FORKED && m.type != FS_HELPER_FORKED &&
		    passed != -1)
			closer_close_drained(passed);
		/* Nothing before the hello: its version says whether the
		 * rest can be read at all. */
		if (!fs->hello && m.type != FS_HELLO) {
			if (passed != -1 && (m.type == FS_FORKED ||
			    m.type == FS_HELPER_FORKED))
				closer_close_drained(passed);
			log_error("fork-server %ld sent %s (%d) before its "
			    "hello; killing it", (long)fs->pid,
			    fs_msg_type_name(m.type), m.type);
			snprintf(why, sizeof why, "the fork-server sent %s "
			    "(%d) before its hello", fs_msg_type_name(m.type),
			    m.type);
			fslink_refuse(fs, why);
			return;
		}
		switch (m.type) {
		case FS_HELLO:
			if (fslink_hello(fs, &m) == -1)
				return;
			log_info("fork-server %ld ready for uid %ld (worker "
			    "protocol %d)", (long)m.pid, (long)fs->uid, m.id);
			if (fs->hello_timer != NULL)
				evtimer_del(fs->hello_timer);
			fs->failures = 0;
			fs->hello = 1;
			fs->asked_ms = ember_now_ms();
			for (k = 0; k < FSLINK_KINDS; k++) {
				if ((p = FSLINK_PEER(k, hello)) != NULL)
					p->hello(fs);
			}
			break;
		case FS_FORKED:
			if (fslink_check_answer(fs, FSLINK_WORKERS, &m,
			    passed) == -1)
				return;
			fslink_forked(fs, FSLINK_WORKERS, &m, passed);
			break;
		case FS_FORK_FAILED:
			if (fslink_check_answer(fs, FSLINK_WORKERS, &m,
			    -1) == -1)
				return;
			fslink_fork_failed(fs, FSLINK_WORKERS, &m);
			break;
		case FS_HELPER_FORKED:
			if (fslink_check_answer(fs, FSLINK_HELPERS, &m,
			    passed) == -1)
				return;
			fslink_forked(fs, FSLINK_HELPERS, &m, passed);
			break;
		case FS_HELPER_FAILED:
			if (fslink_check_answer(fs, FSLINK_HELPERS, &m,
			    -1) == -1)
				return;
			fslink_fork_failed(fs, FSLINK_HELPERS, &m);
			break;
		case FS_EXIT:
			fslink_child_exited(fs, &m);
			break;
		default:
			log_error("fork-server %ld sent message type %d; "
			    "killing it", (long)fs->pid, m.type);
			snprintf(why, sizeof why, "the fork-server sent "
			    "message type %d", m.type);
			fslink_refuse(fs, why);
			return;
		}
	}
}

static void
fslink_restart_cb(evutil_socket_t fd, short events, void *arg)
{
	(void)fd; (void)events;
	if (fslink_start(arg) == 0)
		ember_counters.forkserver_restarts++;
}

/* Add "flag name" to argv for each name of a comma-separated list (blanks
 * around a name ignored, empty names skipped); argv grows as needed. */
static char **
fslink_argv_list(char **argv, size_t *n, size_t *max, const char *flag,
    const char *names)
{
	char	*list, *p, *name;

	list = xstrdup(names);
	for (p = list; (name = strsep(&p, ",")) != NULL;) {
		name += strspn(name, " \t");
		name[strcspn(name, " \t")] = '\0';
		if (*name == '\0')
			continue;
		argv = xreallocarray(argv, *max += 2, sizeof *argv);
		argv[(*n)++] = xstrdup(flag);
		argv[(*n)++] = xstrdup(name);
	}
	free(list);
	return (argv);
}

/* The fork-server's command line: --user when emberd is root, the
 * plugins to preload, and --bind-now when LD_BIND_NOW is emberd's. */
static char **
fslink_argv(const struct fslink *fs, int bind_now)
{
	char	**argv;
	size_t	  n = 0, max = 14;	/* room for the fixed options and NULL */

	argv = xcalloc(max, sizeof *argv);
	argv[n++] = xstrdup("ember-worker");
	argv[n++] = xstrdup("--fork-server");
	argv[n++] = xstrdup("--log-level");
	argv[n++] = xstrdup(ember_conf.daemon_log_level);
	if (bind_now)
		argv[n++] = xstrdup("--bind-now");
	if (geteuid() == 0) {
		argv[n++] = xstrdup("--user");
		xasprintf(&argv[n++], "%ld:%ld", (long)fs->uid, (long)fs->gid);
	}
	/* The address-space limit backs up the resident-memory check; it
	 * is twice workers.max_memory, as a worker's mappings (its code, a
	 * broadcast it shares) are more than what it uses. */
	if (ember_conf.workers_max_memory > 0) {
		argv[n++] = xstrdup("--memory-limit");
		xasprintf(&argv[n++], "%lld",
		    (long long)ember_conf.workers_max_memory * 2);
	}
	/* Where no cgroup holds workers.max_pids_per_user, RLIMIT_NPROC
	 * does, over all of the user's processes. */
	if (!cgroup_active() && ember_conf.workers_max_pids_per_user > 0) {
		argv[n++] = xstrdup("--nproc-limit");
		xasprintf(&argv[n++], "%lld",
		    (long long)ember_conf.workers_max_pids_per_user);
	}
	argv = fslink_argv_list(argv, &n, &max, "--preload",
	    ember_conf.workers_preload);
	argv = fslink_argv_list(argv, &n, &max, "--python-preload",
	    ember_conf.python_preload);
	argv[n] = NULL;
	return (argv);
}

/*
 * In the child: stdio and session for the fork-server, where nothing of
 * emberd's is left for a job to use.  fd 0 is /dev/null and fds 1 and 2
 * the job log's pipe, never emberd's terminal or log; its own session has
 * no controlling terminal, so that no job can type into emberd's
 * (TIOCSTI) or be signalled by it.  It leads that session with the user's
 * rights alone; its workers and helpers never lead one.
 */
static void
fslink_child_stdio(int logfd)
{
	int	null;

	if (setsid() == -1 ||
	    (null = open("/dev/null", O_RDONLY | O_NOCTTY)) == -1 ||
	    dup2(null, 0) == -1 || dup2(logfd, 1) == -1 ||
	    dup2(logfd, 2) == -1)
		_exit(127);
}

/*
 * Have the dynamic linker bind every library's calls as the fork-server
 * starts (LD_BIND_NOW), not in each worker at its first call of each: a
 * worker then looks no symbol up and writes no page of a library's GOT
 * (bench/README.md, "Fresh worker").  Added to env, unless the jobs'
 * environment has it already (workers.env): 1 if added, and the
 * fork-server, told by --bind-now, unsets it before any command sees it.
 */
static int
fslink_bind_now(char ***env)
{
	size_t	n;

	for (n = 0; (*env)[n] != NULL; n++) {
		if (strncmp((*env)[n], "LD_BIND_NOW=", 12) == 0)
			return (0);
	}
	*env = xreallocarray(*env, n + 2, sizeof **env);
	(*env)[n] = xstrdup("LD_BIND_NOW=1");
	(*env)[n + 1] = NULL;
	return (1);
}

static int
fslink_start(struct fslink *fs)
{
	const struct fslink_peer	 *p;
	char				**argv, **env;
	struct timeval			  tv;
	int				  sv[2], logfd, i, k;
	sigset_t			  all, old;
	pid_t				  pid;

	if (socketpair(AF_UNIX, SOCK_SEQPACKET | SOCK_CLOEXEC, 0, sv) == -1) {
		log_error("socketpair: %s", strerror(errno));
		return (-1);
	}
	if ((fs->joblog = joblog_open(fs->uid, &logfd)) == NULL) {
		close(sv[0]);
		close(sv[1]);
		return (-1);
	}
	/* Built before the fork: getpwuid is no business of a child of a
	 * loop.  The fork-server's workers and commands inherit it. */
	env = jobenv_build(fs->uid);
	argv = fslink_argv(fs, fslink_bind_now(&env));

	/* Block signals so none reaches libevent's handlers in the child. */
	sigfillset(&all);
	sigprocmask(SIG_BLOCK, &all, &old);
	pid = fork();
	if (pid == 0) {
		int	sig;

		/* A session of its own: a ^C on the terminal emberd -f runs
		 * on is emberd's to handle (it drains), never the
		 * fork-server's to die of.  One that came before the session
		 * changed is pending here: ignoring a signal discards it.  Its
		 * workers and helpers lead groups of their own. */
		fslink_child_stdio(logfd);
		signal(SIGINT, SIG_IGN);
		signal(SIGQUIT, SIG_IGN);
		signal(SIGTSTP, SIG_IGN);
		for (sig = 1; sig < NSIG; sig++)
			signal(sig, SIG_DFL);
		sigprocmask(SIG_SETMASK, &old, NULL);
		if (dup2(sv[1], 3) == -1)
			_exit(127);
		close_range(4, ~0U, 0);
		execve(fslink_path, argv, env);
		fprintf(stderr, "emberd: exec %s: %s\n", fslink_path,
		    strerror(errno));
		_exit(127);
	}
	sigprocmask(SIG_SETMASK, &old, NULL);
	for (i = 0; argv[i] != NULL; i++)
		free(argv[i]);
	free(argv);
	jobenv_free(env);
	close(sv[1]);
	close(logfd);
	if (pid == -1) {
		log_error("fork: %s", strerror(errno));
		close(sv[0]);
		joblog_close(fs->joblog);
		fs->joblog = NULL;
		return (-1);
	}
	/* Into its user's cgroup before it is asked to fork anything; one
	 * that cannot be bounded is not used (its exit restarts it). */
	if (cgroup_enter(fs->uid, pid) == -1)
		kill(pid, SIGKILL);
	fs->pid = pid;
	memset(fs->asked, 0, sizeof fs->asked);
	fs->loads_sent = fs->loads_done = 0;
	ring_free(&fs->ask_loads);
	/* A packet channel: each message is one packet of FS_MSG_SIZE, a
	 * worker's or helper's socket riding on its FS_FORKED. */
	fs->ch = channel_create_packets(sv[0], FS_MSG_SIZE, FS_MSG_SIZE, 1,
	    fslink_read_cb, fs);
	channel_set_error_cb(fs->ch, fslink_error_cb);
	if (ember_conf.workers_start_timeout > 0) {
		tv.tv_sec = ember_conf.workers_start_timeout / 1000;
		tv.tv_usec = (ember_conf.workers_start_timeout % 1000) * 1000;
		if (fs->hello_timer == NULL)
			fs->hello_timer = evtimer_new(ember_base,
			    fslink_hello_timeout_cb, fs);
		evtimer_add(fs->hello_timer, &tv);
	}
	log_debug("started fork-server %ld for uid %ld (%s)", (long)pid,
	    (long)fs->uid, fslink_path);
	for (k = 0; k < FSLINK_KINDS; k++) {
		if ((p = FSLINK_PEER(k, ready)) != NULL)
			p->ready(fs);
	}
	return (0);
}

struct fslink *
fslink_create(struct pool *pool, uid_t uid, gid_t gid)
{
	struct fslink	*fs = xcalloc(1, sizeof *fs);

	fs->pool = pool;
	fs->uid = uid;
	fs->gid = gid;
	fs->pid = -1;
	ring_init(&fs->ask_loads, sizeof(uint64_t));
	TAILQ_INSERT_TAIL(&fslinks, fs, entry);
	if (fslink_start(fs) == -1) {
		TAILQ_REMOVE(&fslinks, fs, entry);
		free(fs);
		return (NULL);
	}
	return (fs);
}

int
fslink_running(const struct fslink *fs)
{
	return (fs != NULL && fs->ch != NULL);
}

int
fslink_restarting(const struct fslink *fs)
{
	return (fs != NULL && fs->restart != NULL &&
	    evtimer_pending(fs->restart, NULL));
}

pid_t
fslink_pid(const struct fslink *fs)
{
	return (fs->pid);
}

/* A fork-server exited: fail what ran on it and start it again later. */
static void
fslink_exited(struct fslink *fs, int status)
{
	const struct fslink_peer	*p;
	struct timeval			 tv;
	char				 how[96], *why;
	int64_t				 delay;
	int				 again, k;

	/* One emberd refused is failed for what it did, not its SIGKILL. */
	log_describe_wait(status, how, sizeof how);
	if (fs->refused != NULL) {
		why = fs->refused;
		fs->refused = NULL;
	} else
		xasprintf(&why, "the fork-server %s%s",
		    WIFSIGNALED(status) ? "was " : "", how);
	fs->pid = -1;
	fslink_close(fs);
	if (fs->hello_timer != NULL)
		evtimer_del(fs->hello_timer);
	joblog_close(fs->joblog);	/* its last words */
	fs->joblog = NULL;
	/* One that had said hello is started again, and helpers wait. */
	again = fs->hello && !ember_draining && !service_failed();
	for (k = FSLINK_KINDS - 1; k >= 0; k--) {
		if ((p = FSLINK_PEER(k, lost)) != NULL)
			p->lost(fs, why, again, !fs->hello);
	}
	fs->hello = 0;
	if (ember_draining || service_failed()) {
		log_info("%s", why);
		free(why);
		return;
	}
	/* Back off when it keeps dying before it even said hello. */
	delay = ember_conf.workers_fork_backoff << (fs->failures < 5 ?
	    fs->failures : 5);
	fs->failures++;
	log_error("%s; restarting it in %lldms", why, (long long)delay);
	free(why);
	tv.tv_sec = delay / 1000;
	tv.tv_usec = (delay % 1000) * 1000;
	if (fs->restart == NULL)
		fs->restart = evtimer_new(ember_base, fslink_restart_cb, fs);
	evtimer_add(fs->restart, &tv);
}

void
fslink_reap(void)
{
	struct fslink	*fs;
	int			 status;
	pid_t			 pid;

	while ((pid = waitpid(-1, &status, WNOHANG)) > 0) {
		TAILQ_FOREACH(fs, &fslinks, entry) {
			if (fs->pid == pid) {
				fslink_exited(fs, status);
				break;
			}
		}
	}
}

/* Queue a message for the fork-server, with fd (duplicated) if it is
 * not -1: 0, or -1 if it is not running or reads none of what is
 * queued. */
static int
fslink_send_fd(struct fslink *fs, const struct fs_msg *m, int fd)
{
	unsigned char	buf[FS_MSG_SIZE];

	if (!fslink_running(fs))
		return (-1);
	if (evbuffer_get_length(channel_output(fs->ch)) >= FSLINK_MAX_QUEUED) {
		log_error("fork-server %ld reads none of its requests: %s "
		    "refused", (long)fs->pid, fs_msg_type_name(m->type));
		return (-1);
	}
	fs_msg_encode(m, buf);
	if (fd != -1)
		channel_pass_fd(fs->ch, fd);
	evbuffer_add(channel_output(fs->ch), buf, sizeof buf);
	channel_flush(fs->ch);
	return (0);
}

static int
fslink_send(struct fslink *fs, const struct fs_msg *m)
{
	return (fslink_send_fd(fs, m, -1));
}

/* Ask for a child of kind: 0, or -1 as fslink_fork. */
static int
fslink_ask(struct fslink *fs, enum fslink_kind kind, const struct fs_msg *m)
{
	if (fslink_send(fs, m) == -1)
		return (-1);
	if (fs->asked[FSLINK_WORKERS] + fs->asked[FSLINK_HELPERS] == 0)
		fs->asked_ms = ember_now_ms();
	fs->asked[kind]++;
	*(uint64_t *)ring_push(&fs->ask_loads) = fs->loads_sent;
	return (0);
}

/*
 * A fork-server stalled by its user's code (an unpickling that never
 * returns: the loads block its loop) answers no fork request, and those
 * asked for hold their places in workers.max, everyone's, past any task
 * timeout.  One that has answered none for python.broadcast_preload_timeout
 * (longer than any load) while some wait, and as long again for each load
 * the oldest waits behind, is killed and started again.
 */
void
fslink_check_answers(struct fslink *fs, uint64_t now)
{
	uint64_t	allowed, loads = 0, *first;
	char		why[128];

	if (!fslink_running(fs) || !fs->hello ||
	    fs->asked[FSLINK_WORKERS] + fs->asked[FSLINK_HELPERS] == 0)
		return;
	if ((first = ring_first(&fs->ask_loads)) != NULL &&
	    *first > fs->loads_done)
		loads = *first - fs->loads_done;
	allowed = (uint64_t)ember_conf.python_broadcast_preload_timeout *
	    (1 + loads);
	if (now - fs->asked_ms <= allowed)
		return;
	snprintf(why, sizeof why, "the fork-server left %d fork requests "
	    "not answered for %llums",
	    fs->asked[FSLINK_WORKERS] + fs->asked[FSLINK_HELPERS],
	    (unsigned long long)(now - fs->asked_ms));
	log_error("%s (fork-server %ld, uid %ld); killing it", why,
	    (long)fs->pid, (long)fs->uid);
	fslink_refuse(fs, why);
}

/*
 * Workers not reused are asked for with how long the fork-server may keep
 * the next one forked ahead (workers.idle_timeout, as an idle worker, but
 * at most a minute: a reload to workers.reuse = yes sends no more
 * requests, and the spare would wait out the rest): it forks it while
 * this one's task runs.
 */
#define FSLINK_AHEAD_MAX_MS	60000
int
fslink_fork(struct fslink *fs, int32_t request)
{
	struct fs_msg	m = { FS_FORK, request, 0, 0 };
	int64_t		ms = ember_conf.workers_idle_timeout;

	if (!ember_conf.workers_reuse)
		m.value = ms <= 0 || ms > FSLINK_AHEAD_MAX_MS ?
		    FSLINK_AHEAD_MAX_MS : (int32_t)ms;
	return (fslink_ask(fs, FSLINK_WORKERS, &m));
}

int
fslink_helper(struct fslink *fs, int32_t request)
{
	struct fs_msg	m = { FS_HELPER, request, 0, 0 };

	return (fslink_ask(fs, FSLINK_HELPERS, &m));
}

void
fslink_abort(struct fslink *fs, const char *why)
{
	if (!fslink_running(fs) || fs->pid == -1)
		return;
	log_warn("fork-server %ld for uid %ld: %s; killing it", (long)fs->pid,
	    (long)fs->uid, why);
	kill(fs->pid, SIGKILL);
	fslink_close(fs);
}

int
fslink_pyload(struct fslink *fs, int32_t id, int fd)
{
	struct fs_msg	m = { FS_PYLOAD, id, 0, 0 };

	if (fslink_send_fd(fs, &m, fd) == -1)
		return (-1);
	fs->loads_sent++;
	return (0);
}

int
fslink_pydrop(struct fslink *fs, int32_t id)
{
	struct fs_msg	m = { FS_PYDROP, id, 0, 0 };

	return (fslink_send(fs, &m));
}

void
fslink_kill(struct fslink *fs, pid_t pid, int sig)
{
	struct fs_msg	m = { FS_KILL, 0, pid, sig };

	(void)fslink_send(fs, &m);
}

/* Closing the channel makes a fork-server kill its workers and exit. */
void
fslink_free(struct fslink *fs)
{
	int	status, i;

	if (fs->restart != NULL)
		event_free(fs->restart);
	if (fs->hello_timer != NULL)
		event_free(fs->hello_timer);
	ring_free(&fs->ask_loads);
	fslink_close(fs);
	if (fs->pid != -1) {
		for (i = 0; i < 200; i++) {	/* up to 2 s */
			if (waitpid(fs->pid, &status, WNOHANG) != 0)
				break;
			(void)joblog_read(fs->joblog);
			usleep(10000);
		}
		if (i == 200) {
			log_warn("fork-server %ld did not exit; killing it",
			    (long)fs->pid);
			kill(fs->pid, SIGKILL);
			waitpid(fs->pid, &status, 0);
		}
	}
	joblog_close(fs->joblog);	/* its last words */
	TAILQ_REMOVE(&fslinks, fs, entry);
	free(fs->refused);
	free(fs);
}

void
fslink_stop_all(void)
{
	struct fslink	*fs;

	/* Close every channel first, so they all wind down together. */
	TAILQ_FOREACH(fs, &fslinks, entry)
		fslink_close(fs);
	while ((fs = TAILQ_FIRST(&fslinks)) != NULL)
		fslink_free(fs);
	free(fslink_path);
	fslink_path = NULL;
}
