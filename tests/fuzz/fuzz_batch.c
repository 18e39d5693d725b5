/*
 * Fuzzing target: the reader of a worker's messages (common/wmsg.c), as
 * emberd's worker.c runs it on what a worker sends.  A worker runs the
 * user's code, which may write anything on its socket: each message's
 * header is decoded, and a record batch is checked in the pieces a
 * buffer's chains would give, before anything walks its records.
 *
 * The first byte sets the size of those pieces; the rest is the stream of
 * messages.  The check must agree with a plain walk of the whole payload:
 * a batch it passes holds exactly the records its header says, and one it
 * refuses does not.
 */
#include <stdint.h>
#include <stdlib.h>

#include "frame.h"
#include "fuzz.h"
#include "protocol.h"
#include "wmsg.h"

/* Walk one frame at *p: a length of at least min (EMBER_NULL allowed
 * with null) and its bytes.  0, or -1 if it is not whole. */
static int
batch_frame(const unsigned char **p, const unsigned char *end, int null)
{
	int32_t	n;

	if (end - *p < 4)
		return (-1);
	n = be32_get(*p);
	*p += 4;
	if (n == EMBER_NULL && null)
		return (0);
	if (n < 0 || end - *p < n)
		return (-1);
	*p += n;
	return (0);
}

/* Walk a pair or group after its marker: the key frame, then a value
 * frame, or a count and that many. */
static int
batch_keyed(const unsigned char **p, const unsigned char *end, int32_t marker)
{
	int32_t	n = 1;

	if (batch_frame(p, end, 0) == -1)
		return (-1);
	if (marker == EMBER_GROUP) {
		if (end - *p < 4 || (n = be32_get(*p)) < 0)
			return (-1);
		*p += 4;
	}
	while (n-- > 0)
		if (batch_frame(p, end, 1) == -1)
			return (-1);
	return (0);
}

/* Does p hold exactly records records, plain or keyed, to its last byte? */
static int
batch_exact(const unsigned char *p, size_t len, int32_t records)
{
	const unsigned char	*end = p + len;
	int32_t			 n;

	while (p < end) {
		if (records-- == 0 || end - p < 4)
			return (0);
		n = be32_get(p);
		if (n == EMBER_PAIR || n == EMBER_GROUP) {
			p += 4;
			if (batch_keyed(&p, end, n) == -1)
				return (0);
		} else if (batch_frame(&p, end, 1) == -1)
			return (0);
	}
	return (records == 0);
}

/* Check a batch's payload in pieces of step bytes. */
static int
batch_check(const unsigned char *p, const struct wmsg *m, size_t step)
{
	struct wmsg_batch	 b;
	const char		*err;
	size_t			 off, n, len = (size_t)m->length;

	wmsg_batch_begin(&b, m);
	for (off = 0; off < len; off += n) {
		n = len - off < step ? len - off : step;
		if (wmsg_batch_feed(&b, p + off, n, &err) == -1)
			return (0);
	}
	return (wmsg_batch_end(&b, &err) == 0);
}

int
LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
	const unsigned char	*p, *end;
	const char		*err;
	struct wmsg		 m;
	size_t			 hdr, payload, step;

	if (size < 1)
		return (0);
	step = (size_t)data[0] + 1;
	p = data + 1;
	end = data + size;
	while (end - p >= WMSG_TYPE_SIZE) {
		if ((hdr = wmsg_size(be32_get(p))) == 0 ||
		    (size_t)(end - p) < hdr)
			break;
		if (wmsg_get(p, hdr, &m, &err) == -1) {
			if (err == NULL)
				abort();
			break;
		}
		payload = wmsg_payload(&m);
		if ((size_t)(end - p) - hdr < payload)
			break;	/* emberd waits for the rest */
		p += hdr;
		if (m.type == EMBER_RECORD_BATCH &&
		    batch_check(p, &m, step) != batch_exact(p, payload,
		    m.records))
			abort();
		p += payload;
	}
	return (0);
}
