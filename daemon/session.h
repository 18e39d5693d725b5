/*
 * Sessions: bound to the peer uid that said hello.  A session owns its
 * operations and broadcasts; another uid cannot see or resume it.  It
 * outlives the connection that made it: a later hello of the same uid with
 * its id resumes it, and one left with no connection for session.timeout
 * is closed (session_expire), interrupting what it owns.
 */
#ifndef EMBER_SESSION_H
#define EMBER_SESSION_H

#include <sys/types.h>

#include <stdint.h>

#include <jansson.h>

struct session;
struct operation;

/* A new session for the peer uid:gid, held by the calling connection;
 * NULL with *err (allocated) past daemon.max_sessions_per_uid or
 * daemon.max_sessions, when none of the uid's sessions is idle. */
struct session	*session_create(uid_t, gid_t, char **err);
/* The open session with id if uid owns it, now held by one more
 * connection; else NULL. */
struct session	*session_resume(const char *id, uid_t);
/* A connection lets go of the session. */
void		 session_release(struct session *);
/* End a session now: interrupt its operations, drop its broadcasts
 * (close_session, expiry, exit). */
void		 session_close(struct session *, const char *why);
int		 session_closed(const struct session *);
/* Close the sessions with no connection for session.timeout. */
void		 session_expire(uint64_t now_ms);
/* When the next session without a connection expires, or UINT64_MAX. */
uint64_t	 session_next_expiry(void);
/* Close every session (exit). */
void		 session_close_all(void);

const char	*session_id(const struct session *);
uid_t		 session_uid(const struct session *);
gid_t		 session_gid(const struct session *);
void		 session_add_operation(struct session *, struct operation *);
void		 session_remove_operation(struct session *, struct operation *);

/* The user the jobs of client uid:gid run as: the client when emberd is
 * root, workers.root_user for root itself; emberd's user otherwise.  -1
 * (logged) if root's jobs have no one to run as. */
int		 session_job_user(uid_t, gid_t, uid_t *, gid_t *);
/*
 * msg with, if it tells of a permission denied (EACCES, EPERM), whose
 * rights failed: "... Permission denied (the job ran as alice) ...", and
 * for root's jobs workers.root_user.  NULL if it tells of none, or says
 * so already.
 */
char		*session_explain_denied(uid_t client, const char *msg);

/* Sessions visible to uid (root sees all), for status. */
json_t		*session_status(uid_t);
/* Sessions held, everyone's. */
size_t		 session_count(void);

#endif
