/*
 * Records on the wire (docs/protocol.md): a plain record is a length word,
 * EMBER_NULL for null, and that many bytes.  A counted record, the partial
 * result of count_by_value that workers send and emberd merges, is a
 * record followed by an 8-byte frame holding its count, big-endian.  Both
 * sides pack and unpack them here; pairs and groups are worker/keyed.c's.
 */
#ifndef EMBER_RECORD_H
#define EMBER_RECORD_H

#include <stddef.h>
#include <stdint.h>
#include <string.h>

#include "frame.h"
#include "protocol.h"

#define RECORD_HEAD		4	/* the length word */
#define RECORD_COUNT_FRAME	(4 + 8)	/* a count's frame, after its record */

/* A record of len bytes (0 if null), whole. */
static inline size_t
record_size(size_t len)
{
	return (RECORD_HEAD + len);
}

/* A counted record of len bytes, whole. */
static inline size_t
record_counted_size(size_t len)
{
	return (record_size(len) + RECORD_COUNT_FRAME);
}

/* Write a record's length word. */
static inline void
record_head_put(unsigned char *p, size_t len, int null)
{
	be32_put(p, null ? EMBER_NULL : (int32_t)len);
}

/* Write a record whole: its length word and bytes; return what follows. */
static inline unsigned char *
record_put(unsigned char *p, const void *data, size_t len, int null)
{
	record_head_put(p, len, null);
	if (!null && len > 0)	/* an empty record may have no buffer */
		memcpy(p + RECORD_HEAD, data, len);
	return (p + RECORD_HEAD + (null ? 0 : len));
}

/* Write the count frame that follows a counted record's record. */
static inline void
record_count_put(unsigned char *p, int64_t count)
{
	be32_put(p, 8);
	be64_put(p + 4, count);
}

/*
 * Read the count frame at p, with avail bytes there: 0 and *count, or -1
 * if it is short or is not an 8-byte frame.
 */
static inline int
record_count_get(const unsigned char *p, size_t avail, int64_t *count)
{
	if (avail < RECORD_COUNT_FRAME || be32_get(p) != 8)
		return (-1);
	*count = be64_get(p + 4);
	return (0);
}

#endif
