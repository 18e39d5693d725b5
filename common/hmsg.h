/*
 * Helper messages: what emberd (daemon/helper.c) and a helper
 * (worker/helper.c) say to each other, encoded and decoded in one place.
 *
 * A request is one frame {"verb": V, "args": {...}}, with up to
 * HELPER_MAX_FDS descriptors; its reply one frame {"ok": true, "reply":
 * {...}} or {"ok": false, "error": E}.  The verbs are the rows of
 * HMSG_VERBS: a verb's name, the function that runs it in the helper,
 * and the fields its reply may have (a verb's own failure is {"error":
 * E}, allowed to every verb).  A new verb is one row there.
 */
#ifndef EMBER_HMSG_H
#define EMBER_HMSG_H

#include <stddef.h>

#include <jansson.h>

#define HMSG_KEYS(...)	((const char *const []){ "error", __VA_ARGS__, NULL })

/* X(ID, name, function in worker/helper.c, reply fields) */
#define HMSG_VERBS(X)							\
	X(PLAN_CHECK, "plan_check", helper_plan_check,			\
	    HMSG_KEYS("files", "udfs", "nested"))			\
	X(SAVE_BEGIN, "save_begin", helper_save_begin, HMSG_KEYS("ids"))	\
	X(SAVE_COMMIT, "save_commit", helper_save_commit, HMSG_KEYS(NULL))	\
	X(SAVE_ABORT, "save_abort", helper_save_abort, HMSG_KEYS(NULL))	\
	X(BROADCAST_READ, "broadcast_read", helper_broadcast_read,	\
	    HMSG_KEYS("size", "over"))					\
	X(BROADCAST_INDEX, "broadcast_index", helper_broadcast_index,	\
	    HMSG_KEYS("size", "over", "lines", "distinct", "ms"))	\
	X(RELEASE, "release", helper_release, HMSG_KEYS(NULL))		\
	X(CHECKPOINT_COMMIT, "checkpoint_commit", ckpt_verb_commit,	\
	    HMSG_KEYS(NULL))						\
	X(CHECKPOINT_REMOVE, "checkpoint_remove", ckpt_verb_remove,	\
	    HMSG_KEYS("failed"))					\
	X(CHECKPOINT_CLEAN, "checkpoint_clean", ckpt_verb_clean,	\
	    HMSG_KEYS("removed", "checkpoints", "sizes", "refused", "more"))	\
	X(CHECKPOINT_PLAN, "checkpoint_plan", ckpt_verb_plan,		\
	    HMSG_KEYS("plan", "files"))

#define HMSG_ENUM(id, name, fn, keys)	HMSG_##id,
enum hmsg_verb {
	HMSG_VERBS(HMSG_ENUM)
	HMSG_NVERBS
};
#undef HMSG_ENUM

/* The verb named name, or -1. */
int	 hmsg_verb_find(const char *name);
/* A verb's name. */
const char *hmsg_verb_name(enum hmsg_verb);

/* The text of a request (free it): verb's with args. */
char	*hmsg_request_encode(enum hmsg_verb, json_t *args, size_t *len);
/* Read a request of len bytes: its verb and args (*req holds them; the
 * caller frees it).  -1 with *err: not {"verb", "args"}, or no such
 * verb. */
int	 hmsg_request_decode(const void *, size_t len, json_t **req,
	     enum hmsg_verb *, json_t **args, char **err);

/* The text of a reply (free it): verb's reply, or its refusal. */
char	*hmsg_reply_encode(json_t *reply, size_t *len);
char	*hmsg_reply_encode_error(const char *error, size_t *len);
/*
 * Read a reply of len bytes to a request of verb: 0 with *reply (its
 * fields none but the verb's) or *error (a refused request; both point
 * into *msg, which the caller frees); -1 with *err for anything else.
 */
int	 hmsg_reply_decode(const void *, size_t len, enum hmsg_verb,
	     json_t **msg, json_t **reply, const char **error, char **err);

#endif
