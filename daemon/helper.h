/*
 * Helpers: file work done as the user, off emberd's loop.  emberd never
 * opens, stats, globs or parses a path a client named with its own
 * rights; it asks the client's fork-server (already running as the user
 * the client's jobs run as) for a one-shot helper process, sends it one
 * request (a verb, its arguments, and optionally a descriptor), and gets
 * one reply back (JSON, and the descriptors the verb hands out).  The
 * verbs are worker/helper.c's; docs/protocol.md lists them.
 *
 * Every helper is bounded: daemon.max_helpers_per_uid and
 * daemon.max_helpers running at once, daemon.helper_timeout each.
 */
#ifndef EMBER_HELPER_H
#define EMBER_HELPER_H

#include <sys/types.h>

#include <stddef.h>
#include <stdint.h>

#include <jansson.h>

#include "hmsg.h"

struct fslink;
struct helper;

/* The error class of a helper that died before it answered. */
#define HELPER_FAILED	"HELPER_FAILED"

/*
 * The answer, exactly once per helper_run that returned a handle, unless
 * the handle was cancelled first.  On success class is NULL, reply is
 * the verb's reply, read and checked (its json_t members borrowed: incref
 * what you keep; reply->error the verb's own failure) and fds[nfds]
 * the descriptors it handed out, which the callback now owns.  On failure
 * reply is NULL, nfds 0, and class and error say why: LIMIT_EXCEEDED for
 * daemon.helper_timeout, HELPER_FAILED for a helper that could not be
 * forked or died (killed, its fork-server gone) before it answered: what
 * it did of the verb is unknown, asking again may succeed; INTERNAL for
 * one that answered nonsense (logged).  The handle is gone when it is
 * called.
 */
typedef void	(*helper_cb)(const struct hmsg_reply *reply, int *fds,
		    size_t nfds, const char *class, const char *error,
		    void *arg);

/*
 * Run verb with args (borrowed) as the user whose jobs client uid:gid's
 * jobs run as, passing fd_in along unless it is -1 (duplicated: the
 * caller keeps its own).  Returns a handle, or NULL with *err (allocated)
 * and *class set when it cannot start: LIMIT_EXCEEDED naming the limit,
 * INTERNAL when that user's fork-server could not be started and is not
 * being restarted (while it restarts, the request waits for it).
 */
struct helper	*helper_run(uid_t client, gid_t gid, const char *verb,
		    json_t *args, int fd_in, helper_cb, void *arg,
		    const char **class, char **err);
/* The same, passing nfds descriptors (at most HELPER_MAX_FDS, each
 * duplicated) along, in order. */
struct helper	*helper_run_fds(uid_t client, gid_t gid, const char *verb,
		    json_t *args, const int *fds, size_t nfds, helper_cb,
		    void *arg, const char **class, char **err);
/* The same, for emberd's own work that nobody waits for (a removal, a
 * clean, an undo): not charged to daemon.max_helpers_per_uid, it runs
 * when the uid's one background helper is done with the ones before it;
 * daemon.helper_timeout counts from then. */
struct helper	*helper_run_background(uid_t client, gid_t gid,
		    const char *verb, json_t *args, int fd_in, helper_cb,
		    void *arg, const char **class, char **err);
/* A reply longer than max (under HELPER_MAX_REPLY) fails the helper
 * (INTERNAL) before emberd parses it: for a verb whose answer is small
 * whatever the user's files hold.  Set it right after helper_run. */
void		 helper_limit_reply(struct helper *, size_t max);
/* Nobody waits for the answer any more (its client went away): the
 * callback is not called, the helper is killed, nothing is left. */
void		 helper_cancel(struct helper *);

/* Hear from the fork-servers about helpers (fslink_add_peer). */
void		 helper_init(void);
/* Cancel and forget every helper (exit). */
void		 helper_shutdown(void);

/* Helpers running, for status: uid's, or everyone's for root (0). */
json_int_t	 helper_count(uid_t);

#endif
