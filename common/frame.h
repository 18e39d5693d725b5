/*
 * Framing: big-endian integers and length-prefixed frames, on plain memory,
 * on blocking file descriptors (worker, client) and on evbuffers (emberd).
 */
#ifndef EMBER_FRAME_H
#define EMBER_FRAME_H

#include <stddef.h>
#include <stdint.h>
#include <sys/types.h>

struct evbuffer;
struct iovec;

static inline void
be32_put(unsigned char *p, int32_t v)
{
	uint32_t u = (uint32_t)v;

	p[0] = u >> 24; p[1] = u >> 16; p[2] = u >> 8; p[3] = u;
}

static inline int32_t
be32_get(const unsigned char *p)
{
	return ((int32_t)((uint32_t)p[0] << 24 | (uint32_t)p[1] << 16 |
	    (uint32_t)p[2] << 8 | (uint32_t)p[3]));
}

static inline void
be64_put(unsigned char *p, int64_t v)
{
	be32_put(p, (int32_t)((uint64_t)v >> 32));
	be32_put(p + 4, (int32_t)(uint64_t)v);
}

static inline int64_t
be64_get(const unsigned char *p)
{
	return ((int64_t)((uint64_t)(uint32_t)be32_get(p) << 32 |
	    (uint32_t)be32_get(p + 4)));
}

/* Blocking I/O that retries on EINTR and short counts: 0, or -1 with errno
 * set (EPIPE-like end of file reads as -1 with errno 0). */
int	fd_read_full(int, void *, size_t);
int	fd_write_full(int, const void *, size_t);
/* Write all of n iovecs, which are changed on the way. */
int	fd_writev_full(int, struct iovec *, int n);
int	fd_read_int32(int, int32_t *);
int	fd_write_int32(int, int32_t);

/* Frame results on an evbuffer. */
enum frame_status {
	FRAME_OK,		/* a whole frame (or a special length) is there */
	FRAME_INCOMPLETE,	/* wait for more bytes */
	FRAME_TOO_LARGE,	/* the length is over the limit */
};

/*
 * Look at the frame at the head of buf without removing it.  *len is the
 * int32 length (negative for a special value).  FRAME_OK means 4 + len bytes
 * (or just 4 for a special value) are buffered.
 */
enum frame_status frame_peek(struct evbuffer *, size_t max, int32_t *len);
/*
 * The bytes of the first n records of buf (a NULL record, -5, is a header
 * alone; a pair or group, -7 or -8, its marker and frames): 0 with *bytes,
 * or -1 if buf holds fewer.  For a batch checked as it arrived
 * (worker.c), where a short one is emberd's bug.
 */
int	frame_skip_records(struct evbuffer *, int64_t n, size_t *bytes);

/* Append an int32, and a frame of len bytes. */
void	evbuffer_add_int32(struct evbuffer *, int32_t);
void	evbuffer_add_frame(struct evbuffer *, const void *, size_t);

#endif
