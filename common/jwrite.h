/*
 * JSON text written without json_dumps, through jansson's own callback
 * type: emberd's replies straight into the connection's buffer, libember's
 * requests into a string.  jansson's dump costs some 11,000 instructions
 * for a reply of a few members (its loop check prints a "%p" key for every
 * object and array), as much as the rest of a job's reply; this writes
 * the same bytes for a tenth of that.  Reading stays jansson's (jread).
 *
 * Each function returns 0, or -1 as soon as the callback fails.
 */
#ifndef EMBER_JWRITE_H
#define EMBER_JWRITE_H

#include <stddef.h>

#include <jansson.h>

/* Write the len bytes at s (NULs allowed) as a JSON string, escaped as
 * json_dumps escapes: '"', '\\' and the control characters, no more.
 * s must be valid UTF-8 (a jansson string is; a C string from elsewhere
 * must be checked first): its bytes are written as they are. */
int	 jwrite_string(const char *s, size_t len, json_dump_callback_t,
	     void *);
/* Write v's text, byte for byte what json_dumps(v, JSON_COMPACT |
 * JSON_ENCODE_ANY) writes; v is a tree free of cycles. */
int	 jwrite_value(json_t *v, json_dump_callback_t, void *);
/* Write a reply: {"ok":true or false, then the members of fields (an
 * object without "ok"; NULL: none), in their order}, as json_dumps would
 * write the object {"ok":ok} updated with fields. */
int	 jwrite_reply(int ok, json_t *fields, json_dump_callback_t, void *);
/* v's text as json_dumps(v, JSON_COMPACT | JSON_ENCODE_ANY) returns it:
 * allocated with malloc, or NULL when out of memory. */
char	*jwrite_dumps(json_t *v);
/* The reply jwrite_reply writes, as a string allocated with malloc, or
 * NULL when out of memory: one copy into the output, where a callback
 * into an evbuffer costs an evbuffer_add a token. */
char	*jwrite_reply_dumps(int ok, json_t *fields);

#endif
