#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "jread.h"
#include "xmalloc.h"

char *
jread_path(const char *path, const char *key)
{
	char	*out;

	if (path == NULL || *path == '\0')
		return (xstrdup(key));
	xasprintf(&out, "%s.%s", path, key);
	return (out);
}

int
jread_fail(char **err, const char *path, const char *fmt, ...)
{
	va_list	 ap;
	char	*msg;

	va_start(ap, fmt);
	xvasprintf(&msg, fmt, ap);
	va_end(ap);
	if (path != NULL && *path != '\0') {
		xasprintf(err, "%s: %s", path, msg);
		free(msg);
	} else
		*err = msg;
	return (-1);
}

/* Fetch key from obj; 1 if present, 0 if absent (error if required). */
static int
jread_get(json_t *obj, const char *path, const char *key, int required,
    json_t **value, char **err)
{
	char	*p;

	*value = json_object_get(obj, key);
	if (*value != NULL)
		return (1);
	if (required) {
		p = jread_path(path, key);
		jread_fail(err, p, "missing");
		free(p);
		return (-1);
	}
	return (0);
}

static int
jread_wrong(const char *path, const char *key, const char *what, char **err)
{
	char	*p = jread_path(path, key);

	jread_fail(err, p, "expected %s", what);
	free(p);
	return (-1);
}

int
jread_string(json_t *obj, const char *path, const char *key, int required,
    const char **out, char **err)
{
	json_t	*v;
	int	 found = jread_get(obj, path, key, required, &v, err);

	if (found <= 0)
		return (found);
	if (!json_is_string(v))
		return (jread_wrong(path, key, "a string", err));
	*out = json_string_value(v);
	return (0);
}

int
jread_int(json_t *obj, const char *path, const char *key, int required,
    json_int_t *out, char **err)
{
	json_t	*v;
	int	 found = jread_get(obj, path, key, required, &v, err);

	if (found <= 0)
		return (found);
	if (!json_is_integer(v))
		return (jread_wrong(path, key, "an integer", err));
	*out = json_integer_value(v);
	return (0);
}

int
jread_bool(json_t *obj, const char *path, const char *key, int required,
    int *out, char **err)
{
	json_t	*v;
	int	 found = jread_get(obj, path, key, required, &v, err);

	if (found <= 0)
		return (found);
	if (!json_is_boolean(v))
		return (jread_wrong(path, key, "true or false", err));
	*out = json_is_true(v);
	return (0);
}

int
jread_object(json_t *obj, const char *path, const char *key, int required,
    json_t **out, char **err)
{
	json_t	*v;
	int	 found = jread_get(obj, path, key, required, &v, err);

	if (found <= 0)
		return (found);
	if (!json_is_object(v))
		return (jread_wrong(path, key, "an object", err));
	*out = v;
	return (0);
}

int
jread_array(json_t *obj, const char *path, const char *key, int required,
    json_t **out, char **err)
{
	json_t	*v;
	int	 found = jread_get(obj, path, key, required, &v, err);

	if (found <= 0)
		return (found);
	if (!json_is_array(v))
		return (jread_wrong(path, key, "an array", err));
	*out = v;
	return (0);
}

int
jread_only(json_t *obj, const char *path, const char *const *keys, char **err)
{
	const char		*key;
	json_t			*v;
	const char *const	*k;
	char			*p;

	json_object_foreach(obj, key, v) {
		for (k = keys; *k != NULL; k++) {
			if (strcmp(*k, key) == 0)
				break;
		}
		if (*k == NULL) {
			p = jread_path(path, key);
			jread_fail(err, p, "unknown field");
			free(p);
			return (-1);
		}
	}
	return (0);
}
