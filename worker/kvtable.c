#include <stdlib.h>
#include <string.h>

#include "hash.h"
#include "kvtable.h"
#include "log.h"
#include "xmalloc.h"

/*
 * Open addressing with linear probing, as count_by_value's table: a key
 * of up to 16 bytes is kept in its slot, zero-padded, so the common short
 * key is found with a few compares and no pointer to follow; a longer one
 * is copied into the chunks, its slot holding where (k[0]) and its hash
 * (k[1]).  A slot with n 0 is free; n counts 1, then stays at 2 (a lone
 * value's partial is written as the value came): 32 bytes a slot.
 *
 * A short key waits in a batch while its slot's line is fetched: looking
 * up a batch of slots on their way costs one wait to memory, not one
 * each.  The batch keeps the order of arrival, so each key's values are
 * folded in the order they came (a double's sum depends on it).
 */
#define KV_TABLE_INLINE	16
#define KV_TABLE_CHUNK	(256 * 1024)
#define KV_TABLE_FIRST	1024
#define KV_TABLE_BATCH	16

struct kv_table_slot {
	uint64_t	 k[2];
	union {
		int64_t	 i;
		double	 r;
	}		 v;
	uint32_t	 len;
	uint16_t	 real;
	uint16_t	 n;		/* values folded: 0, 1 or 2 (more) */
};

/* A short key's number, waiting for its slot. */
struct kv_table_wait {
	uint64_t	 k[2], h;
	int64_t		 i;
	double		 d;
	uint32_t	 len;
	int		 kind;
};

struct kv_table_chunk {
	struct kv_table_chunk	*next;
	size_t			 used, size;
	char			 data[];
};

struct kv_table {
	enum plan_kv_fn		 fn;
	struct kv_table_slot	*slots;
	size_t			 mask, used;
	struct kv_table_chunk	*chunks;
	size_t			 chunk_bytes;
	struct kv_table_wait	 wait[KV_TABLE_BATCH];
	int			 nwait;
};

/* An empty table for fn. */
struct kv_table *
kv_table_create(enum plan_kv_fn fn)
{
	struct kv_table	*t;

	if (fn == PLAN_KV_CONCAT)
		fatalx("%s: concat", __func__);
	t = xcalloc(1, sizeof *t);
	t->fn = fn;
	t->mask = KV_TABLE_FIRST - 1;
	t->slots = xcalloc(KV_TABLE_FIRST, sizeof *t->slots);
	return (t);
}

/* Free the long keys' copies. */
static void
kv_table_chunks_free(struct kv_table *t)
{
	struct kv_table_chunk	*c;

	while ((c = t->chunks) != NULL) {
		t->chunks = c->next;
		free(c);
	}
	t->chunk_bytes = 0;
}

/* Free a table. */
void
kv_table_free(struct kv_table *t)
{
	if (t == NULL)
		return;
	kv_table_chunks_free(t);
	free(t->slots);
	free(t);
}

/* Copy a long key into the chunks. */
static const char *
kv_table_copy(struct kv_table *t, const char *key, size_t len)
{
	struct kv_table_chunk	*c = t->chunks;
	size_t			 size;

	if (c == NULL || c->size - c->used < len) {
		size = len > KV_TABLE_CHUNK ? len : KV_TABLE_CHUNK;
		c = xmalloc(sizeof *c + size);
		c->size = size;
		c->used = 0;
		c->next = t->chunks;
		t->chunks = c;
		t->chunk_bytes += sizeof *c + size;
	}
	memcpy(c->data + c->used, key, len);
	c->used += len;
	return (c->data + c->used - len);
}

/* Where a slot's key goes in the table. */
static uint64_t
kv_table_slot_hash(const struct kv_table_slot *s)
{
	if (s->len <= KV_TABLE_INLINE)
		return (hash_short(s->k[0], s->k[1], s->len));
	return (s->k[1]);
}

/* Double the slots. */
static void
kv_table_grow(struct kv_table *t)
{
	struct kv_table_slot	*old = t->slots;
	size_t			 oldsize = t->mask + 1, i, j;

	t->mask = oldsize * 2 - 1;
	t->slots = xcalloc(t->mask + 1, sizeof *t->slots);
	for (i = 0; i < oldsize; i++) {
		if (old[i].n == 0)
			continue;
		for (j = kv_table_slot_hash(&old[i]) & t->mask;
		    t->slots[j].n != 0; j = (j + 1) & t->mask)
			;
		t->slots[j] = old[i];
	}
	free(old);
}

/* Fold a number into a slot. */
static inline void
kv_table_fold(struct kv_table *t, struct kv_table_slot *s, int kind,
    int64_t i, double d)
{
	struct kv_acc	a;
	int64_t		sum;

	/* A sum or count of int64s that fits: kv_acc_fold's first case. */
	if (s->n != 0 && !s->real && kind == 1 && (t->fn == PLAN_KV_SUM ||
	    t->fn == PLAN_KV_COUNT) && !__builtin_add_overflow(s->v.i, i,
	    &sum)) {
		s->v.i = sum;
		s->n = 2;
		return;
	}
	a.n = s->n;
	a.real = s->real;
	memcpy(&a.v, &s->v, sizeof a.v);
	kv_acc_fold(t->fn, &a, kind, i, d);
	s->n = a.n > 2 ? 2 : (uint16_t)a.n;
	s->real = (uint16_t)a.real;
	memcpy(&s->v, &a.v, sizeof s->v);
}

/* Fold a number into a key's slot, found or taken. */
static void
kv_table_put(struct kv_table *t, struct kv_table_slot *s, int kind,
    int64_t i, double d)
{
	if (s->n != 0) {
		kv_table_fold(t, s, kind, i, d);
		return;
	}
	kv_table_fold(t, s, kind, i, d);
	/* Grow at 70% full: linear probing slows down past that. */
	if (++t->used * 10 >= (t->mask + 1) * 7)
		kv_table_grow(t);
}

/* Fold a short key's number in, given as its zero-padded words and
 * their hash_short. */
static void
kv_table_add_short(struct kv_table *t, const struct kv_table_wait *w)
{
	struct kv_table_slot	*s;
	size_t			 i;

	for (i = w->h & t->mask;; i = (i + 1) & t->mask) {
		s = &t->slots[i];
		if (s->n == 0)
			break;
		if (s->k[0] == w->k[0] && s->k[1] == w->k[1] &&
		    s->len == w->len) {
			kv_table_fold(t, s, w->kind, w->i, w->d);
			return;
		}
	}
	s->k[0] = w->k[0];
	s->k[1] = w->k[1];
	s->len = w->len;
	kv_table_put(t, s, w->kind, w->i, w->d);
}

/* Fold the batch's numbers in, in the order they came. */
static void
kv_table_flush(struct kv_table *t)
{
	int	i;

	for (i = 0; i < t->nwait; i++)
		kv_table_add_short(t, &t->wait[i]);
	t->nwait = 0;
}

/* Fold a long key's number in. */
static void
kv_table_add_long(struct kv_table *t, const char *key, size_t klen,
    int kind, int64_t i, double d)
{
	struct kv_table_slot	*s;
	uint64_t		 h = hash_bytes(key, klen);
	size_t			 j;

	for (j = h & t->mask;; j = (j + 1) & t->mask) {
		s = &t->slots[j];
		if (s->n == 0)
			break;
		if (s->len == klen && s->k[1] == h &&
		    memcmp((const char *)(uintptr_t)s->k[0], key, klen) == 0) {
			kv_table_fold(t, s, kind, i, d);
			return;
		}
	}
	s->k[0] = (uint64_t)(uintptr_t)kv_table_copy(t, key, klen);
	s->k[1] = h;
	s->len = (uint32_t)klen;
	kv_table_put(t, s, kind, i, d);
}

/* Fold a number into a short key's fold, given as its words. */
void
kv_table_add_words(struct kv_table *t, uint64_t k0, uint64_t k1, size_t klen,
    int kind, int64_t i, double d)
{
	struct kv_table_wait	*w = &t->wait[t->nwait];

	w->k[0] = k0;
	w->k[1] = k1;
	w->len = (uint32_t)klen;
	w->h = hash_short(k0, k1, klen);
	w->kind = kind;
	w->i = i;
	w->d = d;
	__builtin_prefetch(&t->slots[w->h & t->mask]);
	if (++t->nwait == KV_TABLE_BATCH)
		kv_table_flush(t);
}

/* Fold a number into key's fold. */
void
kv_table_add(struct kv_table *t, const char *key, size_t klen, int kind,
    int64_t i, double d)
{
	uint64_t	k[2] = { 0, 0 };

	if (klen > UINT32_MAX)
		fatalx("%s: a key of %zu bytes", __func__, klen);
	if (klen > KV_TABLE_INLINE) {
		/* No short key is equal to it: the batch may wait. */
		kv_table_add_long(t, key, klen, kind, i, d);
		return;
	}
	if (klen > 0)
		memcpy(k, key, klen);
	kv_table_add_words(t, k[0], k[1], klen, kind, i, d);
}

/* The bytes the table holds. */
size_t
kv_table_memory(const struct kv_table *t)
{
	return ((t->mask + 1) * sizeof *t->slots + t->chunk_bytes);
}

/* Give each key's partial to fn, then empty the table. */
int
kv_table_drain(struct kv_table *t, kv_table_fn fn, void *arg, char **err)
{
	struct kv_table_slot	*s;
	struct kv_acc		 a;
	char			 num[KV_ACC_TEXT];
	const char		*key;
	size_t			 i, n;

	kv_table_flush(t);
	for (i = 0; i <= t->mask; i++) {
		s = &t->slots[i];
		if (s->n == 0)
			continue;
		a.n = s->n;
		a.real = s->real;
		memcpy(&a.v, &s->v, sizeof a.v);
		n = kv_acc_text(&a, a.n == 1, num, sizeof num);
		key = s->len <= KV_TABLE_INLINE ? (const char *)s->k :
		    (const char *)(uintptr_t)s->k[0];
		if (fn(arg, key, s->len, num, n, err) == -1)
			return (-1);
	}
	/* Back to the first size: a drain past the memory starts over. */
	free(t->slots);
	t->mask = KV_TABLE_FIRST - 1;
	t->slots = xcalloc(KV_TABLE_FIRST, sizeof *t->slots);
	t->used = 0;
	kv_table_chunks_free(t);
	return (0);
}
