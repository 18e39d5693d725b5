#include <stdlib.h>
#include <string.h>

#include <jansson.h>

#include "hmsg.h"
#include "jread.h"
#include "log.h"
#include "xmalloc.h"

/* Each verb's name and reply fields, from HMSG_VERBS. */
static const struct {
	const char		*name;
	const char *const	*reply_keys;
} hmsg_verbs[HMSG_NVERBS] = {
#define HMSG_ROW(id, name, fn, keys)	[HMSG_##id] = { name, keys },
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

int
hmsg_reply_decode(const void *buf, size_t len, enum hmsg_verb verb,
    json_t **msg, json_t **reply, const char **error, char **err)
{
	static const char *const ok_keys[] = { "ok", "reply", NULL };
	static const char *const error_keys[] = { "ok", "error", NULL };
	int	ok;

	*reply = NULL;
	*error = NULL;
	if ((*msg = hmsg_parse(buf, len, "the reply", err)) == NULL)
		return (-1);
	if (jread_bool(*msg, "", "ok", JREAD_REQUIRED, &ok, err) == -1)
		return (-1);
	if (!ok)
		return (jread_only(*msg, "", error_keys, err) == -1 ||
		    jread_string(*msg, "", "error", JREAD_REQUIRED, error,
		    err) == -1 ? -1 : 0);
	if (jread_only(*msg, "", ok_keys, err) == -1 ||
	    jread_object(*msg, "", "reply", JREAD_REQUIRED, reply, err) == -1 ||
	    jread_only(*reply, "reply", hmsg_verbs[verb].reply_keys,
	    err) == -1)
		return (-1);
	if (json_object_get(*reply, "error") != NULL &&
	    !json_is_string(json_object_get(*reply, "error")))
		return (jread_fail(err, "reply.error", "expected a string"));
	return (0);
}
