#include <sys/mman.h>
#include <sys/stat.h>

#include <errno.h>
#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "broadcast.h"
#include "closer.h"
#include "pypreload.h"
#include "emberd.h"
#include "helper.h"
#include "limit.h"
#include "log.h"
#include "pool.h"
#include "queue.h"
#include "session.h"
#include "worker.h"
#include "xmalloc.h"

/*
 * A broadcast's bytes live in a memfd of emberd's: no name anywhere, so
 * nothing a user plants can be opened in its place, and sealed once
 * complete (no write, no shrink, no growth), so the bytes every worker
 * maps never change.  Workers get the descriptor, never a path.
 */
struct broadcast {
	int64_t			 id;
	struct session		*session;	/* NULL once dropped */
	uid_t			 uid;		/* its session's */
	gid_t			 gid;
	int64_t			 charged;	/* daemon.max_broadcast_bytes */
	int			 fd;		/* the memfd */
	int64_t			 size, written;
	int			 ifd;		/* its index's, or -1 */
	int64_t			 isize;
	int			 sealed;
	int			 no_index;	/* put without one */
	int			 users;		/* operations using it */
	struct helper		*reading;	/* a passed descriptor, or
						   the index being built */
	broadcast_read_cb	 read_cb;
	void			*read_arg;
	TAILQ_ENTRY(broadcast)	 entry;
};
static TAILQ_HEAD(, broadcast) broadcasts = TAILQ_HEAD_INITIALIZER(broadcasts);

/* A memfd this big is freed by a helper, not on emberd's loop. */
#define BROADCAST_FREE_AWAY	(16 * 1024 * 1024)
static int64_t	broadcast_next_id;

/* A helper took the last reference of a big memfd: nothing to do. */
static void
broadcast_released_cb(const struct hmsg_reply *reply, int *fds,
    size_t nfds, const char *class, const char *err, void *arg)
{
	(void)reply; (void)class; (void)err; (void)arg;
	while (nfds > 0)
		closer_close_drained(fds[--nfds]);
}

/*
 * Close a broadcast's memfd.  The last close frees its pages, which for a
 * big one takes a while (a second for a GiB): a helper of its user takes
 * that reference and frees them off the loop.  If none can run, emberd
 * frees them itself.
 */
static void
broadcast_close(struct broadcast *b)
{
	const char	*class;
	char		*err;
	json_t		*args;
	int		 fds[2] = { b->fd, b->ifd };

	if (b->written + b->isize >= BROADCAST_FREE_AWAY) {
		args = json_object();
		if (helper_run_fds(b->uid, b->gid, "release", args, fds,
		    b->ifd == -1 ? 1 : 2, broadcast_released_cb, NULL, &class,
		    &err) == NULL) {
			log_info("broadcast %lld: freed by emberd: %s",
			    (long long)b->id, err);
			free(err);
		}
		json_decref(args);
	}
	close(b->fd);
	b->fd = -1;
	if (b->ifd != -1)
		close(b->ifd);
	b->ifd = -1;
}

/* Remove the file and forget the broadcast. */
static void
broadcast_free(struct broadcast *b)
{
	helper_cancel(b->reading);
	if (b->fd != -1)
		broadcast_close(b);
	limit_release(b->uid, LIMIT_BROADCASTS, 1);
	if (b->charged > 0)
		limit_release(b->uid, LIMIT_BROADCAST_BYTES, b->charged);
	TAILQ_REMOVE(&broadcasts, b, entry);
	/* Its object, if a fork-server loaded one, goes too, and the
	 * workers waiting with it mapped let it go. */
	pypreload_forget(b->id);
	worker_drop_broadcast(b->id);
	log_debug("broadcast %lld freed", (long long)b->id);
	free(b);
}

/* Hold size bytes against the uid's and everyone's broadcast bytes. */
static int
broadcast_charge(struct broadcast *b, int64_t size, const char **class,
    char **err)
{
	if (limit_charge(b->uid, LIMIT_BROADCAST_BYTES, size, err) == -1) {
		*class = "LIMIT_EXCEEDED";
		return (-1);
	}
	b->charged += size;
	return (0);
}

struct broadcast *
broadcast_create(struct session *s, int64_t size, const char **class,
    char **err)
{
	struct broadcast	*b;
	char			 name[64];

	*class = "REQUEST_INVALID";
	if (size < 0 || size > ember_conf.daemon_max_broadcast) {
		xasprintf(err, "size: must be from 0 to daemon.max_broadcast "
		    "(%lld)", (long long)ember_conf.daemon_max_broadcast);
		return (NULL);
	}
	if (limit_charge(session_uid(s), LIMIT_BROADCASTS, 1, err) == -1) {
		*class = "LIMIT_EXCEEDED";
		return (NULL);
	}
	b = xcalloc(1, sizeof *b);
	b->uid = session_uid(s);
	if (size > 0 && broadcast_charge(b, size, class, err) == -1) {
		limit_release(b->uid, LIMIT_BROADCASTS, 1);
		free(b);
		return (NULL);
	}
	b->id = broadcast_next_id++;
	b->session = s;
	b->gid = session_gid(s);
	b->size = size;
	b->ifd = -1;
	snprintf(name, sizeof name, "ember-broadcast-%lld", (long long)b->id);
	b->fd = memfd_create(name, MFD_CLOEXEC | MFD_ALLOW_SEALING);
	if (b->fd == -1) {
		xasprintf(err, "memfd_create: %s", strerror(errno));
		*class = "INTERNAL";
		limit_release(b->uid, LIMIT_BROADCASTS, 1);
		if (b->charged > 0)
			limit_release(b->uid, LIMIT_BROADCAST_BYTES, b->charged);
		free(b);
		return (NULL);
	}
	TAILQ_INSERT_TAIL(&broadcasts, b, entry);
	return (b);
}

int
broadcast_write(struct broadcast *b, const void *data, size_t len,
    char **err)
{
	const char	*p = data;
	ssize_t		 n;

	if ((int64_t)len > b->size - b->written) {
		xasprintf(err, "more bytes than the %lld announced",
		    (long long)b->size);
		return (-1);
	}
	while (len > 0) {
		if ((n = write(b->fd, p, len)) == -1) {
			if (errno == EINTR)
				continue;
			xasprintf(err, "broadcast %lld: %s", (long long)b->id,
			    strerror(errno));
			return (-1);
		}
		p += n;
		len -= (size_t)n;
		b->written += n;
	}
	return (0);
}

/* The helper read the passed descriptor into the memfd, or could not. */
static void
broadcast_read_done_cb(const struct hmsg_reply *reply, int *fds,
    size_t nfds, const char *hclass, const char *herr, void *arg)
{
	struct broadcast	*b = arg;
	broadcast_read_cb	 cb = b->read_cb;
	struct stat		 st;
	const char		*class = "REQUEST_INVALID", *error;
	char			*err = NULL;
	json_int_t		 size;

	b->reading = NULL;
	while (nfds > 0)
		closer_close_drained(fds[--nfds]);
	if (hclass != NULL) {
		class = hclass;
		xasprintf(&err, "fd: reading it as uid %ld: %s", (long)b->uid,
		    herr);
		goto fail;
	}
	if ((error = reply->error) != NULL) {
		/* Over the uid's or everyone's bytes: the limit's own error,
		 * as for bytes sent in frames. */
		size = reply->u.broadcast_read.over;
		if (size > 0 && size <= ember_conf.daemon_max_broadcast &&
		    broadcast_charge(b, size, &class, &err) == -1)
			goto fail;
		if (b->charged > 0) {
			limit_release(b->uid, LIMIT_BROADCAST_BYTES,
			    b->charged);
			b->charged = 0;
		}
		class = "REQUEST_INVALID";
		xasprintf(&err, "fd: %s", error);
		goto fail;
	}
	size = reply->u.broadcast_read.size;
	/* What the memfd holds is what counts, not what the helper said. */
	if (fstat(b->fd, &st) == -1 || st.st_size != size || size < 0 ||
	    size > ember_conf.daemon_max_broadcast) {
		class = "INTERNAL";
		xasprintf(&err, "fd: the helper's copy does not add up");
		goto fail;
	}
	if (broadcast_charge(b, size, &class, &err) == -1)
		goto fail;
	b->size = b->written = size;
	cb(b, NULL, NULL, b->read_arg);
	return;
fail:
	cb(b, class, err, b->read_arg);
	free(err);
}

int
broadcast_read_fd(struct broadcast *b, int fd, broadcast_read_cb cb,
    void *arg, const char **class, char **err)
{
	json_t	*args;
	int64_t	 room;
	int	 fds[2] = { fd, b->fd };

	/* The helper refuses more than the broadcast may hold. */
	room = limit_room(b->uid, LIMIT_BROADCAST_BYTES);
	if (room > ember_conf.daemon_max_broadcast)
		room = ember_conf.daemon_max_broadcast;
	args = json_pack("{s:I,s:s}", "max", (json_int_t)room, "max_key",
	    room == ember_conf.daemon_max_broadcast ? "daemon.max_broadcast" :
	    "daemon.max_broadcast_bytes_per_uid or daemon.max_broadcast_bytes");
	b->read_cb = cb;
	b->read_arg = arg;
	b->reading = helper_run_fds(b->uid, b->gid, "broadcast_read", args,
	    fds, 2, broadcast_read_done_cb, b, class, err);
	json_decref(args);
	return (b->reading == NULL ? -1 : 0);
}

int64_t
broadcast_missing(const struct broadcast *b)
{
	return (b->size - b->written);
}

/* Seal a memfd against any change: 0, or -1 with errno. */
static int
broadcast_seal_fd(int fd)
{
	return (fcntl(fd, F_ADD_SEALS, F_SEAL_SHRINK | F_SEAL_GROW |
	    F_SEAL_WRITE | F_SEAL_SEAL));
}

/*
 * The broadcast is complete, with its index or without: usable, unless
 * its session was closed meanwhile.
 */
static void
broadcast_indexed(struct broadcast *b)
{
	if (b->isize == 0 && b->ifd != -1) {
		close(b->ifd);
		b->ifd = -1;
	}
	if (b->session == NULL) {
		b->read_cb(b, "REQUEST_INVALID", "its session was closed while "
		    "it was put", b->read_arg);
		return;
	}
	b->sealed = 1;
	b->read_cb(b, NULL, NULL, b->read_arg);
}

/*
 * Take the index a helper built: what the memfd holds is what counts,
 * sized, charged and sealed here (a user who kept a writable mapping of
 * it cannot have it sealed).  NULL, or why not (allocated).
 */
static char *
broadcast_index_take(struct broadcast *b,
    const struct hmsg_broadcast_index *reply)
{
	struct stat	 st;
	const char	*class;
	char		*err;
	json_int_t	 size;

	/* Sealed first, so that its size cannot change once read. */
	if (broadcast_seal_fd(b->ifd) == -1) {
		xasprintf(&err, "sealing it: %s", strerror(errno));
		return (err);
	}
	size = reply->size;
	if (fstat(b->ifd, &st) == -1 || st.st_size != size || size <= 0 ||
	    size > ember_conf.daemon_max_broadcast - b->size)
		return (xstrdup("the helper's does not add up"));
	if (broadcast_charge(b, size, &class, &err) == -1)
		return (err);
	b->isize = size;
	log_debug("broadcast %lld: %lld bytes, an index of %lld built in "
	    "%lld ms", (long long)b->id, (long long)b->size,
	    (long long)b->isize,
	    (long long)reply->ms);
	return (NULL);
}

/*
 * The helper built the index into its memfd, or could not.  The index
 * only saves the workers a build: one that would pass the broadcast
 * limits is not made, and one the helper could not make (killed, timed
 * out) or that does not hold is left out; the broadcast is complete
 * without it, each worker building its set.
 */
static void
broadcast_indexed_cb(const struct hmsg_reply *reply, int *fds, size_t nfds,
    const char *hclass, const char *herr, void *arg)
{
	struct broadcast	*b = arg;
	char			*why = NULL;

	b->reading = NULL;
	while (nfds > 0)
		closer_close_drained(fds[--nfds]);
	if (hclass != NULL)
		xasprintf(&why, "building it as uid %ld: %s", (long)b->uid,
		    herr);
	else if (reply->error != NULL)
		why = xstrdup(reply->error);
	else
		why = broadcast_index_take(b, &reply->u.broadcast_index);
	if (why != NULL) {
		log_info("broadcast %lld: no index: %s", (long long)b->id, why);
		free(why);
	}
	broadcast_indexed(b);
}

void
broadcast_skip_index(struct broadcast *b)
{
	b->no_index = 1;
}

/*
 * Seal the bytes and have a helper of the user build their index into a
 * memfd of emberd's, within what the broadcast may still hold; without a
 * helper to build it, the broadcast is complete without one at once.
 */
int
broadcast_seal(struct broadcast *b, broadcast_read_cb cb, void *arg,
    const char **class, char **err)
{
	struct stat	 st;
	json_t		*args;
	int64_t		 room;
	char		 name[64];
	int		 fds[2];

	*class = "INTERNAL";
	if (broadcast_seal_fd(b->fd) == -1) {
		xasprintf(err, "sealing its bytes: %s", strerror(errno));
		return (-1);
	}
	/* A helper wrote a passed descriptor's bytes as the user, who may
	 * have changed their size since it was read and charged. */
	if (fstat(b->fd, &st) == -1 || st.st_size != b->size) {
		*class = "REQUEST_INVALID";
		xasprintf(err, "its bytes changed while they were put");
		return (-1);
	}
	b->read_cb = cb;
	b->read_arg = arg;
	if (b->no_index) {
		broadcast_indexed(b);
		return (0);
	}
	snprintf(name, sizeof name, "ember-index-%lld", (long long)b->id);
	if ((b->ifd = memfd_create(name, MFD_CLOEXEC |
	    MFD_ALLOW_SEALING)) == -1) {
		xasprintf(err, "memfd_create: %s", strerror(errno));
		return (-1);
	}
	room = limit_room(b->uid, LIMIT_BROADCAST_BYTES);
	if (room > ember_conf.daemon_max_broadcast - b->size)
		room = ember_conf.daemon_max_broadcast - b->size;
	args = json_pack("{s:I,s:s}", "max", (json_int_t)room, "max_key",
	    room == ember_conf.daemon_max_broadcast - b->size ?
	    "daemon.max_broadcast" :
	    "daemon.max_broadcast_bytes_per_uid or daemon.max_broadcast_bytes");
	fds[0] = b->fd;
	fds[1] = b->ifd;
	b->reading = helper_run_fds(b->uid, b->gid, "broadcast_index", args,
	    fds, 2, broadcast_indexed_cb, b, class, err);
	json_decref(args);
	if (b->reading == NULL) {
		/* No helper now (the uid's are all busy, say): no index. */
		log_info("broadcast %lld: no index: %s", (long long)b->id,
		    *err);
		free(*err);
		broadcast_indexed(b);
	}
	return (0);
}

void
broadcast_abandon(struct broadcast *b)
{
	broadcast_free(b);
}

int64_t
broadcast_id(const struct broadcast *b)
{
	return (b->id);
}

int
broadcast_fd(const struct broadcast *b)
{
	return (b->fd);
}

int64_t
broadcast_size(const struct broadcast *b)
{
	return (b->size);
}

int
broadcast_index_fd(const struct broadcast *b)
{
	return (b->ifd);
}

int64_t
broadcast_index_size(const struct broadcast *b)
{
	return (b->isize);
}

struct broadcast *
broadcast_find(struct session *s, int64_t id)
{
	struct broadcast	*b;

	TAILQ_FOREACH(b, &broadcasts, entry) {
		if (b->id == id && b->session == s && b->sealed)
			return (b);
	}
	return (NULL);
}

void
broadcast_use(struct broadcast *b)
{
	b->users++;
}

void
broadcast_unuse(struct broadcast *b)
{
	if (--b->users == 0 && b->session == NULL)
		broadcast_free(b);
}

/* Detach a broadcast from its session; free it once nothing uses it. */
static void
broadcast_release(struct broadcast *b)
{
	b->session = NULL;
	if (b->users == 0)
		broadcast_free(b);
}

int
broadcast_drop(struct session *s, int64_t id)
{
	struct broadcast	*b;

	if ((b = broadcast_find(s, id)) == NULL)
		return (-1);
	broadcast_release(b);
	return (0);
}

void
broadcast_drop_session(struct session *s)
{
	struct broadcast	*b, *next;

	TAILQ_FOREACH_SAFE(b, &broadcasts, entry, next) {
		if (b->session != s)
			continue;
		if (b->sealed)
			broadcast_release(b);
		else
			b->session = NULL;	/* its upload ends it */
	}
}

json_t *
broadcast_status(uid_t uid)
{
	json_t			*a = json_array();
	struct broadcast	*b;

	TAILQ_FOREACH(b, &broadcasts, entry) {
		if (b->session == NULL ||
		    (uid != 0 && session_uid(b->session) != uid))
			continue;
		json_array_append_new(a, json_pack("{s:I,s:s,s:I,s:I,s:i,s:b}",
		    "id", (json_int_t)b->id, "session", session_id(b->session),
		    "size", (json_int_t)b->size, "index",
		    (json_int_t)b->isize, "operations", b->users,
		    "complete", b->sealed));
	}
	return (a);
}
