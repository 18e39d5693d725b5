#include <sys/stat.h>

#include <errno.h>
#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "broadcast.h"
#include "emberd.h"
#include "limit.h"
#include "localdir.h"
#include "log.h"
#include "pool.h"
#include "queue.h"
#include "session.h"
#include "xmalloc.h"

struct broadcast {
	int64_t			 id;
	struct session		*session;	/* NULL once dropped */
	uid_t			 uid;		/* its session's */
	int64_t			 charged;	/* daemon.max_broadcast_bytes */
	char			*name;		/* in the local directory */
	char			*path;
	int			 fd;		/* while uploading */
	int64_t			 size, written;
	int			 sealed;
	int			 users;		/* operations using it */
	TAILQ_ENTRY(broadcast)	 entry;
};
static TAILQ_HEAD(, broadcast) broadcasts = TAILQ_HEAD_INITIALIZER(broadcasts);
static int64_t	broadcast_next_id;

/* Remove the file and forget the broadcast. */
static void
broadcast_free(struct broadcast *b)
{
	if (b->fd != -1)
		close(b->fd);
	localdir_unlink(b->name);
	limit_release(b->uid, LIMIT_BROADCASTS, 1);
	if (b->charged > 0)
		limit_release(b->uid, LIMIT_BROADCAST_BYTES, b->charged);
	TAILQ_REMOVE(&broadcasts, b, entry);
	log_debug("broadcast %lld freed", (long long)b->id);
	free(b->name);
	free(b->path);
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
	b->charged = size;
	return (0);
}

struct broadcast *
broadcast_create(struct session *s, int64_t size, const char **class,
    char **err)
{
	struct broadcast	*b;
	uid_t			 uid;
	gid_t			 gid;

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
	b->size = size;
	xasprintf(&b->name, "broadcast-%lld", (long long)b->id);
	xasprintf(&b->path, "%s/%s", ember_local_dir(), b->name);
	/* A name of emberd's own, in its own directory: never one that was
	 * there already, never through a link. */
	b->fd = localdir_create(b->name, O_WRONLY, 0600);
	if (b->fd == -1) {
		xasprintf(err, "%s: %s", b->path, strerror(errno));
		*class = "INTERNAL";
		limit_release(b->uid, LIMIT_BROADCASTS, 1);
		if (b->charged > 0)
			limit_release(b->uid, LIMIT_BROADCAST_BYTES, b->charged);
		free(b->name);
		free(b->path);
		free(b);
		return (NULL);
	}
	/* Workers run as the job's user: it must be able to map the file,
	 * and nobody else read it. */
	if (geteuid() == 0 && session_job_user(session_uid(s), session_gid(s),
	    &uid, &gid) == 0 && fchown(b->fd, uid, gid) == -1)
		log_warn("chown %s: %s", b->path, strerror(errno));
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
			xasprintf(err, "%s: %s", b->path, strerror(errno));
			return (-1);
		}
		p += n;
		len -= (size_t)n;
		b->written += n;
	}
	return (0);
}

/* Copy the rest with pread and write, where copy_file_range cannot. */
static int
broadcast_copy_read(struct broadcast *b, int fd, off_t off, char **err)
{
	char	buf[64 * 1024];
	ssize_t	n;

	while (b->written < b->size) {
		n = pread(fd, buf, sizeof buf, off);
		if (n == -1 && errno == EINTR)
			continue;
		if (n <= 0) {
			xasprintf(err, "fd: %s", n == 0 ? "shorter than it was" :
			    strerror(errno));
			return (-1);
		}
		if (broadcast_write(b, buf, (size_t)n, err) == -1)
			return (-1);
		off += n;
	}
	return (0);
}

int
broadcast_copy_fd(struct broadcast *b, int fd, const char **class,
    char **err)
{
	struct stat	st;
	ssize_t		n;
	loff_t		off = 0;

	*class = "REQUEST_INVALID";
	if (fstat(fd, &st) == -1 || !S_ISREG(st.st_mode)) {
		xasprintf(err, "fd: not a regular file");
		return (-1);
	}
	if (st.st_size > ember_conf.daemon_max_broadcast) {
		xasprintf(err, "fd: %lld bytes, over daemon.max_broadcast",
		    (long long)st.st_size);
		return (-1);
	}
	if (broadcast_charge(b, st.st_size, class, err) == -1)
		return (-1);
	b->size = st.st_size;
	/* The kernel copies: the bytes never cross the client's socket.  An
	 * explicit offset leaves the client's file position alone. */
	while (b->written < b->size) {
		n = copy_file_range(fd, &off, b->fd, NULL,
		    (size_t)(b->size - b->written), 0);
		if (n == -1 && errno == EINTR)
			continue;
		if (n == -1 && (errno == EXDEV || errno == EINVAL ||
		    errno == ENOSYS || errno == EOPNOTSUPP))
			return (broadcast_copy_read(b, fd, off, err));
		if (n <= 0) {
			xasprintf(err, "fd: %s", n == 0 ? "shorter than it was" :
			    strerror(errno));
			return (-1);
		}
		b->written += n;
	}
	return (0);
}

int64_t
broadcast_missing(const struct broadcast *b)
{
	return (b->size - b->written);
}

void
broadcast_seal(struct broadcast *b)
{
	close(b->fd);
	b->fd = -1;
	b->sealed = 1;
	log_debug("broadcast %lld: %lld bytes", (long long)b->id,
	    (long long)b->size);
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

const char *
broadcast_path(const struct broadcast *b)
{
	return (b->path);
}

int64_t
broadcast_size(const struct broadcast *b)
{
	return (b->size);
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
		json_array_append_new(a, json_pack("{s:I,s:s,s:I,s:i,s:b}",
		    "id", (json_int_t)b->id, "session", session_id(b->session),
		    "size", (json_int_t)b->size, "operations", b->users,
		    "complete", b->sealed));
	}
	return (a);
}
