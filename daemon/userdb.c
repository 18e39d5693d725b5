#include <sys/prctl.h>
#include <sys/socket.h>
#include <sys/types.h>
#include <sys/wait.h>

#include <errno.h>
#include <grp.h>
#include <pwd.h>
#include <signal.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include <event2/buffer.h>
#include <event2/event.h>

#include "channel.h"
#include "emberd.h"
#include "log.h"
#include "queue.h"
#include "userdb.h"
#include "xmalloc.h"

#define USERDB_MAX		1024	/* entries kept */
#define USERDB_TTL_MS		60000	/* an older entry is asked again */
#define USERDB_INFLIGHT		64	/* requests the resolver holds */
#define USERDB_RESTART_MS	1000	/* before a resolver that died is
					   started again */
#define USERDB_NAME		256
#define USERDB_DIR		1024
#define USERDB_SHELL		256

/* A request to the resolver and its answer, one datagram each, in
 * order. */
struct userdb_req {
	int32_t		 by_name;
	uint32_t	 uid;
	char		 name[USERDB_NAME];
};
struct userdb_rep {
	int32_t		 by_name;
	uint32_t	 quid;
	char		 qname[USERDB_NAME];
	int32_t		 found;
	uint32_t	 uid;
	uint32_t	 gid;
	char		 name[USERDB_NAME];
	char		 dir[USERDB_DIR];
	char		 shell[USERDB_SHELL];
};

struct userdb_entry;
struct userdb_wait {
	struct userdb_entry		*e;
	void				(*cb)(void *);
	void				*arg;
	TAILQ_ENTRY(userdb_wait)	 entry;
};

struct userdb_entry {
	int				 by_name;
	uid_t				 key_uid;
	char				 key_name[USERDB_NAME];
	int				 known;
	int				 found;
	struct userdb_user		 user;
	char				 name[USERDB_NAME];
	char				 dir[USERDB_DIR];
	char				 shell[USERDB_SHELL];
	uint64_t			 known_ms;
	int				 asked;		/* queued or sent */
	TAILQ_HEAD(, userdb_wait)	 waits;
	TAILQ_ENTRY(userdb_entry)	 entry;		/* oldest use first */
	TAILQ_ENTRY(userdb_entry)	 ask_entry;
};
TAILQ_HEAD(userdb_list, userdb_entry);

static struct userdb_list	 userdb_entries =
    TAILQ_HEAD_INITIALIZER(userdb_entries);
static size_t			 userdb_n;
static struct userdb_list	 userdb_unsent =
    TAILQ_HEAD_INITIALIZER(userdb_unsent);
static struct userdb_list	 userdb_sent =
    TAILQ_HEAD_INITIALIZER(userdb_sent);
static size_t			 userdb_nsent;
static struct channel		*userdb_ch;	/* to the resolver */
static struct event		*userdb_restart;
/* Whom the resolver runs as, when emberd is root: workers.root_user,
 * else nobody's usual ids.  A lookup needs no privilege. */
static uid_t			 userdb_run_uid = 65534;
static gid_t			 userdb_run_gid = 65534;

static void	userdb_flush(void);

/* Copy s into a field of n bytes: 0, or -1 if it does not fit. */
static int
userdb_copy(char *to, size_t n, const char *s)
{
	if (s == NULL)
		s = "";
	if (strlen(s) >= n)
		return (-1);
	strcpy(to, s);
	return (0);
}

/* Fill in an answer from pw (NULL: no such user). */
static void
userdb_answer(const struct passwd *pw, struct userdb_rep *rep)
{
	if (pw == NULL || userdb_copy(rep->name, sizeof rep->name,
	    pw->pw_name) == -1)
		return;
	rep->found = 1;
	rep->uid = pw->pw_uid;
	rep->gid = pw->pw_gid;
	/* Too long to keep: as if there were none. */
	(void)userdb_copy(rep->dir, sizeof rep->dir, pw->pw_dir);
	(void)userdb_copy(rep->shell, sizeof rep->shell, pw->pw_shell);
}

/* The resolver: answer each request in order until emberd goes. */
static void __attribute__((noreturn))
userdb_resolve(int fd)
{
	struct userdb_req	 req;
	struct userdb_rep	 rep;
	ssize_t			 n;

	for (;;) {
		if ((n = recv(fd, &req, sizeof req, 0)) == -1 && errno == EINTR)
			continue;
		if (n != (ssize_t)sizeof req)
			_exit(n == 0 ? 0 : 1);
		memset(&rep, 0, sizeof rep);
		rep.by_name = req.by_name;
		rep.quid = req.uid;
		req.name[sizeof req.name - 1] = '\0';
		memcpy(rep.qname, req.name, sizeof rep.qname);
		userdb_answer(req.by_name ? getpwnam(req.name) :
		    getpwuid(req.uid), &rep);
		if (send(fd, &rep, sizeof rep, MSG_NOSIGNAL) != sizeof rep)
			_exit(1);
	}
}

/*
 * Fork the resolver, with nothing of emberd's but fd.  It is no child of
 * emberd's, whose children are its fork-servers alone (SIGCHLD, the
 * tests' process tree): an intermediate child forks it and exits.  It
 * ends at the end of file of emberd's end, whenever emberd goes.
 */
static int
userdb_fork(int fd, int keep)
{
	sigset_t	all, old;
	pid_t		pid;
	int		sig, status;

	sigfillset(&all);
	sigprocmask(SIG_BLOCK, &all, &old);
	if ((pid = fork()) == 0) {
		if (fork() != 0)
			_exit(0);
		for (sig = 1; sig < NSIG; sig++)
			signal(sig, SIG_DFL);
		signal(SIGINT, SIG_IGN);
		signal(SIGHUP, SIG_IGN);
		sigprocmask(SIG_SETMASK, &old, NULL);
		if (geteuid() == 0 && (setgroups(0, NULL) == -1 ||
		    setgid(userdb_run_gid) == -1 ||
		    setuid(userdb_run_uid) == -1))
			_exit(1);
		prctl(PR_SET_NO_NEW_PRIVS, 1, 0, 0, 0);
		close(keep);
		if (dup2(fd, 3) == -1)
			_exit(1);
		close_range(4, ~0U, 0);
		userdb_resolve(3);
	}
	sigprocmask(SIG_SETMASK, &old, NULL);
	if (pid == -1)
		return (-1);
	while (waitpid(pid, &status, 0) == -1 && errno == EINTR)
		;
	return (0);
}

/* Fill in e's user from an answer. */
static void
userdb_fill(struct userdb_entry *e, const struct userdb_rep *rep)
{
	e->known = 1;
	e->known_ms = ember_now_ms();
	e->found = rep->found;
	if (!rep->found)
		return;
	memcpy(e->name, rep->name, sizeof e->name);
	memcpy(e->dir, rep->dir, sizeof e->dir);
	memcpy(e->shell, rep->shell, sizeof e->shell);
	e->name[sizeof e->name - 1] = e->dir[sizeof e->dir - 1] =
	    e->shell[sizeof e->shell - 1] = '\0';
	e->user.uid = rep->uid;
	e->user.gid = rep->gid;
	e->user.name = e->name;
	e->user.dir = e->dir;
	e->user.shell = e->shell;
}

/* Call e's waits, each once. */
static void
userdb_wake(struct userdb_entry *e)
{
	struct userdb_wait	*w;

	while ((w = TAILQ_FIRST(&e->waits)) != NULL) {
		TAILQ_REMOVE(&e->waits, w, entry);
		w->cb(w->arg);
		free(w);
	}
}

/* Find an entry, made (oldest unused one evicted past the bound) if
 * need be; NULL if every entry is busy. */
static struct userdb_entry *
userdb_find(int by_name, uid_t uid, const char *name, int make)
{
	struct userdb_entry	*e;

	TAILQ_FOREACH(e, &userdb_entries, entry) {
		if (e->by_name == by_name && (by_name ?
		    strcmp(e->key_name, name) == 0 : e->key_uid == uid)) {
			TAILQ_REMOVE(&userdb_entries, e, entry);
			TAILQ_INSERT_TAIL(&userdb_entries, e, entry);
			return (e);
		}
	}
	if (!make || (by_name && strlen(name) >= USERDB_NAME))
		return (NULL);
	if (userdb_n >= USERDB_MAX) {
		TAILQ_FOREACH(e, &userdb_entries, entry) {
			if (!e->asked && TAILQ_EMPTY(&e->waits))
				break;
		}
		if (e == NULL)
			return (NULL);
		TAILQ_REMOVE(&userdb_entries, e, entry);
		free(e);
		userdb_n--;
	}
	e = xcalloc(1, sizeof *e);
	e->by_name = by_name;
	e->key_uid = uid;
	if (by_name)
		strcpy(e->key_name, name);
	TAILQ_INIT(&e->waits);
	TAILQ_INSERT_TAIL(&userdb_entries, e, entry);
	userdb_n++;
	return (e);
}

/* Ask the resolver for e (again). */
static void
userdb_ask(struct userdb_entry *e)
{
	if (e->asked)
		return;
	e->asked = 1;
	TAILQ_INSERT_TAIL(&userdb_unsent, e, ask_entry);
	userdb_flush();
}

/* Send what waits, as far as the resolver holds requests. */
static void
userdb_flush(void)
{
	struct userdb_entry	*e;
	struct userdb_req	 req;

	if (userdb_ch == NULL)
		return;
	while (userdb_nsent < USERDB_INFLIGHT &&
	    (e = TAILQ_FIRST(&userdb_unsent)) != NULL) {
		memset(&req, 0, sizeof req);
		req.by_name = e->by_name;
		req.uid = (uint32_t)e->key_uid;
		strcpy(req.name, e->key_name);
		evbuffer_add(channel_output(userdb_ch), &req, sizeof req);
		TAILQ_REMOVE(&userdb_unsent, e, ask_entry);
		TAILQ_INSERT_TAIL(&userdb_sent, e, ask_entry);
		userdb_nsent++;
	}
	channel_flush(userdb_ch);
}

/* Also remember a user found by name under its uid. */
static void
userdb_alias(const struct userdb_rep *rep)
{
	struct userdb_entry	*e;

	if (!rep->found || (e = userdb_find(0, rep->uid, NULL, 1)) == NULL ||
	    e->asked)
		return;
	userdb_fill(e, rep);
	userdb_wake(e);
}

static void	userdb_restart_cb(evutil_socket_t, short, void *);

/* Start a resolver a second from now. */
static void
userdb_later(void)
{
	struct timeval	tv = { 0, USERDB_RESTART_MS * 1000 };

	if (userdb_restart == NULL)
		userdb_restart = evtimer_new(ember_base, userdb_restart_cb,
		    NULL);
	evtimer_add(userdb_restart, &tv);
}

/* The resolver is gone: what it held is asked again of the next. */
static void
userdb_lost(const char *why)
{
	struct userdb_entry	*e;

	log_warn("user lookups: %s; starting the resolver again", why);
	channel_free(userdb_ch);	/* the resolver ends at its end of file */
	userdb_ch = NULL;
	while ((e = TAILQ_LAST(&userdb_sent, userdb_list)) != NULL) {
		TAILQ_REMOVE(&userdb_sent, e, ask_entry);
		TAILQ_INSERT_HEAD(&userdb_unsent, e, ask_entry);
	}
	userdb_nsent = 0;
	userdb_later();
}

/* Answers: the first request sent is the one each answers. */
static void
userdb_read_cb(void *arg)
{
	struct evbuffer		*in = channel_input(userdb_ch);
	struct userdb_rep	 rep;
	struct userdb_entry	*e;

	(void)arg;
	while (evbuffer_remove(in, &rep, sizeof rep) == (int)sizeof rep) {
		e = TAILQ_FIRST(&userdb_sent);
		if (e == NULL ||
		    rep.by_name != e->by_name || (e->by_name ?
		    strncmp(rep.qname, e->key_name, sizeof rep.qname) != 0 :
		    rep.quid != (uint32_t)e->key_uid)) {
			userdb_lost("the resolver's answer is not the one "
			    "asked for");
			return;
		}
		TAILQ_REMOVE(&userdb_sent, e, ask_entry);
		userdb_nsent--;
		e->asked = 0;
		userdb_fill(e, &rep);
		if (e->by_name)
			userdb_alias(&rep);
		userdb_wake(e);
	}
	userdb_flush();
}

/* The resolver's end, or a packet of the wrong size. */
static void
userdb_error_cb(void *arg, int error)
{
	(void)arg;
	if (error == 0)
		userdb_lost("the resolver exited");
	else if (error == EBADMSG)
		userdb_lost("the resolver's answer is not the one asked for");
	else
		userdb_lost(strerror(error));
}

/* Start a resolver: 0, or -1 (logged). */
static int
userdb_spawn(void)
{
	int	sv[2];

	if (socketpair(AF_UNIX, SOCK_SEQPACKET | SOCK_CLOEXEC, 0, sv) == -1) {
		log_error("user lookups: socketpair: %s", strerror(errno));
		return (-1);
	}
	if (userdb_fork(sv[1], sv[0]) == -1) {
		log_error("user lookups: fork: %s", strerror(errno));
		close(sv[0]);
		close(sv[1]);
		return (-1);
	}
	close(sv[1]);
	userdb_ch = channel_create_packets(sv[0], sizeof(struct userdb_rep),
	    sizeof(struct userdb_req), 0, userdb_read_cb, NULL);
	channel_set_error_cb(userdb_ch, userdb_error_cb);
	userdb_flush();
	return (0);
}

/* Start a resolver, or try again a second later. */
static void
userdb_try(void)
{
	if (userdb_spawn() == -1)
		userdb_later();
}

/* The back-off after a resolver died is over. */
static void
userdb_restart_cb(evutil_socket_t fd, short events, void *arg)
{
	(void)fd; (void)events; (void)arg;
	userdb_try();
}

void
userdb_start(void)
{
	const struct userdb_user	*u;

	/* Before the loop runs: this lookup may take its time. */
	if (geteuid() == 0 && (u = userdb_name_now(
	    ember_conf.workers_root_user)) != NULL && u->uid != 0) {
		userdb_run_uid = u->uid;
		userdb_run_gid = u->gid;
	}
	userdb_try();
}

void
userdb_stop(void)
{
	struct userdb_entry	*e;
	struct userdb_wait	*w;

	if (userdb_restart != NULL)
		event_free(userdb_restart);
	userdb_restart = NULL;
	if (userdb_ch != NULL)
		channel_free(userdb_ch);	/* the resolver ends at its EOF */
	userdb_ch = NULL;
	TAILQ_INIT(&userdb_unsent);
	TAILQ_INIT(&userdb_sent);
	userdb_nsent = 0;
	while ((e = TAILQ_FIRST(&userdb_entries)) != NULL) {
		while ((w = TAILQ_FIRST(&e->waits)) != NULL) {
			TAILQ_REMOVE(&e->waits, w, entry);
			free(w);
		}
		TAILQ_REMOVE(&userdb_entries, e, entry);
		free(e);
	}
	userdb_n = 0;
}

/* The entry of uid or name as it stands; a lookup started if it is not
 * known, or known but old. */
static struct userdb_entry *
userdb_get(int by_name, uid_t uid, const char *name)
{
	struct userdb_entry	*e;

	if ((e = userdb_find(by_name, uid, name, 1)) == NULL)
		return (NULL);
	if (!e->known || ember_now_ms() - e->known_ms > USERDB_TTL_MS)
		userdb_ask(e);
	return (e);
}

/* userdb_uid and userdb_name. */
static int
userdb_known(struct userdb_entry *e, const struct userdb_user **u)
{
	if (e == NULL || !e->known)
		return (0);
	*u = e->found ? &e->user : NULL;
	return (1);
}

int
userdb_uid(uid_t uid, const struct userdb_user **u)
{
	return (userdb_known(userdb_get(0, uid, NULL), u));
}

int
userdb_name(const char *name, const struct userdb_user **u)
{
	return (userdb_known(userdb_get(1, 0, name), u));
}

/* userdb_wait_uid and userdb_wait_name. */
static struct userdb_wait *
userdb_wait(struct userdb_entry *e, void (*cb)(void *), void *arg)
{
	struct userdb_wait	*w;

	if (e == NULL || e->known)
		return (NULL);	/* known, or none can be kept: go on */
	w = xcalloc(1, sizeof *w);
	w->e = e;
	w->cb = cb;
	w->arg = arg;
	TAILQ_INSERT_TAIL(&e->waits, w, entry);
	return (w);
}

struct userdb_wait *
userdb_wait_uid(uid_t uid, void (*cb)(void *), void *arg)
{
	return (userdb_wait(userdb_get(0, uid, NULL), cb, arg));
}

struct userdb_wait *
userdb_wait_name(const char *name, void (*cb)(void *), void *arg)
{
	return (userdb_wait(userdb_get(1, 0, name), cb, arg));
}

void
userdb_cancel(struct userdb_wait *w)
{
	TAILQ_REMOVE(&w->e->waits, w, entry);
	free(w);
}

/* Look e up here, blocking, unless it is known. */
static const struct userdb_user *
userdb_now(struct userdb_entry *e, int by_name, uid_t uid, const char *name)
{
	struct userdb_rep	 rep;

	if (e != NULL && e->known)
		return (e->found ? &e->user : NULL);
	log_debug("user lookups: %s %s%.0ld not cached; looked up here",
	    by_name ? "user" : "uid", by_name ? name : "", by_name ? 0L :
	    (long)uid);
	memset(&rep, 0, sizeof rep);
	userdb_answer(by_name ? getpwnam(name) : getpwuid(uid), &rep);
	if (e == NULL) {
		/* Nowhere to keep it: a copy that lives until the next. */
		static struct userdb_entry	 spare;

		e = &spare;
	}
	userdb_fill(e, &rep);
	if (by_name)
		userdb_alias(&rep);
	userdb_wake(e);
	return (e->found ? &e->user : NULL);
}

const struct userdb_user *
userdb_uid_now(uid_t uid)
{
	return (userdb_now(userdb_find(0, uid, NULL, 1), 0, uid, NULL));
}

const struct userdb_user *
userdb_name_now(const char *name)
{
	return (userdb_now(userdb_find(1, 0, name, 1), 1, 0, name));
}
