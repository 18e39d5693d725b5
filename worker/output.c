#include <errno.h>
#include <stdlib.h>
#include <string.h>
#include <sys/uio.h>
#include <time.h>
#include <unistd.h>

#include "frame.h"
#include "keyed.h"
#include "log.h"
#include "ops.h"
#include "output.h"
#include "utf8.h"
#include "protocol.h"
#include "record.h"
#include "wmsg.h"
#include "xmalloc.h"

/* Records are packed into a buffer of this size; a larger record is sent
 * as a batch of its own. */
#define OUTPUT_BUFFER		(256 * 1024)
/* The buffer's room: a block of lines goes into one batch, over
 * OUTPUT_BUFFER, when it fits in this. */
#define OUTPUT_ROOM		(2 * OUTPUT_BUFFER)
/* The ends of quick tasks held back to go out with the next write, as
 * one TASKS_DONE: its header, then an entry per task. */
#define OUTPUT_HELD_ENTRY	(4 + WMSG_METRIC_SIZE * EMBER_METRIC_COUNT)
#define OUTPUT_HELD		(WMSG_DONE_SIZE + \
				    EMBER_MAX_TASK_BATCH * OUTPUT_HELD_ENTRY)
/* The longest a buffered record waits for the buffer to fill. */
#define OUTPUT_LATENCY_MS	20

struct output {
	int		 fd;
	unsigned char	*buf;
	size_t		 used;
	int32_t		 count;		/* records in buf */
	int64_t		 bytes;		/* payload sent since output_reset */
	int		 broken;

	int		 partition;	/* the task's, for its end */
	unsigned char	 held[OUTPUT_HELD];
	size_t		 heldlen;	/* 0, or the TASKS_DONE's bytes */
	int32_t		 heldn;		/* its tasks */
	int32_t		 heldm;		/* and the metrics of each */

	uint64_t	 first_ms;	/* when buf's first record came */
	int		(*stop_check)(void *);
	void		*stop_arg;

	size_t		 size;		/* buf's room */
	/* While set, a record is copied before it is sent, and nothing is
	 * sent unless the guard, asked after the copy, says the bytes were
	 * good: a mapped file cut under the reads shows zeros. */
	int		(*guard)(void);
};

/* Milliseconds on a coarse monotonic clock: cheap enough per batch. */
static uint64_t
output_now_ms(void)
{
	struct timespec	ts;

	clock_gettime(CLOCK_MONOTONIC_COARSE, &ts);
	return ((uint64_t)ts.tv_sec * 1000 + (uint64_t)ts.tv_nsec / 1000000);
}

/* Note when the buffer took its first record. */
static void
output_mark(struct output *out)
{
	if (out->count == 0)
		out->first_ms = output_now_ms();
}

/* Create the output for a worker's socket. */
struct output *
output_create(int fd)
{
	struct output	*out;

	out = xcalloc(1, sizeof *out);
	out->fd = fd;
	out->buf = xmalloc(OUTPUT_ROOM);
	out->size = OUTPUT_ROOM;
	return (out);
}

/* Free an output. */
void
output_free(struct output *out)
{
	if (out == NULL)
		return;
	free(out->buf);
	free(out);
}

/* Name the task that runs next, for its end. */
void
output_set_partition(struct output *out, int partition)
{
	out->partition = partition;
}

void
output_set_guard(struct output *out, int (*guard)(void))
{
	out->guard = guard;
}

/* Reset the per-task state. */
void
output_reset(struct output *out)
{
	out->used = 0;
	out->count = 0;
	out->bytes = 0;
}

/* Return the payload bytes sent or buffered. */
int64_t
output_bytes(const struct output *out)
{
	return (out->bytes + (int64_t)out->used);
}

/* Tell whether emberd is gone. */
int
output_broken(const struct output *out)
{
	return (out->broken);
}

/* Write an iovec array completely, after what was held back. */
static int
output_writev(struct output *out, struct iovec *vec, int n, char **err)
{
	struct iovec	 all[8];
	struct wmsg	 done = { EMBER_TASKS_DONE, out->heldn, out->heldm };

	if (n > 7)
		fatalx("%s: %d iovecs", __func__, n);
	if (out->heldlen > 0) {
		wmsg_put(out->held, &done);
		all[0].iov_base = out->held;
		all[0].iov_len = out->heldlen;
		memcpy(all + 1, vec, n * sizeof *vec);
		n++;
	} else
		memcpy(all, vec, n * sizeof *vec);

	if (out->broken) {
		if (err != NULL)
			*err = xstrdup("write to emberd: connection lost");
		return (-1);
	}
	if (out->guard != NULL && out->guard()) {
		if (err != NULL)
			*err = xstrdup("the file shrank while it was read");
		return (-1);
	}
	if (fd_writev_full(out->fd, all, n) == -1) {
		out->broken = 1;
		if (err != NULL)
			xasprintf(err, "write to emberd: %s", strerror(errno));
		return (-1);
	}
	out->heldlen = 0;
	out->heldn = 0;
	return (0);
}

/* Encode a batch header. */
static size_t
output_batch_header(unsigned char *hdr, int32_t records, size_t bytes)
{
	struct wmsg	m = { EMBER_RECORD_BATCH, records, (int32_t)bytes };

	return (wmsg_put(hdr, &m));
}

/* Fill in a batch header and its iovec; 0 iovecs if there is no batch. */
static int
output_batch_iov(struct output *out, unsigned char *hdr, struct iovec *iov)
{
	if (out->count == 0)
		return (0);
	output_batch_header(hdr, out->count, out->used);
	iov[0].iov_base = hdr;
	iov[0].iov_len = WMSG_BATCH_SIZE;
	iov[1].iov_base = out->buf;
	iov[1].iov_len = out->used;
	return (2);
}

/* Account for a batch handed to the kernel; a buffer grown for a large
 * guarded record goes back to its usual room. */
static void
output_batch_sent(struct output *out)
{
	out->bytes += out->used;
	out->used = 0;
	out->count = 0;
	if (out->size > OUTPUT_ROOM) {
		free(out->buf);
		out->buf = xmalloc(OUTPUT_ROOM);
		out->size = OUTPUT_ROOM;
	}
}

/* Room for need bytes more in the buffer. */
static void
output_grow(struct output *out, size_t need)
{
	if (out->used + need > out->size) {
		out->size = out->used + need;
		out->buf = xrealloc(out->buf, out->size);
	}
}

/* Send the buffered records as one batch. */
int
output_flush(struct output *out, char **err)
{
	unsigned char	hdr[WMSG_BATCH_SIZE];
	struct iovec	iov[2];
	int		n;

	if ((n = output_batch_iov(out, hdr, iov)) == 0 && out->heldlen == 0)
		return (0);
	if (output_writev(out, iov, n, err) == -1)
		return (-1);
	output_batch_sent(out);
	return (0);
}

int
output_tick(struct output *out, char **err)
{
	if (out->count > 0 &&
	    output_now_ms() - out->first_ms >= OUTPUT_LATENCY_MS &&
	    output_flush(out, err) == -1)
		return (-1);
	if (out->stop_check != NULL && out->stop_check(out->stop_arg))
		return (1);
	return (0);
}

void
output_set_stop_check(struct output *out, int (*check)(void *), void *arg)
{
	out->stop_check = check;
	out->stop_arg = arg;
}

/* Send a record too large for the buffer as a batch of its own. */
static int
output_record_alone(struct output *out, const void *data, size_t len,
    char **err)
{
	unsigned char	hdr[WMSG_BATCH_SIZE + RECORD_HEAD];
	struct iovec	iov[2];

	output_batch_header(hdr, 1, record_size(len));
	record_head_put(hdr + WMSG_BATCH_SIZE, len, 0);
	iov[0].iov_base = hdr;
	iov[0].iov_len = sizeof hdr;
	iov[1].iov_base = (void *)data;
	iov[1].iov_len = len;
	if (output_writev(out, iov, 2, err) == -1)
		return (-1);
	out->bytes += record_size(len);
	return (0);
}

/* Append a record. */
int
output_record(struct output *out, const void *data, size_t len, int null,
    char **err)
{
	if (null)
		len = 0;
	else if (len > EMBER_MAX_BATCH - RECORD_HEAD) {
		xasprintf(err, "record of %zu bytes exceeds the 64 MiB limit",
		    len);
		return (-1);
	}
	if (out->used + record_size(len) > OUTPUT_BUFFER) {
		if (output_flush(out, err) == -1)
			return (-1);
		if (record_size(len) > OUTPUT_BUFFER) {
			if (out->guard == NULL)
				return (output_record_alone(out, data, len,
				    err));
			output_grow(out, record_size(len));
		}
	}
	output_mark(out);
	out->used = (size_t)(record_put(out->buf + out->used, data, len,
	    null) - out->buf);
	out->count++;
	return (0);
}

/* Append a block of lines; what does not fit goes a record at a time. */
int
output_lines(struct output *out, const char *data, size_t len,
    size_t *lines, char **err)
{
	const char	*p = data, *end = data + len, *nl = NULL;
	unsigned char	*w, *room;
	int32_t		 count;
	size_t		 n;

	/* What came before is sent first: the block's own bytes leave only
	 * with the next block or the task's end, after the source's check. */
	if (out->used > 0 && out->used + len > OUTPUT_BUFFER &&
	    output_flush(out, err) == -1)
		return (-1);
	output_mark(out);
	w = out->buf + out->used;
	room = out->buf + out->size;
	count = out->count;
	for (; p < end; p = nl + 1) {
		/* A newline may be gone, read as a zero from a file cut
		 * under its mapping: the line ends at the block's end. */
		if ((nl = memchr(p, '\n', (size_t)(end - p))) == NULL)
			nl = end;
		n = (size_t)(nl - p);
		if ((size_t)(room - w) < record_size(n))
			break;
		w = record_put(w, p, n, 0);
		count++;
	}
	*lines = (size_t)(count - out->count);
	out->used = (size_t)(w - out->buf);
	out->count = count;
	/* The rest of a block larger than the room (lines of a few bytes,
	 * a long line): sent as the buffer fills. */
	for (; p < end; p = nl + 1) {
		if ((nl = memchr(p, '\n', (size_t)(end - p))) == NULL)
			nl = end;
		if (output_record(out, p, (size_t)(nl - p), 0, err) == -1)
			return (-1);
		(*lines)++;
	}
	return (0);
}

/* Forget the records not yet sent. */
void
output_discard(struct output *out)
{
	out->used = 0;
	out->count = 0;
}

/* Append a pair or group; one too large for the buffer goes alone. */
int
output_keyed(struct output *out, const struct record *r, char **err)
{
	unsigned char	hdr[WMSG_BATCH_SIZE + KEYED_HEAD], word[4];
	struct iovec	iov[4];
	size_t		need = keyed_size(r);

	if (r->klen > EMBER_MAX_BATCH || r->len > EMBER_MAX_BATCH ||
	    need > EMBER_MAX_BATCH) {
		xasprintf(err, "a keyed record of %zu bytes exceeds the 64 MiB "
		    "limit", r->klen + r->len);
		return (-1);
	}
	if (out->used + need > OUTPUT_BUFFER && output_flush(out, err) == -1)
		return (-1);
	if (need <= OUTPUT_BUFFER || out->guard != NULL) {
		output_grow(out, need);
		output_mark(out);
		keyed_put(out->buf + out->used, r);
		out->used += need;
		out->count++;
		return (0);
	}
	output_batch_header(hdr, 1, need);
	keyed_head(hdr + WMSG_BATCH_SIZE, r);
	keyed_word(word, r);
	iov[0].iov_base = hdr;
	iov[0].iov_len = sizeof hdr;
	iov[1].iov_base = (void *)r->key;
	iov[1].iov_len = r->klen;
	iov[2].iov_base = word;
	iov[2].iov_len = sizeof word;
	iov[3].iov_base = (void *)r->data;
	iov[3].iov_len = r->len;
	if (output_writev(out, iov, 4, err) == -1)
		return (-1);
	out->bytes += need;
	return (0);
}

/* Append a counted record, in one batch whatever its size. */
int
output_counted(struct output *out, const void *data, size_t len, int null,
    int64_t count, char **err)
{
	unsigned char	hdr[WMSG_BATCH_SIZE + RECORD_HEAD];
	unsigned char	tail[RECORD_COUNT_FRAME];
	struct iovec	iov[3];
	size_t		need;

	if (null)
		len = 0;
	need = record_counted_size(len);
	if (len > EMBER_MAX_BATCH - record_counted_size(0)) {
		xasprintf(err, "record of %zu bytes exceeds the 64 MiB limit",
		    len);
		return (-1);
	}
	if (out->used + need > OUTPUT_BUFFER && output_flush(out, err) == -1)
		return (-1);
	if (need <= OUTPUT_BUFFER || out->guard != NULL) {
		output_grow(out, need);
		output_mark(out);
		record_count_put(record_put(out->buf + out->used, data, len,
		    null), count);
		out->used += need;
		out->count += 2;
		return (0);
	}

	/* A key too large for the buffer: a batch of the pair alone. */
	output_batch_header(hdr, 2, need);
	record_head_put(hdr + WMSG_BATCH_SIZE, len, null);
	record_count_put(tail, count);
	iov[0].iov_base = hdr;
	iov[0].iov_len = sizeof hdr;
	iov[1].iov_base = (void *)data;
	iov[1].iov_len = len;
	iov[2].iov_base = tail;
	iov[2].iov_len = sizeof tail;
	if (output_writev(out, iov, 3, err) == -1)
		return (-1);
	out->bytes += need;
	return (0);
}

/* End a clean task; with hold, keep its end back if it can wait. */
int
output_finish(struct output *out, const int64_t *metrics, int nmetrics,
    int hold, char **err)
{
	unsigned char	hdr[WMSG_BATCH_SIZE];
	unsigned char	tail[WMSG_TYPE_SIZE + WMSG_TIMING_SIZE +
			    WMSG_METRIC_SIZE * EMBER_METRIC_COUNT +
			    WMSG_TYPE_SIZE];
	unsigned char	*p = tail;
	struct wmsg	m = { 0, 0, 0 };
	struct iovec	iov[3];
	int		n;

	if (nmetrics > EMBER_METRIC_COUNT)
		nmetrics = EMBER_METRIC_COUNT;
	n = output_batch_iov(out, hdr, iov);
	m.type = EMBER_END_OF_DATA_SECTION;
	p += wmsg_put(p, &m);
	m.type = EMBER_TIMING_DATA;
	m.length = nmetrics;
	p += wmsg_put(p, &m);
	p += wmsg_put_metrics(p, metrics, nmetrics);
	m.type = EMBER_END_OF_STREAM;
	m.length = 0;
	p += wmsg_put(p, &m);
	if (hold && n == 0 && out->heldn < EMBER_MAX_TASK_BATCH &&
	    (out->heldn == 0 || out->heldm == nmetrics)) {
		/* An entry of the TASKS_DONE held: the same ends, shorter. */
		if (out->heldn++ == 0) {
			out->heldm = nmetrics;
			out->heldlen = WMSG_DONE_SIZE;
		}
		be32_put(out->held + out->heldlen, out->partition);
		out->heldlen += 4;
		out->heldlen += wmsg_put_metrics(out->held + out->heldlen,
		    metrics, nmetrics);
		return (0);
	}
	iov[n].iov_base = tail;
	iov[n].iov_len = (size_t)(p - tail);
	if (output_writev(out, iov, n + 1, err) == -1)
		return (-1);
	output_batch_sent(out);
	return (0);
}

/* End a failed task. */
int
output_fail(struct output *out, const char *message)
{
	unsigned char	hdr[WMSG_BATCH_SIZE];
	unsigned char	tail[WMSG_ERROR_SIZE];
	struct wmsg	m = { EMBER_EXCEPTION_THROWN, 0, 0 };
	struct iovec	iov[4];
	size_t		len;
	int		n;

	len = utf8_cut(message, strlen(message), EMBER_MAX_ERROR_FRAME);
	n = output_batch_iov(out, hdr, iov);
	m.length = (int32_t)len;
	wmsg_put(tail, &m);
	iov[n].iov_base = tail;
	iov[n].iov_len = sizeof tail;
	iov[n + 1].iov_base = (void *)message;
	iov[n + 1].iov_len = len;
	if (output_writev(out, iov, n + 2, NULL) == -1)
		return (-1);
	output_batch_sent(out);
	return (0);
}
