#include <errno.h>
#include <fcntl.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <sys/uio.h>
#include <unistd.h>


#include "checkpoint.h"
#include "frame.h"
#include "hash.h"
#include "keyed.h"
#include "log.h"
#include "ops.h"
#include "output.h"
#include "pieces.h"
#include "plan.h"
#include "source.h"
#include "run.h"
#include "savecommit.h"
#include "shuffle.h"
#include "shuffle_file.h"
#include "xmalloc.h"

/* count_by_value's table starts with this many slots, a power of two. */
#define RUN_CBV_SLOTS		1024
/* It is kept sparse (30% full at most) below this many slots (2 MiB). */
#define RUN_CBV_SPARSE		(64 * 1024)
/* Its keys are put in order of their counts again once this many records
 * were counted, and again at 16, 256... times as many: by then the counts
 * tell the frequent words. */
#define RUN_CBV_SETTLE		(1 << 16)
/* Its records are copied into chunks of this size (or one record's). */
#define RUN_CBV_CHUNK		(1024 * 1024)
/* save writes through a buffer of this size. */
#define RUN_SAVE_BUFFER	(256 * 1024)
/* A reduce task's memory when its descriptor gives none: the default of
 * workers.shuffle_memory. */
#define RUN_SHUFFLE_MEMORY	((size_t)256 * 1024 * 1024)

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
	int64_t			 settle;	/* records: rebuild at */
	struct run_cbv_chunk	*chunks;
};

/* reduce: exact while every record is an integer and the result fits. */
struct run_reducer {
	struct run_sink	 sink;
	enum reduce_fn	 fn;
	int			 real;
	int64_t			 i;
	double			 r;
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

/* shuffle: the map task's file, in the operation's directory. */
struct run_shuffle {
	struct run_sink		 sink;
	int			 opdir;
	struct shuffle_map	*map;
	int64_t			 bytes;
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
	if (r->kind != PLAN_KIND_RECORD) {
		if (output_keyed(s->out, r, &err) == -1)
			return (op_fail_take(op, err));
		return (OP_OK);
	}
	if (output_record(s->out, r->data, r->len, r->null, &err) == -1)
		return (op_fail_take(op, err));
	return (OP_OK);
}

/* records: send a block of the text source's lines as they are. */
static int
run_records_lines_cb(struct op *op, const char *data, size_t len,
    size_t *used)
{
	struct run_sink	*s = (struct run_sink *)op;
	const char		*p = data, *end = data + len, *nl;
	size_t			 lines = 0, skipped = 0;
	char			*err;

	*used = len;
	for (; s->skip > 0 && p < end; s->skip--) {	/* a recompute */
		/* (no newline: one a file cut under the mapping took) */
		nl = memchr(p, '\n', (size_t)(end - p));
		p = nl != NULL ? nl + 1 : end;
		skipped++;
	}
	if (p < end &&
	    output_lines(s->out, p, (size_t)(end - p), &lines, &err) == -1)
		return (op_fail_take(op, err));
	s->records += (int64_t)lines;
	chain_lines_taken(op, skipped + lines);
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

/* count of no ops: count a block of whole lines, read from the mapping
 * (cheaper than a record each from reads; a file cut meanwhile fails the
 * task instead of counting what was read). */
static int
run_count_lines_cb(struct op *op, const char *data, size_t len, size_t *used)
{
	size_t	lines = ops_count_byte(data, len, '\n');

	*used = len;
	((struct run_sink *)op)->records += (int64_t)lines;
	chain_lines_taken(op, lines);
	return (OP_OK);
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

/* Where a slot's key would go in the table. */
static uint64_t
run_cbv_slot_hash(const struct run_cbv_slot *s)
{
	if (s->len <= RUN_CBV_INLINE)
		return (hash_short(s->k[0], s->k[1], s->len));
	return (s->k[1]);
}

/* Slot arrays of RUN_CBV_SPARSE slots a rebuild or a finished task gave
 * back, kept for the next tables of the worker's tasks: their pages are
 * faulted in already (a task's table is rebuilt eight times; fresh
 * pages cost 2,400 faults a task). */
static struct run_cbv_slot	*run_cbv_spare[2];
/* Whether a spare's pages may be resident: not given back since. */
static int			 run_cbv_spare_warm;

/* An array for a table of size slots, all free. */
static struct run_cbv_slot *
run_cbv_slots_get(size_t size)
{
	struct run_cbv_slot	*s;
	int			 i;

	if (size > RUN_CBV_SPARSE)
		return (xcalloc(size, sizeof *s));
	for (i = 0; i < 2; i++) {
		if ((s = run_cbv_spare[i]) != NULL) {
			run_cbv_spare[i] = NULL;
			memset(s, 0, size * sizeof *s);
			return (s);
		}
	}
	/* Room for the sparse sizes, so that any array can be reused. */
	return (xcalloc(RUN_CBV_SPARSE, sizeof *s));
}

/* Give back the array of a table of size slots. */
static void
run_cbv_slots_put(struct run_cbv_slot *s, size_t size)
{
	int	i;

	if (size <= RUN_CBV_SPARSE) {
		for (i = 0; i < 2; i++) {
			if (run_cbv_spare[i] == NULL) {
				run_cbv_spare[i] = s;
				run_cbv_spare_warm = 1;
				return;
			}
		}
	}
	free(s);
}

int
run_holds_spares(void)
{
	return (run_cbv_spare_warm);
}

/* Give the spare arrays' whole pages back to the system: they read as
 * zeros when touched again, and every table is cleared before use. */
void
run_release_spares(void)
{
	uintptr_t	page = (uintptr_t)sysconf(_SC_PAGESIZE), from, to;
	int		i;

	for (i = 0; i < 2; i++) {
		if (run_cbv_spare[i] == NULL)
			continue;
		from = ((uintptr_t)run_cbv_spare[i] + page - 1) & ~(page - 1);
		to = (uintptr_t)(run_cbv_spare[i] + RUN_CBV_SPARSE) &
		    ~(page - 1);
		if (to > from && madvise((void *)from, to - from,
		    MADV_DONTNEED) == -1)
			log_warn("madvise: %s", strerror(errno));
	}
	run_cbv_spare_warm = 0;
}

/*
 * Move the keys into a table of size slots, the most counted first
 * (sorted) or in the order of their slots.  Put in the most counted
 * first, each key takes its own slot if it is free, so the words that
 * make most of a text are found at the first probe, which the branches
 * then predict; put in slot order, a frequent word can stay a slot or
 * more along for the rest of the task.  The order is by the counts' bit
 * lengths (a counting sort in two passes): keys within a factor of two
 * of each other are alike for this, and a qsort of the exact counts was
 * 3% of a task.
 */
static void
run_cbv_rebuild(struct run_cbv *c, size_t size, int sorted)
{
	struct run_cbv_slot	*old = c->slots, **by;
	size_t			 oldsize = c->mask + 1, i, j, n = 0;
	size_t			 at[65] = { 0 };
	int			 b;

	by = xreallocarray(NULL, c->used > 0 ? c->used : 1, sizeof *by);
	if (sorted) {
		/* at[b]: where the keys of 64 - b bits go (count > 0). */
		for (i = 0; i < oldsize; i++)
			if (old[i].count != 0)
				at[__builtin_clzll((uint64_t)old[i].count) +
				    1]++;
		for (b = 1; b <= 64; b++)
			at[b] += at[b - 1];
		for (i = 0; i < oldsize; i++)
			if (old[i].count != 0)
				by[at[__builtin_clzll(
				    (uint64_t)old[i].count)]++] = &old[i];
		n = at[64];
	} else
		for (i = 0; i < oldsize; i++)
			if (old[i].count != 0)
				by[n++] = &old[i];
	c->mask = size - 1;
	c->slots = run_cbv_slots_get(size);
	for (i = 0; i < n; i++) {
		for (j = run_cbv_slot_hash(by[i]) & c->mask;
		    c->slots[j].count != 0; j = (j + 1) & c->mask)
			;
		c->slots[j] = *by[i];
	}
	free(by);
	run_cbv_slots_put(old, oldsize);
}

/* Double the table (its order is made when it settles). */
static void
run_cbv_grow(struct run_cbv *c)
{
	run_cbv_rebuild(c, (c->mask + 1) * 2, 0);
}

/* A new key went into a slot. */
static inline void
run_cbv_added(struct run_cbv *c)
{
	size_t	slots = c->mask + 1;

	/* Grow at 70% full, where linear probing slows down; a table of
	 * fewer than RUN_CBV_SPARSE slots at 30%: each key a lookup finds past its
	 * own slot costs a misprediction and a probe, and so few slots cost
	 * little memory. */
	if (++c->used * 10 >= slots * (slots < RUN_CBV_SPARSE ? 3 : 7))
		run_cbv_grow(c);
}

/* Count a record of up to 16 bytes, given as its zero-padded key and the
 * key's hash_short. */
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
	run_cbv_count_hashed(c, k0, k1, len, hash_short(k0, k1, len));
}

/* Count a record longer than 16 bytes. */
static void
run_cbv_count_long(struct run_cbv *c, const char *data, size_t len)
{
	struct run_cbv_slot	*s;
	uint64_t		 h = hash_bytes(data, len);
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

/* Put the keys in order of their counts again, when it is time. */
static void
run_cbv_settle(struct run_cbv *c)
{
	if (c->sink.records < c->settle)
		return;
	run_cbv_rebuild(c, c->mask + 1, 1);
	c->settle = c->sink.records * 16;
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

#ifdef PIECES_SSE2
/* Count a short piece that is not in its own slot, or a new one: rare
 * once the table has settled, so kept out of the step loop. */
static __attribute__((noinline)) void
run_cbv_count_miss(struct run_cbv *c, uint64_t k0, uint64_t k1, size_t len,
    uint64_t h)
{
	run_cbv_count_hashed(c, k0, k1, len, h);
}

/*
 * Count the pieces of data that end in [0, to), to a multiple of 64, from
 * the one that starts at *start, finding their ends 64 bytes a step; move
 * *start past the last.  A short piece is looked up in its own slot at
 * once: the table is sparse and its most counted keys are in their own
 * slots, so the branch is predicted and the lookups of the next pieces
 * run while a slot's line is fetched.  A piece is never empty here, so a
 * free slot (all zeros) never matches one; the table moves only when a
 * new key grows it (a miss, or a long or empty piece).  Its two loads may
 * run 16 bytes past its start, which is before to: data holds 16 bytes
 * past to.
 */
__attribute__((always_inline)) static inline int64_t
run_cbv_count_steps(struct run_cbv *c, const char *data, size_t to,
    size_t *start, char sep, int avx2)
{
	struct run_cbv_slot	*slots = c->slots, *x;
	const char		*p;
	size_t			 mask = c->mask;
	__m128i			 vsep = _mm_set1_epi8(sep);
	__m128i			 vnl = _mm_set1_epi8('\n');
	uint64_t		 bits, k0, k1, h;
	size_t			 at, e, n, s = *start;
	int64_t			 pieces = 0;

	for (at = 0; at < to; at += 64) {
		bits = avx2 ? pieces_delims_avx2(data + at, sep) :
		    pieces_delims(data + at, vsep, vnl);
		pieces += __builtin_popcountll(bits);
		for (; bits != 0; bits &= bits - 1) {
			e = at + (unsigned)__builtin_ctzll(bits);
			p = data + s;
			n = e - s;
			s = e + 1;
			/* Empty (n - 1 wraps) or long: counted at once. */
			if (__builtin_expect(n - 1 >= RUN_CBV_INLINE, 0)) {
				run_cbv_count(c, p, n);
				slots = c->slots;
				mask = c->mask;
				continue;
			}
			pieces_words(p, n, &k0, &k1);
			h = hash_short(k0, k1, n);
			x = &slots[h & mask];
			if (__builtin_expect(x->k[0] == k0 && x->k[1] == k1 &&
			    x->len == n, 1))
				x->count++;
			else {
				run_cbv_count_miss(c, k0, k1, n, h);
				slots = c->slots;
				mask = c->mask;
			}
		}
	}
	*start = s;
	return (pieces);
}

/* run_cbv_count_steps with SSE2. */
static int64_t
run_cbv_count_steps_sse2(struct run_cbv *c, const char *data, size_t to,
    size_t *start, char sep)
{
	return (run_cbv_count_steps(c, data, to, start, sep, 0));
}

/* run_cbv_count_steps with AVX2, where the CPU has it. */
__attribute__((target("avx2,bmi"))) static int64_t
run_cbv_count_steps_avx2(struct run_cbv *c, const char *data, size_t to,
    size_t *start, char sep)
{
	return (run_cbv_count_steps(c, data, to, start, sep, 1));
}

/* count_by_value: count the pieces of a block of lines split at sep. */
static int
run_cbv_pieces_cb(struct op *op, const char *data, size_t len, char sep)
{
	struct run_cbv	*c = (struct run_cbv *)op;
	size_t		 start = 0, to = 0, e;
	int64_t		 pieces = 0;

	/* 64-byte steps while 16 bytes are left past them. */
	if (len >= 64 + 16) {
		to = (len - 16) & ~(size_t)63;
		pieces = __builtin_cpu_supports("avx2") &&
		    __builtin_cpu_supports("bmi") ?
		    run_cbv_count_steps_avx2(c, data, to, &start, sep) :
		    run_cbv_count_steps_sse2(c, data, to, &start, sep);
	}
	for (e = to; e < len; e++) {
		if (data[e] == sep || data[e] == '\n') {
			run_cbv_count(c, data + start, e - start);
			start = e + 1;
			pieces++;
		}
	}
	c->sink.records += pieces;
	run_cbv_settle(c);
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
	run_cbv_settle(c);
	return (OP_OK);
}
#endif

/* Send a record and its count. */
static int
run_cbv_send(struct run_cbv *c, const char *key, size_t len, int null,
    int64_t count)
{
	char	*err;

	if (output_counted(c->sink.out, key, len, null, count, &err) == -1)
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
	run_cbv_slots_put(c->slots, c->mask + 1);
	free(c);
}

/* reduce: fold a record in. */
static int
run_reduce_push_cb(struct op *op, const struct record *r)
{
	struct run_reducer	*x = (struct run_reducer *)op;
	char			 shown[KEYED_SHOWN];
	int64_t			 i = 0, sum;
	double			 d = 0;
	int			 kind, first = x->sink.records == 0;

	if (r->null)
		return (op_fail(op, "reduce: record null is not a number"));
	/* The whole record is the number, as a shuffle reads a key. */
	if ((kind = shuffle_number_parse(r->data, r->len, &i, &d)) == 0) {
		keyed_show(r->data, r->len, shown, sizeof shown);
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

/* save: a pair's or group's line, made in the buffer or, too large for
 * it, in one of its own. */
static int
run_save_keyed(struct run_save *s, const struct record *r)
{
	struct iovec	 iov;
	size_t		 len = keyed_text_size(r) + 1;
	char		*line;
	int		 rc;

	if (s->used + len > RUN_SAVE_BUFFER && run_save_flush(s) != OP_OK)
		return (OP_FAIL);
	if (len <= RUN_SAVE_BUFFER) {
		keyed_text_put(s->buf + s->used, r);
		s->buf[s->used + len - 1] = '\n';
		s->used += len;
		return (OP_OK);
	}
	line = xmalloc(len);
	keyed_text_put(line, r);
	line[len - 1] = '\n';
	iov.iov_base = line;
	iov.iov_len = len;
	rc = run_save_writev(s, &iov, 1);
	free(line);
	return (rc);
}

/* save: a record and a newline; a null is an empty line. */
static int
run_save_push_cb(struct op *op, const struct record *r)
{
	struct run_save	*s = (struct run_save *)op;
	struct iovec		 iov[3];

	s->sink.records++;
	if (r->kind != PLAN_KIND_RECORD)
		return (run_save_keyed(s, r));
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
	if (r->kind != PLAN_KIND_RECORD) {
		if (ckpt_writer_keyed(c->w, r, &err) == -1)
			return (op_fail_take(op, err));
		return (OP_OK);
	}
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

/* shuffle: write a record to its bucket. */
static int
run_shuffle_push_cb(struct op *op, const struct record *r)
{
	struct run_shuffle	*s = (struct run_shuffle *)op;
	char			*err;

	s->sink.records++;
	if (shuffle_map_add(s->map, r, &err) == -1)
		return (op_fail_take(op, err));
	return (OP_OK);
}

/* shuffle: write the pairs of a block of pieces. */
static int
run_shuffle_pieces_cb(struct op *op, const char *data, size_t len, char sep)
{
	struct run_shuffle	*s = (struct run_shuffle *)op;
	char			*err;

	if (shuffle_map_add_pieces(s->map, data, len, sep, &s->sink.records,
	    &err) == -1)
		return (op_fail_take(op, err));
	return (OP_OK);
}

/* shuffle: sort, write and name the file. */
static int
run_shuffle_finish_cb(struct op *op)
{
	struct run_shuffle	*s = (struct run_shuffle *)op;
	char			*err;

	if (shuffle_map_commit(s->map, &s->bytes, &err) == -1)
		return (op_fail_take(op, err));
	return (OP_OK);
}

/* Free a shuffle sink; a file not committed is removed. */
static void
run_shuffle_free_cb(struct op *op)
{
	struct run_shuffle	*s = (struct run_shuffle *)op;

	shuffle_map_free(s->map);
	if (s->opdir != -1)
		close(s->opdir);
	free(s);
}

/* Make the shuffle sink: the operation's directory, the file's writer. */
static struct run_sink *
run_shuffle_create(const struct run *t, char **err)
{
	struct run_shuffle	*s;

	if (t->shuffle_dirfd == -1 || t->shuffle_dir == NULL ||
	    t->shuffle_op == NULL) {
		*err = xstrdup("mode shuffle: no shuffle directory or op");
		return (NULL);
	}
	s = xcalloc(1, sizeof *s);
	s->sink.op.push = run_shuffle_push_cb;
	s->sink.op.finish = run_shuffle_finish_cb;
	s->sink.op.free = run_shuffle_free_cb;
	if ((s->opdir = shuffle_dir_open(t->shuffle_dirfd, t->shuffle_dir,
	    err)) == -1 || (s->map = shuffle_map_create(s->opdir,
	    t->shuffle_stage, t->partition, t->shuffle_buckets,
	    t->shuffle_op, (size_t)t->shuffle_memory, err)) == NULL) {
		run_shuffle_free_cb(&s->sink.op);
		return (NULL);
	}
	if (shuffle_map_takes_pieces(s->map))
		s->sink.op.push_pair_pieces = run_shuffle_pieces_cb;
	return (&s->sink);
}

/* Run a shuffle source: the reduce side of its wide op. */
static int
run_shuffle_source(const struct run *t, struct chain *chain, int64_t *in,
    char **err)
{
	int	opdir, rc;

	if (t->shuffle_dirfd == -1 || t->shuffle_dir == NULL) {
		*err = xstrdup("a shuffle source without a shuffle directory");
		return (OP_FAIL);
	}
	if ((opdir = shuffle_dir_open(t->shuffle_dirfd, t->shuffle_dir,
	    err)) == -1)
		return (OP_FAIL);
	rc = shuffle_source_run(t->plan, t->partition, opdir,
	    t->shuffle_memory > 0 ? (size_t)t->shuffle_memory :
	    RUN_SHUFFLE_MEMORY, chain, in, err);
	close(opdir);
	return (rc);
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
		s->op.push_lines = t->mode == MODE_RECORDS ?
		    run_records_lines_cb : run_count_lines_cb;
		s->op.finish = run_finish_nothing_cb;
		s->op.free = run_free_cb;
		break;
	case MODE_COUNT_BY_VALUE:
		c = xcalloc(1, sizeof *c);
		c->mask = RUN_CBV_SLOTS - 1;
		c->settle = RUN_CBV_SETTLE;
		c->slots = run_cbv_slots_get(RUN_CBV_SLOTS);
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
		s->op.free = run_free_cb;
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
		if ((s = run_shuffle_create(t, err)) == NULL)
			return (NULL);
		break;
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
	if (t->plan->source == PLAN_SOURCE_SHUFFLE)
		rc = run_shuffle_source(t, chain, &in, &serr);
	else
		rc = source_run(t->plan, t->partition, t->source_dirfd, chain,
		    &in, &serr);
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
	if (t->mode == MODE_SHUFFLE)	/* what emberd charges the uid */
		metrics[EMBER_METRIC_BYTES_OUT] =
		    ((struct run_shuffle *)sink)->bytes;
	chain_free(chain);	/* stops and reaps any command still running */

	if (t->mode != MODE_COUNT && t->mode != MODE_SAVE &&
	    t->mode != MODE_CHECKPOINT && t->mode != MODE_SHUFFLE)
		metrics[EMBER_METRIC_BYTES_OUT] = output_bytes(out);
	return (rc == OP_FAIL ? -1 : 0);
}
