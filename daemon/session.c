#include "queue.h"

#include <errno.h>
#include <pwd.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include <uuid/uuid.h>

#include "broadcast.h"
#include "checkpoint.h"
#include "emberd.h"
#include "limit.h"
#include "log.h"
#include "operation.h"
#include "session.h"
#include "userdb.h"
#include "xmalloc.h"

/*
 * A session stays in the list until it is closed; it is freed once closed
 * and no longer held (by a connection that still points at it, or by an
 * operation that is ending).
 */
struct session {
	char			 id[37];
	uid_t			 uid;
	gid_t			 gid;
	int			 connections;	/* connections using it */
	size_t			 noperations;
	int			 closed;
	uint64_t		 created_ms;
	uint64_t		 idle_ms;	/* when the last connection went */
	TAILQ_ENTRY(session)	 entry;
};
static TAILQ_HEAD(, session) sessions = TAILQ_HEAD_INITIALIZER(sessions);

/* The session of uid that has had no connection the longest, or NULL. */
static struct session *
session_idlest(uid_t uid)
{
	struct session	*s, *best = NULL;

	TAILQ_FOREACH(s, &sessions, entry) {
		if (s->uid == uid && s->connections == 0 &&
		    (best == NULL || s->idle_ms < best->idle_ms))
			best = s;
	}
	return (best);
}

/*
 * Count a new session of uid in daemon.max_sessions*: 0, or -1 with *err.
 * A client that leaves without close_session leaves its session open
 * for session.timeout, so at the bound the uid's session idle the longest
 * is closed to make room: its own, never another uid's.
 */
static int
session_charge(uid_t uid, char **err)
{
	struct session	*idlest;

	/* More than one when the bound was lowered (SIGHUP) below what
	 * the uid holds. */
	while (limit_charge(uid, LIMIT_SESSIONS, 1, err) == -1) {
		if ((idlest = session_idlest(uid)) == NULL)
			return (-1);
		log_info("session %s closed to make room: %s", idlest->id,
		    *err);
		free(*err);
		session_close(idlest, "closed to make room for a new session "
		    "of its uid");
	}
	return (0);
}

struct session *
session_create(uid_t uid, gid_t gid, char **err)
{
	struct session	*s;
	uuid_t		 u;

	if (session_charge(uid, err) == -1)
		return (NULL);
	s = xcalloc(1, sizeof *s);
	uuid_generate(u);
	uuid_unparse_lower(u, s->id);
	s->uid = uid;
	s->gid = gid;
	s->connections = 1;
	s->created_ms = ember_now_ms();
	TAILQ_INSERT_TAIL(&sessions, s, entry);
	log_debug("session %s created for uid %ld", s->id, (long)uid);
	return (s);
}

struct session *
session_resume(const char *id, uid_t uid)
{
	struct session	*s;

	TAILQ_FOREACH(s, &sessions, entry) {
		if (s->uid == uid && !s->closed && strcmp(s->id, id) == 0) {
			s->connections++;
			log_debug("session %s resumed", s->id);
			return (s);
		}
	}
	return (NULL);
}

/* Free a closed session nobody holds any more. */
static void
session_free_unheld(struct session *s)
{
	if (!s->closed || s->connections > 0 || s->noperations > 0)
		return;
	log_debug("session %s freed", s->id);
	free(s);
}

void
session_release(struct session *s)
{
	if (--s->connections > 0)
		return;
	s->idle_ms = ember_now_ms();
	if (!s->closed && ember_conf.session_timeout == 0) {
		/* It frees s if its operations ended at once. */
		session_close(s, "its last connection closed");
		return;
	}
	if (!s->closed)
		operation_maintenance_due(s->idle_ms +
		    (uint64_t)ember_conf.session_timeout);
	session_free_unheld(s);
}

void
session_close(struct session *s, const char *why)
{
	if (s->closed)
		return;
	log_debug("session %s closed: %s", s->id, why);
	s->closed = 1;
	TAILQ_REMOVE(&sessions, s, entry);
	limit_release(s->uid, LIMIT_SESSIONS, 1);
	/* Held while its operations end, so that s outlives the loop. */
	s->connections++;
	operation_interrupt_session(s, why);
	broadcast_drop_session(s);
	checkpoint_drop_session(s);
	s->connections--;
	session_free_unheld(s);
}

int
session_closed(const struct session *s)
{
	return (s->closed);
}

void
session_expire(uint64_t now)
{
	struct session	*s, *next;
	uint64_t	 timeout = (uint64_t)ember_conf.session_timeout;

	TAILQ_FOREACH_SAFE(s, &sessions, entry, next) {
		if (s->connections == 0 && now - s->idle_ms >= timeout)
			session_close(s, "session expired");
	}
}

uint64_t
session_next_expiry(void)
{
	struct session	*s;
	uint64_t	 due = UINT64_MAX;

	TAILQ_FOREACH(s, &sessions, entry) {
		if (s->connections == 0 && s->idle_ms < due)
			due = s->idle_ms;
	}
	if (due != UINT64_MAX)
		due += (uint64_t)ember_conf.session_timeout;
	return (due);
}

void
session_close_all(void)
{
	struct session	*s;

	while ((s = TAILQ_FIRST(&sessions)) != NULL)
		session_close(s, "emberd is shutting down");
}

const char *
session_id(const struct session *s)
{
	return (s->id);
}

uid_t
session_uid(const struct session *s)
{
	return (s->uid);
}

gid_t
session_gid(const struct session *s)
{
	return (s->gid);
}

void
session_add_operation(struct session *s, struct operation *op)
{
	(void)op;
	s->noperations++;
}

void
session_remove_operation(struct session *s, struct operation *op)
{
	(void)op;
	s->noperations--;
	session_free_unheld(s);
}

size_t
session_count(void)
{
	struct session	*s;
	size_t		 n = 0;

	TAILQ_FOREACH(s, &sessions, entry)
		n++;
	return (n);
}

json_t *
session_status(uid_t uid)
{
	json_t		*a = json_array();
	struct session	*s;
	uint64_t	 now = ember_now_ms();

	TAILQ_FOREACH(s, &sessions, entry) {
		if (uid != 0 && s->uid != uid)
			continue;
		json_array_append_new(a, json_pack("{s:s,s:I,s:i,s:I,s:I,s:I}",
		    "id", s->id, "uid", (json_int_t)s->uid,
		    "connections", s->connections,
		    "operations", (json_int_t)s->noperations,
		    "age_ms", (json_int_t)(now - s->created_ms),
		    "idle_ms", (json_int_t)(s->connections > 0 ? 0 :
		    now - s->idle_ms)));
	}
	return (a);
}

/* The user a client's jobs run as: itself, never root. */
int
session_job_user(uid_t client, gid_t client_gid, uid_t *uid, gid_t *gid)
{
	const struct userdb_user	*pw;

	if (geteuid() != 0) {
		*uid = getuid();
		*gid = getgid();
		return (0);
	}
	/* Cached: a client's hello waited for its user (connection.c). */
	if (client == 0)
		pw = userdb_name_now(ember_conf.workers_root_user);
	else
		pw = userdb_uid_now(client);
	if (pw == NULL && client != 0) {
		/* A uid without a name still runs as itself. */
		*uid = client;
		*gid = client_gid;
		return (0);
	}
	if (pw == NULL || pw->uid == 0) {
		log_error("workers.root_user: \"%s\" is %s",
		    ember_conf.workers_root_user, pw == NULL ? "no user" :
		    "root, and a job never runs as root");
		return (-1);
	}
	*uid = pw->uid;
	*gid = pw->gid;
	return (0);
}

/* Whose rights a job of client had: "alice", "uid 61234", and for root
 * or emberd's own user, where that user comes from. */
static char *
session_job_whom(uid_t client)
{
	const struct userdb_user	*pw = NULL;
	char				*whom;
	uid_t				 uid = client;
	const char			*why = "";

	if (geteuid() != 0) {
		uid = getuid();
		why = ", emberd's own user";
	} else if (client == 0) {
		xasprintf(&whom, "%s (workers.root_user): emberd never runs "
		    "a job as root", ember_conf.workers_root_user);
		return (whom);
	}
	/* The cached entry, as session_job_user found it; never a lookup
	 * on the loop. */
	if (userdb_uid(uid, &pw) == 1 && pw != NULL)
		xasprintf(&whom, "%s%s", pw->name, why);
	else
		xasprintf(&whom, "uid %ld%s", (long)uid, why);
	return (whom);
}

char *
session_explain_denied(uid_t client, const char *msg)
{
	static const int	 errors[] = { EACCES, EPERM };
	const char		*at = NULL, *text;
	char			*whom, *out;
	size_t			 i, len = 0;

	if (strstr(msg, " (the job ran as ") != NULL)
		return (NULL);
	for (i = 0; i < sizeof errors / sizeof errors[0] && at == NULL; i++) {
		text = strerror(errors[i]);
		if ((at = strstr(msg, text)) != NULL)
			len = strlen(text);
	}
	if (at == NULL)
		return (NULL);
	whom = session_job_whom(client);
	/* Right after the error, so that a cut message keeps it. */
	at += len;
	xasprintf(&out, "%.*s (the job ran as %s)%s", (int)(at - msg), msg,
	    whom, at);
	free(whom);
	return (out);
}
