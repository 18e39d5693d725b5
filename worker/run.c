#include <errno.h>
#include <fcntl.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <sys/uio.h>
#include <unistd.h>

#if defined(__SSE2__) && defined(__x86_64__)
#include <emmintrin.h>
#endif

#include "checkpoint.h"
#include "frame.h"
#include "log.h"
#include "ops.h"
#include "output.h"
#include "plan.h"
#include "source.h"
#include "run.h"
#include "savecommit.h"
#include "xmalloc.h"

/* count_by_value's table starts with this many slots, a power of two. */
#define RUN_CBV_SLOTS		1024
/* Its records are copied into chunks of this size (or one record's). */
#define RUN_CBV_CHUNK		(1024 * 1024)
/* save writes through a buffer of this size. */
#define RUN_SAVE_BUFFER	(256 * 1024)
/* How much of a record a reduce error shows. */
#define RUN_REDUCE_SHOWN	64

/* What every sink has: the records that reached it. */
struct run_sink {
	struct op	 op;
	struct output	*out;
	int64_t		 records;
	int64_t		 skip;		/* records: dropped before sending */
};

/* count_by_value: an open-addressing table (linear probing) of records
 * and counts; a slot with count 0 is free.  A record of up to 16 bytes
 * is kept in the slot itself, zero-padded: the common short record is
 * found with a few compares and no pointer to follow, in 32 bytes a slot.
 * A longer one is copied into the chunks; its slot holds where (k[0]) and
 * its hash (k[1]). */
#define RUN_CBV_INLINE	16

struct run_cbv_slot {
	uint64_t	 k[2];
	uint64_t	 len;
	int64_t		 count;
};

struct run_cbv_chunk {
	struct run_cbv_chunk	*next;
	size_t			 used, size;
	char			 data[];
};

struct run_cbv {
	struct run_sink	 sink;
	struct run_cbv_slot	*slots;
	size_t			 mask, used;
	int64_t			 nulls;
	struct run_cbv_chunk	*chunks;
};

/* reduce: exact while every record is an integer and the result fits. */
struct run_reducer {
	struct run_sink	 sink;
	enum reduce_fn	 fn;
	int			 real;
	int64_t			 i;
	double			 r;
	char			*scratch;
	size_t			 size;
};

/* save: the part file being written under a temporary name. */
struct run_save {
	struct run_sink	 sink;
	struct savecommit_part	*part;
	char			*buf;
	size_t			 used;
};

/* checkpoint: the partition's file being written. */
struct run_ckpt {
	struct run_sink		 sink;
	struct ckpt_writer	*w;
};

/* Tell whether a task is answered without reading its source. */
int
run_is_quick(const struct run *t)
{
	int64_t	count;

	return (t->mode == MODE_COUNT && t->plan->nops == 0 &&
	    source_count(t->plan, t->partition, &count) == 0);
}

/* Sink: nothing is left to finish. */
static int
run_finish_nothing_cb(__attribute__((unused)) struct op *op)
{
	return (OP_OK);
}

/* Free a sink that owns nothing else. */
static void
run_free_cb(struct op *op)
{
	free(op);
}

/* records: send a record to emberd. */
static int
run_records_push_cb(struct op *op, const struct record *r)
{
	struct run_sink	*s = (struct run_sink *)op;
	char			*err;

	if (s->skip > 0) {
		/* A recompute: the client has these already. */
		s->skip--;
		return (OP_OK);
	}
	s->records++;
	if (output_record(s->out, r->data, r->len, r->null, &err) == -1)
		return (op_fail_take(op, err));
	return (OP_OK);
}

/* count: count a record. */
static int
run_count_push_cb(struct op *op, __attribute__((unused))
    const struct record *r)
{
	((struct run_sink *)op)->records++;
	return (OP_OK);
}

/* Read 8 bytes, unaligned, in host order. */
static inline uint64_t
run_load64(const char *p)
{
	uint64_t	v;

	memcpy(&v, p, 8);
	return (v);
}

/* Multiply to 128 bits and fold. */
static inline uint64_t
run_mix(uint64_t a, uint64_t b)
{
	__uint128_t	r = (__uint128_t)a * b;

	return ((uint64_t)r ^ (uint64_t)(r >> 64));
}

/* Hash a record, 16 bytes a step (in the manner of wyhash). */
static uint64_t
run_hash(const char *p, size_t len)
{
	static const uint64_t	k0 = 0xa0761d6478bd642fULL,
				k1 = 0xe7037ed1a0b428dbULL,
				k2 = 0x8ebc6af09c88c6e3ULL;
	uint64_t		h = k0 ^ len, a, b;
	size_t			n = len;

	while (n > 16) {
		h = run_mix(run_load64(p) ^ k1, run_load64(p + 8) ^ h);
		p += 16;
		n -= 16;
	}
	if (n >= 8) {
		a = run_load64(p);
		b = run_load64(p + n - 8);
	} else if (n >= 4) {
		uint32_t	x, y;

		memcpy(&x, p, 4);
		memcpy(&y, p + n - 4, 4);
		a = x;
		b = y;
	} else if (n > 0) {
		a = ((uint64_t)(unsigned char)p[0] << 16) |
		    ((uint64_t)(unsigned char)p[n / 2] << 8) |
		    (unsigned char)p[n - 1];
		b = 0;
	} else
		a = b = 0;
	return (run_mix(k1 ^ len, run_mix(a ^ k2, b ^ h)));
}

/* Copy a record's bytes into the table's chunks. */
static const char *
run_cbv_copy(struct run_cbv *c, const char *data, size_t len)
{
	struct run_cbv_chunk	*k = c->chunks;
	size_t			 size;

	if (k == NULL || k->size - k->used < len) {
		size = len > RUN_CBV_CHUNK ? len : RUN_CBV_CHUNK;
		k = xmalloc(sizeof *k + size);
		k->size = size;
		k->used = 0;
		k->next = c->chunks;
		c->chunks = k;
	}
	memcpy(k->data + k->used, data, len);
	k->used += len;
	return (k->data + k->used - len);
}

/* The slot index of a short record's key. */
static inline uint64_t
run_hash_short(uint64_t k0, uint64_t k1, uint64_t len)
{
	return (run_mix(k0 ^ 0xa0761d6478bd642fULL,
	    k1 ^ 0xe7037ed1a0b428dbULL ^ len));
}

/* Where a slot's key would go in the table. */
static uint64_t
run_cbv_slot_hash(const struct run_cbv_slot *s)
{
	if (s->len <= RUN_CBV_INLINE)
		return (run_hash_short(s->k[0], s->k[1], s->len));
	return (s->k[1]);
}

/* Double the table. */
static void
run_cbv_grow(struct run_cbv *c)
{
	struct run_cbv_slot	*old = c->slots;
	size_t			 oldsize = c->mask + 1, i, j;

	c->mask = oldsize * 2 - 1;
	c->slots = xcalloc(c->mask + 1, sizeof *c->slots);
	for (i = 0; i < oldsize; i++) {
		if (old[i].count == 0)
			continue;
		for (j = run_cbv_slot_hash(&old[i]) & c->mask;
		    c->slots[j].count != 0; j = (j + 1) & c->mask)
			;
		c->slots[j] = old[i];
	}
	free(old);
}

/* A new key went into a slot. */
static inline void
run_cbv_added(struct run_cbv *c)
{
	/* Grow at 70% full: linear probing slows down past that. */
	if (++c->used * 10 >= (c->mask + 1) * 7)
		run_cbv_grow(c);
}

/* Count a record of up to 16 bytes, given as its zero-padded key and the
 * key's run_hash_short. */
static inline void
run_cbv_count_hashed(struct run_cbv *c, uint64_t k0, uint64_t k1, size_t len,
    uint64_t h)
{
	struct run_cbv_slot	*s;
	size_t			 i;

	for (i = h & c->mask;; i = (i + 1) & c->mask) {
		s = &c->slots[i];
		if (s->count == 0)
			break;
		if (s->k[0] == k0 && s->k[1] == k1 && s->len == len) {
			s->count++;
			return;
		}
	}
	s->k[0] = k0;
	s->k[1] = k1;
	s->len = len;
	s->count = 1;
	run_cbv_added(c);
}

/* Count a record of up to 16 bytes, given as its zero-padded key. */
static inline void
run_cbv_count_short(struct run_cbv *c, uint64_t k0, uint64_t k1, size_t len)
{
	run_cbv_count_hashed(c, k0, k1, len, run_hash_short(k0, k1, len));
}

/* Count a record longer than 16 bytes. */
static void
run_cbv_count_long(struct run_cbv *c, const char *data, size_t len)
{
	struct run_cbv_slot	*s;
	uint64_t		 h = run_hash(data, len);
	size_t			 i;

	for (i = h & c->mask;; i = (i + 1) & c->mask) {
		s = &c->slots[i];
		if (s->count == 0)
			break;
		if (s->len == len && s->k[1] == h &&
		    memcmp((const char *)(uintptr_t)s->k[0], data, len) == 0) {
			s->count++;
			return;
		}
	}
	s->k[0] = (uint64_t)(uintptr_t)run_cbv_copy(c, data, len);
	s->k[1] = h;
	s->len = len;
	s->count = 1;
	run_cbv_added(c);
}

/* Count a record's bytes. */
static void
run_cbv_count(struct run_cbv *c, const char *data, size_t len)
{
	uint64_t	k[2] = { 0, 0 };

	if (len > RUN_CBV_INLINE) {
		run_cbv_count_long(c, data, len);
		return;
	}
	if (len > 0)
		memcpy(k, data, len);
	run_cbv_count_short(c, k[0], k[1], len);
}

/* count_by_value: count a record. */
static int
run_cbv_push_cb(struct op *op, const struct record *r)
{
	struct run_cbv	*c = (struct run_cbv *)op;

	c->sink.records++;
	if (r->null)
		c->nulls++;
	else
		run_cbv_count(c, r->data, r->len);
	return (OP_OK);
}

#if defined(__SSE2__) && defined(__x86_64__) && \
    __BYTE_ORDER__ == __ORDER_LITTLE_ENDIAN__
/* The bytes of a load that hold a key of n bytes (n up to 16). */
static const uint64_t	run_cbv_mask0[17] = {
	0, 0xff, 0xffff, 0xffffff, 0xffffffffULL, 0xffffffffffULL,
	0xffffffffffffULL, 0xffffffffffffffULL, ~0ULL, ~0ULL, ~0ULL, ~0ULL,
	~0ULL, ~0ULL, ~0ULL, ~0ULL, ~0ULL
};
static const uint64_t	run_cbv_mask1[17] = {
	0, 0, 0, 0, 0, 0, 0, 0, 0, 0xff, 0xffff, 0xffffff, 0xffffffffULL,
	0xffffffffffULL, 0xffffffffffffULL, 0xffffffffffffffULL, ~0ULL
};

/* A bit for each byte of p[0, 64) that is sep or a newline. */
static inline uint64_t
run_cbv_delims(const char *p, __m128i vsep, __m128i vnl)
{
	uint64_t	m = 0;
	__m128i		v;
	int		i;

	for (i = 0; i < 4; i++) {
		v = _mm_loadu_si128((const __m128i *)(p + 16 * i));
		m |= (uint64_t)(uint16_t)_mm_movemask_epi8(_mm_or_si128(
		    _mm_cmpeq_epi8(v, vsep), _mm_cmpeq_epi8(v, vnl))) <<
		    (16 * i);
	}
	return (m);
}

/* Short pieces waiting for their slots, whose lines are being fetched. */
#define RUN_CBV_BATCH	32

struct run_cbv_batch {
	uint64_t	 k0[RUN_CBV_BATCH], k1[RUN_CBV_BATCH];
	uint64_t	 len[RUN_CBV_BATCH], h[RUN_CBV_BATCH];
	int		 n;
};

/* Count the pieces of a batch. */
static void
run_cbv_batch_flush(struct run_cbv *c, struct run_cbv_batch *b)
{
	int	i;

	for (i = 0; i < b->n; i++)
		run_cbv_count_hashed(c, b->k0[i], b->k1[i], b->len[i], b->h[i]);
	b->n = 0;
}

/*
 * Count the piece [p, p + len) of a block that goes on to end.  A short
 * one waits in the batch while its slot's line is fetched: looking up a
 * batch of slots that are on their way costs one wait to memory, not one
 * each.  Counting in another order gives the same counts.
 */
static inline void
run_cbv_count_piece(struct run_cbv *c, struct run_cbv_batch *b,
    const char *p, size_t len, const char *end)
{
	uint64_t	k0, k1, h;

	if (len > RUN_CBV_INLINE || end - p < 16) {
		run_cbv_count(c, p, len);
		return;
	}
	/* Two loads that may run past the piece, inside the block. */
	k0 = run_load64(p) & run_cbv_mask0[len];
	k1 = run_load64(p + 8) & run_cbv_mask1[len];
	h = run_hash_short(k0, k1, len);
	__builtin_prefetch(&c->slots[h & c->mask]);
	b->k0[b->n] = k0;
	b->k1[b->n] = k1;
	b->len[b->n] = len;
	b->h[b->n] = h;
	if (++b->n == RUN_CBV_BATCH)
		run_cbv_batch_flush(c, b);
}

/* count_by_value: count the pieces of a block of lines split at sep,
 * finding the separators 64 bytes a step. */
static int
run_cbv_pieces_cb(struct op *op, const char *data, size_t len, char sep)
{
	struct run_cbv		*c = (struct run_cbv *)op;
	struct run_cbv_batch	 b;
	const char		*start = data, *end = data + len, *e;
	__m128i			 vsep = _mm_set1_epi8(sep);
	__m128i			 vnl = _mm_set1_epi8('\n');
	uint64_t		 bits;
	size_t			 at;
	int64_t			 pieces = 0;

	b.n = 0;
	for (at = 0; at + 64 <= len; at += 64) {
		for (bits = run_cbv_delims(data + at, vsep, vnl); bits != 0;
		    bits &= bits - 1) {
			e = data + at + __builtin_ctzll(bits);
			run_cbv_count_piece(c, &b, start, (size_t)(e - start),
			    end);
			start = e + 1;
			pieces++;
		}
	}
	for (e = data + at; e < end; e++) {
		if (*e == sep || *e == '\n') {
			run_cbv_count_piece(c, &b, start, (size_t)(e - start),
			    end);
			start = e + 1;
			pieces++;
		}
	}
	run_cbv_batch_flush(c, &b);
	c->sink.records += pieces;
	return (OP_OK);
}
#else
/* count_by_value: count the pieces of a block of lines split at sep. */
static int
run_cbv_pieces_cb(struct op *op, const char *data, size_t len, char sep)
{
	struct run_cbv	*c = (struct run_cbv *)op;
	const char	*start = data, *end = data + len, *e;

	for (e = data; e < end; e++) {
		if (*e == sep || *e == '\n') {
			run_cbv_count(c, start, (size_t)(e - start));
			start = e + 1;
			c->sink.records++;
		}
	}
	return (OP_OK);
}
#endif

/* Send a record and its count. */
static int
run_cbv_send(struct run_cbv *c, const char *key, size_t len, int null,
    int64_t count)
{
	unsigned char	 be[8];
	char		*err;

	be64_put(be, count);
	if (output_pair(c->sink.out, key, len, null, be, &err) == -1)
		return (op_fail_take(&c->sink.op, err));
	return (OP_OK);
}

/* count_by_value: send the pairs. */
static int
run_cbv_finish_cb(struct op *op)
{
	struct run_cbv		*c = (struct run_cbv *)op;
	struct run_cbv_slot	*s;
	size_t			 i;

	if (c->nulls != 0 && run_cbv_send(c, NULL, 0, 1, c->nulls) != OP_OK)
		return (OP_FAIL);
	for (i = 0; i <= c->mask; i++) {
		s = &c->slots[i];
		if (s->count != 0 && run_cbv_send(c, s->len <= RUN_CBV_INLINE ?
		    (const char *)s->k : (const char *)(uintptr_t)s->k[0],
		    s->len, 0, s->count) != OP_OK)
			return (OP_FAIL);
	}
	return (OP_OK);
}

/* Free the table and its chunks. */
static void
run_cbv_free_cb(struct op *op)
{
	struct run_cbv		*c = (struct run_cbv *)op;
	struct run_cbv_chunk	*k, *next;

	for (k = c->chunks; k != NULL; k = next) {
		next = k->next;
		free(k);
	}
	free(c->slots);
	free(c);
}

/* Write up to RUN_REDUCE_SHOWN bytes of a record, escaped, for an error. */
static void
run_reduce_show(const struct record *r, char *buf, size_t size)
{
	size_t		 i, n = r->len < RUN_REDUCE_SHOWN ? r->len :
			     RUN_REDUCE_SHOWN, used = 0;
	unsigned char	 c;

	for (i = 0; i < n && used + 5 < size; i++) {
		c = (unsigned char)r->data[i];
		if (c == '"' || c == '\\')
			used += (size_t)snprintf(buf + used, size - used,
			    "\\%c", c);
		else if (c < 0x20 || c >= 0x7f)
			used += (size_t)snprintf(buf + used, size - used,
			    "\\x%02x", c);
		else
			buf[used++] = (char)c;
	}
	if (n < r->len && used + 4 < size) {
		memcpy(buf + used, "...", 3);
		used += 3;
	}
	buf[used] = '\0';
}

/*
 * Read a record as a number: 1 for an integer in *i, 2 for a real in *d,
 * 0 for neither.  The whole record must be the number, with no spaces; an
 * integer too large for an int64 is read as a real.
 */
static int
run_reduce_parse(struct run_reducer *x, const struct record *r, int64_t *i,
    double *d)
{
	char	*s, *end;
	size_t	 k;
	int	 integer = 1;

	if (r->null || r->len == 0)
		return (0);
	for (k = 0; k < r->len; k++) {
		char c = r->data[k];

		if (c >= '0' && c <= '9')
			continue;
		if ((c == '+' || c == '-') && k == 0)
			continue;
		if (c == '.' || c == 'e' || c == 'E' || c == '+' || c == '-')
			integer = 0;
		else
			return (0);
	}
	if (r->len + 1 > x->size) {
		free(x->scratch);
		x->size = r->len + 1 < 64 ? 64 : r->len + 1;
		x->scratch = xmalloc(x->size);
	}
	s = x->scratch;
	memcpy(s, r->data, r->len);
	s[r->len] = '\0';
	if (integer) {
		errno = 0;
		*i = strtoll(s, &end, 10);
		if (errno == 0 && *end == '\0' && end != s)
			return (1);
	}
	errno = 0;
	*d = strtod(s, &end);
	if (*end != '\0' || end == s || !isfinite(*d))
		return (0);
	return (2);
}

/* reduce: fold a record in. */
static int
run_reduce_push_cb(struct op *op, const struct record *r)
{
	struct run_reducer	*x = (struct run_reducer *)op;
	char			 shown[4 * RUN_REDUCE_SHOWN + 8];
	int64_t			 i = 0, sum;
	double			 d = 0;
	int			 kind, first = x->sink.records == 0;

	if (r->null)
		return (op_fail(op, "reduce: record null is not a number"));
	if ((kind = run_reduce_parse(x, r, &i, &d)) == 0) {
		run_reduce_show(r, shown, sizeof shown);
		return (op_fail(op, "reduce: record \"%s\" is not a number",
		    shown));
	}
	x->sink.records++;
	if (first) {
		x->real = kind == 2;
		x->i = i;
		x->r = d;
		return (OP_OK);
	}
	if (!x->real && kind == 1) {
		switch (x->fn) {
		case REDUCE_SUM:
			if (!__builtin_add_overflow(x->i, i, &sum)) {
				x->i = sum;
				return (OP_OK);
			}
			break;	/* on as a real */
		case REDUCE_MIN:
			if (i < x->i)
				x->i = i;
			return (OP_OK);
		case REDUCE_MAX:
			if (i > x->i)
				x->i = i;
			return (OP_OK);
		}
	}
	if (!x->real) {
		x->real = 1;
		x->r = (double)x->i;
	}
	if (kind == 1)
		d = (double)i;
	switch (x->fn) {
	case REDUCE_SUM:
		x->r += d;
		break;
	case REDUCE_MIN:
		if (d < x->r)
			x->r = d;
		break;
	case REDUCE_MAX:
		if (d > x->r)
			x->r = d;
		break;
	}
	return (OP_OK);
}

/* reduce: send the partial result as JSON text. */
static int
run_reduce_finish_cb(struct op *op)
{
	struct run_reducer	*x = (struct run_reducer *)op;
	char			 buf[128], *err;
	int			 n;

	if (x->sink.records == 0)
		n = snprintf(buf, sizeof buf, "{\"count\":0}");
	else if (!x->real)
		n = snprintf(buf, sizeof buf, "{\"count\":%lld,\"int\":%lld}",
		    (long long)x->sink.records, (long long)x->i);
	else if (!isfinite(x->r))
		return (op_fail(op, "reduce: the sum is out of range"));
	else
		n = snprintf(buf, sizeof buf, "{\"count\":%lld,\"real\":%.17g}",
		    (long long)x->sink.records, x->r);
	if (output_record(x->sink.out, buf, (size_t)n, 0, &err) == -1)
		return (op_fail_take(op, err));
	return (OP_OK);
}

/* Free a reduce sink. */
static void
run_reduce_free_cb(struct op *op)
{
	struct run_reducer	*x = (struct run_reducer *)op;

	free(x->scratch);
	free(x);
}

/* Write all of an iovec array to the part file. */
static int
run_save_writev(struct run_save *s, struct iovec *iov, int n)
{
	if (fd_writev_full(savecommit_part_fd(s->part), iov, n) == -1)
		return (op_fail(&s->sink.op, "save: %s: %s",
		    savecommit_part_name(s->part), strerror(errno)));
	return (OP_OK);
}

/* Write out what is buffered. */
static int
run_save_flush(struct run_save *s)
{
	struct iovec	iov;

	if (s->used == 0)
		return (OP_OK);
	iov.iov_base = s->buf;
	iov.iov_len = s->used;
	s->used = 0;
	return (run_save_writev(s, &iov, 1));
}

/* save: a record and a newline; a null is an empty line. */
static int
run_save_push_cb(struct op *op, const struct record *r)
{
	struct run_save	*s = (struct run_save *)op;
	struct iovec		 iov[3];

	s->sink.records++;
	if (s->used + r->len + 1 <= RUN_SAVE_BUFFER) {
		if (r->len != 0)
			memcpy(s->buf + s->used, r->data, r->len);
		s->buf[s->used + r->len] = '\n';
		s->used += r->len + 1;
		return (OP_OK);
	}
	/* Too large for what is left: write it out with the buffer. */
	iov[0].iov_base = s->buf;
	iov[0].iov_len = s->used;
	iov[1].iov_base = (void *)r->data;
	iov[1].iov_len = r->len;
	iov[2].iov_base = (void *)"\n";
	iov[2].iov_len = 1;
	s->used = 0;
	return (run_save_writev(s, iov, 3));
}

/* save: write out what is buffered; run_save_commit names the file. */
static int
run_save_finish_cb(struct op *op)
{
	return (run_save_flush((struct run_save *)op));
}

/* Give the part file its name, now that the task has succeeded. */
static int
run_save_commit(struct run_save *s, char **err)
{
	return (savecommit_part_commit(s->part, err));
}

/* Free a save sink; a file not committed is removed. */
static void
run_save_free_cb(struct op *op)
{
	struct run_save	*s = (struct run_save *)op;

	savecommit_part_free(s->part);
	free(s->buf);
	free(s);
}

/* Make the save sink: create the temporary file. */
static struct run_sink *
run_save_create(const struct run *t, char **err)
{
	struct savecommit_part	*part;
	struct run_save		*s;

	part = savecommit_part_create(t->save_dir, t->partition,
	    t->save_attempt, err);
	if (part == NULL)
		return (NULL);
	s = xcalloc(1, sizeof *s);
	s->part = part;
	s->buf = xmalloc(RUN_SAVE_BUFFER);
	s->sink.op.push = run_save_push_cb;
	s->sink.op.finish = run_save_finish_cb;
	s->sink.op.free = run_save_free_cb;
	return (&s->sink);
}

/* checkpoint: append a record to the partition's file. */
static int
run_ckpt_push_cb(struct op *op, const struct record *r)
{
	struct run_ckpt	*c = (struct run_ckpt *)op;
	char		*err;

	c->sink.records++;
	if (ckpt_writer_record(c->w, r->data, r->len, r->null, &err) == -1)
		return (op_fail_take(op, err));
	return (OP_OK);
}

/* checkpoint: end, sync and name the file. */
static int
run_ckpt_finish_cb(struct op *op)
{
	struct run_ckpt	*c = (struct run_ckpt *)op;
	char		*err;

	if (ckpt_writer_commit(c->w, &err) == -1)
		return (op_fail_take(op, err));
	return (OP_OK);
}

/* Free a checkpoint sink; a file not committed is removed. */
static void
run_ckpt_free_cb(struct op *op)
{
	struct run_ckpt	*c = (struct run_ckpt *)op;

	ckpt_writer_free(c->w);
	free(c);
}

/* Make the checkpoint sink: open the partition's file. */
static struct run_sink *
run_ckpt_create(const struct run *t, char **err)
{
	struct run_ckpt	*c;
	struct ckpt_writer *w;

	if ((w = ckpt_writer_open(t->ckpt_dir, t->ckpt_dirfd, t->partition,
	    t->ckpt_sync, err)) == NULL)
		return (NULL);
	c = xcalloc(1, sizeof *c);
	c->w = w;
	c->sink.op.push = run_ckpt_push_cb;
	c->sink.op.finish = run_ckpt_finish_cb;
	c->sink.op.free = run_ckpt_free_cb;
	return (&c->sink);
}

/* Make the sink of a task's mode. */
static struct run_sink *
run_sink_create(const struct run *t, struct output *out, char **err)
{
	struct run_sink	*s = NULL;
	struct run_cbv		*c;
	struct run_reducer	*x;

	switch (t->mode) {
	case MODE_RECORDS:
	case MODE_COUNT:
		s = xcalloc(1, sizeof *s);
		s->op.push = t->mode == MODE_RECORDS ? run_records_push_cb :
		    run_count_push_cb;
		s->skip = t->mode == MODE_RECORDS ? t->skip : 0;
		s->op.finish = run_finish_nothing_cb;
		s->op.free = run_free_cb;
		break;
	case MODE_COUNT_BY_VALUE:
		c = xcalloc(1, sizeof *c);
		c->mask = RUN_CBV_SLOTS - 1;
		c->slots = xcalloc(RUN_CBV_SLOTS, sizeof *c->slots);
		s = &c->sink;
		s->op.push = run_cbv_push_cb;
		s->op.push_pieces = run_cbv_pieces_cb;
		s->op.finish = run_cbv_finish_cb;
		s->op.free = run_cbv_free_cb;
		break;
	case MODE_REDUCE:
		x = xcalloc(1, sizeof *x);
		x->fn = t->fn;
		s = &x->sink;
		s->op.push = run_reduce_push_cb;
		s->op.finish = run_reduce_finish_cb;
		s->op.free = run_reduce_free_cb;
		break;
	case MODE_SAVE:
		if ((s = run_save_create(t, err)) == NULL)
			return (NULL);
		break;
	case MODE_CHECKPOINT:
		if ((s = run_ckpt_create(t, err)) == NULL)
			return (NULL);
		break;
	case MODE_SHUFFLE:
		*err = xstrdup("mode shuffle: not supported by this worker");
		return (NULL);
	}
	s->out = out;
	return (s);
}

/* Run a task and gather its metrics. */
int
run_execute(const struct run *t, struct output *out,
    int64_t metrics[EMBER_METRIC_COUNT], char **err)
{
	struct run_sink	*sink;
	struct chain		*chain;
	int64_t			 in = 0, count;
	char			*serr = NULL;
	int			 rc;

	memset(metrics, 0, EMBER_METRIC_COUNT * sizeof *metrics);
	*err = NULL;

	/* Counting a source that knows its size needs no reading. */
	if (run_is_quick(t)) {
		source_count(t->plan, t->partition, &count);
		metrics[EMBER_METRIC_RECORDS_IN] = count;
		metrics[EMBER_METRIC_RECORDS_OUT] = count;
		return (0);
	}

	if ((sink = run_sink_create(t, out, err)) == NULL)
		return (-1);
	chain = chain_create(t->plan, t->partition, out, &sink->op, err);
	if (chain == NULL)
		return (-1);
	rc = source_run(t->plan, t->partition, t->source_dirfd, chain, &in,
	    &serr);
	if (rc == OP_OK && !chain_halted(chain))
		rc = chain_finish(chain);
	if (rc == OP_FAIL) {
		if (serr != NULL)
			*err = serr;
		else if (chain_error(chain) != NULL)
			*err = xstrdup(chain_error(chain));
		else
			*err = xstrdup("task failed");
	} else if (t->mode == MODE_SAVE &&
	    run_save_commit((struct run_save *)sink, err) == -1)
		rc = OP_FAIL;
	metrics[EMBER_METRIC_RECORDS_IN] = in;
	metrics[EMBER_METRIC_RECORDS_OUT] = sink->records;
	metrics[EMBER_METRIC_DROPPED] = chain_dropped(chain);
	if (t->mode == MODE_CHECKPOINT)
		metrics[EMBER_METRIC_BYTES_OUT] =
		    ckpt_writer_bytes(((struct run_ckpt *)sink)->w);
	chain_free(chain);	/* stops and reaps any command still running */

	if (t->mode != MODE_COUNT && t->mode != MODE_SAVE &&
	    t->mode != MODE_CHECKPOINT)
		metrics[EMBER_METRIC_BYTES_OUT] = output_bytes(out);
	return (rc == OP_FAIL ? -1 : 0);
}
