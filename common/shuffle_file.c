/*
 * Shuffle files: an entry's encoding, key order, the reader of a bucket,
 * the merge of readers and a sort's boundaries (docs/protocol.md,
 * "Shuffle files").  The file comes from a map task, which runs the
 * user's code: every length is checked against the bytes that are there,
 * and every block's CRC before its end is passed on.
 */
#include <sys/stat.h>

#include <errno.h>
#include <fcntl.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include <zlib.h>

#include "frame.h"
#include "plan.h"
#include "shuffle_private.h"
#include "xmalloc.h"

/* An entry's kind is the plan's kind of record, as the worker has it. */
_Static_assert(SHUFFLE_KIND_RECORD == PLAN_KIND_RECORD &&
    SHUFFLE_KIND_PAIR == PLAN_KIND_PAIR &&
    SHUFFLE_KIND_GROUP == PLAN_KIND_GROUP, "shuffle kinds are plan kinds");

/*
 * A fuzzing build reads past CRC mismatches, so that the fuzzer reaches
 * the checks behind them (libFuzzer's convention; configure's
 * --enable-fuzzing defines it).  Every other build stops at them.
 */
#ifdef FUZZING_BUILD_MODE_UNSAFE_FOR_PRODUCTION
#define SF_CRC_BAD(a, b)	((void)(a), (void)(b), 0)
#else
#define SF_CRC_BAD(a, b)	((uint32_t)(a) != (uint32_t)(b))
#endif

struct sf_block {
	int64_t		 off;		/* from the bucket's start */
	uint32_t	 crc;
};

struct shuffle_reader {
	char		*name;
	int		 fd;
	int		 buckets;
	enum shuffle_order order;
	int		 descending;
	int64_t		 off, len, count;	/* the bucket's */
	uint32_t	 crc;
	struct sf_block	*blocks;
	size_t		 nblocks;
	unsigned char	*extra;
	struct shuffle_key *sample;
	size_t		 nsample;
	struct sf_in	 in;
	size_t		 chunk;		/* bytes per read */
	size_t		 blk;		/* the block being read */
	unsigned long	 bcrc;		/* the blocks' CRCs combined */
	int		 whole;		/* read from the start */
	int64_t		 seen;		/* entries read */
	struct shuffle_entry peek;	/* seek's entry, given next */
	int		 peeked;
	struct sf_num	 num;		/* the last entry's key as a number */
};

/* The bytes of e encoded. */
size_t
sf_encode_size(const struct shuffle_entry *e)
{
	size_t	n = 1 + 4 + (e->knull ? 0 : e->klen);

	if (e->kind == SHUFFLE_KIND_PAIR)
		n += 4 + (e->vnull ? 0 : e->vlen);
	else if (e->kind == SHUFFLE_KIND_GROUP)
		n += 4 + e->vlen;
	return (n);
}

/* Put a frame of n bytes at p, or a null one; returns the bytes. */
static size_t
sf_put_frame(unsigned char *p, const char *s, size_t n, int null)
{
	if (null) {
		be32_put(p, SF_NULL);
		return (4);
	}
	be32_put(p, (int32_t)n);
	if (n > 0)
		memcpy(p + 4, s, n);
	return (4 + n);
}

/* Encode e at p. */
size_t
sf_encode(unsigned char *p, const struct shuffle_entry *e)
{
	size_t	n = 1;

	if (e->kind == SHUFFLE_KIND_PAIR)
		p[0] = SF_TAG_PAIR;
	else if (e->kind == SHUFFLE_KIND_GROUP)
		p[0] = SF_TAG_GROUP;
	else
		p[0] = SF_TAG_RECORD;
	n += sf_put_frame(p + n, e->key, e->klen, e->knull);
	if (e->kind == SHUFFLE_KIND_PAIR)
		n += sf_put_frame(p + n, e->value, e->vlen, e->vnull);
	else if (e->kind == SHUFFLE_KIND_GROUP)
		n += sf_put_frame(p + n, e->value, e->vlen, 0);
	return (n);
}

/* Are the len bytes at p whole frames (a group's values)? */
static int
sf_frames_valid(const unsigned char *p, size_t len)
{
	int32_t	n;

	while (len > 0) {
		if (len < 4)
			return (0);
		n = be32_get(p);
		p += 4;
		len -= 4;
		if (n == SF_NULL)
			continue;
		if (n < 0 || (size_t)n > len)
			return (0);
		p += n;
		len -= (size_t)n;
	}
	return (1);
}

/* Decode the frame length at p: 0 and *n (-1 for null), or -1. */
static int
sf_frame_len(const unsigned char *p, int null_ok, int64_t *n)
{
	int32_t	v = be32_get(p);

	if (v == SF_NULL && null_ok) {
		*n = -1;
		return (0);
	}
	if (v < 0)
		return (-1);
	*n = v;
	return (0);
}

/* Decode the entry at p. */
int
sf_decode(const unsigned char *p, size_t avail, struct shuffle_entry *e,
    size_t *size, const char **why)
{
	int64_t	klen, vlen = 0;
	size_t	need = 5, at;
	int	tag;

	if (avail < need)
		goto more;
	tag = p[0];
	if (tag != SF_TAG_RECORD && tag != SF_TAG_PAIR && tag != SF_TAG_GROUP) {
		*why = "unknown entry tag";
		return (-1);
	}
	if (sf_frame_len(p + 1, tag == SF_TAG_RECORD, &klen) == -1) {
		*why = "bad key length";
		return (-1);
	}
	need += klen > 0 ? (size_t)klen : 0;
	at = need;
	if (tag != SF_TAG_RECORD) {
		need += 4;
		if (avail < need)
			goto more;
		if (sf_frame_len(p + at, tag == SF_TAG_PAIR, &vlen) == -1) {
			*why = "bad value length";
			return (-1);
		}
		need += vlen > 0 ? (size_t)vlen : 0;
	}
	if (avail < need)
		goto more;
	memset(e, 0, sizeof *e);
	e->kind = tag == SF_TAG_PAIR ? SHUFFLE_KIND_PAIR :
	    tag == SF_TAG_GROUP ? SHUFFLE_KIND_GROUP : SHUFFLE_KIND_RECORD;
	e->knull = klen < 0;
	e->key = e->knull ? NULL : (const char *)p + 5;
	e->klen = klen > 0 ? (size_t)klen : 0;
	if (tag != SF_TAG_RECORD) {
		e->vnull = vlen < 0;
		e->value = e->vnull ? NULL : (const char *)p + at + 4;
		e->vlen = vlen > 0 ? (size_t)vlen : 0;
	}
	if (tag == SF_TAG_GROUP &&
	    !sf_frames_valid((const unsigned char *)e->value, e->vlen)) {
		*why = "bad group values";
		return (-1);
	}
	*size = need;
	return (1);
more:
	*size = need;
	return (0);
}

/* Read a short integer (an optional sign and up to 18 digits, which
 * cannot overflow) as strtoll would, without its copy and locale: the
 * common value of a sum.  0 for anything else, which strtoll reads. */
static int
shuffle_number_int(const char *p, size_t len, int64_t *i)
{
	const char	*end = p + len;
	int		 neg = 0;
	uint64_t	 v = 0;

	if (*p == '-' || *p == '+') {
		neg = *p == '-';
		p++;
	}
	if (p == end || end - p > 18)
		return (0);
	for (; p < end; p++) {
		if (*p < '0' || *p > '9')
			return (0);
		v = v * 10 + (uint64_t)(*p - '0');
	}
	*i = neg ? -(int64_t)v : (int64_t)v;
	return (1);
}

/* Read a key as a number, as reduce reads a record. */
int
shuffle_number_parse(const char *p, size_t len, int64_t *i, double *d)
{
	char	 buf[64], *s, *end;
	size_t	 k;
	int	 integer = 1, r = 0;

	if (p == NULL || len == 0)
		return (0);
	if (shuffle_number_int(p, len, i))
		return (1);
	for (k = 0; k < len; k++) {
		char c = p[k];

		if (c >= '0' && c <= '9')
			continue;
		if ((c == '+' || c == '-') && k == 0)
			continue;
		if (c == '.' || c == 'e' || c == 'E' || c == '+' || c == '-')
			integer = 0;
		else
			return (0);
	}
	s = len < sizeof buf ? buf : xmalloc(len + 1);
	memcpy(s, p, len);
	s[len] = '\0';
	if (integer) {
		errno = 0;
		*i = strtoll(s, &end, 10);
		if (errno == 0 && *end == '\0' && end != s)
			r = 1;
	}
	if (r == 0) {
		errno = 0;
		*d = strtod(s, &end);
		if (*end == '\0' && end != s && isfinite(*d))
			r = 2;
	}
	if (s != buf)
		free(s);
	return (r);
}

/* Read e's key as a number. */
int
sf_num_read(enum shuffle_order order, const struct shuffle_entry *e,
    struct sf_num *n)
{
	n->type = 0;
	if (order != SHUFFLE_ORDER_KEY_NUMERIC)
		return (0);
	if (e->knull)
		return (-1);
	n->type = shuffle_number_parse(e->key, e->klen, &n->i, &n->d);
	if (n->type == 1)
		n->d = (double)n->i;
	return (n->type == 0 ? -1 : 0);
}

/* Show a key in an error. */
void
sf_key_show(char *buf, size_t size, const struct shuffle_entry *e)
{
	size_t	i, n = e->klen < 64 ? e->klen : 64, at = 0;
	char	c;

	if (e->knull || size < SF_SHOWN_SIZE) {
		snprintf(buf, size, "null");
		return;
	}
	buf[at++] = '"';
	for (i = 0; i < n; i++) {
		c = e->key[i];
		buf[at++] = c >= 0x20 && c < 0x7f ? c : '?';
	}
	buf[at++] = '"';
	if (n < e->klen) {
		memcpy(buf + at, "...", 3);
		at += 3;
	}
	buf[at] = '\0';
}

/* Compare two keys' bytes: memcmp, then length; NULL first. */
int
sf_bytes_compare(const char *a, size_t alen, const char *b, size_t blen)
{
	int	c;

	if (a == NULL || b == NULL)
		return ((a != NULL) - (b != NULL));
	if ((c = memcmp(a, b, alen < blen ? alen : blen)) != 0)
		return (c);
	return ((alen > blen) - (alen < blen));
}

/* Compare two numbers: as int64 when both are, else as doubles; a
 * number that is none sorts last. */
int
sf_num_compare(const struct sf_num *a, const struct sf_num *b)
{
	if (a->type == 0 || b->type == 0)
		return ((a->type == 0) - (b->type == 0));
	if (a->type == 1 && b->type == 1)
		return ((a->i > b->i) - (a->i < b->i));
	return ((a->d > b->d) - (a->d < b->d));
}

/* Compare two entries' keys in order. */
int
sf_entry_compare(enum shuffle_order order, int descending,
    const struct shuffle_entry *a, const struct sf_num *na,
    const struct shuffle_entry *b, const struct sf_num *nb)
{
	int	c;

	if (order == SHUFFLE_ORDER_KEY_NUMERIC)
		c = sf_num_compare(na, nb);
	else if (order == SHUFFLE_ORDER_KEY)
		c = sf_bytes_compare(a->knull ? NULL : a->key, a->klen,
		    b->knull ? NULL : b->key, b->klen);
	else
		c = 0;
	return (descending ? -c : c);
}

/* Compare two keys in order. */
int
shuffle_key_compare(enum shuffle_order order, int descending, const char *a,
    size_t alen, const char *b, size_t blen)
{
	struct shuffle_entry	ea, eb;
	struct sf_num		na, nb;

	memset(&ea, 0, sizeof ea);
	memset(&eb, 0, sizeof eb);
	ea.key = a;
	ea.klen = alen;
	ea.knull = a == NULL;
	eb.key = b;
	eb.klen = blen;
	eb.knull = b == NULL;
	(void)sf_num_read(order, &ea, &na);
	(void)sf_num_read(order, &eb, &nb);
	return (sf_entry_compare(order, descending, &ea, &na, &eb, &nb));
}

/* Start reading [start, end) of fd. */
void
sf_in_init(struct sf_in *in, int fd, int64_t start, int64_t end,
    size_t chunk)
{
	free(in->buf);
	memset(in, 0, sizeof *in);
	in->fd = fd;
	in->pos = in->bufoff = in->crc_done = start;
	in->end = end;
	in->chunk = chunk;
	in->crc = crc32_z(0, NULL, 0);
}

/* Free the reader's buffer. */
void
sf_in_free(struct sf_in *in)
{
	free(in->buf);
	in->buf = NULL;
}

/* The file offset of the next unread byte. */
int64_t
sf_in_offset(const struct sf_in *in)
{
	return (in->bufoff + (int64_t)in->head);
}

/* Fold the bytes read up to upto into the crc. */
void
sf_in_crc(struct sf_in *in, int64_t upto)
{
	if (!in->crc_on || upto <= in->crc_done)
		return;
	in->crc = crc32_z(in->crc, in->buf + (in->crc_done - in->bufoff),
	    (size_t)(upto - in->crc_done));
	in->crc_done = upto;
}

/* Move the unread bytes to the buffer's start (the bytes before them
 * folded into the CRC first: they are gone after). */
static void
sf_in_compact(struct sf_in *in)
{
	sf_in_crc(in, sf_in_offset(in));
	if (in->head > 0) {
		memmove(in->buf, in->buf + in->head, in->tail - in->head);
		in->bufoff += (int64_t)in->head;
		in->tail -= in->head;
		in->head = 0;
	}
}

/* Read in pieces of chunk bytes from now on.  The buffer shrinks at
 * its next refill, when the entry it gave last is no longer valid. */
void
sf_in_resize(struct sf_in *in, size_t chunk)
{
	in->chunk = chunk;
}

/* Have n bytes buffered: 0, or -1 with *why (past the range, a short
 * file, a read error). */
static int
sf_in_fill(struct sf_in *in, size_t n, const char **why)
{
	size_t	 want;
	ssize_t	 r;

	if (in->tail - in->head >= n)
		return (0);
	if ((int64_t)(n - (in->tail - in->head)) > in->end - in->pos) {
		*why = "an entry runs past its bucket or block";
		return (-1);
	}
	sf_in_compact(in);
	want = n > in->chunk ? n : in->chunk;
	if ((int64_t)want > (int64_t)in->tail + (in->end - in->pos))
		want = in->tail + (size_t)(in->end - in->pos);
	/* Grown for a large entry, or for a larger chunk: back to size. */
	if (want > in->size || (in->size > in->chunk && want <= in->chunk)) {
		in->buf = xrealloc(in->buf, want);
		in->size = want;
	}
	while (in->tail < n) {
		want = in->size - in->tail;
		if ((int64_t)want > in->end - in->pos)
			want = (size_t)(in->end - in->pos);
		r = pread(in->fd, in->buf + in->tail, want, in->pos);
		if (r == -1 && errno == EINTR)
			continue;
		if (r <= 0) {
			*why = r == 0 ? "the file is short" : strerror(errno);
			return (-1);
		}
		in->tail += (size_t)r;
		in->pos += r;
	}
	return (0);
}

/* The next entry of the range. */
int
sf_in_next(struct sf_in *in, struct shuffle_entry *e, size_t *size,
    const char **why)
{
	size_t	need = 5;
	int	r;

	if (in->head == in->tail && in->pos == in->end)
		return (0);
	for (;;) {
		if (sf_in_fill(in, need, why) == -1)
			return (-1);
		r = sf_decode(in->buf + in->head, in->tail - in->head, e, &need,
		    why);
		if (r == -1)
			return (-1);
		if (r == 1)
			break;
	}
	in->head += need;
	*size = need;
	return (1);
}

/* Set *err to "shuffle file NAME: why". */
static void
sf_error(char **err, const char *name, const char *why)
{
	xasprintf(err, "shuffle file %s: %s", name, why);
}

/* Read len bytes at off: 0, or -1 with *why. */
static int
sf_pread(int fd, void *buf, size_t len, int64_t off, const char **why)
{
	ssize_t	r;

	while (len > 0) {
		r = pread(fd, buf, len, off);
		if (r == -1 && errno == EINTR)
			continue;
		if (r <= 0) {
			*why = r == 0 ? "the file is short" : strerror(errno);
			return (-1);
		}
		buf = (char *)buf + r;
		len -= (size_t)r;
		off += r;
	}
	return (0);
}

/* Read the extra section of the bucket: its samples and blocks. */
static int
sf_reader_extra(struct shuffle_reader *r, const unsigned char *p,
    size_t len, const char **why)
{
	size_t	 i, at = 4;
	int32_t	 n;
	int64_t	 klen, prev = -1;

	*why = "bad bucket extras";
	if (len < 4 || (n = be32_get(p)) < 0 || n > SHUFFLE_SAMPLE_MAX)
		return (-1);
	r->sample = xcalloc((size_t)n + 1, sizeof *r->sample);
	for (i = 0; i < (size_t)n; i++) {
		if (len - at < 4 || sf_frame_len(p + at, 1, &klen) == -1 ||
		    klen > SHUFFLE_SAMPLE_KEY_MAX ||
		    (klen > 0 && (int64_t)(len - at - 4) < klen))
			return (-1);
		r->sample[i].key = klen < 0 ? NULL : (const char *)p + at + 4;
		r->sample[i].len = klen > 0 ? (size_t)klen : 0;
		at += 4 + (klen > 0 ? (size_t)klen : 0);
	}
	r->nsample = (size_t)n;
	if (len - at < 4 || (n = be32_get(p + at)) < 0 ||
	    (size_t)n > (len - at - 4) / SF_BLOCK_ENTRY_SIZE)
		return (-1);
	at += 4;
	r->blocks = xcalloc((size_t)n + 1, sizeof *r->blocks);
	for (i = 0; i < (size_t)n; i++, at += SF_BLOCK_ENTRY_SIZE) {
		r->blocks[i].off = be64_get(p + at);
		r->blocks[i].crc = (uint32_t)be32_get(p + at + 8);
		if (r->blocks[i].off <= prev || r->blocks[i].off >= r->len ||
		    (i == 0 && r->blocks[i].off != 0))
			return (-1);
		prev = r->blocks[i].off;
	}
	r->nblocks = (size_t)n;
	if (at != len || (r->nblocks == 0) != (r->len == 0))
		return (-1);
	return (0);
}

/* Read and check the trailer at the file's end into t: 0 and the
 * table's offset in *toff, or -1 with *why. */
static int
sf_reader_trailer(struct shuffle_reader *r, unsigned char *t, int64_t *toff,
    const char **why)
{
	struct stat	 st;
	int32_t		 flags;

	if (fstat(r->fd, &st) == -1) {
		*why = strerror(errno);
		return (-1);
	}
	*why = "no shuffle file footer";
	if (!S_ISREG(st.st_mode) || st.st_size < SF_TRAILER_SIZE ||
	    sf_pread(r->fd, t, SF_TRAILER_SIZE, st.st_size - SF_TRAILER_SIZE,
	    why) == -1 || memcmp(t + 20, SF_MAGIC, SF_MAGIC_SIZE) != 0)
		return (-1);
	r->buckets = be32_get(t);
	flags = be32_get(t + 4);
	*toff = be64_get(t + 8);
	*why = "footer CRC mismatch";
	if (SF_CRC_BAD(crc32_z(0, t, 16), be32_get(t + 16)))
		return (-1);
	*why = "bad footer";
	if (r->buckets < 1 || r->buckets > SF_MAX_BUCKETS || (flags & ~7) ||
	    ((flags & SF_FLAG_NUMERIC) && !(flags & SF_FLAG_ORDERED)))
		return (-1);
	/* The table ends where the trailer begins. */
	if (*toff < 0 || *toff != st.st_size - SF_TRAILER_SIZE -
	    (int64_t)r->buckets * SF_ROW_SIZE)
		return (-1);
	r->order = !(flags & SF_FLAG_ORDERED) ? SHUFFLE_ORDER_NONE :
	    (flags & SF_FLAG_NUMERIC) ? SHUFFLE_ORDER_KEY_NUMERIC :
	    SHUFFLE_ORDER_KEY;
	r->descending = (flags & SF_FLAG_DESCENDING) != 0;
	return (0);
}

/* Read the bucket's row (data and extras before the table at toff),
 * then its extras. */
static int
sf_reader_row(struct shuffle_reader *r, const unsigned char *row,
    int64_t toff, const char **why)
{
	int64_t	xoff, xlen;

	r->off = be64_get(row);
	r->len = be64_get(row + 8);
	r->count = be64_get(row + 16);
	r->crc = (uint32_t)be32_get(row + 24);
	xoff = be64_get(row + 28);
	xlen = be32_get(row + 36);
	*why = "bad bucket row";
	if (r->off < 0 || r->len < 0 || r->off > toff ||
	    r->len > toff - r->off || r->count < 0 || r->count > r->len ||
	    xoff < 0 || xlen < 8 || xoff > toff || xlen > toff - xoff)
		return (-1);
	r->extra = xmalloc((size_t)xlen);
	if (sf_pread(r->fd, r->extra, (size_t)xlen, xoff, why) == -1)
		return (-1);
	*why = "bucket extras CRC mismatch";
	if (SF_CRC_BAD(crc32_z(0, r->extra, (size_t)xlen), be32_get(row + 40)))
		return (-1);
	return (sf_reader_extra(r, r->extra, (size_t)xlen, why));
}

/* Check the trailer, then read and check the bucket's row and extras:
 * only those, so that a reduce task opening every map's file reads a
 * row of each, not R. */
static int
sf_reader_footer(struct shuffle_reader *r, int bucket, const char **why)
{
	unsigned char	 t[SF_TRAILER_SIZE], row[SF_ROW_SIZE];
	int64_t		 toff;

	if (sf_reader_trailer(r, t, &toff, why) == -1)
		return (-1);
	if (bucket < 0 || bucket >= r->buckets) {
		*why = "no such bucket";
		return (-1);
	}
	if (sf_pread(r->fd, row, sizeof row, toff + (int64_t)bucket *
	    SF_ROW_SIZE, why) == -1)
		return (-1);
	*why = "bucket row CRC mismatch";
	if (SF_CRC_BAD(crc32_z(0, row, 44), be32_get(row + 44)))
		return (-1);
	return (sf_reader_row(r, row, toff, why));
}

/* Start reading the bucket at block i. */
static void
sf_reader_start(struct shuffle_reader *r, size_t i)
{
	int64_t	start = r->off + (i < r->nblocks ? r->blocks[i].off : r->len);

	sf_in_init(&r->in, r->fd, start, r->off + r->len, r->chunk);
	r->in.crc_on = 1;
	r->blk = i;
	r->bcrc = crc32_z(0, NULL, 0);
	r->whole = i == 0;
	r->seen = 0;
	r->peeked = 0;
}

/* A reader of one bucket of an open file. */
struct shuffle_reader *
shuffle_reader_open_fd(int fd, const char *name, int bucket, char **err)
{
	struct shuffle_reader	*r;
	const char		*why;

	r = xcalloc(1, sizeof *r);
	r->name = xstrdup(name);
	r->fd = fd;
	r->chunk = SF_IO_SIZE;
	if (sf_reader_footer(r, bucket, &why) == -1) {
		sf_error(err, name, why);
		shuffle_reader_free(r);
		return (NULL);
	}
	sf_reader_start(r, 0);
	return (r);
}

/* A reader of one bucket of NAME in dirfd. */
struct shuffle_reader *
shuffle_reader_open(int dirfd, const char *name, int bucket, char **err)
{
	int	fd;

	if (*name == '\0' || strchr(name, '/') != NULL) {
		sf_error(err, name, "a name, not a path");
		return (NULL);
	}
	/* O_NONBLOCK: a FIFO planted by the user's code does not hang the
	 * open; it is then refused as no regular file. */
	fd = openat(dirfd, name, O_RDONLY|O_NOFOLLOW|O_CLOEXEC|O_NOCTTY|
	    O_NONBLOCK);
	if (fd == -1) {
		sf_error(err, name, strerror(errno));
		return (NULL);
	}
	return (shuffle_reader_open_fd(fd, name, bucket, err));
}

/* The file's bucket count. */
int
shuffle_reader_buckets(struct shuffle_reader *r)
{
	return (r->buckets);
}

/* The file's order. */
enum shuffle_order
shuffle_reader_order(struct shuffle_reader *r)
{
	return (r->order);
}

/* Whether the file's order is reversed. */
int
shuffle_reader_descending(struct shuffle_reader *r)
{
	return (r->descending);
}

/* The bucket's entries, as its row gives them. */
int64_t
shuffle_reader_count(struct shuffle_reader *r)
{
	return (r->count);
}

/* The end of block i, as a file offset. */
static int64_t
sf_block_end(const struct shuffle_reader *r, size_t i)
{
	return (r->off + (i + 1 < r->nblocks ? r->blocks[i + 1].off : r->len));
}

/* Check the block that ends where the last entry did. */
static int
sf_reader_block(struct shuffle_reader *r, const char **why)
{
	int64_t	at = sf_in_offset(&r->in), end = sf_block_end(r, r->blk);

	if (at < end)
		return (0);
	if (at > end) {
		*why = "an entry crosses a block";
		return (-1);
	}
	sf_in_crc(&r->in, at);
	if (SF_CRC_BAD(r->in.crc, r->blocks[r->blk].crc)) {
		*why = "CRC mismatch";
		return (-1);
	}
	r->bcrc = crc32_combine(r->bcrc, r->in.crc,
	    end - r->off - r->blocks[r->blk].off);
	r->in.crc = crc32_z(0, NULL, 0);
	r->blk++;
	return (0);
}

/* Check the bucket as a whole at its end. */
static int
sf_reader_end(struct shuffle_reader *r, const char **why)
{
	if (!r->whole)
		return (0);
	if (SF_CRC_BAD(r->bcrc, r->crc)) {
		*why = "bucket CRC mismatch";
		return (-1);
	}
	if (r->seen != r->count) {
		*why = "bucket entry count mismatch";
		return (-1);
	}
	return (0);
}

/* Read the next entry of the bucket, unpeeked. */
static int
sf_reader_read(struct shuffle_reader *r, struct shuffle_entry *e,
    const char **why)
{
	size_t	size;
	int	rc;

	if ((rc = sf_in_next(&r->in, e, &size, why)) == 0)
		return (sf_reader_end(r, why) == -1 ? -1 : 0);
	if (rc == -1 || sf_reader_block(r, why) == -1)
		return (-1);
	r->seen++;
	if (sf_num_read(r->order, e, &r->num) == -1) {
		*why = "a key is not a number in a numeric file";
		return (-1);
	}
	return (1);
}

/* The next entry. */
int
shuffle_reader_next(struct shuffle_reader *r, struct shuffle_entry *e,
    char **err)
{
	const char	*why;
	int		 rc;

	if (r->peeked) {
		*e = r->peek;
		r->peeked = 0;
		return (1);
	}
	if ((rc = sf_reader_read(r, e, &why)) == -1)
		sf_error(err, r->name, why);
	return (rc);
}

/* Does block i's first entry sort before key?  1, 0, or -1. */
static int
sf_block_before(struct shuffle_reader *r, size_t i,
    const struct shuffle_entry *key, const struct sf_num *kn,
    const char **why)
{
	struct shuffle_entry	e;
	size_t			size;

	sf_in_init(&r->in, r->fd, r->off + r->blocks[i].off,
	    sf_block_end(r, i), SF_IO_MIN);
	switch (sf_in_next(&r->in, &e, &size, why)) {
	case 1:
		break;
	case 0:
		*why = "an empty block";
		return (-1);
	default:
		return (-1);	/* *why says why */
	}
	if (sf_num_read(r->order, &e, &r->num) == -1) {
		*why = "a key is not a number";
		return (-1);
	}
	return (sf_entry_compare(r->order, r->descending, &e, &r->num,
	    key, kn) < 0);
}

/* Find the last block whose first entry sorts before key (0 if none). */
static int
sf_reader_find(struct shuffle_reader *r, const struct shuffle_entry *key,
    const struct sf_num *kn, size_t *blk, const char **why)
{
	size_t	lo = 0, hi = r->nblocks, mid;
	int	c;

	/* Invariant: blocks before lo start before key; from hi, not. */
	while (lo < hi) {
		mid = lo + (hi - lo) / 2;
		if ((c = sf_block_before(r, mid, key, kn, why)) == -1)
			return (-1);
		if (c)
			lo = mid + 1;
		else
			hi = mid;
	}
	*blk = lo > 0 ? lo - 1 : 0;
	return (0);
}

/* Go to the first entry that does not sort before key. */
int
shuffle_reader_seek(struct shuffle_reader *r, const char *key, size_t klen,
    char **err)
{
	struct shuffle_entry	k, e;
	struct sf_num		kn;
	const char		*why = "an unordered file has no seek";
	size_t			blk;
	int			rc;

	if (r->order == SHUFFLE_ORDER_NONE)
		goto fail;
	memset(&k, 0, sizeof k);
	k.key = key;
	k.klen = klen;
	k.knull = key == NULL;
	(void)sf_num_read(r->order, &k, &kn);
	if (sf_reader_find(r, &k, &kn, &blk, &why) == -1)
		goto fail;
	sf_reader_start(r, blk);
	while ((rc = sf_reader_read(r, &e, &why)) == 1) {
		if (sf_entry_compare(r->order, r->descending, &e, &r->num, &k,
		    &kn) >= 0) {
			r->peek = e;
			r->peeked = 1;
			break;
		}
	}
	if (rc == -1)
		goto fail;
	return (0);
fail:
	sf_error(err, r->name, why);
	return (-1);
}

/* The bucket's sampled keys. */
size_t
shuffle_reader_sample(struct shuffle_reader *r, const struct shuffle_key **k)
{
	*k = r->sample;
	return (r->nsample);
}

/* Free a reader and close its file. */
void
shuffle_reader_free(struct shuffle_reader *r)
{
	if (r == NULL)
		return;
	sf_in_free(&r->in);
	if (r->fd != -1)
		close(r->fd);
	free(r->blocks);
	free(r->sample);
	free(r->extra);
	free(r->name);
	free(r);
}

/* A k-way merge: a heap of reader indexes, each with its current entry. */
struct shuffle_merge {
	struct shuffle_reader	**readers;
	size_t			  n;
	enum shuffle_order	  order;
	int			  descending;
	struct shuffle_entry	 *cur;
	struct sf_num		 *num;
	size_t			 *heap;
	size_t			  nheap;
	int			  started;
	size_t			  last;	/* the reader to advance next */
	int			  done;
};

/* Does reader a's entry come before b's?  Ties to the lower index. */
static int
sf_merge_less(const struct shuffle_merge *m, size_t a, size_t b)
{
	int	c;

	c = sf_entry_compare(m->order, m->descending, &m->cur[a], &m->num[a],
	    &m->cur[b], &m->num[b]);
	return (c < 0 || (c == 0 && a < b));
}

/* Sift the heap's element at i down. */
static void
sf_merge_down(struct shuffle_merge *m, size_t i)
{
	size_t	c, t;

	for (;;) {
		c = 2 * i + 1;
		if (c >= m->nheap)
			return;
		if (c + 1 < m->nheap &&
		    sf_merge_less(m, m->heap[c + 1], m->heap[c]))
			c++;
		if (!sf_merge_less(m, m->heap[c], m->heap[i]))
			return;
		t = m->heap[c];
		m->heap[c] = m->heap[i];
		m->heap[i] = t;
		i = c;
	}
}

/* A merge of n readers. */
struct shuffle_merge *
shuffle_merge_create(struct shuffle_reader **readers, size_t n,
    enum shuffle_order order, int descending)
{
	struct shuffle_merge	*m;
	size_t			 i, chunk;

	m = xcalloc(1, sizeof *m);
	m->readers = readers;
	m->n = n;
	m->order = order;
	m->descending = descending;
	/* Many readers read in smaller pieces: their buffers stay within
	 * SF_MERGE_BUFFERS in all. */
	chunk = n > 0 ? SF_MERGE_BUFFERS / n : SF_IO_SIZE;
	chunk = chunk > SF_IO_SIZE ? SF_IO_SIZE : chunk < SF_IO_MIN ?
	    SF_IO_MIN : chunk;
	for (i = 0; i < n; i++) {
		readers[i]->chunk = chunk;
		sf_in_resize(&readers[i]->in, chunk);
	}
	m->cur = xcalloc(n + 1, sizeof *m->cur);
	m->num = xcalloc(n + 1, sizeof *m->num);
	m->heap = xcalloc(n + 1, sizeof *m->heap);
	return (m);
}

/* Read reader i's next entry into the merge: 1, 0, -1. */
static int
sf_merge_pull(struct shuffle_merge *m, size_t i, char **err)
{
	int	rc;

	rc = shuffle_reader_next(m->readers[i], &m->cur[i], err);
	if (rc == 1)
		m->num[i] = m->readers[i]->num;
	return (rc);
}

/* The next entry of an unordered merge: each reader in turn. */
static int
sf_merge_next_concat(struct shuffle_merge *m, struct shuffle_entry *e,
    size_t *from, char **err)
{
	int	rc;

	for (; m->last < m->n; m->last++) {
		if ((rc = shuffle_reader_next(m->readers[m->last], e,
		    err)) != 0) {
			*from = m->last;
			return (rc);
		}
	}
	return (0);
}

/* The next entry of the merge. */
int
shuffle_merge_next(struct shuffle_merge *m, struct shuffle_entry *e,
    size_t *from, char **err)
{
	size_t	i;
	int	rc;

	if (m->done)
		return (0);
	if (m->order == SHUFFLE_ORDER_NONE)
		return (sf_merge_next_concat(m, e, from, err));
	if (!m->started) {
		m->started = 1;
		for (i = 0; i < m->n; i++) {
			if ((rc = sf_merge_pull(m, i, err)) == -1)
				return (-1);
			if (rc == 1)
				m->heap[m->nheap++] = i;
		}
		for (i = m->nheap / 2; i-- > 0;)
			sf_merge_down(m, i);
	} else if (m->nheap > 0) {
		if ((rc = sf_merge_pull(m, m->heap[0], err)) == -1)
			return (-1);
		if (rc == 0)
			m->heap[0] = m->heap[--m->nheap];
		sf_merge_down(m, 0);
	}
	if (m->nheap == 0) {
		m->done = 1;
		return (0);
	}
	*from = m->heap[0];
	*e = m->cur[*from];
	return (1);
}

/* Free a merge (not its readers). */
void
shuffle_merge_free(struct shuffle_merge *m)
{
	if (m == NULL)
		return;
	free(m->cur);
	free(m->num);
	free(m->heap);
	free(m);
}

/* A sampled key with its weight, for the boundaries. */
struct sf_weighted {
	struct shuffle_entry	 e;
	struct sf_num		 num;
	double			 weight;
	size_t			 seq;
};

/* The order samples are sorted in. */
struct sf_sort {
	enum shuffle_order	 order;
	int			 descending;
};

/* qsort_r's comparison of two samples: in order, then by sequence. */
static int
sf_weighted_cmp(const void *va, const void *vb, void *arg)
{
	const struct sf_weighted	*a = va, *b = vb;
	const struct sf_sort		*o = arg;
	int				 c;

	c = sf_entry_compare(o->order, o->descending, &a->e, &a->num, &b->e,
	    &b->num);
	if (c != 0)
		return (c);
	return ((a->seq > b->seq) - (a->seq < b->seq));
}

/* Gather every reader's samples, weighted by its bucket's count. */
static size_t
sf_samples_gather(struct shuffle_reader **readers, size_t n,
    enum shuffle_order order, struct sf_weighted **out, double *total)
{
	struct sf_weighted	*w;
	size_t			 i, j, k = 0, all = 0;

	for (i = 0; i < n; i++)
		all += readers[i]->nsample;
	w = xcalloc(all + 1, sizeof *w);
	*total = 0;
	for (i = 0; i < n; i++) {
		for (j = 0; j < readers[i]->nsample; j++, k++) {
			w[k].e.key = readers[i]->sample[j].key;
			w[k].e.klen = readers[i]->sample[j].len;
			w[k].e.knull = w[k].e.key == NULL;
			w[k].weight = (double)readers[i]->count /
			    (double)readers[i]->nsample;
			w[k].seq = k;
			(void)sf_num_read(order, &w[k].e, &w[k].num);
			*total += w[k].weight;
		}
	}
	*out = w;
	return (all);
}

/* The range boundaries of a sort from the readers' samples. */
int
shuffle_boundaries(struct shuffle_reader **readers, size_t n, int partitions,
    enum shuffle_order order, int descending, struct shuffle_key **bounds,
    char **err)
{
	struct sf_weighted	*w;
	struct shuffle_key	*b;
	struct sf_sort		 sort;
	double			 total, acc = 0;
	size_t			 all, k = 0;
	int			 p;

	if (partitions < 1 || order == SHUFFLE_ORDER_NONE) {
		xasprintf(err, "shuffle boundaries: %s",
		    partitions < 1 ? "no partitions" : "an unordered file");
		return (-1);
	}
	all = sf_samples_gather(readers, n, order, &w, &total);
	sort.order = order;
	sort.descending = descending;
	qsort_r(w, all, sizeof *w, sf_weighted_cmp, &sort);
	b = xcalloc((size_t)partitions, sizeof *b);
	for (p = 1; p < partitions; p++) {
		/* The sample in which p/partitions of the weight falls. */
		while (k + 1 < all &&
		    acc + w[k].weight <= total * p / partitions) {
			acc += w[k].weight;
			k++;
		}
		if (all > 0 && w[k].e.key != NULL) {
			b[p - 1].key = xmalloc(w[k].e.klen + 1);
			memcpy((char *)b[p - 1].key, w[k].e.key, w[k].e.klen);
			b[p - 1].len = w[k].e.klen;
		}
	}
	free(w);
	*bounds = b;
	return (0);
}

/* Free the boundaries of a sort in partitions. */
void
shuffle_boundaries_free(struct shuffle_key *b, int partitions)
{
	int	p;

	if (b == NULL)
		return;
	for (p = 0; p + 1 < partitions; p++)
		free((char *)b[p].key);
	free(b);
}
