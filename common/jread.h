/*
 * Typed, strict access to JSON objects: every reader of a message or a plan
 * goes through these, so errors always name the offending field by its path
 * ("plan.ops[2].filter.contains: expected a string").
 *
 * Each getter returns 0 on success and -1 with *err set to an allocated
 * message.  A missing optional field leaves *out untouched and returns 0;
 * JREAD_REQUIRED makes it an error.
 */
#ifndef EMBER_JREAD_H
#define EMBER_JREAD_H

#include <jansson.h>

#define JREAD_OPTIONAL	0
#define JREAD_REQUIRED	1

int	jread_string(json_t *, const char *path, const char *key, int required,
	    const char **out, char **err);
int	jread_int(json_t *, const char *path, const char *key, int required,
	    json_int_t *out, char **err);
int	jread_bool(json_t *, const char *path, const char *key, int required,
	    int *out, char **err);
int	jread_object(json_t *, const char *path, const char *key, int required,
	    json_t **out, char **err);
int	jread_array(json_t *, const char *path, const char *key, int required,
	    json_t **out, char **err);

/* Refuse any key of obj that is not in the NULL-terminated list. */
int	jread_only(json_t *obj, const char *path, const char *const *keys,
	    char **err);

/* "path.key" (or "key" when path is empty), allocated. */
char	*jread_path(const char *path, const char *key);

/* Set *err to "path: message". */
int	jread_fail(char **err, const char *path, const char *fmt, ...)
	    __attribute__((format(printf, 3, 4)));

#endif
