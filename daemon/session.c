#include "queue.h"

#include <pwd.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include <uuid/uuid.h>

#include "broadcast.h"
#include "emberd.h"
#include "log.h"
#include "operation.h"
#include "session.h"
#include "xmalloc.h"

struct session {
	char			 id[37];
	uid_t			 uid;
	gid_t			 gid;
	int			 holds;		/* connections using it */
	int			 closed;
	uint64_t		 created_ms;
	size_t			 noperations;
	TAILQ_ENTRY(session)	 entry;
};
static TAILQ_HEAD(, session) sessions = TAILQ_HEAD_INITIALIZER(sessions);

struct session *
session_create(uid_t uid, gid_t gid)
{
	struct session	*s = xcalloc(1, sizeof *s);
	uuid_t		 u;

	uuid_generate(u);
	uuid_unparse_lower(u, s->id);
	s->uid = uid;
	s->gid = gid;
	s->holds = 1;
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
			s->holds++;
			return (s);
		}
	}
	return (NULL);
}

/* Free a session nobody holds (each operation holds its session). */
static void
session_free(struct session *s)
{
	broadcast_drop_session(s);
	TAILQ_REMOVE(&sessions, s, entry);
	log_debug("session %s freed", s->id);
	free(s);
}

void
session_release(struct session *s)
{
	if (--s->holds == 0)
		session_free(s);
}

void
session_close(struct session *s)
{
	s->closed = 1;
	operation_interrupt_session(s, "session closed");
	broadcast_drop_session(s);
	session_release(s);
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
	s->holds++;
}

void
session_remove_operation(struct session *s, struct operation *op)
{
	(void)op;
	s->noperations--;
	session_release(s);
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
		json_array_append_new(a, json_pack("{s:s,s:I,s:i,s:I,s:I}",
		    "id", s->id, "uid", (json_int_t)s->uid,
		    "connections", s->holds - (int)s->noperations,
		    "operations", (json_int_t)s->noperations,
		    "age_ms", (json_int_t)(now - s->created_ms)));
	}
	return (a);
}

/* The user a client's jobs run as: itself, never root. */
int
session_job_user(uid_t client, gid_t client_gid, uid_t *uid, gid_t *gid)
{
	struct passwd	*pw;

	if (geteuid() != 0) {
		*uid = getuid();
		*gid = getgid();
		return (0);
	}
	if (client == 0)
		pw = getpwnam(ember_conf.workers_root_user);
	else
		pw = getpwuid(client);
	if (pw == NULL && client != 0) {
		/* A uid without a name still runs as itself. */
		*uid = client;
		*gid = client_gid;
		return (0);
	}
	if (pw == NULL || pw->pw_uid == 0) {
		log_error("workers.root_user: \"%s\" is %s",
		    ember_conf.workers_root_user, pw == NULL ? "no user" :
		    "root, and a job never runs as root");
		return (-1);
	}
	*uid = pw->pw_uid;
	*gid = pw->pw_gid;
	return (0);
}
