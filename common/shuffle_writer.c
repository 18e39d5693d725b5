/*
 * The shuffle file's writer (docs/protocol.md, "Shuffle files").  Entries
 * go, encoded as in the file, into an arena of chunks; an array of
 * (key prefix, record) items, one per entry, is what is sorted, so most
 * comparisons are one integer compare and nothing is allocated per entry.
 * With a combine function a hash table finds an entry's key as it arrives
 * and folds the entry into the one already there, so only the combined
 * entries are ever sorted.  Past the memory bound the buckets are sorted
 * and spilled, as runs, to one nameless file; commit merges the runs and
 * what is left in memory, bucket by bucket, into the final file.
 */
#include <errno.h>
#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include <zlib.h>

#include "frame.h"
#include "shuffle_private.h"
#include "xmalloc.h"

#define SW_MEMORY_MIN	(64 << 10)
#define SW_CHUNK_MAX	(1 << 20)
#define SW_CHUNK_MIN	(4 << 10)

/* An entry in the arena: this header, the entry encoded (cap bytes,
 * 8-aligned) and, in a numeric file, its key's struct sf_num. */
struct sw_rec {
	uint32_t	 bucket;
	uint32_t	 size;		/* bytes of the encoded entry */
	uint32_t	 cap;		/* room for it, for combine */
	uint32_t	 hash;
};

#define SW_ALIGN(n)	(((size_t)(n) + 7) & ~(size_t)7)

/* What is sorted: a record and its key's first 8 bytes (or number),
 * big-endian, so that integer order is key order. */
struct sw_item {
	uint64_t	 prefix;
	struct sw_rec	*rec;
};

/* A slot of combine's table: the key's hash beside the item, so that a
 * probe reads no record but the one that matches. */
struct sw_slot {
	struct sw_rec	*rec;		/* the item's, NULL empty */
	uint32_t	 item;		/* its index */
	uint32_t	 hash;
};

struct sw_chunk {
	struct sw_chunk	*next;
	size_t		 size, used;
	unsigned char	 data[];
};

/* A bucket's part of a spilled run. */
struct sw_seg {
	int		 bucket;
	int64_t		 off, len, count;
};

struct sw_run {
	struct sw_seg	*segs;
	size_t		 nsegs, cur;
};

/* Where merged entries go: a run, or the final file. */
struct sw_out {
	int		 fd;
	unsigned char	*buf;
	size_t		 used;
	int64_t		 off;		/* file offset of buf[0] */
	int		 final;
	/* The bucket being written. */
	int64_t		 bstart, count;
	unsigned long	 bcrc, kcrc;	/* the bucket's, the block's */
	size_t		 crc_from;	/* buf's bytes not yet in kcrc */
	int64_t		 kstart;	/* the block's start */
	unsigned char	*extra;		/* every bucket's extras */
	size_t		 xlen, xsize;
	unsigned char	*blocks;	/* this bucket's block entries */
	size_t		 nblocks, bsize;
	unsigned char	*samples;	/* this bucket's samples */
	size_t		 nsample, slen, ssize;
	int64_t		 expect, next_sample;
	unsigned char	*rows;		/* the table */
};

struct shuffle_writer {
	int			 dirfd;
	char			*name;
	int			 buckets;
	enum shuffle_order	 order;
	int			 descending;
	size_t			 memory;
	shuffle_combine_fn	 combine;
	void			*arg;
	struct sw_chunk		*chunks;
	size_t			 chunk_size;
	size_t			 used;		/* memory held */
	struct sw_item		*items, *tmp;
	size_t			 nitems, cap;
	struct sw_slot		*table;		/* combine's: open addressing */
	size_t			 tcap;
	int			 runfd;
	int64_t			 runlen;
	struct sw_run		*runs;
	size_t			 nruns;
	size_t			*starts;	/* each bucket's first item */
	size_t			*radix;		/* the sort's counts */
	char			*tmpname;
	unsigned char		*pending;	/* merge's entry to emit */
	size_t			 plen, psize;
	unsigned char		*spare;		/* the next pending */
	size_t			 spsize;
	int			 failed;
};

/* A writer of NAME in dirfd. */
struct shuffle_writer *
shuffle_writer_create(int dirfd, const char *name, int buckets,
    enum shuffle_order order, int descending, size_t memory,
    shuffle_combine_fn combine, void *arg, char **err)
{
	struct shuffle_writer	*w;

	if (*name == '\0' || *name == '.' || strchr(name, '/') != NULL) {
		xasprintf(err, "shuffle file %s: a name, not a path", name);
		return (NULL);
	}
	if (buckets < 1 || buckets > SF_MAX_BUCKETS) {
		xasprintf(err, "shuffle file %s: %d buckets", name, buckets);
		return (NULL);
	}
	if (combine != NULL && order == SHUFFLE_ORDER_NONE) {
		xasprintf(err, "shuffle file %s: combine needs an ordered file",
		    name);
		return (NULL);
	}
	w = xcalloc(1, sizeof *w);
	w->dirfd = dirfd;
	w->name = xstrdup(name);
	w->buckets = buckets;
	w->order = order;
	w->descending = descending;
	w->memory = memory < SW_MEMORY_MIN ? SW_MEMORY_MIN : memory;
	w->chunk_size = w->memory / 8;
	if (w->chunk_size > SW_CHUNK_MAX)
		w->chunk_size = SW_CHUNK_MAX;
	if (w->chunk_size < SW_CHUNK_MIN)
		w->chunk_size = SW_CHUNK_MIN;
	w->combine = combine;
	w->arg = arg;
	w->runfd = -1;
	return (w);
}

/* Room for size bytes in the arena, 8-aligned. */
static struct sw_rec *
sw_arena_alloc(struct shuffle_writer *w, size_t size)
{
	struct sw_chunk	*c = w->chunks;
	size_t		 n;

	size = (size + 7) & ~(size_t)7;
	if (c == NULL || c->size - c->used < size) {
		n = size > w->chunk_size / 2 ? size : w->chunk_size;
		c = xmalloc(sizeof *c + n);
		c->size = n;
		c->used = 0;
		c->next = w->chunks;
		w->chunks = c;
		w->used += sizeof *c + n;
	}
	c->used += size;
	return ((struct sw_rec *)(c->data + c->used - size));
}

/* Free the arena. */
static void
sw_arena_free(struct shuffle_writer *w)
{
	struct sw_chunk	*c;

	while ((c = w->chunks) != NULL) {
		w->chunks = c->next;
		w->used -= sizeof *c + c->size;
		free(c);
	}
}

/* A record's key as a number (numeric files only). */
static struct sf_num *
sw_rec_num(const struct sw_rec *r)
{
	return ((struct sf_num *)((unsigned char *)(r + 1) + SW_ALIGN(r->cap)));
}

/* A new record for size bytes (room for cap). */
static struct sw_rec *
sw_rec_alloc(struct shuffle_writer *w, size_t size, size_t cap)
{
	struct sw_rec	*r;

	r = sw_arena_alloc(w, sizeof *r + SW_ALIGN(cap) +
	    (w->order == SHUFFLE_ORDER_KEY_NUMERIC ? sizeof (struct sf_num) :
	    0));
	r->size = (uint32_t)size;
	r->cap = (uint32_t)cap;
	return (r);
}

/* The key's bytes of a record. */
static const unsigned char *
sw_rec_key(const struct sw_rec *r, int64_t *klen)
{
	const unsigned char	*p = (const unsigned char *)(r + 1);
	int32_t			 n = be32_get(p + 1);

	*klen = n;
	return (n == SF_NULL ? NULL : p + 5);
}

/* The sort prefix of a key: order-preserving as an unsigned integer. */
static uint64_t
sw_prefix(const struct shuffle_writer *w, const struct shuffle_entry *e,
    const struct sf_num *num)
{
	uint64_t	 u = 0;
	double		 d;
	size_t		 i;

	if (w->order == SHUFFLE_ORDER_KEY_NUMERIC) {
		d = num->type == 1 ? (double)num->i : num->d;
		if (d == 0)
			d = 0;	/* -0 as 0, as the comparison has it */
		memcpy(&u, &d, sizeof u);
		u = (u >> 63) ? ~u : u | (uint64_t)1 << 63;
	} else if (!e->knull) {
		for (i = 0; i < 8; i++)
			u = u << 8 | (i < e->klen ?
			    (unsigned char)e->key[i] : 0);
	}
	return (w->descending ? ~u : u);
}

/* A key's hash, for combine's table (FNV-1a, and the bucket). */
static uint32_t
sw_hash(int bucket, const char *key, size_t len)
{
	uint64_t	h = 14695981039346656037ULL ^ (uint64_t)bucket;
	size_t		i;

	for (i = 0; i < len; i++)
		h = (h ^ (unsigned char)key[i]) * 1099511628211ULL;
	/* FNV's low bits are weak, and the table uses them: mix. */
	h ^= h >> 33;
	h *= 0xff51afd7ed558ccdULL;
	h ^= h >> 33;
	return ((uint32_t)h);
}

/* The entry a record holds. */
static void
sw_rec_entry(const struct sw_rec *r, struct shuffle_entry *e)
{
	const char	*why;
	size_t		 size;

	if (sf_decode((const unsigned char *)(r + 1), r->size, e, &size,
	    &why) != 1)
		abort();	/* we encoded it */
}

/* Compare two records' keys in order (after equal prefixes). */
static int
sw_rec_compare(const struct shuffle_writer *w, const struct sw_rec *a,
    const struct sw_rec *b)
{
	const unsigned char	*ka, *kb;
	int64_t			 la, lb;
	int			 c;

	if (w->order == SHUFFLE_ORDER_KEY_NUMERIC)
		c = sf_num_compare(sw_rec_num(a), sw_rec_num(b));
	else {
		ka = sw_rec_key(a, &la);
		kb = sw_rec_key(b, &lb);
		c = sf_bytes_compare((const char *)ka, la < 0 ? 0 : (size_t)la,
		    (const char *)kb, lb < 0 ? 0 : (size_t)lb);
	}
	return (w->descending ? -c : c);
}

/* Does item a sort after b? */
static inline int
sw_item_after(const struct shuffle_writer *w, const struct sw_item *a,
    const struct sw_item *b)
{
	if (a->prefix != b->prefix)
		return (a->prefix > b->prefix);
	return (sw_rec_compare(w, a->rec, b->rec) > 0);
}

/* Sort n items stably: insertion sort of runs of 16, then merges. */
static void
sw_sort_merge(const struct shuffle_writer *w, struct sw_item *a,
    struct sw_item *t, size_t n)
{
	struct sw_item	*src = a, *dst = t, *sw, x;
	size_t		 i, j, lo, mid, hi, k, width;

	for (lo = 0; lo < n; lo += 16) {
		hi = lo + 16 < n ? lo + 16 : n;
		for (i = lo + 1; i < hi; i++) {
			x = a[i];
			for (j = i; j > lo && sw_item_after(w, &a[j - 1], &x);
			    j--)
				a[j] = a[j - 1];
			a[j] = x;
		}
	}
	for (width = 16; width < n; width *= 2) {
		for (lo = 0; lo < n; lo += 2 * width) {
			mid = lo + width < n ? lo + width : n;
			hi = lo + 2 * width < n ? lo + 2 * width : n;
			i = lo;
			j = mid;
			for (k = lo; k < hi; k++) {
				if (i < mid && (j >= hi ||
				    !sw_item_after(w, &src[i], &src[j])))
					dst[k] = src[i++];
				else
					dst[k] = src[j++];
			}
		}
		sw = src;
		src = dst;
		dst = sw;
	}
	if (src != a)
		memcpy(a, src, n * sizeof *a);
}

/* Grow the items (and the sort's scratch) for one more. */
static void
sw_items_grow(struct shuffle_writer *w)
{
	size_t	cap = w->cap == 0 ? 1024 : w->cap * 2;

	w->items = xreallocarray(w->items, cap, sizeof *w->items);
	w->used += (cap - w->cap) * sizeof *w->items;
	w->cap = cap;
}

/* Grow combine's table to keep it at most half full. */
static void
sw_table_grow(struct shuffle_writer *w)
{
	size_t		 cap = w->tcap == 0 ? 1024 : w->tcap * 2, i, s;

	free(w->table);
	w->used -= w->tcap * sizeof *w->table;
	w->table = xcalloc(cap, sizeof *w->table);
	w->used += cap * sizeof *w->table;
	w->tcap = cap;
	for (i = 0; i < w->nitems; i++) {
		s = w->items[i].rec->hash & (cap - 1);
		while (w->table[s].rec != NULL)
			s = (s + 1) & (cap - 1);
		w->table[s].rec = w->items[i].rec;
		w->table[s].item = (uint32_t)i;
		w->table[s].hash = w->items[i].rec->hash;
	}
}

/* Find the item of the bucket's key in combine's table: its slot, and
 * whether the item is there. */
static size_t
sw_table_find(const struct shuffle_writer *w, int bucket,
    const struct shuffle_entry *e, uint32_t hash, int *found)
{
	const struct sw_rec	*r;
	const unsigned char	*k;
	size_t			 s = hash & (w->tcap - 1);
	int64_t			 klen;

	for (; w->table[s].rec != NULL; s = (s + 1) & (w->tcap - 1)) {
		if (w->table[s].hash != hash)
			continue;
		r = w->table[s].rec;
		if (r->bucket != (uint32_t)bucket)
			continue;
		k = sw_rec_key(r, &klen);
		if ((k == NULL) == e->knull && (k == NULL ||
		    ((size_t)klen == e->klen &&
		    memcmp(k, e->key, e->klen) == 0))) {
			*found = 1;
			return (s);
		}
	}
	*found = 0;
	return (s);
}

/* Fold e into the item that has its key. */
static int
sw_combine(struct shuffle_writer *w, struct sw_slot *slot,
    const struct shuffle_entry *e, char **err)
{
	struct shuffle_entry	 a, out;
	struct sw_rec		*r = slot->rec, *n;
	size_t			 size;
	char			*why = NULL;

	sw_rec_entry(r, &a);
	if (w->combine(w->arg, &a, e, &out, &why) == -1) {
		xasprintf(err, "shuffle file %s: %s", w->name,
		    why != NULL ? why : "combine failed");
		free(why);
		return (-1);
	}
	size = sf_encode_size(&out);
	if (size > UINT32_MAX / 2) {
		xasprintf(err, "shuffle file %s: a combined entry is too large",
		    w->name);
		return (-1);
	}
	if (size > r->cap) {
		n = sw_rec_alloc(w, size, size + size / 2);
		n->bucket = r->bucket;
		n->hash = r->hash;
		if (w->order == SHUFFLE_ORDER_KEY_NUMERIC)
			*sw_rec_num(n) = *sw_rec_num(r);
		w->items[slot->item].rec = slot->rec = r = n;
	}
	/* out may point into r: encode apart, then copy in. */
	if (w->spsize < size) {
		w->spare = xrealloc(w->spare, size);
		w->spsize = size;
	}
	sf_encode(w->spare, &out);
	memcpy(r + 1, w->spare, size);
	r->size = (uint32_t)size;
	return (0);
}

/* Put a new entry into the arena and the items. */
static void
sw_append(struct shuffle_writer *w, int bucket, const struct shuffle_entry *e,
    const struct sf_num *num, uint32_t hash, size_t size)
{
	struct sw_rec	*r;

	r = sw_rec_alloc(w, size, size);
	r->bucket = (uint32_t)bucket;
	r->hash = hash;
	if (w->order == SHUFFLE_ORDER_KEY_NUMERIC)
		*sw_rec_num(r) = *num;
	sf_encode((unsigned char *)(r + 1), e);
	if (w->nitems == w->cap)
		sw_items_grow(w);
	w->items[w->nitems].prefix = w->order == SHUFFLE_ORDER_NONE ? 0 :
	    sw_prefix(w, e, num);
	w->items[w->nitems++].rec = r;
}

#define SW_RADIX_BITS	16
#define SW_RADIX_MIN	1024	/* fewer items are merge-sorted at once */

/*
 * Sort n items stably: one counting pass on the 16 highest bits in which
 * their prefixes differ, then a merge sort of each group.  Random keys
 * leave groups of a few items, so most of the merge passes go; keys that
 * share their first bytes are grouped by the bytes after them.
 */
static void
sw_sort(struct shuffle_writer *w, struct sw_item *a, struct sw_item *t,
    size_t n)
{
	size_t		*count, i, g, sum = 0;
	uint64_t	 diff = 0;
	int		 shift;

	for (i = 1; i < n; i++)
		diff |= a[i].prefix ^ a[0].prefix;
	if (n < SW_RADIX_MIN || diff == 0) {
		sw_sort_merge(w, a, t, n);
		return;
	}
	shift = 63 - __builtin_clzll(diff) - (SW_RADIX_BITS - 1);
	if (shift < 0)
		shift = 0;
	if (w->radix == NULL)
		w->radix = xcalloc((size_t)1 << SW_RADIX_BITS,
		    sizeof *w->radix);
	count = w->radix;
	memset(count, 0, sizeof *count << SW_RADIX_BITS);
	for (i = 0; i < n; i++)
		count[(a[i].prefix >> shift) & 0xffff]++;
	for (g = 0; g < (size_t)1 << SW_RADIX_BITS; g++) {
		i = count[g];
		count[g] = sum;
		sum += i;
	}
	for (i = 0; i < n; i++)
		t[count[(a[i].prefix >> shift) & 0xffff]++] = a[i];
	memcpy(a, t, n * sizeof *a);
	/* count[g] is now group g's end. */
	for (g = 0, i = 0; g < (size_t)1 << SW_RADIX_BITS; g++) {
		if (count[g] - i > 1)
			sw_sort_merge(w, a + i, t, count[g] - i);
		i = count[g];
	}
}

static int	sw_spill(struct shuffle_writer *, char **);

/* Check an entry the caller gives. */
static const char *
sw_entry_check(const struct shuffle_entry *e)
{
	if (e->kind != SHUFFLE_KIND_RECORD && e->kind != SHUFFLE_KIND_PAIR &&
	    e->kind != SHUFFLE_KIND_GROUP)
		return ("an entry of no kind");
	if (e->knull && e->kind != SHUFFLE_KIND_RECORD)
		return ("a null key");
	if (e->klen > INT32_MAX || e->vlen > INT32_MAX ||
	    sf_encode_size(e) > UINT32_MAX / 2)
		return ("an entry over 2 GiB");
	if (e->kind == SHUFFLE_KIND_GROUP && e->vnull)
		return ("a group without values");
	return (NULL);
}

/* Add an entry to a bucket. */
int
shuffle_writer_add(struct shuffle_writer *w, int bucket,
    const struct shuffle_entry *e, char **err)
{
	struct sf_num	 num;
	const char	*why;
	size_t		 slot = 0;
	uint32_t	 hash = 0;
	int		 found;
	char		 shown[SF_SHOWN_SIZE];

	if (bucket < 0 || bucket >= w->buckets)
		why = "no such bucket";
	else
		why = sw_entry_check(e);
	if (why != NULL) {
		xasprintf(err, "shuffle file %s: %s", w->name, why);
		return (-1);
	}
	if (sf_num_read(w->order, e, &num) == -1) {
		sf_key_show(shown, sizeof shown, e);
		xasprintf(err, "shuffle file %s: key %s is not a number",
		    w->name, shown);
		return (-1);
	}
	if (w->combine != NULL) {
		if ((w->nitems + 1) * 2 > w->tcap)
			sw_table_grow(w);
		hash = sw_hash(bucket, e->key, e->knull ? 0 : e->klen);
		slot = sw_table_find(w, bucket, e, hash, &found);
		if (found)
			return (sw_combine(w, &w->table[slot], e, err));
		w->table[slot].item = (uint32_t)w->nitems;
		w->table[slot].hash = hash;
	}
	sw_append(w, bucket, e, &num, hash, sf_encode_size(e));
	if (w->combine != NULL)
		w->table[slot].rec = w->items[w->nitems - 1].rec;
	if (w->used > w->memory)
		return (sw_spill(w, err));
	return (0);
}

/* Add without combining, if nothing was added yet. */
void
shuffle_writer_unique_keys(struct shuffle_writer *w)
{
	if (w->nitems == 0 && w->nruns == 0 && w->runlen == 0)
		w->combine = NULL;
}

/* Sort the items by bucket (stable, by counting), then each bucket by
 * key; w->starts[b] is bucket b's first item. */
static void
sw_sort_all(struct shuffle_writer *w)
{
	size_t	i, b, sum = 0, n;

	if (w->starts == NULL)
		w->starts = xcalloc((size_t)w->buckets + 1, sizeof *w->starts);
	memset(w->starts, 0, ((size_t)w->buckets + 1) * sizeof *w->starts);
	for (i = 0; i < w->nitems; i++)
		w->starts[w->items[i].rec->bucket + 1]++;
	w->tmp = xreallocarray(NULL, w->nitems + 1, sizeof *w->tmp);
	for (b = 0; b <= (size_t)w->buckets; b++) {
		sum += w->starts[b];
		w->starts[b] = sum;
	}
	for (i = 0; i < w->nitems; i++)
		w->tmp[w->starts[w->items[i].rec->bucket]++] = w->items[i];
	/* starts[b] is now bucket b's end: shift them back. */
	memmove(w->starts + 1, w->starts, (size_t)w->buckets *
	    sizeof *w->starts);
	w->starts[0] = 0;
	if (w->nitems > 0)
		memcpy(w->items, w->tmp, w->nitems * sizeof *w->items);
	if (w->order != SHUFFLE_ORDER_NONE) {
		for (b = 0; b < (size_t)w->buckets; b++) {
			n = w->starts[b + 1] - w->starts[b];
			if (n > 1)
				sw_sort(w, w->items + w->starts[b], w->tmp, n);
		}
	}
	free(w->tmp);
	w->tmp = NULL;
}

/* Fold the buffered bytes into the block's CRC (in large pieces: a call
 * per entry would cost more than the CRC itself). */
static void
sw_out_crc(struct sw_out *o)
{
	if (o->final && o->used > o->crc_from)
		o->kcrc = crc32_z(o->kcrc, o->buf + o->crc_from,
		    o->used - o->crc_from);
	o->crc_from = o->used;
}

/* Write the output's buffer out. */
static int
sw_out_flush(struct sw_out *o)
{
	sw_out_crc(o);
	o->crc_from = 0;
	if (o->used == 0)
		return (0);
	if (fd_write_full(o->fd, o->buf, o->used) == -1)
		return (-1);
	o->off += (int64_t)o->used;
	o->used = 0;
	return (0);
}

/* The output's offset: what is written and buffered. */
static int64_t
sw_out_offset(const struct sw_out *o)
{
	return (o->off + (int64_t)o->used);
}

/* Write n bytes to the output. */
static int
sw_out_write(struct sw_out *o, const void *p, size_t n)
{
	if (o->used + n > SF_IO_SIZE && sw_out_flush(o) == -1)
		return (-1);
	if (n >= SF_IO_SIZE) {
		if (o->final)
			o->kcrc = crc32_z(o->kcrc, p, n);
		if (fd_write_full(o->fd, p, n) == -1)
			return (-1);
		o->off += (int64_t)n;
		return (0);
	}
	memcpy(o->buf + o->used, p, n);
	o->used += n;
	return (0);
}

/* Append n bytes to a growing buffer. */
static void
sw_grow_put(unsigned char **buf, size_t *len, size_t *size, const void *p,
    size_t n)
{
	if (n == 0)
		return;
	if (*len + n > *size) {
		*size = (*len + n) * 2;
		*buf = xrealloc(*buf, *size);
	}
	memcpy(*buf + *len, p, n);
	*len += n;
}

/* Close the block being written, if it holds anything. */
static void
sw_out_block_end(struct sw_out *o)
{
	unsigned char	 b[SF_BLOCK_ENTRY_SIZE];
	int64_t		 len = sw_out_offset(o) - o->kstart;

	if (len == 0)
		return;
	sw_out_crc(o);
	be64_put(b, o->kstart - o->bstart);
	be32_put(b + 8, (int32_t)(uint32_t)o->kcrc);
	sw_grow_put(&o->blocks, &o->nblocks, &o->bsize, b, sizeof b);
	o->bcrc = crc32_combine(o->bcrc, o->kcrc, len);
	o->kcrc = crc32_z(0, NULL, 0);
	o->kstart = sw_out_offset(o);
}

/* Begin a bucket of the output, expecting about expect entries. */
static void
sw_out_bucket_begin(struct sw_out *o, int64_t expect)
{
	o->bstart = o->kstart = sw_out_offset(o);
	o->count = 0;
	o->bcrc = o->kcrc = crc32_z(0, NULL, 0);
	o->nblocks = o->nsample = o->slen = 0;
	o->expect = expect;
	o->next_sample = 0;
}

/* Sample the key of the count-th entry when it is due: up to
 * SHUFFLE_SAMPLE_MAX spread evenly over the expected entries. */
static void
sw_out_sample(struct sw_out *o, enum shuffle_order order,
    const struct shuffle_entry *e)
{
	unsigned char	 h[4];
	size_t		 len = e->knull ? 0 : e->klen;

	if (order == SHUFFLE_ORDER_NONE || o->count != o->next_sample ||
	    o->nsample == SHUFFLE_SAMPLE_MAX)
		return;
	o->nsample++;
	o->next_sample = o->expect <= SHUFFLE_SAMPLE_MAX ? o->count + 1 :
	    (int64_t)((double)o->nsample * (double)o->expect /
	    SHUFFLE_SAMPLE_MAX);
	if (order == SHUFFLE_ORDER_KEY_NUMERIC &&
	    len > SHUFFLE_SAMPLE_KEY_MAX) {
		o->nsample--;	/* a prefix of a number is another number */
		return;
	}
	if (len > SHUFFLE_SAMPLE_KEY_MAX)
		len = SHUFFLE_SAMPLE_KEY_MAX;
	be32_put(h, e->knull ? SF_NULL : (int32_t)len);
	sw_grow_put(&o->samples, &o->slen, &o->ssize, h, 4);
	if (len > 0)
		sw_grow_put(&o->samples, &o->slen, &o->ssize, e->key, len);
}

/* Write an entry's encoded bytes to the output. */
static int
sw_out_entry(struct sw_out *o, enum shuffle_order order,
    const struct shuffle_entry *e, const unsigned char *p, size_t n)
{
	if (o->final) {
		sw_out_sample(o, order, e);
		if (sw_out_offset(o) - o->kstart >= SF_BLOCK_SIZE)
			sw_out_block_end(o);
	}
	o->count++;
	return (sw_out_write(o, p, n));
}

/* End a bucket of the final file: its extras and its row. */
static void
sw_out_bucket_end(struct sw_out *o, int bucket)
{
	unsigned char	 h[4], *row = o->rows + (size_t)bucket * SF_ROW_SIZE;
	size_t		 xstart = o->xlen;

	sw_out_block_end(o);
	be32_put(h, (int32_t)o->nsample);
	sw_grow_put(&o->extra, &o->xlen, &o->xsize, h, 4);
	sw_grow_put(&o->extra, &o->xlen, &o->xsize, o->samples, o->slen);
	be32_put(h, (int32_t)(o->nblocks / SF_BLOCK_ENTRY_SIZE));
	sw_grow_put(&o->extra, &o->xlen, &o->xsize, h, 4);
	sw_grow_put(&o->extra, &o->xlen, &o->xsize, o->blocks, o->nblocks);
	be64_put(row, o->bstart);
	be64_put(row + 8, sw_out_offset(o) - o->bstart);
	be64_put(row + 16, o->count);
	be32_put(row + 24, (int32_t)(uint32_t)o->bcrc);
	be64_put(row + 28, (int64_t)xstart);	/* made absolute at the end */
	be32_put(row + 36, (int32_t)(o->xlen - xstart));
	be32_put(row + 40, (int32_t)(uint32_t)crc32_z(0, o->extra + xstart,
	    o->xlen - xstart));
}

/* A source of a bucket's merge: a run's segment, or the sorted items. */
struct sw_src {
	struct sf_in		 in;
	int			 mem;
	size_t			 i, n;
	struct shuffle_entry	 e;
	struct sf_num		 num;
	const unsigned char	*p;	/* the entry's encoded bytes */
	size_t			 size;
};

/* The source's next entry: 1, 0, -1 with *why. */
static int
sw_src_next(struct shuffle_writer *w, struct sw_src *s, const char **why)
{
	struct sw_rec	*r;
	int		 rc;

	if (s->mem) {
		if (s->i == s->n)
			return (0);
		if (s->i + 8 < s->n)
			__builtin_prefetch(w->items[s->i + 8].rec);
		r = w->items[s->i++].rec;
		sw_rec_entry(r, &s->e);
		if (w->order == SHUFFLE_ORDER_KEY_NUMERIC)
			s->num = *sw_rec_num(r);
		s->p = (const unsigned char *)(r + 1);
		s->size = r->size;
		return (1);
	}
	if ((rc = sf_in_next(&s->in, &s->e, &s->size, why)) != 1)
		return (rc);
	s->p = s->in.buf + s->in.head - s->size;
	(void)sf_num_read(w->order, &s->e, &s->num);
	return (1);
}

/* Does source a's entry come before b's?  Ties to the lower index. */
static int
sw_src_less(const struct shuffle_writer *w, const struct sw_src *s,
    size_t a, size_t b)
{
	int	c;

	c = sf_entry_compare(w->order, w->descending, &s[a].e, &s[a].num,
	    &s[b].e, &s[b].num);
	return (c < 0 || (c == 0 && a < b));
}

/* Sift a heap of source indexes down from i. */
static void
sw_heap_down(const struct shuffle_writer *w, const struct sw_src *s,
    size_t *heap, size_t n, size_t i)
{
	size_t	c, t;

	for (;;) {
		c = 2 * i + 1;
		if (c >= n)
			return;
		if (c + 1 < n && sw_src_less(w, s, heap[c + 1], heap[c]))
			c++;
		if (!sw_src_less(w, s, heap[c], heap[i]))
			return;
		t = heap[c];
		heap[c] = heap[i];
		heap[i] = t;
		i = c;
	}
}

/* Copy an entry into the pending buffer (e may point into it: it is
 * encoded into the spare one, and the two swap). */
static void
sw_pending_set(struct shuffle_writer *w, const struct shuffle_entry *e)
{
	unsigned char	*t;
	size_t		 size = sf_encode_size(e);

	if (w->spsize < size) {
		w->spsize = size;
		w->spare = xrealloc(w->spare, size);
	}
	w->plen = sf_encode(w->spare, e);
	t = w->pending;
	w->pending = w->spare;
	w->spare = t;
	size = w->psize;
	w->psize = w->spsize;
	w->spsize = size;
}

/* The pending entry, decoded. */
static void
sw_pending_entry(struct shuffle_writer *w, struct shuffle_entry *e)
{
	const char	*why;
	size_t		 size;

	if (sf_decode(w->pending, w->plen, e, &size, &why) != 1)
		abort();	/* we encoded it */
}

/* Do two entries have the same key bytes? */
static int
sw_same_key(const struct shuffle_entry *a, const struct shuffle_entry *b)
{
	if (a->knull || b->knull)
		return (a->knull && b->knull);
	return (a->klen == b->klen && memcmp(a->key, b->key, a->klen) == 0);
}

/* Emit the next merged entry, combining it with the pending one when
 * their keys are equal. */
static int
sw_emit(struct shuffle_writer *w, struct sw_out *o, const struct sw_src *s,
    int *pending, char **err)
{
	struct shuffle_entry	 p, out;
	char			*why = NULL;

	if (w->combine == NULL)
		return (sw_out_entry(o, w->order, &s->e, s->p, s->size));
	if (*pending) {
		sw_pending_entry(w, &p);
		if (sw_same_key(&p, &s->e)) {
			if (w->combine(w->arg, &p, &s->e, &out, &why) == -1) {
				xasprintf(err, "shuffle file %s: %s", w->name,
				    why != NULL ? why : "combine failed");
				free(why);
				return (-2);
			}
			sw_pending_set(w, &out);
			return (0);
		}
		if (sw_out_entry(o, w->order, &p, w->pending, w->plen) == -1)
			return (-1);
	}
	sw_pending_set(w, &s->e);
	*pending = 1;
	return (0);
}

/* Gather the sources of bucket b: its segments of every run, then the
 * items in memory. */
static size_t
sw_sources(struct shuffle_writer *w, int b, struct sw_src *s, int64_t *expect)
{
	struct sw_run	*run;
	struct sw_seg	*seg;
	size_t		 i, n = 0, chunk;

	chunk = w->memory / (w->nruns + 1);
	chunk = chunk > SF_IO_SIZE ? SF_IO_SIZE : chunk < SF_IO_MIN ?
	    SF_IO_MIN : chunk;
	*expect = 0;
	for (i = 0; i < w->nruns; i++) {
		run = &w->runs[i];
		if (run->cur == run->nsegs || run->segs[run->cur].bucket != b)
			continue;
		seg = &run->segs[run->cur++];
		memset(&s[n], 0, sizeof s[n]);
		sf_in_init(&s[n].in, w->runfd, seg->off, seg->off + seg->len,
		    chunk);
		*expect += seg->count;
		n++;
	}
	memset(&s[n], 0, sizeof s[n]);
	s[n].mem = 1;
	s[n].i = w->starts[b];
	s[n].n = w->starts[b + 1];
	*expect += (int64_t)(s[n].n - s[n].i);
	return (n + 1);
}

/* Merge the sources of a bucket into the output: 0, -1 (a write error,
 * errno), -2 with *err. */
static int
sw_merge(struct shuffle_writer *w, struct sw_out *o, struct sw_src *s,
    size_t n, size_t *heap, char **err)
{
	const char	*why;
	size_t		 i, nheap = 0;
	int		 rc, pending = 0;

	for (i = 0; i < n; i++) {
		if ((rc = sw_src_next(w, &s[i], &why)) == -1)
			goto bad;
		if (rc == 1)
			heap[nheap++] = i;
	}
	if (w->order == SHUFFLE_ORDER_NONE) {
		/* Arrival order: the sources one after the other. */
		for (i = 0; i < nheap; i++) {
			do {
				if ((rc = sw_emit(w, o, &s[heap[i]], &pending,
				    err)) != 0)
					return (rc);
			} while ((rc = sw_src_next(w, &s[heap[i]], &why)) == 1);
			if (rc == -1)
				goto bad;
		}
		return (0);
	}
	for (i = nheap / 2; i-- > 0;)
		sw_heap_down(w, s, heap, nheap, i);
	while (nheap > 0) {
		if ((rc = sw_emit(w, o, &s[heap[0]], &pending, err)) != 0)
			return (rc);
		if ((rc = sw_src_next(w, &s[heap[0]], &why)) == -1)
			goto bad;
		if (rc == 0)
			heap[0] = heap[--nheap];
		sw_heap_down(w, s, heap, nheap, 0);
	}
	if (pending) {
		struct shuffle_entry	p;

		sw_pending_entry(w, &p);
		return (sw_out_entry(o, w->order, &p, w->pending, w->plen));
	}
	return (0);
bad:
	xasprintf(err, "shuffle file %s: a spilled run: %s", w->name, why);
	return (-2);
}

/* Merge every bucket's runs and items into the output. */
static int
sw_merge_all(struct shuffle_writer *w, struct sw_out *o, char **err)
{
	struct sw_src	*s;
	size_t		*heap, i, n;
	int64_t		 expect;
	int		 b, rc = 0;

	s = xcalloc(w->nruns + 1, sizeof *s);
	heap = xcalloc(w->nruns + 1, sizeof *heap);
	for (i = 0; i < w->nruns; i++)
		w->runs[i].cur = 0;
	for (b = 0; b < w->buckets && rc == 0; b++) {
		n = sw_sources(w, b, s, &expect);
		sw_out_bucket_begin(o, expect);
		rc = sw_merge(w, o, s, n, heap, err);
		for (i = 0; i < n; i++)
			sf_in_free(&s[i].in);
		if (rc == 0)
			sw_out_bucket_end(o, b);
	}
	free(s);
	free(heap);
	return (rc);
}

/* Open the nameless file the runs spill to. */
static int
sw_run_open(struct shuffle_writer *w)
{
	char	name[64];
	int	fd, i;

	fd = openat(w->dirfd, ".", O_TMPFILE|O_RDWR|O_CLOEXEC|O_NOCTTY, 0600);
	if (fd != -1 || (errno != EOPNOTSUPP && errno != EISDIR &&
	    errno != EINVAL))
		return (fd);
	/* No O_TMPFILE here: a fresh name, unlinked at once. */
	for (i = 0; i < 100; i++) {
		snprintf(name, sizeof name, ".spill.%ld.%d", (long)getpid(), i);
		fd = openat(w->dirfd, name, O_RDWR|O_CREAT|O_EXCL|O_NOFOLLOW|
		    O_CLOEXEC|O_NOCTTY, 0600);
		if (fd != -1) {
			unlinkat(w->dirfd, name, 0);
			return (fd);
		}
		if (errno != EEXIST)
			return (-1);
	}
	return (-1);
}

/* Write the sorted items of every bucket as a run. */
static int
sw_spill_write(struct shuffle_writer *w, struct sw_out *o, struct sw_run *run)
{
	struct sw_seg	*seg;
	struct sw_rec	*r;
	size_t		 i, cap = 0;
	int		 b;

	for (b = 0; b < w->buckets; b++) {
		if (w->starts[b] == w->starts[b + 1])
			continue;
		if (run->nsegs == cap) {
			cap = cap == 0 ? 16 : cap * 2;
			run->segs = xreallocarray(run->segs, cap,
			    sizeof *run->segs);
		}
		seg = &run->segs[run->nsegs++];
		seg->bucket = b;
		seg->off = sw_out_offset(o);
		seg->count = (int64_t)(w->starts[b + 1] - w->starts[b]);
		for (i = w->starts[b]; i < w->starts[b + 1]; i++) {
			r = w->items[i].rec;
			if (sw_out_write(o, r + 1, r->size) == -1)
				return (-1);
		}
		seg->len = sw_out_offset(o) - seg->off;
	}
	return (sw_out_flush(o));
}

/* Sort what is in memory and spill it as a run. */
static int
sw_spill(struct shuffle_writer *w, char **err)
{
	struct sw_out	 o;
	struct sw_run	*run;

	if (w->runfd == -1 && (w->runfd = sw_run_open(w)) == -1) {
		xasprintf(err, "shuffle file %s: spill: %s", w->name,
		    strerror(errno));
		return (-1);
	}
	sw_sort_all(w);
	w->runs = xreallocarray(w->runs, w->nruns + 1, sizeof *w->runs);
	run = &w->runs[w->nruns++];
	memset(run, 0, sizeof *run);
	memset(&o, 0, sizeof o);
	o.fd = w->runfd;
	o.off = w->runlen;
	o.buf = xmalloc(SF_IO_SIZE);
	if (sw_spill_write(w, &o, run) == -1) {
		xasprintf(err, "shuffle file %s: spill: %s", w->name,
		    strerror(errno));
		free(o.buf);
		return (-1);
	}
	w->runlen = o.off;
	free(o.buf);
	sw_arena_free(w);
	w->nitems = 0;
	/* Arrays grown past half the bound would leave no room, and every
	 * later add would spill: start them again small. */
	if ((w->cap * sizeof *w->items + w->tcap * sizeof *w->table) >
	    w->memory / 2) {
		free(w->items);
		free(w->table);
		w->items = NULL;
		w->table = NULL;
		w->used -= w->cap * sizeof *w->items +
		    w->tcap * sizeof *w->table;
		w->cap = w->tcap = 0;
	} else if (w->table != NULL)
		memset(w->table, 0, w->tcap * sizeof *w->table);
	return (0);
}

/* Write the extras and the table and trailer after the buckets. */
static int
sw_out_footer(struct shuffle_writer *w, struct sw_out *o)
{
	unsigned char	 t[SF_TRAILER_SIZE], *row;
	int64_t		 xbase = sw_out_offset(o), toff;
	size_t		 tlen = (size_t)w->buckets * SF_ROW_SIZE;
	int		 b, flags = 0;

	o->final = 0;	/* no more blocks */
	for (b = 0; b < w->buckets; b++) {
		row = o->rows + (size_t)b * SF_ROW_SIZE;
		be64_put(row + 28, be64_get(row + 28) + xbase);
		be32_put(row + 44, (int32_t)(uint32_t)crc32_z(0, row, 44));
	}
	if (sw_out_write(o, o->extra, o->xlen) == -1)
		return (-1);
	toff = sw_out_offset(o);
	if (sw_out_write(o, o->rows, tlen) == -1)
		return (-1);
	if (w->order != SHUFFLE_ORDER_NONE)
		flags |= SF_FLAG_ORDERED;
	if (w->order == SHUFFLE_ORDER_KEY_NUMERIC)
		flags |= SF_FLAG_NUMERIC;
	if (w->descending)
		flags |= SF_FLAG_DESCENDING;
	be32_put(t, w->buckets);
	be32_put(t + 4, flags);
	be64_put(t + 8, toff);
	be32_put(t + 16, (int32_t)(uint32_t)crc32_z(0, t, 16));
	memcpy(t + 20, SF_MAGIC, SF_MAGIC_SIZE);
	if (sw_out_write(o, t, sizeof t) == -1)
		return (-1);
	return (sw_out_flush(o));
}

/* Open the temporary file, .NAME.PID.tmp, replacing a stale one. */
static int
sw_tmp_open(struct shuffle_writer *w)
{
	int	fd, flags = O_WRONLY|O_CREAT|O_EXCL|O_NOFOLLOW|O_CLOEXEC|
		    O_NOCTTY;

	xasprintf(&w->tmpname, ".%s.%ld.tmp", w->name, (long)getpid());
	fd = openat(w->dirfd, w->tmpname, flags, 0600);
	if (fd == -1 && errno == EEXIST &&
	    unlinkat(w->dirfd, w->tmpname, 0) == 0)
		fd = openat(w->dirfd, w->tmpname, flags, 0600);
	if (fd == -1) {
		free(w->tmpname);
		w->tmpname = NULL;
	}
	return (fd);
}

/* Write the whole file to fd. */
static int
sw_write(struct shuffle_writer *w, int fd, int64_t *bytes, char **err)
{
	struct sw_out	o;
	int		rc;

	memset(&o, 0, sizeof o);
	o.fd = fd;
	o.final = 1;
	o.buf = xmalloc(SF_IO_SIZE);
	o.rows = xcalloc((size_t)w->buckets, SF_ROW_SIZE);
	rc = sw_merge_all(w, &o, err);
	if (rc == 0)
		rc = sw_out_footer(w, &o);
	if (rc == -1)
		xasprintf(err, "shuffle file %s: %s", w->name, strerror(errno));
	*bytes = o.off;
	free(o.buf);
	free(o.rows);
	free(o.extra);
	free(o.blocks);
	free(o.samples);
	return (rc == 0 ? 0 : -1);
}

/* Sort, combine, merge and write the file, then rename it into place. */
int
shuffle_writer_commit(struct shuffle_writer *w, int64_t *bytes, char **err)
{
	int	fd;

	if (w->failed) {
		xasprintf(err, "shuffle file %s: committed twice", w->name);
		return (-1);
	}
	w->failed = 1;
	sw_sort_all(w);
	if ((fd = sw_tmp_open(w)) == -1) {
		xasprintf(err, "shuffle file %s: %s", w->name, strerror(errno));
		return (-1);
	}
	if (sw_write(w, fd, bytes, err) == -1) {
		close(fd);
		return (-1);
	}
	if (close(fd) == -1 || renameat(w->dirfd, w->tmpname, w->dirfd,
	    w->name) == -1) {
		xasprintf(err, "shuffle file %s: %s", w->name, strerror(errno));
		return (-1);
	}
	free(w->tmpname);
	w->tmpname = NULL;
	return (0);
}

/* The runs spilled so far. */
int
shuffle_writer_spills(const struct shuffle_writer *w)
{
	return ((int)w->nruns);
}

/* Free a writer, removing its temporary file if it has one. */
void
shuffle_writer_free(struct shuffle_writer *w)
{
	size_t	i;

	if (w == NULL)
		return;
	if (w->tmpname != NULL)
		unlinkat(w->dirfd, w->tmpname, 0);
	if (w->runfd != -1)
		close(w->runfd);
	for (i = 0; i < w->nruns; i++)
		free(w->runs[i].segs);
	sw_arena_free(w);
	free(w->runs);
	free(w->items);
	free(w->table);
	free(w->starts);
	free(w->radix);
	free(w->pending);
	free(w->spare);
	free(w->tmpname);
	free(w->name);
	free(w);
}
