#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <uuid/uuid.h>

#include "jread.h"
#include "request.h"
#include "xmalloc.h"

size_t
request_count_values(const void *data, size_t len, size_t max)
{
	const unsigned char	*p = data;
	size_t			 n = 1, i;

	for (i = 0; i < len && n <= max; i++) {
		switch (p[i]) {
		case '"':
			/* A string: skip to its closing quote. */
			for (i++; i < len && p[i] != '"'; i++) {
				if (p[i] == '\\')
					i++;
			}
			break;
		case ',':
		case ':':
		case '[':
		case '{':
			n++;
			break;
		}
	}
	return (n);
}

json_t *
request_parse(const void *data, size_t len, size_t max_values, char **err)
{
	json_error_t	 jerr;
	json_t		*req;

	/* Refused before jansson makes a tree of them: each value costs it
	 * about 80 bytes and 150 ns to make and free (docs/design.md). */
	if (max_values > 0 &&
	    request_count_values(data, len, max_values) > max_values) {
		xasprintf(err, "the request holds more than "
		    "daemon.max_frame_values (%zu) values and keys",
		    max_values);
		return (NULL);
	}
	req = json_loadb(data, len, JSON_REJECT_DUPLICATES | JSON_ALLOW_NUL,
	    &jerr);
	if (req == NULL) {
		xasprintf(err, "not JSON: %s (at byte %d)", jerr.text,
		    jerr.position);
		return (NULL);
	}
	if (!json_is_object(req) ||
	    !json_is_string(json_object_get(req, "op"))) {
		*err = xstrdup("a request is a JSON object with a string "
		    "\"op\"");
		json_decref(req);
		return (NULL);
	}
	return (req);
}

const char *const action_names[ACTION_CHECKPOINT + 1] = { "iterate",
    "collect", "count", "count_by_value", "reduce", "save", "checkpoint" };
const enum taskdesc_mode action_modes[ACTION_CHECKPOINT + 1] = {
    MODE_RECORDS, MODE_RECORDS, MODE_COUNT, MODE_COUNT_BY_VALUE, MODE_REDUCE,
    MODE_SAVE, MODE_CHECKPOINT };

/* The options each action takes, besides reattachable. */
static const char *const *
request_option_keys(enum action action)
{
	static const char *const iterate[] = { "prefetch", "limit",
	    "reattachable", NULL };
	static const char *const collect[] = { "limit", "reattachable", NULL };
	static const char *const reduce[] = { "fn", "reattachable", NULL };
	static const char *const save[] = { "path", "overwrite",
	    "reattachable", NULL };
	static const char *const checkpoint[] = { "local", "eager",
	    "reattachable", NULL };
	static const char *const other[] = { "reattachable", NULL };

	switch (action) {
	case ACTION_ITERATE:
		return (iterate);
	case ACTION_COLLECT:
		return (collect);
	case ACTION_REDUCE:
		return (reduce);
	case ACTION_SAVE:
		return (save);
	case ACTION_CHECKPOINT:
		return (checkpoint);
	default:
		return (other);
	}
}

/* An option of another action: name the action it belongs to.  -1 with
 * *err when options holds one, else 0. */
static int
request_foreign_option(enum action action, json_t *options, char **err)
{
	const char *const	*mine = request_option_keys(action), *const *k;
	const char		*key;
	json_t			*v;
	size_t			 a;

	json_object_foreach(options, key, v) {
		for (k = mine; *k != NULL && strcmp(*k, key) != 0; k++)
			;
		if (*k != NULL)
			continue;
		for (a = 0; a < sizeof action_names / sizeof *action_names;
		    a++) {
			for (k = request_option_keys((enum action)a);
			    *k != NULL && strcmp(*k, key) != 0; k++)
				;
			if (*k != NULL)
				return (jread_fail(err, NULL, "options.%s "
				    "belongs to action %s, not %s", key,
				    action_names[a], action_names[action]));
		}
	}
	return (0);
}

/* Read the options of er's action into er; -1 with *err. */
static int
request_read_options(struct execute_request *er, json_t *options, char **err)
{
	json_int_t	 prefetch = -1, limit = 0;
	int		 reattachable = 1, local = 0, eager = 1;
	const char	*fn = NULL;

	if (options == NULL)
		options = json_object();
	else
		json_incref(options);
	if (request_foreign_option(er->action, options, err) == -1 ||
	    jread_only(options, "options", request_option_keys(er->action),
	    err) == -1 ||
	    jread_int(options, "options", "prefetch", JREAD_OPTIONAL,
	    &prefetch, err) == -1 ||
	    jread_int(options, "options", "limit", JREAD_OPTIONAL,
	    &limit, err) == -1 ||
	    jread_bool(options, "options", "reattachable", JREAD_OPTIONAL,
	    &reattachable, err) == -1 ||
	    jread_string(options, "options", "fn", er->action == ACTION_REDUCE,
	    &fn, err) == -1 ||
	    jread_string(options, "options", "path", er->action == ACTION_SAVE,
	    &er->save_path, err) == -1 ||
	    jread_bool(options, "options", "overwrite", JREAD_OPTIONAL,
	    &er->overwrite, err) == -1 ||
	    jread_bool(options, "options", "local", JREAD_OPTIONAL, &local,
	    err) == -1 ||
	    jread_bool(options, "options", "eager", JREAD_OPTIONAL, &eager,
	    err) == -1)
		goto fail;
	er->ckpt_local = local;
	er->ckpt_eager = eager;
	if (json_object_get(options, "prefetch") != NULL && (prefetch < 0 ||
	    prefetch > OPERATION_MAX_PREFETCH)) {
		jread_fail(err, "options.prefetch", "must be from 0 to %d",
		    OPERATION_MAX_PREFETCH);
		goto fail;
	}
	if (fn != NULL && reduce_fn_from_string(fn, &er->fn) == -1) {
		jread_fail(err, "options.fn", "expected \"sum\", \"min\" or "
		    "\"max\", not \"%s\"", fn);
		goto fail;
	}
	if (limit < 0) {
		jread_fail(err, "options.limit", "must not be negative");
		goto fail;
	}
	/* Only the text: the path itself is the user's, looked at by a
	 * helper as the user (commit.c). */
	if (er->save_path != NULL && *er->save_path != '/') {
		jread_fail(err, "options.path", "\"%s\" is not an absolute "
		    "path", er->save_path);
		goto fail;
	}
	er->prefetch = (int)prefetch;
	er->reattachable = reattachable;
	er->limit = limit;
	json_decref(options);
	return (0);
fail:
	json_decref(options);
	return (-1);
}

int
request_refuse(const char **class, char **err, const char *c,
    const char *fmt, ...)
{
	va_list	ap;

	*class = c;
	va_start(ap, fmt);
	xvasprintf(err, fmt, ap);
	va_end(ap);
	return (-1);
}

int
request_answer_ok(struct request_answer *a, json_t *fields)
{
	memset(a, 0, sizeof *a);
	a->kind = REQUEST_ANSWER_OK;
	a->fields = fields;
	return (0);
}

int
request_answer_error(struct request_answer *a, const char *c,
    const char *fmt, ...)
{
	va_list	ap;

	memset(a, 0, sizeof *a);
	a->kind = REQUEST_ANSWER_ERROR;
	a->class = c;
	va_start(ap, fmt);
	xvasprintf(&a->message, fmt, ap);
	va_end(ap);
	return (-1);
}

int
request_read_execute(json_t *req, int (*taken)(const char *, void *),
    void *arg, struct execute_request *er, const char **class, char **err)
{
	static const char *const keys[] = { "op", "plan", "action", "options",
	    "operation", NULL };
	const char	*action = NULL, *id = NULL;
	json_t		*options = NULL;
	char		*e = NULL;
	uuid_t		 u;
	size_t		 i;

	memset(er, 0, sizeof *er);
	if (jread_only(req, "", keys, &e) == -1 ||
	    jread_string(req, "", "action", JREAD_REQUIRED, &action,
	    &e) == -1 ||
	    jread_object(req, "", "options", JREAD_OPTIONAL, &options,
	    &e) == -1 ||
	    jread_string(req, "", "operation", JREAD_OPTIONAL, &id, &e) == -1) {
		request_refuse(class, err, "REQUEST_INVALID", "execute: %s",
		    e);
		free(e);
		return (-1);
	}
	if (id != NULL && (uuid_parse(id, u) == -1 || strlen(id) != 36))
		return (request_refuse(class, err, "REQUEST_INVALID",
		    "operation: \"%s\" is not a UUID", id));
	if (id != NULL && taken != NULL && taken(id, arg))
		return (request_refuse(class, err, "OPERATION_ALREADY_EXISTS",
		    "operation %s already exists", id));
	for (i = 0; i < sizeof action_names / sizeof action_names[0]; i++) {
		if (strcmp(action, action_names[i]) == 0)
			break;
	}
	if (i == sizeof action_names / sizeof action_names[0])
		return (request_refuse(class, err, "ACTION_INVALID",
		    "action: unknown action \"%s\" (expected iterate, collect, "
		    "count, count_by_value, reduce, save or checkpoint)",
		    action));
	er->action = (enum action)i;
	*class = "ACTION_INVALID";
	if (request_read_options(er, options, err) == -1)
		return (-1);
	if (id != NULL)
		strcpy(er->id, id);
	else
		request_new_id(er->id);
	return (0);
}

/* One getrandom per id: libuuid's uuid_generate also reseeds random(3)
 * each time, five more system calls and thousands of instructions a job. */
void
request_new_id(char id[37])
{
	uuid_t	u;

	arc4random_buf(u, sizeof u);
	u[6] = (u[6] & 0x0f) | 0x40;	/* version 4: random */
	u[8] = (u[8] & 0x3f) | 0x80;	/* the RFC 4122 variant */
	uuid_unparse_lower(u, id);
}
