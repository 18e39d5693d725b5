#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "bindex.h"
#include "xmalloc.h"

#define BINDEX_MAGIC	"EMBERIX"	/* and a NUL: 8 bytes */
#define BINDEX_VERSION	1
#define BINDEX_TAG_BITS	24
#define BINDEX_TAG_MASK	((UINT64_C(1) << BINDEX_TAG_BITS) - 1)
#define BINDEX_MAX_SIZE	((UINT64_C(1) << (64 - BINDEX_TAG_BITS)) - 2)

/* Lines hashed ahead of their insertion, so their slots are prefetched. */
#define BINDEX_BATCH	32

/* The header, BINDEX_HEADER bytes. */
struct bindex_header {
	char		 magic[8];
	uint32_t	 version;
	uint32_t	 tag_bits;
	uint64_t	 bytes;		/* of the broadcast it indexes */
	uint64_t	 nslots;
	uint64_t	 lines;
	uint64_t	 distinct;
	uint64_t	 max_probe;
	uint64_t	 check;		/* hash of the fields above */
};

struct bindex {
	const unsigned char	*base;
	size_t			 len;
	const uint64_t		*slots;
	size_t			 nslots;
	size_t			 count;
	size_t			 max_probe;
};

/* A line waiting for its slot during a build. */
struct bindex_line {
	uint64_t		 hash;
	size_t			 off;
	size_t			 len;
	size_t			 slot;
};

/* Multipliers of the hash (odd, with well spread bits). */
#define HASH_K0	UINT64_C(0xa0761d6478bd642f)
#define HASH_K1	UINT64_C(0xe7037ed1a0b428db)
#define HASH_K2	UINT64_C(0x8ebc6af09c88c6e3)

/* Multiply to 128 bits and fold the halves. */
static inline uint64_t
bindex_mix(uint64_t a, uint64_t b)
{
	__uint128_t	r = (__uint128_t)a * b;

	return ((uint64_t)r ^ (uint64_t)(r >> 64));
}

/* Load 8 bytes, unaligned. */
static inline uint64_t
bindex_load8(const unsigned char *p)
{
	uint64_t	v;

	memcpy(&v, p, sizeof v);
	return (v);
}

/* Load 4 bytes, unaligned. */
static inline uint64_t
bindex_load4(const unsigned char *p)
{
	uint32_t	v;

	memcpy(&v, p, sizeof v);
	return (v);
}

/*
 * Hash a line.  Multiply-and-fold over 16 bytes a round; lines of up to
 * 16 bytes (numbers, ids, words) take two loads and two multiplies.
 */
static inline uint64_t
bindex_hash(const unsigned char *p, size_t len)
{
	uint64_t	a, b, seed = HASH_K2;
	size_t		left = len, step;
	__uint128_t	r;

	if (len <= 16) {
		if (len >= 4) {
			step = (len >> 3) << 2;
			a = (bindex_load4(p) << 32) |
			    bindex_load4(p + step);
			b = (bindex_load4(p + len - 4) << 32) |
			    bindex_load4(p + len - 4 - step);
		} else if (len > 0) {
			a = ((uint64_t)p[0] << 16) |
			    ((uint64_t)p[len >> 1] << 8) | p[len - 1];
			b = 0;
		} else
			a = b = 0;
	} else {
		while (left > 16) {
			seed = bindex_mix(bindex_load8(p) ^ HASH_K1,
			    bindex_load8(p + 8) ^ seed);
			p += 16;
			left -= 16;
		}
		a = bindex_load8(p + left - 16);
		b = bindex_load8(p + left - 8);
	}
	r = (__uint128_t)(a ^ HASH_K1) * (b ^ seed);
	return (bindex_mix((uint64_t)r ^ HASH_K0 ^ len,
	    (uint64_t)(r >> 64) ^ HASH_K1));
}

/* The first slot to probe for a hash: its high bits scaled to the table. */
static inline size_t
bindex_home(size_t nslots, uint64_t hash)
{
	return ((size_t)(((__uint128_t)hash * nslots) >> 64));
}

/* Is the line at off (at most len) equal to data? */
static inline int
bindex_equal(const unsigned char *base, size_t len, size_t off,
    const unsigned char *data, size_t dlen)
{
	if (dlen > len - off)
		return (0);
	if (memcmp(base + off, data, dlen) != 0)
		return (0);
	return (off + dlen == len || base[off + dlen] == '\n');
}

/*
 * Count the lines of bytes, a word at a time: a byte of x is zero exactly
 * where the word had a newline, and the top bit of each byte of t marks
 * one.
 */
static size_t
bindex_count_lines(const unsigned char *p, size_t size)
{
	const uint64_t	ones = UINT64_C(0x0101010101010101);
	const uint64_t	low7 = UINT64_C(0x7f7f7f7f7f7f7f7f);
	uint64_t	x, t;
	size_t		i = 0, n = 0;

	for (; i + 8 <= size; i += 8) {
		x = bindex_load8(p + i) ^ (ones * '\n');
		t = ~(((x & low7) + low7) | x | low7);
		n += (size_t)__builtin_popcountll(t);
	}
	for (; i < size; i++)
		n += p[i] == '\n';
	if (size > 0 && p[size - 1] != '\n')
		n++;
	return (n);
}

size_t
bindex_size(const void *bytes, size_t len, size_t *lines)
{
	size_t	nslots;

	*lines = 0;
	if ((uint64_t)len > BINDEX_MAX_SIZE)
		return (0);
	*lines = bindex_count_lines(bytes, len);
	/* A load of at most 3/4. */
	nslots = *lines + *lines / 3 + 8;
	return (BINDEX_HEADER + nslots * sizeof (uint64_t));
}

/* The header's checksum: the hash of its fields before it. */
static uint64_t
bindex_check(const struct bindex_header *h)
{
	return (bindex_hash((const unsigned char *)h,
	    offsetof(struct bindex_header, check)));
}

void
bindex_stamp(void *index)
{
	struct bindex_header	*h = index;

	h->check = bindex_check(h);
}

/* Insert a batch of hashed lines whose slots were prefetched. */
static void
bindex_insert(const unsigned char *base, size_t len, uint64_t *slots,
    size_t nslots, struct bindex_line *batch, size_t n,
    struct bindex_stats *st)
{
	size_t		i, slot, probe;
	uint64_t	s, tag;

	for (i = 0; i < n; i++) {
		slot = batch[i].slot;
		tag = batch[i].hash & BINDEX_TAG_MASK;
		for (probe = 0;; probe++) {
			s = slots[slot];
			if (s == 0)
				break;
			if ((s & BINDEX_TAG_MASK) == tag && bindex_equal(base,
			    len, (size_t)(s >> BINDEX_TAG_BITS) - 1,
			    base + batch[i].off, batch[i].len))
				break;
			if (++slot == nslots)
				slot = 0;
		}
		if (s != 0)
			continue;	/* a line seen before */
		slots[slot] = ((uint64_t)(batch[i].off + 1) <<
		    BINDEX_TAG_BITS) | tag;
		st->distinct++;
		if (probe > st->max_probe)
			st->max_probe = probe;
	}
}

/*
 * Lines are hashed a batch ahead of their insertion and their slots
 * prefetched, so that the cache misses of a batch overlap.
 */
void
bindex_build(const void *bytes, size_t len, size_t lines, void *out,
    size_t size, struct bindex_stats *st)
{
	struct bindex_header	*h = out;
	struct bindex_line	 batch[BINDEX_BATCH];
	const unsigned char	*base = bytes, *p = bytes, *end, *nl;
	uint64_t		*slots;
	size_t			 n, nslots, llen;

	memset(st, 0, sizeof *st);
	st->lines = lines;
	slots = (uint64_t *)((unsigned char *)out + BINDEX_HEADER);
	nslots = (size - BINDEX_HEADER) / sizeof (uint64_t);
	end = base + len;
	while (p < end) {
		for (n = 0; n < BINDEX_BATCH && p < end; n++) {
			nl = memchr(p, '\n', (size_t)(end - p));
			llen = (size_t)((nl != NULL ? nl : end) - p);
			batch[n].off = (size_t)(p - base);
			batch[n].len = llen;
			batch[n].hash = bindex_hash(p, llen);
			batch[n].slot = bindex_home(nslots, batch[n].hash);
			__builtin_prefetch(&slots[batch[n].slot], 1);
			p = nl != NULL ? nl + 1 : end;
		}
		bindex_insert(base, len, slots, nslots, batch, n, st);
	}
	memcpy(h->magic, BINDEX_MAGIC, sizeof h->magic);
	h->version = BINDEX_VERSION;
	h->tag_bits = BINDEX_TAG_BITS;
	h->bytes = len;
	h->nslots = nslots;
	h->lines = lines;
	h->distinct = st->distinct;
	h->max_probe = st->max_probe;
	bindex_stamp(h);
}

/* Check an index's header against its size and its bytes' length. */
static int
bindex_check_header(const struct bindex_header *h, size_t size, size_t len,
    char **err)
{
	const char	*why = NULL;

	if (size < BINDEX_HEADER)
		why = "shorter than its header";
	else if (memcmp(h->magic, BINDEX_MAGIC, sizeof h->magic) != 0)
		why = "not an index (its magic)";
	else if (h->version != BINDEX_VERSION ||
	    h->tag_bits != BINDEX_TAG_BITS)
		why = "a version this worker does not read";
	else if (h->check != bindex_check(h))
		why = "its header's checksum does not match";
	else if (h->bytes != len)
		why = "made for bytes of another size";
	else if ((size - BINDEX_HEADER) % sizeof (uint64_t) != 0 ||
	    h->nslots != (size - BINDEX_HEADER) / sizeof (uint64_t) ||
	    h->nslots == 0)
		why = "its slots do not fill it";
	else if (h->lines > (uint64_t)len + 1 || h->distinct > h->lines ||
	    h->distinct >= h->nslots || h->max_probe >= h->nslots)
		why = "its counts do not add up";
	if (why == NULL)
		return (0);
	xasprintf(err, "%s", why);
	return (-1);
}

struct bindex *
bindex_open(const void *index, size_t size, const void *bytes, size_t len,
    char **err)
{
	const struct bindex_header	*h = index;
	struct bindex			*b;

	*err = NULL;
	if (((uintptr_t)index & (sizeof (uint64_t) - 1)) != 0) {
		xasprintf(err, "misaligned");
		return (NULL);
	}
	if (bindex_check_header(h, size, len, err) == -1)
		return (NULL);
	b = xcalloc(1, sizeof *b);
	/* No bytes may come as NULL; memcmp takes no NULL, even for 0. */
	b->base = bytes != NULL ? bytes : (const void *)"";
	b->len = len;
	b->slots = (const uint64_t *)((const unsigned char *)index +
	    BINDEX_HEADER);
	b->nslots = (size_t)h->nslots;
	b->count = (size_t)h->distinct;
	b->max_probe = (size_t)h->max_probe;
	return (b);
}

void
bindex_close(struct bindex *b)
{
	free(b);
}

/*
 * A line is at most max_probe slots past its home slot, so no more are
 * read: a corrupt table full of slots cannot make the lookup loop.
 */
int
bindex_contains(const struct bindex *b, const char *data, size_t len)
{
	const unsigned char	*d = (const unsigned char *)data;
	uint64_t		 hash, tag, s;
	size_t			 slot, probe, off;

	/* No line holds a newline; a record with one would match a run of
	 * lines. */
	if (b->count == 0 || (len != 0 && memchr(data, '\n', len) != NULL))
		return (0);
	hash = bindex_hash(d, len);
	tag = hash & BINDEX_TAG_MASK;
	slot = bindex_home(b->nslots, hash);
	for (probe = 0; probe <= b->max_probe; probe++) {
		s = b->slots[slot];
		if (s == 0)
			return (0);
		if ((s & BINDEX_TAG_MASK) == tag) {
			off = (size_t)(s >> BINDEX_TAG_BITS) - 1;
			if (off > b->len)
				return (-1);
			if (bindex_equal(b->base, b->len, off, d, len))
				return (1);
		}
		if (++slot == b->nslots)
			slot = 0;
	}
	return (0);
}

size_t
bindex_count(const struct bindex *b)
{
	return (b->count);
}
