/*
 * reduce_by_key's fold of one key's values (docs/plans.md, "Keyed data
 * and the shuffle"): sum, min and max read values as reduce reads records
 * (an int64 while every value is one and the result fits, else a double);
 * count counts them; concat joins them with a separator in the order
 * they come.  The same fold makes a map task's partial values (each value
 * alone: a number checked, a count of 1), combines two partials of a key
 * in the shuffle file, and folds partials on the reduce side, where a
 * count is the sum of the counts.
 */
#ifndef EMBER_WORKER_KVFOLD_H
#define EMBER_WORKER_KVFOLD_H

#include <stddef.h>
#include <stdint.h>

#include "plan.h"

struct kv_fold;

/* A running fold of numbers: a sum, count, min or max of int64s while
 * every value is one and the result fits, else of doubles. */
struct kv_acc {
	int64_t		 n;		/* values folded */
	union {
		int64_t	 i;
		double	 r;
	}		 v;
	int		 real;		/* v is r */
};

#define KV_ACC_TEXT	64	/* room for an accumulator's text */

/* Read a value as a number to fold in (count's value alone is 1, and
 * is not read): kind 1 an int64 in *i, 2 a double in *d.  0, or -1 with
 * *err (to free) naming the key and the value that is not a number.
 * Not for concat. */
int		 kv_fold_read(enum plan_kv_fn, int partials, const char *key,
		     size_t klen, const char *v, size_t vlen, int vnull,
		     int *kind, int64_t *i, double *d, char **err);
/* Fold a number read by kv_fold_read into a (fn: not concat). */
void		 kv_acc_fold(enum plan_kv_fn, struct kv_acc *a, int kind,
		     int64_t i, double d);
/* Write a's value into buf (KV_ACC_TEXT bytes at least); its length.
 * keep_real: a double reads back as one (a map task's lone value does,
 * as it came). */
size_t		 kv_acc_text(const struct kv_acc *a, int keep_real,
		     char *buf, size_t size);

/* A fold of fn (concat's separator sep); partials: the values folded
 * are partial results (a count sums them). */
struct kv_fold	*kv_fold_create(enum plan_kv_fn, const char *sep,
		     size_t seplen, int partials);
void		 kv_fold_free(struct kv_fold *);

/* A value alone as a partial result, as a map task writes it: the value
 * itself once checked (a number for sum, min and max), "1" for count.
 * 0, or -1 with *err as kv_fold_add. */
int		 kv_fold_partial(struct kv_fold *, const char *key,
		     size_t klen, const char *v, size_t vlen, int vnull,
		     const char **out, size_t *outlen, char **err);

/* Begin a key's fold. */
void		 kv_fold_begin(struct kv_fold *);
/* Fold a value in (vnull: a null value).  0, or -1 with *err (to free)
 * naming the key and the value that is not a number. */
int		 kv_fold_add(struct kv_fold *, const char *key, size_t klen,
		     const char *v, size_t vlen, int vnull, char **err);
/* The key's result, valid until the next begin; never null. */
void		 kv_fold_end(struct kv_fold *, const char **v,
		     size_t *vlen);

#endif
