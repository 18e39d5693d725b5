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
 * (k[1]).  A slot with n 0 is free.
 */
#define KV_TABLE_INLINE	16
#define KV_TABLE_CHUNK	(256 * 1024)
#define KV_TABLE_FIRST	1024

struct kv_table_slot {
	uint64_t	 k[2];
	int64_t		 n;		/* values folded */
	union {
		int64_t	 i;
		double	 r;
	}		 v;
	uint32_t	 len;
	uint32_t	 real;
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

	a.n = s->n;
	a.real = (int)s->real;
	memcpy(&a.v, &s->v, sizeof a.v);
	kv_acc_fold(t->fn, &a, kind, i, d);
	s->n = a.n;
	s->real = (uint32_t)a.real;
	memcpy(&s->v, &a.v, sizeof s->v);
}

/* The slot of key: its own, or the free one it goes in (its k and len
 * set, n 0). */
static struct kv_table_slot *
kv_table_find(struct kv_table *t, const char *key, size_t klen)
{
	struct kv_table_slot	*s;
	uint64_t		 k[2] = { 0, 0 }, h;
	size_t			 i;

	if (klen <= KV_TABLE_INLINE) {
		if (klen > 0)
			memcpy(k, key, klen);
		h = hash_short(k[0], k[1], klen);
		for (i = h & t->mask;; i = (i + 1) & t->mask) {
			s = &t->slots[i];
			if (s->n == 0 || (s->k[0] == k[0] && s->k[1] == k[1] &&
			    s->len == klen))
				break;
		}
	} else {
		h = hash_bytes(key, klen);
		for (i = h & t->mask;; i = (i + 1) & t->mask) {
			s = &t->slots[i];
			if (s->n == 0 || (s->len == klen && s->k[1] == h &&
			    memcmp((const char *)(uintptr_t)s->k[0], key,
			    klen) == 0))
				break;
		}
		k[1] = h;
	}
	if (s->n == 0) {
		s->k[0] = k[0];
		s->k[1] = k[1];
		s->len = (uint32_t)klen;
	}
	return (s);
}

/* Fold a number into key's fold. */
void
kv_table_add(struct kv_table *t, const char *key, size_t klen, int kind,
    int64_t i, double d)
{
	struct kv_table_slot	*s;

	if (klen > UINT32_MAX)
		fatalx("%s: a key of %zu bytes", __func__, klen);
	s = kv_table_find(t, key, klen);
	if (s->n == 0 && klen > KV_TABLE_INLINE) {
		s->k[0] = (uint64_t)(uintptr_t)kv_table_copy(t, key, klen);
		s->len = (uint32_t)klen;
	}
	if (s->n == 0) {
		kv_table_fold(t, s, kind, i, d);
		/* Grow at 70% full: linear probing slows down past that. */
		if (++t->used * 10 >= (t->mask + 1) * 7)
			kv_table_grow(t);
		return;
	}
	kv_table_fold(t, s, kind, i, d);
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

	for (i = 0; i <= t->mask; i++) {
		s = &t->slots[i];
		if (s->n == 0)
			continue;
		a.n = s->n;
		a.real = (int)s->real;
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
