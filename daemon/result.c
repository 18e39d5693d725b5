#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "frame.h"
#include "log.h"
#include "protocol.h"
#include "record.h"
#include "result.h"
#include "xmalloc.h"

/* One distinct record of count_by_value, in an open-addressing table. */
struct result_entry {
	char		*data;		/* NULL: empty slot */
	size_t		 len;
	uint64_t	 hash;
	int64_t		 count;
};

struct result {
	enum result_kind	 kind;
	enum reduce_fn		 fn;

	struct result_entry	*table;		/* count_by_value */
	size_t			 slots, used;
	size_t			 bytes;		/* of the records, as allocated */
	size_t			 budget;	/* the most result_size may be */
	size_t			 over;		/* bytes wanted past the budget */
	int64_t			 nulls;
	int64_t			 total;		/* every count, nulls too */
	char			*key;		/* a pair split between batches */
	size_t			 keylen;
	int			 have_key, key_null;

	int64_t			 count;		/* reduce: records seen */
	int			 have, is_real;
	int64_t			 ivalue;
	double			 rvalue;
};

struct result *
result_create(enum result_kind kind, enum reduce_fn fn)
{
	struct result	*r = xcalloc(1, sizeof *r);

	r->kind = kind;
	r->fn = fn;
	r->budget = SIZE_MAX;
	return (r);
}

void
result_free(struct result *r)
{
	size_t	i;

	if (r == NULL)
		return;
	for (i = 0; i < r->slots; i++)
		free(r->table[i].data);
	free(r->table);
	free(r->key);
	free(r);
}

size_t
result_size(const struct result *r)
{
	return (r->bytes + r->slots * sizeof *r->table);
}

void
result_set_budget(struct result *r, size_t budget)
{
	r->budget = budget;
}

size_t
result_over(const struct result *r)
{
	return (r->over);
}

size_t
result_distinct(const struct result *r)
{
	return (r->used);
}

/* What a record of len bytes costs in the heap: malloc's chunk, header
 * included, not just the bytes. */
static size_t
result_record_cost(size_t len)
{
	size_t	n = (len + 1 + 8 + 15) & ~(size_t)15;

	return (n < 32 ? 32 : n);
}

/* May the result grow by n bytes?  If not, say so in r->over. */
static int
result_may_grow(struct result *r, size_t n)
{
	if (r->over == 0 && result_size(r) + n <= r->budget)
		return (1);
	if (r->over == 0)
		r->over = n;
	return (0);
}

/* FNV-1a, then a final mix so the low bits index the table well. */
static uint64_t
result_hash(const char *data, size_t len)
{
	uint64_t	h = 0xcbf29ce484222325ULL;
	size_t		i;

	for (i = 0; i < len; i++) {
		h ^= (unsigned char)data[i];
		h *= 0x100000001b3ULL;
	}
	h ^= h >> 33;
	h *= 0xff51afd7ed558ccdULL;
	h ^= h >> 33;
	return (h);
}

static void
result_grow(struct result *r)
{
	struct result_entry	*old = r->table, *e;
	size_t			 oslots = r->slots, i, j;

	r->slots = oslots == 0 ? 1024 : oslots * 2;
	r->table = xcalloc(r->slots, sizeof *r->table);
	for (i = 0; i < oslots; i++) {
		if (old[i].data == NULL)
			continue;
		for (j = old[i].hash & (r->slots - 1);; j = (j + 1) &
		    (r->slots - 1)) {
			e = &r->table[j];
			if (e->data == NULL) {
				*e = old[i];
				break;
			}
		}
	}
	free(old);
}

/* Add n to a record's count. */
static void
result_add(struct result *r, const char *data, size_t len, int64_t n)
{
	struct result_entry	*e;
	uint64_t		 h = result_hash(data, len);
	size_t			 i;

	if (r->over > 0)
		return;
	if ((r->used + 1) * 4 > r->slots * 3) {
		if (!result_may_grow(r, (r->slots == 0 ? 1024 : r->slots) *
		    sizeof *r->table))
			return;
		result_grow(r);
	}
	for (i = h & (r->slots - 1);; i = (i + 1) & (r->slots - 1)) {
		e = &r->table[i];
		if (e->data == NULL)
			break;
		if (e->hash == h && e->len == len &&
		    memcmp(e->data, data, len) == 0) {
			e->count += n;
			return;
		}
	}
	if (!result_may_grow(r, result_record_cost(len)))
		return;
	e->data = xmalloc(len + 1);	/* never NULL, even when empty */
	memcpy(e->data, data, len);
	e->len = len;
	e->hash = h;
	e->count = n;
	r->used++;
	r->bytes += result_record_cost(len);
}

/*
 * Add a worker's count to a sum, or -1 if no worker could have sent it:
 * below zero, or past what an int64 holds (no job has that many records).
 */
static int
result_add_count(int64_t *sum, int64_t n)
{
	int64_t	new;

	if (n < 0 || __builtin_add_overflow(*sum, n, &new))
		return (-1);
	*sum = new;
	return (0);
}

/* Fold one partition's partial reduce, JSON text from the worker. */
static int
result_fold(struct result *r, const unsigned char *data, size_t len,
    char **err)
{
	json_t		*j, *v;
	json_error_t	 jerr;
	json_int_t	 count;
	double		 real;
	int64_t		 sum;

	if ((j = json_loadb((const char *)data, len, 0, &jerr)) == NULL ||
	    !json_is_integer(json_object_get(j, "count"))) {
		json_decref(j);
		*err = xstrdup("bad partial reduce from worker");
		return (-1);
	}
	count = json_integer_value(json_object_get(j, "count"));
	if (result_add_count(&r->count, count) == -1) {
		json_decref(j);
		*err = xstrdup("bad record count in a partial reduce from "
		    "worker");
		return (-1);
	}
	if ((v = json_object_get(j, "int")) != NULL && json_is_integer(v) &&
	    !r->is_real) {
		json_int_t	i = json_integer_value(v);

		if (!r->have)
			r->ivalue = i;
		else if (r->fn == REDUCE_SUM) {
			if (__builtin_add_overflow(r->ivalue, (int64_t)i, &sum)) {
				r->is_real = 1;
				r->rvalue = (double)r->ivalue + (double)i;
			} else
				r->ivalue = sum;
		} else if (r->fn == REDUCE_MIN ? i < r->ivalue : i > r->ivalue)
			r->ivalue = i;
		r->have = 1;
	} else if (v != NULL || (v = json_object_get(j, "real")) != NULL) {
		if (!json_is_number(v)) {
			json_decref(j);
			*err = xstrdup("bad partial reduce from worker");
			return (-1);
		}
		real = json_number_value(v);
		if (!r->is_real) {
			r->rvalue = (double)r->ivalue;
			r->is_real = 1;
		}
		if (!r->have)
			r->rvalue = real;
		else if (r->fn == REDUCE_SUM)
			r->rvalue += real;
		else if (r->fn == REDUCE_MIN ? real < r->rvalue :
		    real > r->rvalue)
			r->rvalue = real;
		r->have = 1;
	}
	json_decref(j);
	return (0);
}

/*
 * Take a batch of record frames.  count_by_value's come in pairs, a record
 * then its count; a batch may end between the two, so the record waits in
 * r->key for the next batch.  The counts' total is checked, so no sum of
 * some of them (a record's, the nulls', or the records result_counts
 * merges) can overflow.
 */
int
result_absorb(struct result *r, const unsigned char *p, size_t len,
    char **err)
{
	const unsigned char	*end = p + len;
	const char		*key = NULL;	/* in this batch */
	int64_t			 count;
	int32_t			 n;

	while (p < end) {
		if (r->kind != RESULT_REDUCE && r->have_key) {
			if (record_count_get(p, (size_t)(end - p),
			    &count) == -1 ||
			    result_add_count(&r->total, count) == -1)
				goto bad;
			if (r->key_null)
				r->nulls += count;
			else
				result_add(r, key != NULL ? key : r->key,
				    r->keylen, count);
			r->have_key = 0;
			key = NULL;
			p += RECORD_COUNT_FRAME;
			continue;
		}
		if (end - p < RECORD_HEAD)
			goto bad;
		n = be32_get(p);
		p += RECORD_HEAD;
		if (n < 0 && n != EMBER_NULL)
			goto bad;
		if (n > 0 && end - p < n)
			goto bad;
		if (r->kind == RESULT_REDUCE) {
			if (n < 0)
				goto bad;
			if (result_fold(r, p, (size_t)n, err) == -1)
				return (-1);
			p += n;
			continue;
		}
		r->key_null = n == EMBER_NULL;
		r->keylen = n < 0 ? 0 : (size_t)n;
		key = (const char *)p;
		r->have_key = 1;
		if (n > 0)
			p += n;
	}
	if (r->have_key && key != NULL) {
		r->key = xrealloc(r->key, r->keylen);
		memcpy(r->key, key, r->keylen);
	}
	return (0);
bad:
	*err = xstrdup("bad partial counts from worker");
	return (-1);
}

/* Length of the valid UTF-8 sequence at p, or 0 if it is not valid. */
static size_t
result_utf8_len(const unsigned char *p, size_t left)
{
	size_t	n, i;

	if (p[0] < 0x80)
		return (1);
	if (p[0] >= 0xc2 && p[0] <= 0xdf)
		n = 2;
	else if (p[0] >= 0xe0 && p[0] <= 0xef)
		n = 3;
	else if (p[0] >= 0xf0 && p[0] <= 0xf4)
		n = 4;
	else
		return (0);
	if (n > left)
		return (0);
	for (i = 1; i < n; i++) {
		if ((p[i] & 0xc0) != 0x80)
			return (0);
	}
	if ((p[0] == 0xe0 && p[1] < 0xa0) || (p[0] == 0xed && p[1] > 0x9f) ||
	    (p[0] == 0xf0 && p[1] < 0x90) || (p[0] == 0xf4 && p[1] > 0x8f))
		return (0);
	return (n);
}

/*
 * JSON keys are UTF-8: a record that is not has its bad bytes replaced by
 * U+FFFD, and records that become equal share one count.  A record holding
 * a NUL byte goes into *withnul instead (a JSON parser may refuse a key
 * with one, jansson does), kept there as a key too.
 */
static json_t *
result_counts(struct result *r, json_t **withnul)
{
	json_t		*counts = json_object(), *v, *into;
	char		*fixed;
	size_t		 i, j, n, k;

	*withnul = json_object();

	for (i = 0; i < r->slots; i++) {
		const unsigned char	*d = (unsigned char *)r->table[i].data;
		size_t			 len = r->table[i].len;

		if (d == NULL)
			continue;
		fixed = xmalloc(len * 3 + 1);
		for (j = k = 0; j < len; j += n) {
			if ((n = result_utf8_len(d + j, len - j)) == 0) {
				memcpy(fixed + k, "\xef\xbf\xbd", 3);
				k += 3;
				n = 1;
			} else {
				memcpy(fixed + k, d + j, n);
				k += n;
			}
		}
		into = memchr(fixed, '\0', k) != NULL ? *withnul : counts;
		v = json_object_getn(into, fixed, k);
		json_object_setn_new_nocheck(into, fixed, k, json_integer(
		    r->table[i].count + (v != NULL ? json_integer_value(v) : 0)));
		free(fixed);
	}
	return (counts);
}

/* Order [record, count] pairs by record, bytes compared. */
static int
result_pair_cmp(const void *a, const void *b)
{
	json_t		*x = json_array_get(*(json_t *const *)a, 0);
	json_t		*y = json_array_get(*(json_t *const *)b, 0);
	size_t		 lx = json_string_length(x), ly = json_string_length(y);
	int		 c;

	c = memcmp(json_string_value(x), json_string_value(y),
	    lx < ly ? lx : ly);
	if (c != 0)
		return (c);
	return (lx < ly ? -1 : lx > ly);
}

/* The records with a NUL, as an array of [record, count] pairs in the
 * order of their bytes. */
static json_t *
result_pairs(json_t *withnul)
{
	json_t		*pairs, **rows, *v;
	const char	*key;
	size_t		 keylen, n = 0, i;

	rows = xcalloc(json_object_size(withnul) + 1, sizeof *rows);
	json_object_keylen_foreach(withnul, key, keylen, v)
		rows[n++] = json_pack("[s%,O]", key, keylen, v);
	qsort(rows, n, sizeof *rows, result_pair_cmp);
	pairs = json_array();
	for (i = 0; i < n; i++)
		json_array_append_new(pairs, rows[i]);
	free(rows);
	return (pairs);
}

json_t *
result_reply(struct result *r)
{
	json_t	*value, *reply, *withnul;

	if (r->kind == RESULT_COUNT_BY_VALUE) {
		reply = json_pack("{s:o,s:I}", "counts", result_counts(r,
		    &withnul), "nulls", (json_int_t)r->nulls);
		if (json_object_size(withnul) > 0)
			json_object_set_new(reply, "pairs",
			    result_pairs(withnul));
		json_decref(withnul);
		return (reply);
	}
	if (!r->have)
		value = json_null();
	else if (r->is_real)
		value = isfinite(r->rvalue) ? json_real(r->rvalue) :
		    json_null();
	else
		value = json_integer(r->ivalue);
	return (json_pack("{s:o,s:I}", "value", value, "count",
	    (json_int_t)r->count));
}
