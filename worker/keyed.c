#include <stdio.h>
#include <string.h>

#include "frame.h"
#include "keyed.h"
#include "log.h"
#include "ops.h"
#include "plan.h"
#include "protocol.h"

/* Return the size of a keyed record's encoding. */
size_t
keyed_size(const struct record *r)
{
	return (KEYED_HEAD + r->klen + 4 + r->len);
}

/* Encode the marker and the key's length. */
void
keyed_head(unsigned char *p, const struct record *r)
{
	be32_put(p, r->kind == PLAN_KIND_GROUP ? EMBER_GROUP : EMBER_PAIR);
	be32_put(p + 4, (int32_t)r->klen);
}

/* Encode the word between the key and the data. */
void
keyed_word(unsigned char *p, const struct record *r)
{
	if (r->kind == PLAN_KIND_GROUP)
		be32_put(p, keyed_count(r));
	else
		be32_put(p, r->null ? EMBER_NULL : (int32_t)r->len);
}

/* Encode a keyed record whole. */
void
keyed_put(unsigned char *p, const struct record *r)
{
	keyed_head(p, r);
	if (r->klen > 0)
		memcpy(p + KEYED_HEAD, r->key, r->klen);
	p += KEYED_HEAD + r->klen;
	keyed_word(p, r);
	if (r->len > 0)
		memcpy(p + 4, r->data, r->len);
}

/* Read one frame's length at p + *at: 1 and *at past it, 0 if it is
 * not all there (*at how far it needs), -1 if bad. */
static int
keyed_frame(const char *p, size_t avail, size_t max, size_t *at, int null,
    int32_t *len)
{
	if (avail - *at < 4) {
		*at += 4;
		return (0);
	}
	*len = be32_get((const unsigned char *)p + *at);
	*at += 4;
	if (*len == EMBER_NULL && null)
		return (1);
	if (*len < 0 || (size_t)*len > max)
		return (-1);
	if (avail - *at < (size_t)*len) {
		*at += (size_t)*len;
		return (0);
	}
	*at += (size_t)*len;
	return (1);
}

/* Decode the rest of a pair or group after its marker. */
static int
keyed_get_rest(const char *p, size_t avail, size_t max, struct record *r,
    size_t *used)
{
	size_t	at = 4, body;
	int32_t	len, n = 1;
	int	rc;

	if ((rc = keyed_frame(p, avail, max, &at, 0, &len)) != 1)
		goto out;
	r->key = p + 8;
	r->klen = (size_t)len;
	if (r->kind == PLAN_KIND_GROUP) {
		if (avail - at < 4) {
			at += 4;
			rc = 0;
			goto out;
		}
		if ((n = be32_get((const unsigned char *)p + at)) < 0)
			return (-1);
		at += 4;
	}
	body = at;
	while (n-- > 0)
		if ((rc = keyed_frame(p, avail, max, &at, 1, &len)) != 1)
			goto out;
	if (r->kind == PLAN_KIND_GROUP) {
		r->data = p + body;
		r->len = at - body;
		r->null = 0;
	} else {
		r->data = len == EMBER_NULL ? NULL : p + body + 4;
		r->len = len == EMBER_NULL ? 0 : (size_t)len;
		r->null = len == EMBER_NULL;
	}
	rc = 1;
out:
	*used = at;
	return (rc);
}

/* Decode one record, plain or keyed. */
int
keyed_get(const char *p, size_t avail, size_t max, struct record *r,
    size_t *used)
{
	int32_t	len;

	*used = 4;
	if (avail < 4)
		return (0);
	len = be32_get((const unsigned char *)p);
	r->key = NULL;
	r->klen = 0;
	if (len == EMBER_PAIR || len == EMBER_GROUP) {
		r->kind = len == EMBER_PAIR ? PLAN_KIND_PAIR : PLAN_KIND_GROUP;
		return (keyed_get_rest(p, avail, max, r, used));
	}
	r->kind = PLAN_KIND_RECORD;
	if (len == EMBER_NULL) {
		r->data = NULL;
		r->len = 0;
		r->null = 1;
		return (1);
	}
	if (len < 0 || (size_t)len > max)
		return (-1);
	*used = 4 + (size_t)len;
	if (avail < *used)
		return (0);
	r->data = p + 4;
	r->len = (size_t)len;
	r->null = 0;
	return (1);
}

/* Give the next of a group's values. */
int
keyed_value_next(const char **p, const char *end, const char **v,
    size_t *vlen, int *vnull)
{
	int32_t	len;

	if (*p >= end)
		return (0);
	if (end - *p < 4)
		fatalx("%s: a group's values cut short", __func__);
	len = be32_get((const unsigned char *)*p);
	*p += 4;
	*vnull = len == EMBER_NULL;
	*vlen = len > 0 ? (size_t)len : 0;
	*v = *vnull ? NULL : *p;
	if ((size_t)(end - *p) < *vlen || (len < 0 && !*vnull))
		fatalx("%s: a group's values cut short", __func__);
	*p += *vlen;
	return (1);
}

/* Count a group's values. */
int32_t
keyed_count(const struct record *r)
{
	const char	*p = r->data, *end = r->data + r->len, *v;
	size_t		 vlen;
	int32_t		 n = 0;
	int		 vnull;

	while (keyed_value_next(&p, end, &v, &vlen, &vnull))
		n++;
	return (n);
}

/* The size of a keyed record's line. */
size_t
keyed_text_size(const struct record *r)
{
	if (r->kind == PLAN_KIND_PAIR)
		return (r->klen + 1 + r->len);
	/* Each value's 4-byte frame length becomes a 1-byte tab. */
	return (r->klen + r->len - 3 * (size_t)keyed_count(r));
}

/* Write a keyed record's line. */
void
keyed_text_put(char *p, const struct record *r)
{
	const char	*at = r->data, *end = r->data + r->len, *v;
	size_t		 vlen;
	int		 vnull;

	if (r->klen > 0)
		memcpy(p, r->key, r->klen);
	p += r->klen;
	if (r->kind == PLAN_KIND_PAIR) {
		*p++ = '\t';
		if (r->len > 0)
			memcpy(p, r->data, r->len);
		return;
	}
	while (keyed_value_next(&at, end, &v, &vlen, &vnull)) {
		*p++ = '\t';
		if (vlen > 0)
			memcpy(p, v, vlen);
		p += vlen;
	}
}

/* Write up to 64 bytes of p, escaped, for an error. */
void
keyed_show(const char *p, size_t len, char *buf, size_t size)
{
	size_t		 i, n = len < 64 ? len : 64, used = 0;
	unsigned char	 c;

	for (i = 0; i < n && used + 5 < size; i++) {
		c = (unsigned char)p[i];
		if (c == '"' || c == '\\')
			used += (size_t)snprintf(buf + used, size - used,
			    "\\%c", c);
		else if (c < 0x20 || c >= 0x7f)
			used += (size_t)snprintf(buf + used, size - used,
			    "\\x%02x", c);
		else
			buf[used++] = (char)c;
	}
	if (n < len && used + 4 < size) {
		memcpy(buf + used, "...", 3);
		used += 3;
	}
	buf[used] = '\0';
}
