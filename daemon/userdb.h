/*
 * Users' passwd entries, looked up off emberd's loop and kept.  A lookup
 * may take as long as LDAP or sssd take; emberd's loop never waits for
 * one: a resolver process of emberd's (forked at start, restarted if it
 * dies) does each lookup and answers, and the answers are cached, at most
 * USERDB_MAX of them, each looked up again when wanted past its age.
 * Whoever needs a user asks first (userdb_wait_*) and goes on when the
 * answer is in; a client's hello waits so, and what runs after it finds
 * its user cached.
 */
#ifndef EMBER_USERDB_H
#define EMBER_USERDB_H

#include <sys/types.h>

/* A passwd entry, as much of it as emberd uses. */
struct userdb_user {
	uid_t		 uid;
	gid_t		 gid;
	const char	*name;
	const char	*dir;		/* "" if too long to keep */
	const char	*shell;
};

struct userdb_wait;

/* Start the resolver (if it cannot be now, a second later, logged).
 * Until it answers, lookups wait for it. */
void		 userdb_start(void);
/* Stop the resolver, cancel the waits and forget every entry. */
void		 userdb_stop(void);

/*
 * The cached entry of uid (or of user name): 1 with *u (NULL for no such
 * user) if known, else 0 and a lookup is started.
 */
int		 userdb_uid(uid_t, const struct userdb_user **u);
int		 userdb_name(const char *, const struct userdb_user **u);

/*
 * Wait for uid's (or name's) entry to be known: NULL if it is now (cb is
 * not called), else a wait whose cb(arg) is called once it is.  An entry
 * known but old is looked up again meanwhile, and does not wait.
 */
struct userdb_wait *userdb_wait_uid(uid_t, void (*cb)(void *), void *arg);
struct userdb_wait *userdb_wait_name(const char *, void (*cb)(void *),
		     void *arg);
/* Give up a wait before its cb is called. */
void		 userdb_cancel(struct userdb_wait *);

/*
 * The entry of uid (or name) now: the cached one, else looked up here,
 * blocking.  For emberd's start, before the loop runs, and as the last
 * resort of what a wait should have cached (logged).
 */
const struct userdb_user *userdb_uid_now(uid_t);
const struct userdb_user *userdb_name_now(const char *);

#endif
