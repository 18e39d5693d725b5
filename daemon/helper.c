#include <sys/socket.h>

#include <errno.h>
#include <fcntl.h>
#include <signal.h>
#include <stdarg.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include <event2/buffer.h>
#include <event2/event.h>

#include "channel.h"
#include "closer.h"
#include "emberd.h"
#include "fdpass.h"
#include "frame.h"
#include "fslink.h"
#include "helper.h"
#include "hmsg.h"
#include "limit.h"
#include "log.h"
#include "pool.h"
#include "protocol.h"
#include "queue.h"
#include "xmalloc.h"

/* Bytes read from a helper before its reply's length raises the mark. */
#define HELPER_READ_HIGH	(256 * 1024)

/*
 * A helper from request to exit.  The handle the caller holds is this
 * struct while cb is set; it stays in the list after its answer (or a
 * cancel) until the fork-server reports the process's exit.  The limits
 * count helpers at work: one cancelled or failed counts until it is gone,
 * but one that answered only has to exit, so its slot is free at once for
 * the user's next step (a save's commit, a checkpoint's manifest); if it
 * lingers past daemon.helper_timeout, it is killed.  One asked while
 * its fork-server restarts waits for it (within daemon.helper_timeout),
 * as tasks wait for workers; it is asked once the fork-server is back.
 */
struct helper {
	int32_t			 id;		/* FS_HELPER request id */
	uid_t			 client;	/* charged to */
	struct fslink		*fs;
	pid_t			 pid;		/* -1 until forked */
	int			 sent;		/* asked of the fork-server */
	int			 background;	/* emberd's own work */
	int			 queued;	/* waits for the uid's slot */
	int			 slot;		/* holds it */
	struct channel		*ch;		/* NULL until forked, and after */
	int			 fds_in[HELPER_MAX_FDS]; /* to pass */
	size_t			 nin;		/* 0: none, or queued */
	struct event		*timer;
	struct evbuffer		*out;		/* the request frame, until
						   forked */
	char			*verb;
	enum hmsg_verb		 verb_id;
	int32_t			 max_reply;	/* the reply's bound */
	uint64_t		 started_ms;
	helper_cb		 cb;		/* NULL: answered or cancelled */
	void			*arg;
	int			 charged;	/* counts against the limits */
	TAILQ_ENTRY(helper)	 entry;
};
static TAILQ_HEAD(, helper) helpers = TAILQ_HEAD_INITIALIZER(helpers);
static int32_t	helper_next_id = 1;

/*
 * Background helpers (removals, cleans, undos nobody waits for) are not
 * charged to daemon.max_helpers_per_uid, so they never take the slots
 * the user's own requests need: they run one at a time per uid, and the
 * others wait in order, their time starting when they go.
 */
#define HELPER_BACKGROUND_PER_UID	1

static void	helper_timeout_cb(evutil_socket_t, short, void *);
static void	helper_release_slot(struct helper *);

/* Find a helper by its request. */
static struct helper *
helper_find(struct fslink *fs, int32_t id)
{
	struct helper	*h;

	TAILQ_FOREACH(h, &helpers, entry) {
		if (h->fs == fs && h->id == id)
			return (h);
	}
	return (NULL);
}

/* Close what the helper's exchange holds: its channel (with the
 * descriptors nobody took), the request, the timer. */
static void
helper_close(struct helper *h)
{
	if (h->timer != NULL)
		event_free(h->timer);
	h->timer = NULL;
	if (h->ch != NULL)
		channel_free(h->ch);
	h->ch = NULL;
	while (h->nin > 0)
		closer_close(h->fds_in[--h->nin]);
	if (h->out != NULL)
		evbuffer_free(h->out);
	h->out = NULL;
}

/* Forget a helper whose process is gone (or never was). */
static void
helper_free(struct helper *h)
{
	helper_close(h);
	TAILQ_REMOVE(&helpers, h, entry);
	if (h->charged)
		limit_release(h->client, LIMIT_HELPERS, 1);
	helper_release_slot(h);
	free(h->verb);
	free(h);
}

/* Stop the exchange and the process; the struct waits for the exit, or
 * goes at once if the fork-server was never asked for it. */
static void
helper_stop(struct helper *h)
{
	helper_close(h);
	h->cb = NULL;
	helper_release_slot(h);
	if (!h->sent)
		helper_free(h);
	else if (h->pid > 0)
		fslink_kill(h->fs, h->pid, SIGKILL);
}

/* Answer the caller with an error, and stop the helper. */
static void __attribute__((format(printf, 3, 4)))
helper_fail(struct helper *h, const char *class, const char *fmt, ...)
{
	helper_cb	 cb = h->cb;
	void		*arg = h->arg;
	va_list		 ap;
	char		*msg;

	va_start(ap, fmt);
	xvasprintf(&msg, fmt, ap);
	va_end(ap);
	if (strcmp(class, "INTERNAL") == 0)
		log_error("helper %ld (%s, uid %ld): %s", (long)h->pid, h->verb,
		    (long)h->client, msg);
	else if (strcmp(class, HELPER_FAILED) == 0)
		log_warn("helper %ld (%s, uid %ld): %s", (long)h->pid, h->verb,
		    (long)h->client, msg);
	else
		log_info("helper %ld (%s, uid %ld): %s", (long)h->pid, h->verb,
		    (long)h->client, msg);
	helper_stop(h);
	if (cb != NULL)
		cb(NULL, NULL, 0, class, msg, arg);
	free(msg);
}

/* Give h daemon.helper_timeout, then cb: to answer, or to exit. */
static void
helper_set_timer(struct helper *h, event_callback_fn cb)
{
	struct timeval	tv;
	int64_t		ms = ember_conf.daemon_helper_timeout;

	tv.tv_sec = ms / 1000;
	tv.tv_usec = (ms % 1000) * 1000;
	h->timer = evtimer_new(ember_base, cb, h);
	evtimer_add(h->timer, &tv);
}

static void
helper_timeout_cb(evutil_socket_t fd, short events, void *arg)
{
	struct helper	*h = arg;

	(void)fd; (void)events;
	helper_fail(h, "LIMIT_EXCEEDED", "daemon.helper_timeout is %lldms: "
	    "the %s request of uid %ld took longer", (long long)
	    ember_conf.daemon_helper_timeout, h->verb, (long)h->client);
}

struct helper *
helper_run(uid_t client, gid_t gid, const char *verb, json_t *args,
    int fd_in, helper_cb cb, void *arg, const char **class, char **err)
{
	return (helper_run_fds(client, gid, verb, args, &fd_in,
	    fd_in == -1 ? 0 : 1, cb, arg, class, err));
}

/* Background helpers running, holding uid's one slot. */
static int
helper_background_running(uid_t client)
{
	struct helper	*h;
	int		 n = 0;

	TAILQ_FOREACH(h, &helpers, entry) {
		if (h->client == client && h->slot)
			n++;
	}
	return (n);
}

/* Ask the fork-server for h, or let h wait for one restarting (or dying:
 * its exit comes next, and helper_lost says whether h waits on); its time
 * starts now. */
static void
helper_go(struct helper *h)
{
	h->queued = 0;
	h->slot = h->background;
	if (fslink_running(h->fs) && fslink_helper(h->fs, h->id) == 0)
		h->sent = 1;
	else
		log_info("helper request %d (%s, uid %ld) waits for its "
		    "fork-server", h->id, h->verb, (long)h->client);
	helper_set_timer(h, helper_timeout_cb);
}

/* A background helper is done with its slot: the next one of its uid
 * goes. */
static void
helper_release_slot(struct helper *h)
{
	struct helper	*next;

	if (!h->slot)
		return;
	h->slot = 0;
	TAILQ_FOREACH(next, &helpers, entry) {
		if (next->queued && next->client == h->client)
			break;
	}
	if (next != NULL)
		helper_go(next);
}

/* Make a helper and ask for it (a background one may queue first). */
static struct helper *
helper_create(uid_t client, gid_t gid, const char *verb, json_t *args,
    const int *fds, size_t nfds, int background, helper_cb cb, void *arg,
    const char **class, char **err)
{
	struct helper	*h;
	struct pool	*p;
	char		*text;
	size_t		 i, len;
	int		 v;

	*class = "INTERNAL";
	if (nfds > HELPER_MAX_FDS)
		fatalx("helper %s: %zu descriptors", verb, nfds);
	if ((p = pool_of_client(client, gid)) == NULL) {
		xasprintf(err, "uid %ld: no user to run its work as",
		    (long)client);
		return (NULL);
	}
	if (!fslink_running(pool_fslink(p)) &&
	    !fslink_restarting(pool_fslink(p))) {
		xasprintf(err, "uid %ld: its fork-server is not running now",
		    (long)client);
		return (NULL);
	}
	if (!background && limit_charge(client, LIMIT_HELPERS, 1,
	    err) == -1) {
		*class = "LIMIT_EXCEEDED";
		return (NULL);
	}
	h = xcalloc(1, sizeof *h);
	h->id = helper_next_id++;
	if (helper_next_id <= 0)
		helper_next_id = 1;
	h->client = client;
	h->fs = pool_fslink(p);
	h->pid = -1;
	h->verb = xstrdup(verb);
	if ((v = hmsg_verb_find(verb)) == -1)
		fatalx("helper: no verb %s", verb);
	h->verb_id = (enum hmsg_verb)v;
	h->max_reply = HELPER_MAX_REPLY;
	h->cb = cb;
	h->arg = arg;
	h->charged = !background;
	h->background = background;
	h->started_ms = ember_now_ms();
	TAILQ_INSERT_TAIL(&helpers, h, entry);
	for (i = 0; i < nfds; i++) {
		if ((h->fds_in[h->nin] = fcntl(fds[i], F_DUPFD_CLOEXEC,
		    3)) == -1) {
			xasprintf(err, "dup: %s", strerror(errno));
			helper_free(h);
			return (NULL);
		}
		h->nin++;
	}
	text = hmsg_request_encode(h->verb_id, args, &len);
	h->out = evbuffer_new();
	evbuffer_add_frame(h->out, text, len);
	free(text);
	if (background && helper_background_running(client) >=
	    HELPER_BACKGROUND_PER_UID) {
		h->queued = 1;
		log_debug("helper request %d: %s for uid %ld, queued", h->id,
		    verb, (long)client);
		return (h);
	}
	helper_go(h);
	log_debug("helper request %d: %s for uid %ld", h->id, verb,
	    (long)client);
	return (h);
}

struct helper *
helper_run_fds(uid_t client, gid_t gid, const char *verb, json_t *args,
    const int *fds, size_t nfds, helper_cb cb, void *arg,
    const char **class, char **err)
{
	return (helper_create(client, gid, verb, args, fds, nfds, 0, cb, arg,
	    class, err));
}

struct helper *
helper_run_background(uid_t client, gid_t gid, const char *verb,
    json_t *args, int fd_in, helper_cb cb, void *arg, const char **class,
    char **err)
{
	return (helper_create(client, gid, verb, args, &fd_in,
	    fd_in == -1 ? 0 : 1, 1, cb, arg, class, err));
}

void
helper_limit_reply(struct helper *h, size_t max)
{
	if (max < HELPER_MAX_REPLY)
		h->max_reply = (int32_t)max;
}

void
helper_cancel(struct helper *h)
{
	if (h == NULL || h->cb == NULL)
		return;
	log_debug("helper %ld (%s, uid %ld): cancelled", (long)h->pid, h->verb,
	    (long)h->client);
	helper_stop(h);
}

/* Kill a helper that answered but did not exit. */
static void
helper_linger_cb(evutil_socket_t fd, short events, void *arg)
{
	struct helper	*h = arg;

	(void)fd; (void)events;
	log_info("helper %ld (%s, uid %ld): answered %lldms ago and still "
	    "runs: killed", (long)h->pid, h->verb, (long)h->client,
	    (long long)ember_conf.daemon_helper_timeout);
	fslink_kill(h->fs, h->pid, SIGKILL);
}

/* It answered: its slot is free, and it has a while to exit. */
static void
helper_answered(struct helper *h)
{
	if (h->charged)
		limit_release(h->client, LIMIT_HELPERS, 1);
	h->charged = 0;
	helper_release_slot(h);
	helper_set_timer(h, helper_linger_cb);
}

/* The whole reply arrived: check its shape and answer the caller. */
static void
helper_answer(struct helper *h, size_t len)
{
	struct hmsg_reply reply;
	json_t		*msg;
	helper_cb	 cb = h->cb;
	void		*arg = h->arg;
	const char	*error;
	char		*err = NULL;
	int		 fds[HELPER_MAX_FDS];
	size_t		 nfds = 0;
	struct evbuffer	*in = channel_input(h->ch);

	if (hmsg_reply_decode(evbuffer_pullup(in, (ev_ssize_t)len), len,
	    h->verb_id, &msg, &reply, &error, &err) == -1) {
		json_decref(msg);
		helper_fail(h, "INTERNAL", "a malformed reply: %s", err);
		free(err);
		return;
	}
	if (error != NULL) {
		helper_fail(h, "INTERNAL", "it refused the request: %s",
		    error);
		json_decref(msg);
		return;
	}
	log_debug("helper %ld (%s, uid %ld): answered in %llums",
	    (long)h->pid, h->verb, (long)h->client,
	    (unsigned long long)(ember_now_ms() - h->started_ms));
	/* The callback's now. */
	while (nfds < HELPER_MAX_FDS && (fds[nfds] = channel_take_fd(h->ch)) !=
	    -1)
		nfds++;
	h->cb = NULL;
	helper_close(h);
	helper_answered(h);
	cb(&reply, fds, nfds, NULL, NULL, arg);
	json_decref(msg);
}

/* Look at what the helper sent: 0, or -1 after failing or answering. */
static int
helper_read(struct helper *h)
{
	struct evbuffer	*in = channel_input(h->ch);
	int32_t		 len;

	if (channel_fds_refused(h->ch) > 0) {
		helper_fail(h, "INTERNAL", "it passed too many descriptors");
		return (-1);
	}
	switch (channel_frame(h->ch, (size_t)h->max_reply, &len)) {
	case FRAME_INCOMPLETE:
		return (0);
	case FRAME_TOO_LARGE:
		break;
	case FRAME_OK:
		if (len <= 0)
			break;
		evbuffer_drain(in, 4);
		helper_answer(h, (size_t)len);
		return (-1);
	}
	helper_fail(h, "INTERNAL", "a reply of %d bytes", len);
	return (-1);
}

static void
helper_read_cb(void *arg)
{
	helper_read(arg);
}

/* Its end came before a whole reply. */
static void
helper_error_cb(void *arg, int error)
{
	struct helper	*h = arg;

	if (error == 0)
		helper_fail(h, HELPER_FAILED, "it exited without a reply");
	else
		helper_fail(h, HELPER_FAILED, "reading its reply: %s",
		    strerror(error));
}

/* Its channel, with the request (the descriptors ride on its first
 * bytes) on the way. */
static void
helper_open(struct helper *h, int fd)
{
	size_t	i;

	h->ch = channel_create(fd, HELPER_READ_HIGH, helper_read_cb, h);
	channel_accept_fds(h->ch, HELPER_MAX_FDS);
	channel_set_error_cb(h->ch, helper_error_cb);
	for (i = 0; i < h->nin; i++)
		channel_pass_fd(h->ch, h->fds_in[i]);
	while (h->nin > 0)
		closer_close(h->fds_in[--h->nin]);
	evbuffer_add_buffer(channel_output(h->ch), h->out);
	evbuffer_free(h->out);
	h->out = NULL;
	channel_flush(h->ch);
}

/* The fork-server forked the helper of request. */
static void
helper_forked(struct fslink *fs, int32_t request, pid_t pid, int fd,
    int32_t gen)
{
	struct helper	*h = helper_find(fs, request);

	(void)gen;
	if (h == NULL || h->pid != -1) {
		log_error("fork-server sent helper %ld for request %d, which "
		    "is not waiting", (long)pid, request);
		closer_close_drained(fd);
		fslink_kill(fs, pid, SIGKILL);
		return;
	}
	h->pid = pid;
	if (h->cb == NULL) {		/* cancelled meanwhile */
		closer_close_drained(fd);
		fslink_kill(fs, pid, SIGKILL);
		return;
	}
	helper_open(h, fd);
	log_debug("helper %ld started for request %d (%s, uid %ld)", (long)pid,
	    request, h->verb, (long)h->client);
}

/* The fork-server could not fork the helper of request. */
static void
helper_fork_failed(struct fslink *fs, int32_t request, int error)
{
	struct helper	*h = helper_find(fs, request);

	if (h == NULL || h->pid != -1) {
		log_error("fork-server failed helper request %d, which is not "
		    "waiting", request);
		return;
	}
	if (h->cb != NULL)
		helper_fail(h, HELPER_FAILED, "the fork-server could not "
		    "fork it: %s", strerror(error));
	helper_free(h);
}

/* A child of the fork-server exited: 1 if it was a helper. */
static int
helper_exited(struct fslink *fs, pid_t pid, int status)
{
	struct helper	*h;
	char		 how[96];
	int		 turns = HELPER_MAX_REPLY / HELPER_READ_HIGH + 2;
	size_t		 len;

	TAILQ_FOREACH(h, &helpers, entry) {
		if (h->fs == fs && h->pid == pid)
			break;
	}
	if (h == NULL)
		return (0);
	if (h->cb != NULL) {
		/* Its socket may still hold the reply: read it first; its
		 * end is told below, with how it exited. */
		if (h->ch != NULL)
			channel_set_error_cb(h->ch, NULL);
		while (h->ch != NULL && h->cb != NULL && turns-- > 0) {
			len = evbuffer_get_length(channel_input(h->ch));
			channel_read(h->ch);
			if (h->ch != NULL && evbuffer_get_length(
			    channel_input(h->ch)) == len)
				break;
		}
	}
	if (h->cb != NULL) {
		log_describe_wait(status, how, sizeof how);
		helper_fail(h, HELPER_FAILED, "it %s without a reply", how);
	}
	helper_free(h);
	return (1);
}

/* A fork-server exited: its helpers are gone, their requests fail; with
 * restarting, those not forked yet wait for the next one. */
static void
helper_lost(struct fslink *fs, const char *why, int restarting,
    int before_hello)
{
	struct helper	*h, *next;

	(void)before_hello;
	TAILQ_FOREACH_SAFE(h, &helpers, entry, next) {
		if (h->fs != fs)
			continue;
		/* Not forked yet: it did nothing, and waits for the next. */
		if (restarting && h->pid == -1 && h->cb != NULL) {
			h->sent = 0;
			continue;
		}
		if (h->cb != NULL) {
			h->sent = 1;	/* freed here */
			helper_fail(h, HELPER_FAILED, "%s", why);
		}
		if (h->sent)
			helper_free(h);
	}
}

/* A fork-server (re)started: ask it for the helpers waiting. */
static void
helper_forkserver_ready(struct fslink *fs)
{
	struct helper	*h;

	TAILQ_FOREACH(h, &helpers, entry) {
		if (h->fs != fs || h->sent || h->queued)
			continue;
		if (fslink_helper(fs, h->id) == 0)
			h->sent = 1;
	}
}

/* What a fork-server tells helper.c (fslink.h). */
static const struct fslink_peer helper_fslink_peer = {
	.ready = helper_forkserver_ready,
	.forked = helper_forked,
	.fork_failed = helper_fork_failed,
	.exited = helper_exited,
	.lost = helper_lost,
};

void
helper_init(void)
{
	fslink_add_peer(FSLINK_HELPERS, &helper_fslink_peer);
}

void
helper_shutdown(void)
{
	struct helper	*h;

	while ((h = TAILQ_FIRST(&helpers)) != NULL) {
		h->cb = NULL;
		helper_free(h);
	}
}

json_int_t
helper_count(uid_t uid)
{
	struct helper	*h;
	json_int_t	 n = 0;

	TAILQ_FOREACH(h, &helpers, entry) {
		if (uid == 0 || h->client == uid)
			n++;
	}
	return (n);
}
