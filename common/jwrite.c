#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include <jansson.h>

#include "jwrite.h"

/* Whether json_dumps escapes byte c: the quote, the backslash and the
 * control characters.  Bytes of 0x80 and over are UTF-8, written as
 * they are (jansson's strings hold valid UTF-8 only). */
#define JWRITE_ESCAPED(c)	((c) == '"' || (c) == '\\' || (c) < 0x20)

/* A string being made by jwrite_dumps. */
struct jwrite_buf {
	char	*data;
	size_t	 len;
	size_t	 size;
};

/* Write a character's escape as json_dumps writes it. */
static int
jwrite_escape(unsigned char c, json_dump_callback_t cb, void *arg)
{
	static const char	 hex[] = "0123456789ABCDEF";
	char			 seq[6] = { '\\', 'u', '0', '0', 0, 0 };

	switch (c) {
	case '"':
		return (cb("\\\"", 2, arg));
	case '\\':
		return (cb("\\\\", 2, arg));
	case '\b':
		return (cb("\\b", 2, arg));
	case '\f':
		return (cb("\\f", 2, arg));
	case '\n':
		return (cb("\\n", 2, arg));
	case '\r':
		return (cb("\\r", 2, arg));
	case '\t':
		return (cb("\\t", 2, arg));
	}
	seq[4] = hex[c >> 4];
	seq[5] = hex[c & 0xf];
	return (cb(seq, sizeof seq, arg));
}

int
jwrite_string(const char *s, size_t len, json_dump_callback_t cb, void *arg)
{
	const unsigned char	*p = (const unsigned char *)s;
	size_t			 i, run = 0;

	if (cb("\"", 1, arg) == -1)
		return (-1);
	for (i = 0; i < len; i++) {
		if (!JWRITE_ESCAPED(p[i]))
			continue;
		/* The plain bytes before it, in one piece. */
		if ((i > run && cb(s + run, i - run, arg) == -1) ||
		    jwrite_escape(p[i], cb, arg) == -1)
			return (-1);
		run = i + 1;
	}
	if (len > run && cb(s + run, len - run, arg) == -1)
		return (-1);
	return (cb("\"", 1, arg));
}

/* Write an integer in decimal: snprintf costs ten times as much. */
static int
jwrite_integer(json_int_t v, json_dump_callback_t cb, void *arg)
{
	char		 buf[24], *p = buf + sizeof buf;
	uint64_t	 u = v < 0 ? -(uint64_t)v : (uint64_t)v;

	do {
		*--p = (char)('0' + u % 10);
		u /= 10;
	} while (u > 0);
	if (v < 0)
		*--p = '-';
	return (cb(p, (size_t)(buf + sizeof buf - p), arg));
}

/* Write an object's members, each after a comma when after is set. */
static int
jwrite_members(json_t *o, int after, json_dump_callback_t cb, void *arg)
{
	void	*it;

	for (it = json_object_iter(o); it != NULL;
	    it = json_object_iter_next(o, it)) {
		if ((after && cb(",", 1, arg) == -1) ||
		    jwrite_string(json_object_iter_key(it),
		    json_object_iter_key_len(it), cb, arg) == -1 ||
		    cb(":", 1, arg) == -1 ||
		    jwrite_value(json_object_iter_value(it), cb, arg) == -1)
			return (-1);
		after = 1;
	}
	return (0);
}

/* Write an array's elements. */
static int
jwrite_array(json_t *a, json_dump_callback_t cb, void *arg)
{
	size_t	i;

	if (cb("[", 1, arg) == -1)
		return (-1);
	for (i = 0; i < json_array_size(a); i++) {
		if ((i > 0 && cb(",", 1, arg) == -1) ||
		    jwrite_value(json_array_get(a, i), cb, arg) == -1)
			return (-1);
	}
	return (cb("]", 1, arg));
}

int
jwrite_value(json_t *v, json_dump_callback_t cb, void *arg)
{
	switch (json_typeof(v)) {
	case JSON_OBJECT:
		if (cb("{", 1, arg) == -1 || jwrite_members(v, 0, cb,
		    arg) == -1)
			return (-1);
		return (cb("}", 1, arg));
	case JSON_ARRAY:
		return (jwrite_array(v, cb, arg));
	case JSON_STRING:
		return (jwrite_string(json_string_value(v),
		    json_string_length(v), cb, arg));
	case JSON_INTEGER:
		return (jwrite_integer(json_integer_value(v), cb, arg));
	case JSON_REAL:
		/* jansson's own formatting of a real, kept. */
		return (json_dump_callback(v, cb, arg, JSON_ENCODE_ANY |
		    JSON_COMPACT));
	case JSON_TRUE:
		return (cb("true", 4, arg));
	case JSON_FALSE:
		return (cb("false", 5, arg));
	case JSON_NULL:
		return (cb("null", 4, arg));
	}
	return (-1);
}

int
jwrite_reply(int ok, json_t *fields, json_dump_callback_t cb, void *arg)
{
	if ((ok ? cb("{\"ok\":true", 10, arg) : cb("{\"ok\":false", 11,
	    arg)) == -1)
		return (-1);
	if (fields != NULL && jwrite_members(fields, 1, cb, arg) == -1)
		return (-1);
	return (cb("}", 1, arg));
}

/* Append to a jwrite_buf, keeping room for a NUL. */
static int
jwrite_buf_cb(const char *s, size_t len, void *arg)
{
	struct jwrite_buf	*b = arg;
	size_t			 size;
	char			*p;

	if (len >= b->size - b->len) {
		size = b->size;
		while (len >= size - b->len) {
			if (size > SIZE_MAX / 2)
				return (-1);
			size *= 2;
		}
		if ((p = realloc(b->data, size)) == NULL)
			return (-1);
		b->data = p;
		b->size = size;
	}
	memcpy(b->data + b->len, s, len);
	b->len += len;
	return (0);
}

/* Start a string for jwrite_buf_cb: 0, or -1 when out of memory. */
static int
jwrite_buf_start(struct jwrite_buf *b)
{
	b->len = 0;
	b->size = 256;
	return ((b->data = malloc(b->size)) == NULL ? -1 : 0);
}

/* End a string made through jwrite_buf_cb: it, or NULL if rc failed. */
static char *
jwrite_buf_end(struct jwrite_buf *b, int rc)
{
	if (rc == -1) {
		free(b->data);
		return (NULL);
	}
	b->data[b->len] = '\0';
	return (b->data);
}

char *
jwrite_dumps(json_t *v)
{
	struct jwrite_buf	b;

	if (jwrite_buf_start(&b) == -1)
		return (NULL);
	return (jwrite_buf_end(&b, jwrite_value(v, jwrite_buf_cb, &b)));
}

char *
jwrite_reply_dumps(int ok, json_t *fields)
{
	struct jwrite_buf	b;

	if (jwrite_buf_start(&b) == -1)
		return (NULL);
	return (jwrite_buf_end(&b, jwrite_reply(ok, fields, jwrite_buf_cb,
	    &b)));
}
