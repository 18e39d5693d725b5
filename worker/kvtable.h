/*
 * reduce_by_key's map-side table (docs/plans.md, "Keyed data and the
 * shuffle"): for sum, count, min and max, each key's running fold in a
 * hash table, so that a map task reads each value once and writes one
 * partial per key, instead of combining two texts per record in the
 * shuffle file's writer.  The table holds what it is given until it is
 * drained; its owner drains it past its memory and at the end.
 */
#ifndef EMBER_WORKER_KVTABLE_H
#define EMBER_WORKER_KVTABLE_H

#include <stddef.h>
#include <stdint.h>

#include "kvfold.h"

struct kv_table;

/* Take a key's partial: its bytes and its value's text, both valid for
 * the call.  0, or -1 with *err (to free) to stop the drain. */
typedef int (*kv_table_fn)(void *arg, const char *key, size_t klen,
    const char *v, size_t vlen, char **err);

/* An empty table for fn (sum, count, min or max: not concat). */
struct kv_table	*kv_table_create(enum plan_kv_fn);
void		 kv_table_free(struct kv_table *);

/* Fold a number (as kv_fold_read gives it) into key's fold. */
void		 kv_table_add(struct kv_table *, const char *key,
		     size_t klen, int kind, int64_t i, double d);

/* Fold a number into the fold of a key of up to 16 bytes, given as its
 * zero-padded words (pieces_words), as kv_table_add would. */
void		 kv_table_add_words(struct kv_table *, uint64_t k0,
		     uint64_t k1, size_t klen, int kind, int64_t i, double d);

/* The bytes the table holds: its slots and its copies of long keys. */
size_t		 kv_table_memory(const struct kv_table *);

/* Give each key's partial to fn, in no order, then empty the table (back to
 * its first size).  A lone value's partial reads back as that
 * value did (an int64, or a double); a fold's is kv_fold_end's text.  0,
 * or fn's -1 with its *err (the table is left as it was). */
int		 kv_table_drain(struct kv_table *, kv_table_fn, void *arg,
		     char **err);

#endif
