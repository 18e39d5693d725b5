/*
 * Sessions: bound to the peer uid that said hello.  A session owns its
 * operations; another uid cannot see or resume it.  A session lives while a
 * connection holds it; the last one to let go interrupts what it owns.
 */
#ifndef EMBER_SESSION_H
#define EMBER_SESSION_H

#include <sys/types.h>

#include <jansson.h>

struct session;
struct operation;

/* A new session for the peer uid:gid, held once by the caller. */
struct session	*session_create(uid_t, gid_t);
/* The session with id if uid owns it (held once more), else NULL. */
struct session	*session_resume(const char *id, uid_t);
void		 session_release(struct session *);
/* End a session now: interrupt its operations (close_session). */
void		 session_close(struct session *);

const char	*session_id(const struct session *);
uid_t		 session_uid(const struct session *);
gid_t		 session_gid(const struct session *);
void		 session_add_operation(struct session *, struct operation *);
void		 session_remove_operation(struct session *, struct operation *);

/* The user the jobs of client uid:gid run as: the client when emberd is
 * root, workers.root_user for root itself; emberd's user otherwise.  -1
 * (logged) if root's jobs have no one to run as. */
int		 session_job_user(uid_t, gid_t, uid_t *, gid_t *);

/* Sessions visible to uid (root sees all), for status. */
json_t		*session_status(uid_t);

#endif
