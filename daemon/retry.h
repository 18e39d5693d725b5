/*
 * The retry buffer of a reattachable result stream, and the positions that
 * name a point in it.
 *
 * A position (partition, offset) says "the first offset records of
 * partition have been received".  The stream's sent position is how far
 * emberd has sent; the buffer holds the records from its start position up
 * to the sent position, as the batches the workers sent, by reference: the
 * bytes a client's output holds and the bytes the buffer holds are the same
 * memory.  A release moves the start forward; a trim drops the oldest
 * batches to keep the buffer under its bound.  What left the buffer can
 * only be recomputed (retry_rewind restarts the stream there).
 *
 * Every partition that ended keeps its record count, so a position can be
 * checked against it: retry_check tells a position to replay from one to
 * recompute, and says what is wrong with a bad one.
 */
#ifndef EMBER_RETRY_H
#define EMBER_RETRY_H

#include <stddef.h>
#include <stdint.h>

struct evbuffer;

struct position {
	int64_t		partition;
	int64_t		offset;
};

/* Order two positions: <0, 0, >0. */
int		 position_cmp(const struct position *, const struct position *);

enum position_check {
	POSITION_BUFFERED,	/* from the start of the buffer to the sent
				   position: replayed from the buffer */
	POSITION_RELEASED,	/* before the buffer: recompute it, or it is
				   not available */
	POSITION_NEGATIVE,	/* a negative partition or offset */
	POSITION_PAST_PARTITIONS, /* past the last partition */
	POSITION_PAST_END,	/* past the end of a partition that ended */
	POSITION_NOT_SENT,	/* past what was sent */
};

struct retry;

struct retry	*retry_create(int partitions);
void		 retry_free(struct retry *);

/* How far the stream was sent, and where the buffer starts. */
const struct position *retry_sent(const struct retry *);
const struct position *retry_start(const struct retry *);
/* Bytes of record frames the buffer holds. */
size_t		 retry_bytes(const struct retry *);
/* Records in partition, if it ended; else -1. */
int64_t		 retry_partition_records(const struct retry *, int64_t);

/*
 * Send a batch of records frames of the sent position's partition: bytes
 * bytes holding records records leave from (the chains move, nothing is
 * copied) for the buffer, and out gets a reference to them.
 */
void		 retry_append(struct retry *, struct evbuffer *from,
		     size_t bytes, int32_t records, struct evbuffer *out);
/* The sent position's partition ended: the stream moves to the next. */
void		 retry_end_partition(struct retry *);

/* Check a position; for a bad one, why says what is wrong with it. */
enum position_check retry_check(const struct retry *,
		     const struct position *, char *why, size_t len);

/*
 * Add to out (by reference) the buffered records of pos's partition from
 * pos on, and move pos past them.  1 if that partition ended (pos is then
 * at its end, and the caller sends END_OF_DATA_SECTION), 0 if pos reached
 * the sent position inside it.  pos must be POSITION_BUFFERED.
 */
int		 retry_replay(struct retry *, struct position *,
		     struct evbuffer *out);

/* Forget the records before pos (the client has them): 0, or -1 if pos is
 * past the sent position. */
int		 retry_release(struct retry *, const struct position *);
/* Drop the oldest batches until at most limit bytes are left. */
void		 retry_trim(struct retry *, size_t limit);
/* Restart the stream at pos, before the buffer: what is buffered goes, and
 * the stream is sent again from pos. */
void		 retry_rewind(struct retry *, const struct position *);

#endif
