#include "queue.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <event2/buffer.h>

#include "frame.h"
#include "log.h"
#include "protocol.h"
#include "retry.h"
#include "xmalloc.h"

/*
 * A batch up to this size is copied into the batch itself: in an evbuffer
 * of its own, any chain would take a kilobyte, which a detached operation
 * of a few records would hold for nothing.
 */
#define RETRY_SMALL_BYTES	512

/* One batch a worker sent, as it went to the client. */
struct retry_batch {
	struct position		 at;		/* its first record */
	int64_t			 records;
	struct evbuffer		*data;		/* the record frames, or NULL
						   for a small batch: */
	size_t			 small_off, small_len; /* in small[] */
	TAILQ_ENTRY(retry_batch) entry;
	unsigned char		 small[];
};

/* The bytes of b's frames still held. */
static size_t
retry_batch_length(const struct retry_batch *b)
{
	if (b->data != NULL)
		return (evbuffer_get_length(b->data));
	return (b->small_len);
}

/* Add b's frames to out: by reference, or a copy of a small batch. */
static void
retry_batch_add(struct evbuffer *out, struct retry_batch *b)
{
	if (b->data != NULL) {
		if (evbuffer_add_buffer_reference(out, b->data) == -1)
			fatalx("evbuffer_add_buffer_reference failed");
	} else if (evbuffer_add(out, b->small + b->small_off,
	    b->small_len) == -1)
		fatalx("evbuffer_add failed");
}

struct retry {
	int64_t			 partitions;
	struct position		 start;
	struct position		 sent;
	size_t			 bytes;
	int64_t			*ends;		/* records of each ended
						   partition */
	size_t			 nends, ends_size;
	TAILQ_HEAD(, retry_batch) batches;
};

int
position_cmp(const struct position *a, const struct position *b)
{
	if (a->partition != b->partition)
		return (a->partition < b->partition ? -1 : 1);
	if (a->offset != b->offset)
		return (a->offset < b->offset ? -1 : 1);
	return (0);
}

struct retry *
retry_create(int partitions)
{
	struct retry	*r = xcalloc(1, sizeof *r);

	r->partitions = partitions;
	TAILQ_INIT(&r->batches);
	return (r);
}

/* Drop the oldest batch. */
static void
retry_drop(struct retry *r, struct retry_batch *b)
{
	r->bytes -= retry_batch_length(b);
	TAILQ_REMOVE(&r->batches, b, entry);
	if (b->data != NULL)
		evbuffer_free(b->data);
	free(b);
}

void
retry_free(struct retry *r)
{
	struct retry_batch	*b;

	if (r == NULL)
		return;
	while ((b = TAILQ_FIRST(&r->batches)) != NULL)
		retry_drop(r, b);
	free(r->ends);
	free(r);
}

const struct position *
retry_sent(const struct retry *r)
{
	return (&r->sent);
}

const struct position *
retry_start(const struct retry *r)
{
	return (&r->start);
}

size_t
retry_bytes(const struct retry *r)
{
	return (r->bytes);
}

int64_t
retry_partition_records(const struct retry *r, int64_t partition)
{
	if (partition < 0 || (size_t)partition >= r->nends ||
	    partition >= r->sent.partition)
		return (-1);
	return (r->ends[partition]);
}

void
retry_append(struct retry *r, struct evbuffer *from, size_t bytes,
    int32_t records, struct evbuffer *out)
{
	struct retry_batch	*b;

	if (bytes <= RETRY_SMALL_BYTES) {
		b = xmalloc(sizeof *b + bytes);
		b->data = NULL;
		b->small_off = 0;
		b->small_len = bytes;
		if (evbuffer_remove(from, b->small, bytes) != (int)bytes)
			fatalx("evbuffer_remove came up short");
	} else {
		b = xmalloc(sizeof *b);
		if ((b->data = evbuffer_new()) == NULL)
			fatalx("evbuffer_new failed");
		/* Moves whole chains where it can: no copy. */
		if (evbuffer_remove_buffer(from, b->data, bytes) != (int)bytes)
			fatalx("evbuffer_remove_buffer came up short");
	}
	b->at = r->sent;
	b->records = records;
	if (out != NULL)
		retry_batch_add(out, b);
	TAILQ_INSERT_TAIL(&r->batches, b, entry);
	r->bytes += bytes;
	r->sent.offset += records;
}

void
retry_end_partition(struct retry *r)
{
	if ((size_t)r->sent.partition >= r->ends_size) {
		r->ends_size = r->ends_size == 0 ? 64 : r->ends_size * 2;
		/* No more than the stream's partitions: most have few. */
		if (r->ends_size > (size_t)r->partitions &&
		    r->sent.partition < r->partitions)
			r->ends_size = (size_t)r->partitions;
		r->ends = xreallocarray(r->ends, r->ends_size,
		    sizeof *r->ends);
	}
	r->ends[r->sent.partition] = r->sent.offset;
	r->nends = (size_t)r->sent.partition + 1;
	r->sent.partition++;
	r->sent.offset = 0;
}

/* The same point of the stream, moved past the end of ended partitions:
 * (p, records of p) and (p + 1, 0) hold the same records. */
static struct position
retry_normalize(const struct retry *r, const struct position *pos)
{
	struct position	n = *pos;

	while (n.partition < r->sent.partition &&
	    n.offset == r->ends[n.partition]) {
		n.partition++;
		n.offset = 0;
	}
	return (n);
}

enum position_check
retry_check(const struct retry *r, const struct position *pos, char *why,
    size_t len)
{
	struct position	n, s;

	if (pos->partition < 0 || pos->offset < 0) {
		snprintf(why, len, "partition %lld, offset %lld: a position "
		    "is never negative", (long long)pos->partition,
		    (long long)pos->offset);
		return (POSITION_NEGATIVE);
	}
	if (pos->partition > r->partitions ||
	    (pos->partition == r->partitions && pos->offset > 0)) {
		snprintf(why, len, "partition %lld: the operation has %lld "
		    "partitions", (long long)pos->partition,
		    (long long)r->partitions);
		return (POSITION_PAST_PARTITIONS);
	}
	if (pos->partition < r->sent.partition &&
	    pos->offset > r->ends[pos->partition]) {
		snprintf(why, len, "partition %lld has %lld records, not %lld",
		    (long long)pos->partition,
		    (long long)r->ends[pos->partition],
		    (long long)pos->offset);
		return (POSITION_PAST_END);
	}
	if (position_cmp(pos, &r->sent) > 0) {
		snprintf(why, len, "partition %lld, offset %lld: only %lld "
		    "records of partition %lld were sent",
		    (long long)pos->partition, (long long)pos->offset,
		    (long long)r->sent.offset, (long long)r->sent.partition);
		return (POSITION_NOT_SENT);
	}
	n = retry_normalize(r, pos);
	s = retry_normalize(r, &r->start);
	if (position_cmp(&n, &s) < 0) {
		snprintf(why, len, "partition %lld, offset %lld is no longer "
		    "buffered", (long long)pos->partition,
		    (long long)pos->offset);
		return (POSITION_RELEASED);
	}
	return (POSITION_BUFFERED);
}

/* The bytes of the first n record frames of buf, a batch worker.c
 * checked as it arrived: a short one is emberd's own bug. */
static size_t
retry_frames_bytes(struct retry_batch *b, int64_t n)
{
	struct evbuffer	*buf = b->data;
	size_t		 bytes;
	int		 rc;

	if (buf == NULL) {
		/* Read in place, for the length of this call. */
		if ((buf = evbuffer_new()) == NULL)
			fatalx("evbuffer_new failed");
		if (evbuffer_add_reference(buf, b->small + b->small_off,
		    b->small_len, NULL, NULL) == -1)
			fatalx("evbuffer_add_reference failed");
	}
	rc = frame_skip_records(buf, n, &bytes);
	if (buf != b->data)
		evbuffer_free(buf);
	if (rc == -1)
		fatalx("retry buffer: a batch is shorter than its records");
	return (bytes);
}

int
retry_replay(struct retry *r, struct position *pos, struct evbuffer *out)
{
	struct retry_batch	*b;
	struct evbuffer		*tmp;
	int64_t			 skip;

	TAILQ_FOREACH(b, &r->batches, entry) {
		if (b->at.partition < pos->partition ||
		    (b->at.partition == pos->partition &&
		    b->at.offset + b->records <= pos->offset))
			continue;
		if (b->at.partition > pos->partition)
			break;
		if (b->at.offset > pos->offset)
			fatalx("retry buffer: partition %lld has a hole at %lld",
			    (long long)pos->partition, (long long)pos->offset);
		skip = pos->offset - b->at.offset;
		if (skip == 0)
			retry_batch_add(out, b);
		else if (b->data == NULL) {
			size_t	bytes = retry_frames_bytes(b, skip);

			if (evbuffer_add(out, b->small + b->small_off + bytes,
			    b->small_len - bytes) == -1)
				fatalx("evbuffer_add failed");
		} else {
			if ((tmp = evbuffer_new()) == NULL)
				fatalx("evbuffer_new failed");
			if (evbuffer_add_buffer_reference(tmp, b->data) == -1)
				fatalx("evbuffer_add_buffer_reference failed");
			evbuffer_drain(tmp, retry_frames_bytes(b, skip));
			evbuffer_add_buffer(out, tmp);
			evbuffer_free(tmp);
		}
		pos->offset = b->at.offset + b->records;
	}
	return (pos->partition < r->sent.partition);
}

int
retry_release(struct retry *r, const struct position *pos)
{
	struct retry_batch	*b;
	int64_t			 n;
	size_t			 bytes;

	if (position_cmp(pos, &r->sent) > 0)
		return (-1);
	while ((b = TAILQ_FIRST(&r->batches)) != NULL) {
		if (b->at.partition > pos->partition ||
		    (b->at.partition == pos->partition &&
		    b->at.offset >= pos->offset))
			break;
		if (b->at.partition < pos->partition ||
		    b->at.offset + b->records <= pos->offset) {
			retry_drop(r, b);
			continue;
		}
		/* The batch holds the position: drop what is before it. */
		n = pos->offset - b->at.offset;
		bytes = retry_frames_bytes(b, n);
		r->bytes -= bytes;
		if (b->data != NULL)
			evbuffer_drain(b->data, bytes);
		else {
			b->small_off += bytes;
			b->small_len -= bytes;
		}
		b->at.offset += n;
		b->records -= n;
		break;
	}
	if (position_cmp(pos, &r->start) > 0)
		r->start = *pos;
	return (0);
}

void
retry_trim(struct retry *r, size_t limit)
{
	struct retry_batch	*b;

	while (r->bytes > limit && (b = TAILQ_FIRST(&r->batches)) != NULL) {
		r->start.partition = b->at.partition;
		r->start.offset = b->at.offset + b->records;
		retry_drop(r, b);
	}
}

void
retry_rewind(struct retry *r, const struct position *pos)
{
	struct retry_batch	*b;

	while ((b = TAILQ_FIRST(&r->batches)) != NULL)
		retry_drop(r, b);
	r->start = *pos;
	r->sent = *pos;
}
