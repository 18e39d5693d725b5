/*
 * Helper messages: what emberd (daemon/helper.c) and a helper
 * (worker/helper.c) say to each other, encoded and decoded in one place.
 *
 * A request is one frame {"verb": V, "args": {...}}, with up to
 * HELPER_MAX_FDS descriptors; its reply one frame {"ok": true, "reply":
 * {...}} or {"ok": false, "error": E}.  The verbs are the rows of
 * HMSG_VERBS: a verb's name, the function that runs it in the helper,
 * and the function that reads its reply into struct hmsg_reply, typed,
 * refusing a field it does not know (a verb's own failure is {"error":
 * E}, allowed to every verb).  A new verb is one row there and, if its
 * reply has fields, a member of the union.
 */
#ifndef EMBER_HMSG_H
#define EMBER_HMSG_H

#include <stddef.h>

#include <jansson.h>

/* X(ID, name, function in worker/helper.c, reader of its reply) */
#define HMSG_VERBS(X)							\
	X(PLAN_CHECK, "plan_check", helper_plan_check,			\
	    hmsg_read_plan_check)					\
	X(SAVE_BEGIN, "save_begin", helper_save_begin,			\
	    hmsg_read_save_begin)					\
	X(SAVE_COMMIT, "save_commit", helper_save_commit,		\
	    hmsg_read_none)						\
	X(SAVE_ABORT, "save_abort", helper_save_abort, hmsg_read_none)	\
	X(BROADCAST_READ, "broadcast_read", helper_broadcast_read,	\
	    hmsg_read_broadcast_read)					\
	X(RELEASE, "release", helper_release, hmsg_read_none)		\
	X(CHECKPOINT_COMMIT, "checkpoint_commit", ckpt_verb_commit,	\
	    hmsg_read_none)						\
	X(CHECKPOINT_REMOVE, "checkpoint_remove", ckpt_verb_remove,	\
	    hmsg_read_checkpoint_remove)				\
	X(CHECKPOINT_CLEAN, "checkpoint_clean", ckpt_verb_clean,	\
	    hmsg_read_checkpoint_clean)					\
	X(CHECKPOINT_PLAN, "checkpoint_plan", ckpt_verb_plan,		\
	    hmsg_read_checkpoint_plan)					\
	X(BROADCAST_INDEX, "broadcast_index", helper_broadcast_index,	\
	    hmsg_read_broadcast_index)

#define HMSG_ENUM(id, name, fn, rd)	HMSG_##id,
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
/* plan_check's reply: the text files with their sizes, and whether each
 * udf is deterministic. */
struct hmsg_plan_check {
	json_t	*files;		/* [{"path", "size"}], or NULL */
	json_t	*udfs;		/* [{"deterministic"}], plan_walk's
				   order */
	json_t	*nested;	/* per nested plan: its files, or null;
				   or NULL */
};

/* save_begin's: the directories it made, to name them again. */
struct hmsg_save_begin {
	json_t	*ids;		/* {"target_dev", "target_ino",
				   "task_dev", "task_ino": N} */
};

/* broadcast_read's: the bytes copied, or how far it got. */
struct hmsg_broadcast_read {
	json_int_t size;	/* the bytes copied (0 or more) */
	json_int_t over;	/* with error: the bytes it held when it
				   stopped, or 0 */
};

/* broadcast_index's: the index built into the memfd passed, or how far
 * it got. */
struct hmsg_broadcast_index {
	json_int_t size;	/* the index's bytes (0 or more) */
	json_int_t over;	/* with error: the bytes past max, or 0 */
	json_int_t lines;	/* the broadcast's lines */
	json_int_t distinct;	/* the distinct ones among them */
	json_int_t ms;		/* how long it took */
};

/* checkpoint_remove's: with error, the ids it could not remove. */
struct hmsg_checkpoint_remove {
	json_t	*failed;	/* [id], or NULL */
};

/* checkpoint_clean's: what it removed, found and measured. */
struct hmsg_checkpoint_clean {
	json_int_t removed;	/* entries removed */
	json_t	*checkpoints;	/* [a manifest's summary] */
	json_t	*sizes;		/* {id: bytes} */
	json_int_t refused;	/* manifests that do not hold */
	json_int_t more;	/* past the bound, not served */
};

/* checkpoint_plan's: a lazy checkpoint's plan and its text files. */
struct hmsg_checkpoint_plan {
	json_t	*plan;
	json_t	*files;		/* [{"path", "size"}], or NULL */
};

/*
 * A reply as read: the verb's own failure, or its fields, each of the type
 * given and checked down to the elements of its arrays.  The json_t
 * members point into the message hmsg_reply_decode returned (borrowed:
 * incref what you keep); a field the helper did not send is NULL (or 0).
 */
struct hmsg_reply {
	enum hmsg_verb	 verb;
	const char	*error;	/* why the verb failed, or NULL */
	union {
		struct hmsg_plan_check		plan_check;
		struct hmsg_save_begin		save_begin;
		struct hmsg_broadcast_read	broadcast_read;
		struct hmsg_broadcast_index	broadcast_index;
		struct hmsg_checkpoint_remove	checkpoint_remove;
		struct hmsg_checkpoint_clean	checkpoint_clean;
		struct hmsg_checkpoint_plan	checkpoint_plan;
	} u;
};

/*
 * Read a reply of len bytes to a request of verb: 0 with *reply, or with
 * *refused set (the helper refused the request); both point into *msg,
 * which the caller frees.  -1 with *err for anything else: not the
 * envelope, a field the verb's reply does not have, one of the wrong type
 * or out of range.
 */
int	 hmsg_reply_decode(const void *, size_t len, enum hmsg_verb,
	     json_t **msg, struct hmsg_reply *, const char **refused,
	     char **err);

/* HMSG_VERBS' readers: a verb's reply object into *reply; -1 with *err
 * naming the field.  hmsg_reply_decode calls them. */
int	 hmsg_read_none(json_t *, struct hmsg_reply *, char **err);
int	 hmsg_read_plan_check(json_t *, struct hmsg_reply *, char **err);
int	 hmsg_read_save_begin(json_t *, struct hmsg_reply *, char **err);
int	 hmsg_read_broadcast_read(json_t *, struct hmsg_reply *, char **err);
int	 hmsg_read_broadcast_index(json_t *, struct hmsg_reply *,
	     char **err);
int	 hmsg_read_checkpoint_remove(json_t *, struct hmsg_reply *,
	     char **err);
int	 hmsg_read_checkpoint_clean(json_t *, struct hmsg_reply *,
	     char **err);
int	 hmsg_read_checkpoint_plan(json_t *, struct hmsg_reply *,
	     char **err);

#endif
