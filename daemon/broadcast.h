/*
 * Broadcasts: bytes a client uploads once, kept in a sealed memfd of
 * emberd's that every worker maps read-only (passed with the task
 * descriptor), so a broadcast costs one copy however many tasks use it.  A broadcast belongs to its session; dropping
 * it (or closing the session) makes it unusable for new plans, and its file
 * goes when no running operation uses it any more.
 */
#ifndef EMBER_BROADCAST_H
#define EMBER_BROADCAST_H

#include <sys/types.h>

#include <stddef.h>
#include <stdint.h>

#include <jansson.h>

struct broadcast;
struct session;

/*
 * Start an upload of size bytes: a file to write them into.  On error
 * *class is the error class for the client: REQUEST_INVALID, or
 * LIMIT_EXCEEDED when the uid's broadcasts (count or bytes) or everyone's
 * would pass their bound.
 */
struct broadcast	*broadcast_create(struct session *, int64_t size,
			     const char **class, char **err);
/* Append uploaded bytes; -1 with *err on a write error. */
int			 broadcast_write(struct broadcast *, const void *, size_t,
			     char **err);
/*
 * Take the whole file behind fd (passed by the client) as the bytes: a
 * helper reads it as the user, off the loop, into the broadcast's memfd
 * (fd is duplicated: the caller closes its own).  cb says how it went
 * (class NULL: the bytes are in; else class and err), unless the
 * broadcast is abandoned first.  -1 with *class and *err if it cannot
 * start.
 */
typedef void		(*broadcast_read_cb)(struct broadcast *,
			     const char *class, const char *err, void *arg);
int			 broadcast_read_fd(struct broadcast *, int fd,
			     broadcast_read_cb, void *arg, const char **class,
			     char **err);
/* How many bytes the upload still expects. */
int64_t			 broadcast_missing(const struct broadcast *);
/* Put it without its set index: broadcast_seal makes none. */
void			 broadcast_skip_index(struct broadcast *);
/*
 * The upload is complete: seal its bytes and have a helper, as the user
 * and off the loop, build their set index (common/bindex.h) into a memfd
 * of emberd's, charged with the bytes to the broadcast limits
 * (daemon.max_broadcast*); without one if it would pass them or no
 * helper could build it (cb may then be called before this returns).  cb says
 * how it went (class NULL: the broadcast can be used; else class and
 * err), unless the broadcast is abandoned first.  -1 with *class and *err if it cannot start.
 */
int			 broadcast_seal(struct broadcast *, broadcast_read_cb,
			     void *arg, const char **class, char **err);
/* Give up an upload (the client went away or sent too much). */
void			 broadcast_abandon(struct broadcast *);

int64_t			 broadcast_id(const struct broadcast *);
/* Its memfd, sealed once complete: what workers map. */
int			 broadcast_fd(const struct broadcast *);
int64_t			 broadcast_size(const struct broadcast *);
/* Its index's memfd and size, sealed, that workers map with the bytes. */
int			 broadcast_index_fd(const struct broadcast *);
int64_t			 broadcast_index_size(const struct broadcast *);

/* A sealed broadcast of the session's, or NULL. */
struct broadcast	*broadcast_find(struct session *, int64_t id);
/* An operation uses it until broadcast_unuse. */
void			 broadcast_use(struct broadcast *);
void			 broadcast_unuse(struct broadcast *);
/* broadcast_drop: 0, or -1 if the session has no such broadcast. */
int			 broadcast_drop(struct session *, int64_t id);
void			 broadcast_drop_session(struct session *);

json_t			*broadcast_status(uid_t);

#endif
