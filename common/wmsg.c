#include <stddef.h>
#include <stdint.h>

#include "frame.h"
#include "wmsg.h"

/* Return the size of a message of type, without its payload. */
size_t
wmsg_size(int32_t type)
{
	switch (type) {
	case EMBER_RECORD_BATCH:
		return (WMSG_BATCH_SIZE);
	case EMBER_TIMING_DATA:
		return (WMSG_TIMING_SIZE);
	case EMBER_EXCEPTION_THROWN:
		return (WMSG_ERROR_SIZE);
	case EMBER_TASKS_DONE:
		return (WMSG_DONE_SIZE);
	case EMBER_END_OF_DATA_SECTION:
	case EMBER_END_OF_STREAM:
		return (WMSG_TYPE_SIZE);
	default:
		return (0);
	}
}

/* Return the bytes of payload behind a message. */
size_t
wmsg_payload(const struct wmsg *m)
{
	switch (m->type) {
	case EMBER_RECORD_BATCH:
	case EMBER_EXCEPTION_THROWN:
		return ((size_t)m->length);
	case EMBER_TIMING_DATA:
		return ((size_t)m->length * WMSG_METRIC_SIZE);
	case EMBER_TASKS_DONE:
		return ((size_t)m->records * wmsg_done_entry(m));
	default:
		return (0);
	}
}

/* Return the bytes of a TASKS_DONE entry. */
size_t
wmsg_done_entry(const struct wmsg *m)
{
	return (4 + (size_t)m->length * WMSG_METRIC_SIZE);
}

/* Name a message type. */
const char *
wmsg_type_name(int32_t type)
{
	switch (type) {
	case EMBER_RECORD_BATCH:
		return ("RECORD_BATCH");
	case EMBER_TIMING_DATA:
		return ("TIMING_DATA");
	case EMBER_EXCEPTION_THROWN:
		return ("EXCEPTION_THROWN");
	case EMBER_TASKS_DONE:
		return ("TASKS_DONE");
	case EMBER_END_OF_DATA_SECTION:
		return ("END_OF_DATA_SECTION");
	case EMBER_END_OF_STREAM:
		return ("END_OF_STREAM");
	default:
		return ("unknown");
	}
}

/* Encode a message. */
size_t
wmsg_put(unsigned char *p, const struct wmsg *m)
{
	size_t	size = wmsg_size(m->type);

	be32_put(p, m->type);
	switch (m->type) {
	case EMBER_RECORD_BATCH:
	case EMBER_TASKS_DONE:
		be32_put(p + 4, m->records);
		be32_put(p + 8, m->length);
		break;
	case EMBER_TIMING_DATA:
	case EMBER_EXCEPTION_THROWN:
		be32_put(p + 4, m->length);
		break;
	}
	return (size);
}

/* Check that a decoded message's fields are in range. */
static int
wmsg_check(const struct wmsg *m, const char **err)
{
	switch (m->type) {
	case EMBER_RECORD_BATCH:
		if (m->records < 0 || m->length < 0 ||
		    m->length > EMBER_MAX_BATCH) {
			*err = "bad record batch";
			return (-1);
		}
		break;
	case EMBER_TIMING_DATA:
		if (m->length < 0 || m->length > WMSG_MAX_METRICS) {
			*err = "bad metrics count";
			return (-1);
		}
		break;
	case EMBER_TASKS_DONE:
		if (m->records < 1 || m->records > EMBER_MAX_TASK_BATCH ||
		    m->length < 0 || m->length > WMSG_MAX_METRICS) {
			*err = "bad task ends";
			return (-1);
		}
		break;
	case EMBER_EXCEPTION_THROWN:
		if (m->length < 0 || m->length > EMBER_MAX_ERROR_FRAME) {
			*err = "bad error frame";
			return (-1);
		}
		break;
	}
	return (0);
}

/* Decode exactly one message. */
int
wmsg_get(const unsigned char *p, size_t len, struct wmsg *m, const char **err)
{
	size_t	size;

	if (len < WMSG_TYPE_SIZE) {
		*err = "message too short";
		return (-1);
	}
	m->type = be32_get(p);
	m->records = m->length = 0;
	if ((size = wmsg_size(m->type)) == 0) {
		*err = "unknown message";
		return (-1);
	}
	if (len < size) {
		*err = "message too short";
		return (-1);
	}
	if (len > size) {
		*err = "not at end";
		return (-1);
	}
	switch (m->type) {
	case EMBER_RECORD_BATCH:
	case EMBER_TASKS_DONE:
		m->records = be32_get(p + 4);
		m->length = be32_get(p + 8);
		break;
	case EMBER_TIMING_DATA:
	case EMBER_EXCEPTION_THROWN:
		m->length = be32_get(p + 4);
		break;
	}
	return (wmsg_check(m, err));
}

/* Encode metrics. */
size_t
wmsg_put_metrics(unsigned char *p, const int64_t *metrics, int n)
{
	int	i;

	for (i = 0; i < n; i++)
		be64_put(p + (size_t)i * WMSG_METRIC_SIZE, metrics[i]);
	return ((size_t)n * WMSG_METRIC_SIZE);
}

/* Decode the metrics of a TIMING_DATA payload. */
int
wmsg_get_metrics(const unsigned char *p, size_t len, int32_t n,
    int64_t *metrics, int max, const char **err)
{
	int32_t	i;

	if (n < 0 || n > WMSG_MAX_METRICS) {
		*err = "bad metrics count";
		return (-1);
	}
	if (len < (size_t)n * WMSG_METRIC_SIZE) {
		*err = "message too short";
		return (-1);
	}
	if (len > (size_t)n * WMSG_METRIC_SIZE) {
		*err = "not at end";
		return (-1);
	}
	for (i = 0; i < n && i < max; i++)
		metrics[i] = be64_get(p + (size_t)i * WMSG_METRIC_SIZE);
	return (0);
}

/* Where a batch's check is inside a pair or a group: the word it reads
 * next. */
enum {
	WMSG_KEYED_NONE,	/* a record's frame, or a marker */
	WMSG_KEYED_PAIR_KEY,
	WMSG_KEYED_PAIR_VALUE,
	WMSG_KEYED_GROUP_KEY,
	WMSG_KEYED_GROUP_COUNT,
	WMSG_KEYED_GROUP_VALUE,
};

/* Begin the check of a record batch's payload. */
void
wmsg_batch_begin(struct wmsg_batch *b, const struct wmsg *m)
{
	b->frames = m->records;
	b->left = (size_t)m->length;
	b->body = 0;
	b->have = 0;
	b->keyed = WMSG_KEYED_NONE;
	b->owed = 0;
}

/* Check a word that is no plain record's length: a special length, or
 * one inside a pair or group.  Off the path of plain records. */
static int
wmsg_batch_keyed(struct wmsg_batch *b, int32_t word, const char **err)
{
	int	value = word >= 0 || word == EMBER_NULL;

	b->body = 0;
	switch (b->keyed) {
	case WMSG_KEYED_NONE:
		if (word == EMBER_PAIR)
			b->keyed = WMSG_KEYED_PAIR_KEY;
		else if (word == EMBER_GROUP)
			b->keyed = WMSG_KEYED_GROUP_KEY;
		else if (word != EMBER_NULL) {
			*err = "a record of a negative length";
			return (-1);
		}
		b->frames--;
		return (0);
	case WMSG_KEYED_PAIR_KEY:
	case WMSG_KEYED_GROUP_KEY:
		if (word < 0) {
			*err = "a keyed record with a bad key";
			return (-1);
		}
		b->keyed = b->keyed == WMSG_KEYED_PAIR_KEY ?
		    WMSG_KEYED_PAIR_VALUE : WMSG_KEYED_GROUP_COUNT;
		break;
	case WMSG_KEYED_GROUP_COUNT:
		if (word < 0) {
			*err = "a group of a negative count";
			return (-1);
		}
		b->owed = word;
		b->keyed = word > 0 ? WMSG_KEYED_GROUP_VALUE : WMSG_KEYED_NONE;
		return (0);
	case WMSG_KEYED_PAIR_VALUE:
	case WMSG_KEYED_GROUP_VALUE:
		if (!value) {
			*err = "a keyed record with a bad value";
			return (-1);
		}
		if (b->keyed == WMSG_KEYED_PAIR_VALUE || --b->owed == 0)
			b->keyed = WMSG_KEYED_NONE;
		break;
	}
	b->body = word > 0 ? (size_t)word : 0;
	return (0);
}

/* Walk the next piece of a batch's payload: frame headers (whole or split
 * between pieces) and the bodies they announce. */
int
wmsg_batch_feed(struct wmsg_batch *b, const unsigned char *p, size_t len,
    const char **err)
{
	const unsigned char	*end = p + len;
	size_t			 n;
	int32_t			 frame, frames;

	if (len > b->left) {
		*err = "a record batch longer than it says";
		return (-1);
	}
	b->left -= len;
	while (p < end) {
		/* Plain records whose length lies whole in the piece: the
		 * bulk of a stream, walked without the general steps. */
		if (b->body == 0 && b->have == 0 &&
		    b->keyed == WMSG_KEYED_NONE) {
			frames = b->frames;
			while (frames > 0 && end - p >= 4 &&
			    (frame = be32_get(p)) >= 0) {
				p += 4;
				frames--;
				if ((size_t)frame > (size_t)(end - p)) {
					b->body = (size_t)frame -
					    (size_t)(end - p);
					p = end;
					break;
				}
				p += frame;
			}
			b->frames = frames;
			if (p == end)
				break;
		}
		if (b->body > 0) {
			n = (size_t)(end - p) < b->body ? (size_t)(end - p) :
			    b->body;
			p += n;
			b->body -= n;
			continue;
		}
		if (b->frames == 0 && b->keyed == WMSG_KEYED_NONE) {
			*err = "a record batch with more records than it says";
			return (-1);
		}
		if (b->have == 0 && end - p >= 4) {
			frame = be32_get(p);
			p += 4;
		} else {
			b->hdr[b->have++] = *p++;
			if (b->have < 4)
				continue;
			frame = be32_get(b->hdr);
			b->have = 0;
		}
		if (frame < 0 || b->keyed != WMSG_KEYED_NONE) {
			if (wmsg_batch_keyed(b, frame, err) == -1)
				return (-1);
			continue;
		}
		b->frames--;
		b->body = (size_t)frame;
	}
	return (0);
}

/* End the check: every byte walked, and every record whole. */
int
wmsg_batch_end(const struct wmsg_batch *b, const char **err)
{
	if (b->left > 0) {
		*err = "a record batch shorter than it says";
		return (-1);
	}
	if (b->frames > 0 || b->body > 0 || b->have > 0 ||
	    b->keyed != WMSG_KEYED_NONE) {
		*err = "a record batch with fewer records than it says";
		return (-1);
	}
	return (0);
}
