#include <stdlib.h>
#include <string.h>

#include <jansson.h>

#include "hmsg.h"
#include "jread.h"
#include "log.h"
#include "xmalloc.h"

/* Each verb's name and the reader of its reply, from HMSG_VERBS. */
static const struct {
	const char	*name;
	int		(*read)(json_t *, struct hmsg_reply *, char **);
} hmsg_verbs[HMSG_NVERBS] = {
#define HMSG_ROW(id, name, fn, rd)	[HMSG_##id] = { name, rd },
	HMSG_VERBS(HMSG_ROW)
#undef HMSG_ROW
};

int
hmsg_verb_find(const char *name)
{
	int	i;

	for (i = 0; i < HMSG_NVERBS; i++) {
		if (strcmp(hmsg_verbs[i].name, name) == 0)
			return (i);
	}
	return (-1);
}

const char *
hmsg_verb_name(enum hmsg_verb verb)
{
	return (hmsg_verbs[verb].name);
}

/* The compact text of a message, which this frees; *len its length. */
static char *
hmsg_text(json_t *msg, size_t *len)
{
	char	*text;

	if ((text = json_dumps(msg, JSON_COMPACT)) == NULL)
		fatalx("json_dumps");
	json_decref(msg);
	*len = strlen(text);
	return (text);
}

char *
hmsg_request_encode(enum hmsg_verb verb, json_t *args, size_t *len)
{
	return (hmsg_text(json_pack("{s:s,s:O}", "verb",
	    hmsg_verbs[verb].name, "args", args), len));
}

/* Parse len bytes as a JSON object: NULL with *err if they are not. */
static json_t *
hmsg_parse(const void *buf, size_t len, const char *what, char **err)
{
	json_error_t	 je;
	json_t		*msg;

	msg = json_loadb(buf, len, JSON_REJECT_DUPLICATES, &je);
	if (msg == NULL || !json_is_object(msg)) {
		json_decref(msg);
		xasprintf(err, "%s is not a JSON object", what);
		return (NULL);
	}
	return (msg);
}

int
hmsg_request_decode(const void *buf, size_t len, json_t **req,
    enum hmsg_verb *verb, json_t **args, char **err)
{
	static const char *const keys[] = { "verb", "args", NULL };
	const char	*name;
	int		 v;

	if ((*req = hmsg_parse(buf, len, "the request", err)) == NULL)
		return (-1);
	if (jread_only(*req, "", keys, err) == -1 ||
	    jread_string(*req, "", "verb", JREAD_REQUIRED, &name, err) == -1 ||
	    jread_object(*req, "", "args", JREAD_REQUIRED, args, err) == -1)
		return (-1);
	if ((v = hmsg_verb_find(name)) == -1) {
		xasprintf(err, "unknown verb \"%s\"", name);
		return (-1);
	}
	*verb = (enum hmsg_verb)v;
	return (0);
}

char *
hmsg_reply_encode(json_t *reply, size_t *len)
{
	return (hmsg_text(json_pack("{s:b,s:O}", "ok", 1, "reply", reply),
	    len));
}

char *
hmsg_reply_encode_error(const char *error, size_t *len)
{
	return (hmsg_text(json_pack("{s:b,s:s}", "ok", 0, "error", error),
	    len));
}

/* Read an element of an array at path: 0, or -1 with *err. */
typedef int	(*hmsg_elem_fn)(json_t *, const char *path, char **err);

/* Read each element of the array a (path its field) with fn. */
static int
hmsg_read_each(json_t *a, const char *path, hmsg_elem_fn fn, char **err)
{
	json_t	*v;
	size_t	 i;
	char	*p;
	int	 rc;

	json_array_foreach(a, i, v) {
		xasprintf(&p, "%s[%zu]", path, i);
		rc = fn(v, p, err);
		free(p);
		if (rc == -1)
			return (-1);
	}
	return (0);
}

/* An integer field of 0 or more. */
static int
hmsg_read_count(json_t *obj, const char *path, const char *key,
    int required, json_int_t *out, char **err)
{
	char	*p;

	if (jread_int(obj, path, key, required, out, err) == -1)
		return (-1);
	if (*out >= 0)
		return (0);
	p = jread_path(path, key);
	jread_fail(err, p, "must be 0 or more");
	free(p);
	return (-1);
}

/* A text file of a plan: {"path": S, "size": N}. */
static int
hmsg_read_file(json_t *v, const char *path, char **err)
{
	static const char *const keys[] = { "path", "size", NULL };
	const char	*s;
	json_int_t	 size;

	if (!json_is_object(v))
		return (jread_fail(err, path, "expected an object"));
	return (jread_only(v, path, keys, err) == -1 ||
	    jread_string(v, path, "path", JREAD_REQUIRED, &s, err) == -1 ||
	    hmsg_read_count(v, path, "size", JREAD_REQUIRED, &size,
	    err) == -1 ? -1 : 0);
}

/* A nested plan's files: an array of files, or null (not a text one). */
static int
hmsg_read_nested(json_t *v, const char *path, char **err)
{
	if (json_is_null(v))
		return (0);
	if (!json_is_array(v))
		return (jread_fail(err, path, "expected an array or null"));
	return (hmsg_read_each(v, path, hmsg_read_file, err));
}

/* A udf as checked: {"deterministic": B}. */
static int
hmsg_read_udf(json_t *v, const char *path, char **err)
{
	static const char *const keys[] = { "deterministic", NULL };
	int	deterministic;

	if (!json_is_object(v))
		return (jread_fail(err, path, "expected an object"));
	return (jread_only(v, path, keys, err) == -1 ||
	    jread_bool(v, path, "deterministic", JREAD_REQUIRED,
	    &deterministic, err) == -1 ? -1 : 0);
}

/* A checkpoint's id. */
static int
hmsg_read_id(json_t *v, const char *path, char **err)
{
	if (!json_is_string(v))
		return (jread_fail(err, path, "expected a string"));
	return (0);
}

/* A manifest's summary, as a clean found it; checkpoint_adopt checks
 * its values. */
static int
hmsg_read_summary(json_t *v, const char *path, char **err)
{
	static const char *const keys[] = { "id", "partitions", "records",
	    "bytes", "eager", "pending", NULL };
	const char	*id;
	json_int_t	 n;
	int		 b;

	if (!json_is_object(v))
		return (jread_fail(err, path, "expected an object"));
	return (jread_only(v, path, keys, err) == -1 ||
	    jread_string(v, path, "id", JREAD_REQUIRED, &id, err) == -1 ||
	    jread_int(v, path, "partitions", JREAD_REQUIRED, &n, err) == -1 ||
	    jread_int(v, path, "records", JREAD_REQUIRED, &n, err) == -1 ||
	    jread_int(v, path, "bytes", JREAD_REQUIRED, &n, err) == -1 ||
	    jread_bool(v, path, "eager", JREAD_OPTIONAL, &b, err) == -1 ||
	    jread_bool(v, path, "pending", JREAD_OPTIONAL, &b, err) == -1 ?
	    -1 : 0);
}

/* Checkpoints' sizes: {id: bytes, ...}, each 0 or more. */
static int
hmsg_read_sizes(json_t *sizes, const char *path, char **err)
{
	const char	*id;
	json_t		*v;
	json_int_t	 n;

	json_object_foreach(sizes, id, v) {
		if (hmsg_read_count(sizes, path, id, JREAD_REQUIRED, &n,
		    err) == -1)
			return (-1);
	}
	return (0);
}

/* An array field whose elements fn reads. */
static int
hmsg_read_array(json_t *obj, const char *key, int required, hmsg_elem_fn fn,
    json_t **out, char **err)
{
	char	*p;
	int	 rc;

	if (jread_array(obj, "reply", key, required, out, err) == -1)
		return (-1);
	if (*out == NULL)
		return (0);
	p = jread_path("reply", key);
	rc = hmsg_read_each(*out, p, fn, err);
	free(p);
	return (rc);
}

/* Refuse any field of reply not in keys ("error" and the verb's), and
 * read the verb's own failure. */
static int
hmsg_read_fields(json_t *reply, const char *const *keys,
    struct hmsg_reply *r, char **err)
{
	if (jread_only(reply, "reply", keys, err) == -1)
		return (-1);
	return (jread_string(reply, "reply", "error", JREAD_OPTIONAL,
	    &r->error, err));
}

int
hmsg_read_none(json_t *reply, struct hmsg_reply *r, char **err)
{
	static const char *const keys[] = { "error", NULL };

	return (hmsg_read_fields(reply, keys, r, err));
}

int
hmsg_read_plan_check(json_t *reply, struct hmsg_reply *r, char **err)
{
	static const char *const keys[] = { "error", "files", "udfs",
	    "nested", NULL };

	return (hmsg_read_fields(reply, keys, r, err) == -1 ||
	    hmsg_read_array(reply, "files", JREAD_OPTIONAL, hmsg_read_file,
	    &r->u.plan_check.files, err) == -1 ||
	    hmsg_read_array(reply, "udfs", r->error == NULL, hmsg_read_udf,
	    &r->u.plan_check.udfs, err) == -1 ||
	    hmsg_read_array(reply, "nested", JREAD_OPTIONAL, hmsg_read_nested,
	    &r->u.plan_check.nested, err) == -1 ? -1 : 0);
}

int
hmsg_read_save_begin(json_t *reply, struct hmsg_reply *r, char **err)
{
	static const char *const keys[] = { "error", "ids", NULL };
	static const char *const id_keys[] = { "target_dev", "target_ino",
	    "task_dev", "task_ino", NULL };
	const char *const	*k;
	json_t			*ids;
	json_int_t		 n;

	if (hmsg_read_fields(reply, keys, r, err) == -1 ||
	    jread_object(reply, "reply", "ids", r->error == NULL,
	    &r->u.save_begin.ids, err) == -1)
		return (-1);
	if ((ids = r->u.save_begin.ids) == NULL)
		return (0);
	if (jread_only(ids, "reply.ids", id_keys, err) == -1)
		return (-1);
	for (k = id_keys; *k != NULL; k++) {
		if (jread_int(ids, "reply.ids", *k, JREAD_REQUIRED, &n,
		    err) == -1)
			return (-1);
	}
	return (0);
}

int
hmsg_read_broadcast_read(json_t *reply, struct hmsg_reply *r, char **err)
{
	static const char *const keys[] = { "error", "size", "over", NULL };

	return (hmsg_read_fields(reply, keys, r, err) == -1 ||
	    hmsg_read_count(reply, "reply", "size", r->error == NULL,
	    &r->u.broadcast_read.size, err) == -1 ||
	    hmsg_read_count(reply, "reply", "over", JREAD_OPTIONAL,
	    &r->u.broadcast_read.over, err) == -1 ? -1 : 0);
}

int
hmsg_read_broadcast_index(json_t *reply, struct hmsg_reply *r, char **err)
{
	static const char *const keys[] = { "error", "size", "over", "lines",
	    "distinct", "ms", NULL };
	struct hmsg_broadcast_index	*x = &r->u.broadcast_index;
	int				 need;

	if (hmsg_read_fields(reply, keys, r, err) == -1)
		return (-1);
	need = r->error == NULL;
	return (hmsg_read_count(reply, "reply", "size", need, &x->size,
	    err) == -1 ||
	    hmsg_read_count(reply, "reply", "over", JREAD_OPTIONAL, &x->over,
	    err) == -1 ||
	    hmsg_read_count(reply, "reply", "lines", need, &x->lines,
	    err) == -1 ||
	    hmsg_read_count(reply, "reply", "distinct", need, &x->distinct,
	    err) == -1 ||
	    hmsg_read_count(reply, "reply", "ms", need, &x->ms, err) == -1 ?
	    -1 : 0);
}

int
hmsg_read_checkpoint_remove(json_t *reply, struct hmsg_reply *r,
    char **err)
{
	static const char *const keys[] = { "error", "failed", NULL };

	return (hmsg_read_fields(reply, keys, r, err) == -1 ||
	    hmsg_read_array(reply, "failed", JREAD_OPTIONAL, hmsg_read_id,
	    &r->u.checkpoint_remove.failed, err) == -1 ? -1 : 0);
}

int
hmsg_read_checkpoint_clean(json_t *reply, struct hmsg_reply *r,
    char **err)
{
	static const char *const keys[] = { "error", "removed",
	    "checkpoints", "sizes", "refused", "more", NULL };
	int	need;

	if (hmsg_read_fields(reply, keys, r, err) == -1)
		return (-1);
	need = r->error == NULL;
	return (hmsg_read_count(reply, "reply", "removed", need,
	    &r->u.checkpoint_clean.removed, err) == -1 ||
	    hmsg_read_array(reply, "checkpoints", need, hmsg_read_summary,
	    &r->u.checkpoint_clean.checkpoints, err) == -1 ||
	    jread_object(reply, "reply", "sizes", need,
	    &r->u.checkpoint_clean.sizes, err) == -1 ||
	    hmsg_read_sizes(r->u.checkpoint_clean.sizes, "reply.sizes",
	    err) == -1 ||
	    hmsg_read_count(reply, "reply", "refused", need,
	    &r->u.checkpoint_clean.refused, err) == -1 ||
	    hmsg_read_count(reply, "reply", "more", need,
	    &r->u.checkpoint_clean.more, err) == -1 ? -1 : 0);
}

int
hmsg_read_checkpoint_plan(json_t *reply, struct hmsg_reply *r, char **err)
{
	static const char *const keys[] = { "error", "plan", "files", NULL };

	return (hmsg_read_fields(reply, keys, r, err) == -1 ||
	    jread_object(reply, "reply", "plan", r->error == NULL,
	    &r->u.checkpoint_plan.plan, err) == -1 ||
	    hmsg_read_array(reply, "files", JREAD_OPTIONAL, hmsg_read_file,
	    &r->u.checkpoint_plan.files, err) == -1 ? -1 : 0);
}

int
hmsg_reply_decode(const void *buf, size_t len, enum hmsg_verb verb,
    json_t **msg, struct hmsg_reply *r, const char **refused, char **err)
{
	static const char *const ok_keys[] = { "ok", "reply", NULL };
	static const char *const error_keys[] = { "ok", "error", NULL };
	json_t	*reply;
	int	 ok;

	memset(r, 0, sizeof *r);
	r->verb = verb;
	*refused = NULL;
	if ((*msg = hmsg_parse(buf, len, "the reply", err)) == NULL)
		return (-1);
	if (jread_bool(*msg, "", "ok", JREAD_REQUIRED, &ok, err) == -1)
		return (-1);
	if (!ok)
		return (jread_only(*msg, "", error_keys, err) == -1 ||
		    jread_string(*msg, "", "error", JREAD_REQUIRED, refused,
		    err) == -1 ? -1 : 0);
	if (jread_only(*msg, "", ok_keys, err) == -1 ||
	    jread_object(*msg, "", "reply", JREAD_REQUIRED, &reply, err) == -1)
		return (-1);
	return (hmsg_verbs[verb].read(reply, r, err));
}
