#include <errno.h>
#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "frame.h"
#include "hash.h"
#include "keyed.h"
#include "kvfold.h"
#include "kvtable.h"
#include "log.h"
#include "ops.h"
#include "pieces.h"
#include "plan.h"
#include "protocol.h"
#include "shuffle.h"
#include "shuffle_file.h"
#include "xmalloc.h"

/* A map task's writer, for one wide op. */
struct shuffle_map {
	struct plan		*holder;	/* the op, parsed */
	const struct plan_op	*op;
	struct shuffle_writer	*w;
	int			 buckets;
	uint64_t		 next;	/* repartition's round robin */
	/* reduce_by_key: a value alone, and two partials of a key */
	struct kv_fold		*partial, *combine;
	/* ... and for sum, count, min and max each key's fold, written
	 * once per key when past its memory and at the end */
	struct kv_table		*table;
	size_t			 table_memory;
	int			 drained;	/* before commit */
	char			*buf;	/* distinct's pair, encoded */
	size_t			 size;
	char			 name[64];
};

/* Open the operation's directory in the uid's shuffle directory. */
int
shuffle_dir_open(int dirfd, const char *name, char **err)
{
	int	fd;

	if (mkdirat(dirfd, name, 0700) == -1 && errno != EEXIST) {
		xasprintf(err, "shuffle: mkdir %s: %s", name, strerror(errno));
		return (-1);
	}
	fd = openat(dirfd, name, O_RDONLY | O_DIRECTORY | O_NOFOLLOW |
	    O_CLOEXEC | O_NOCTTY);
	if (fd == -1)
		xasprintf(err, "shuffle: %s: %s", name, strerror(errno));
	return (fd);
}

/* Parse the wide op a map task writes for, as a stage's source would
 * hold it: the plan that holds it, or NULL with *err. */
static struct plan *
shuffle_op_parse(json_t *op, char **err)
{
	struct plan	*plan;
	json_t		*j;
	int		 two;

	two = json_object_get(op, "join") != NULL ||
	    json_object_get(op, "union") != NULL;
	j = json_pack("{s:{s:{s:O,s:[{s:i,s:i}]}},s:i}", "source", "shuffle",
	    "op", op, "inputs", "stage", 0, "maps", 1, "partitions", 1);
	if (j != NULL && two)
		json_array_append_new(json_object_get(json_object_get(
		    json_object_get(j, "source"), "shuffle"), "inputs"),
		    json_pack("{s:i,s:i}", "stage", 0, "maps", 1));
	if (j == NULL || plan_parse_stage(j, &plan, err) == -1) {
		if (j == NULL)
			*err = xstrdup("shuffle.op: cannot be read");
		json_decref(j);
		return (NULL);
	}
	json_decref(j);
	return (plan);
}

/* reduce_by_key's combine of two partials of a key in the file. */
static int
shuffle_map_combine_cb(void *arg, const struct shuffle_entry *a,
    const struct shuffle_entry *b, struct shuffle_entry *out, char **err)
{
	struct shuffle_map	*m = arg;

	kv_fold_begin(m->combine);
	if (kv_fold_add(m->combine, a->key, a->klen, a->value, a->vlen,
	    a->vnull, err) == -1 ||
	    kv_fold_add(m->combine, b->key, b->klen, b->value, b->vlen,
	    b->vnull, err) == -1)
		return (-1);
	*out = *a;
	out->vnull = 0;
	kv_fold_end(m->combine, &out->value, &out->vlen);
	return (0);
}

/* distinct's combine: the first of two equal entries. */
static int
shuffle_map_first_cb(__attribute__((unused)) void *arg,
    const struct shuffle_entry *a,
    __attribute__((unused)) const struct shuffle_entry *b,
    struct shuffle_entry *out, __attribute__((unused)) char **err)
{
	*out = *a;
	return (0);
}

/* Make a map task's writer. */
struct shuffle_map *
shuffle_map_create(int opdir, int stage, int partition, int buckets,
    json_t *opj, size_t memory, char **err)
{
	struct shuffle_map	*m;
	enum shuffle_order	 order = SHUFFLE_ORDER_KEY;
	shuffle_combine_fn	 combine = NULL;
	int			 descending = 0;

	m = xcalloc(1, sizeof *m);
	if ((m->holder = shuffle_op_parse(opj, err)) == NULL)
		goto fail;
	m->op = m->holder->shuffle_op;
	m->next = (uint64_t)partition;
	switch (m->op->type) {
	case PLAN_OP_REDUCE_BY_KEY:
		m->partial = kv_fold_create(m->op->kv_fn, m->op->arg,
		    m->op->arglen, 0);
		m->combine = kv_fold_create(m->op->kv_fn, m->op->arg,
		    m->op->arglen, 1);
		combine = shuffle_map_combine_cb;
		if (m->op->kv_fn != PLAN_KV_CONCAT) {
			/* Half the memory each: the table and the writer. */
			m->table = kv_table_create(m->op->kv_fn);
			memory /= 2;
			m->table_memory = memory;
		}
		break;
	case PLAN_OP_DISTINCT:
		combine = shuffle_map_first_cb;
		break;
	case PLAN_OP_SORT_BY:
		/* One run, sorted; reduce tasks split it at boundaries. */
		buckets = 1;
		order = m->op->numeric ? SHUFFLE_ORDER_KEY_NUMERIC :
		    SHUFFLE_ORDER_KEY;
		descending = m->op->descending;
		break;
	case PLAN_OP_UNION:
		buckets = 1;
		order = SHUFFLE_ORDER_NONE;
		break;
	case PLAN_OP_REPARTITION:
		order = SHUFFLE_ORDER_NONE;
		break;
	default:
		break;
	}
	m->buckets = buckets;
	snprintf(m->name, sizeof m->name, "s%d-m%d.data", stage, partition);
	m->w = shuffle_writer_create(opdir, m->name, buckets, order, descending,
	    memory, combine, m, err);
	if (m->w == NULL)
		goto fail;
	return (m);
fail:
	shuffle_map_free(m);
	return (NULL);
}

/* distinct of a pair: the whole pair as the key, so that equal pairs
 * sort together (the reduce side takes it apart again). */
static void
shuffle_map_whole(struct shuffle_map *m, const struct record *r,
    struct shuffle_entry *e)
{
	size_t	need = 8 + r->klen + r->len;

	if (need > m->size) {
		free(m->buf);
		m->size = need * 2;
		m->buf = xmalloc(m->size);
	}
	be32_put((unsigned char *)m->buf, (int32_t)r->klen);
	if (r->klen > 0)
		memcpy(m->buf + 4, r->key, r->klen);
	be32_put((unsigned char *)m->buf + 4 + r->klen, r->null ? EMBER_NULL :
	    (int32_t)r->len);
	if (r->len > 0)
		memcpy(m->buf + 8 + r->klen, r->data, r->len);
	e->key = m->buf;
	e->klen = need;
	e->value = NULL;
	e->vlen = 0;
	e->vnull = 1;
}

/* The bucket of a record: by its key's hash, or round robin. */
static int
shuffle_map_bucket(struct shuffle_map *m, const struct shuffle_entry *e)
{
	if (m->buckets == 1)
		return (0);
	if (m->op->type == PLAN_OP_REPARTITION)
		return ((int)(m->next++ % (uint64_t)m->buckets));
	if (e->knull)
		return (0);
	return ((int)(hash_bytes(e->key, e->klen) % (uint64_t)m->buckets));
}

/* sort_by numeric: fail on a key that is not a number, naming it. */
static int
shuffle_map_number(const struct shuffle_entry *e, char **err)
{
	char	k[KEYED_SHOWN];
	int64_t	i;
	double	d;

	if (e->knull) {
		*err = xstrdup("sort_by: a null record is not a number");
		return (-1);
	}
	if (shuffle_number_parse(e->key, e->klen, &i, &d) != 0)
		return (0);
	keyed_show(e->key, e->klen, k, sizeof k);
	xasprintf(err, "sort_by: key \"%s\" is not a number", k);
	return (-1);
}

/* Write a key's partial from the table to its bucket. */
static int
shuffle_map_partial_cb(void *arg, const char *key, size_t klen,
    const char *v, size_t vlen, char **err)
{
	struct shuffle_map	*m = arg;
	struct shuffle_entry	 e;

	e.kind = PLAN_KIND_PAIR;
	e.key = key;
	e.klen = klen;
	e.knull = 0;
	e.value = v;
	e.vlen = vlen;
	e.vnull = 0;
	return (shuffle_writer_add(m->w, shuffle_map_bucket(m, &e), &e, err));
}

/* Write the table's partials past its memory: the writer combines
 * them with the next drain's. */
static int
shuffle_map_drain(struct shuffle_map *m, char **err)
{
	m->drained = 1;
	return (kv_table_drain(m->table, shuffle_map_partial_cb, m, err));
}

/* reduce_by_key of a number: fold the value into its key's fold in the
 * table; past the table's memory, write the table's partials. */
static int
shuffle_map_fold(struct shuffle_map *m, const struct record *r, char **err)
{
	int64_t	i = 0;
	double	d = 0;
	int	kind;

	if (kv_fold_read(m->op->kv_fn, 0, r->key, r->klen, r->data, r->len,
	    r->null, &kind, &i, &d, err) == -1)
		return (-1);
	kv_table_add(m->table, r->key != NULL ? r->key : "", r->klen, kind,
	    i, d);
	if (kv_table_memory(m->table) > m->table_memory)
		return (shuffle_map_drain(m, err));
	return (0);
}

/* Does the writer take pairs as pieces? */
int
shuffle_map_takes_pieces(const struct shuffle_map *m)
{
	return (m->table != NULL);
}

/* Fold a piece, both key and value, into the table; the block goes on
 * to end. */
static inline int
shuffle_map_piece(struct shuffle_map *m, const char *p, size_t len,
    const char *end, char **err)
{
	int64_t	i = 1;
	double	d = 0;
	int	kind = 1;
#ifdef PIECES_SSE2
	uint64_t	k0, k1;
#endif

	if (m->op->kv_fn != PLAN_KV_COUNT && kv_fold_read(m->op->kv_fn, 0, p,
	    len, p, len, 0, &kind, &i, &d, err) == -1)
		return (-1);
#ifdef PIECES_SSE2
	if (len <= 16 && end - p >= 16) {
		pieces_words(p, len, &k0, &k1);
		kv_table_add_words(m->table, k0, k1, len, kind, i, d);
	} else
#endif
		kv_table_add(m->table, p, len, kind, i, d);
	(void)end;
	if (kv_table_memory(m->table) > m->table_memory)
		return (shuffle_map_drain(m, err));
	return (0);
}

/* Write the pairs of a block of lines split at sep. */
int
shuffle_map_add_pieces(struct shuffle_map *m, const char *data, size_t len,
    char sep, int64_t *records, char **err)
{
	const char	*start = data, *end = data + len, *e;
	size_t		 at = 0;
#ifdef PIECES_SSE2
	__m128i		 vsep = _mm_set1_epi8(sep);
	__m128i		 vnl = _mm_set1_epi8('\n');
	uint64_t	 bits;
#endif

	if (m->table == NULL)
		fatalx("%s: not a table's", __func__);
#ifdef PIECES_SSE2
	for (; at + 64 <= len; at += 64) {
		for (bits = pieces_delims(data + at, vsep, vnl); bits != 0;
		    bits &= bits - 1) {
			e = data + at + __builtin_ctzll(bits);
			(*records)++;
			if (shuffle_map_piece(m, start, (size_t)(e - start),
			    end, err) == -1)
				return (-1);
			start = e + 1;
		}
	}
#endif
	for (e = data + at; e < end; e++) {
		if (*e != sep && *e != '\n')
			continue;
		(*records)++;
		if (shuffle_map_piece(m, start, (size_t)(e - start), end,
		    err) == -1)
			return (-1);
		start = e + 1;
	}
	return (0);
}

/* Write a record to its bucket. */
int
shuffle_map_add(struct shuffle_map *m, const struct record *r, char **err)
{
	struct shuffle_entry	e;

	if (m->table != NULL && r->kind == PLAN_KIND_PAIR)
		return (shuffle_map_fold(m, r, err));
	e.kind = r->kind;
	e.knull = 0;
	if (r->kind == PLAN_KIND_RECORD) {
		/* The record is the key; a key of no bytes still points
		 * somewhere, as a NULL one is a null record's. */
		e.key = r->null || r->data != NULL ? r->data : "";
		e.klen = r->len;
		e.knull = r->null;
		e.value = NULL;
		e.vlen = 0;
		e.vnull = 1;
	} else {
		e.key = r->key;
		e.klen = r->klen;
		e.value = r->data;
		e.vlen = r->len;
		e.vnull = r->null;
	}
	if (m->op->type == PLAN_OP_REDUCE_BY_KEY) {
		if (kv_fold_partial(m->partial, r->key, r->klen, r->data,
		    r->len, r->null, &e.value, &e.vlen, err) == -1)
			return (-1);
		e.vnull = 0;
	} else if (m->op->type == PLAN_OP_DISTINCT &&
	    r->kind == PLAN_KIND_PAIR)
		shuffle_map_whole(m, r, &e);
	else if (m->op->type == PLAN_OP_SORT_BY && m->op->numeric &&
	    shuffle_map_number(&e, err) == -1)
		return (-1);
	return (shuffle_writer_add(m->w, shuffle_map_bucket(m, &e), &e, err));
}

/* Write the file whole; say how it went, for a look at its memory. */
int
shuffle_map_commit(struct shuffle_map *m, int64_t *bytes, char **err)
{
	if (m->table != NULL) {
		/* Never drained: one partial a key, nothing to combine. */
		if (!m->drained)
			shuffle_writer_unique_keys(m->w);
		if (kv_table_drain(m->table, shuffle_map_partial_cb, m,
		    err) == -1)
			return (-1);
	}
	if (shuffle_writer_commit(m->w, bytes, err) == -1)
		return (-1);
	log_debug("shuffle: %s: %lld bytes, %d runs spilled", m->name,
	    (long long)*bytes, shuffle_writer_spills(m->w));
	return (0);
}

/* Free a writer. */
void
shuffle_map_free(struct shuffle_map *m)
{
	if (m == NULL)
		return;
	shuffle_writer_free(m->w);
	kv_fold_free(m->partial);
	kv_fold_free(m->combine);
	kv_table_free(m->table);
	if (m->holder != NULL)
		plan_free(m->holder);
	free(m->buf);
	free(m);
}

/* A reduce task's inputs: one reader per map file of an input. */
struct shuffle_in {
	int			 stage;
	struct shuffle_reader	**readers;
	int			*maps;	/* each reader's map task */
	size_t			 n;
	struct shuffle_merge	*merge;
};

/* What the reduce side runs: its chain, and what it copies. */
struct shuffle_reduce {
	const struct plan	*plan;
	const struct plan_op	*op;
	int			 partition;
	struct chain		*chain;
	int64_t			*records_in;
	char			*key;	/* the current run's key */
	size_t			 klen, ksize;
	int			 knull, have;
	char			*vals;	/* a group's value frames */
	size_t			 vlen, vsize;
	size_t			 memory; /* join's right values */
	int			 chain_failed;
};

/* Fail the reduce side with a lost map file's error. */
static int
shuffle_lost(int stage, int map, const char *why, char **err)
{
	xasprintf(err, "SHUFFLE_LOST stage %d map %d: %s", stage, map, why);
	return (OP_FAIL);
}

/* Turn a reader's error into SHUFFLE_LOST, naming the map task whose
 * file it names. */
static int
shuffle_in_lost(const struct shuffle_in *in, char *why, char **err)
{
	char	name[64];
	size_t	i;
	int	map = in->n > 0 ? in->maps[0] : 0;

	for (i = 0; i < in->n; i++) {
		snprintf(name, sizeof name, "s%d-m%d.data", in->stage,
		    in->maps[i]);
		if (why != NULL && strstr(why, name) != NULL) {
			map = in->maps[i];
			break;
		}
	}
	shuffle_lost(in->stage, map, why != NULL ? why : "read error", err);
	free(why);
	return (OP_FAIL);
}

/* Open bucket of maps [first, first + n) of stage. */
static int
shuffle_in_open(struct shuffle_in *in, int opdir, int stage, int first,
    int n, int bucket, char **err)
{
	char	 name[64], *why = NULL;
	int	 i;

	in->stage = stage;
	in->readers = xcalloc((size_t)n, sizeof *in->readers);
	in->maps = xcalloc((size_t)n, sizeof *in->maps);
	for (i = 0; i < n; i++) {
		snprintf(name, sizeof name, "s%d-m%d.data", stage, first + i);
		in->maps[i] = first + i;
		in->readers[i] = shuffle_reader_open(opdir, name, bucket, &why);
		if (in->readers[i] == NULL) {
			shuffle_lost(stage, first + i, why, err);
			free(why);
			return (OP_FAIL);
		}
		in->n++;
	}
	return (OP_OK);
}

/* Merge an input's readers in the order they were written. */
static void
shuffle_in_merge(struct shuffle_in *in)
{
	enum shuffle_order	order = SHUFFLE_ORDER_NONE;
	int			descending = 0;

	if (in->n > 0) {
		order = shuffle_reader_order(in->readers[0]);
		descending = shuffle_reader_descending(in->readers[0]);
	}
	in->merge = shuffle_merge_create(in->readers, in->n, order,
	    descending);
}

/* The next entry of an input: 1, 0 at its end, or OP_FAIL with *err. */
static int
shuffle_in_next(struct shuffle_in *in, struct shuffle_entry *e, char **err)
{
	char	*why = NULL;
	size_t	 from;
	int	 rc;

	if ((rc = shuffle_merge_next(in->merge, e, &from, &why)) == -1)
		return (shuffle_in_lost(in, why, err));
	return (rc);
}

/* Close an input. */
static void
shuffle_in_close(struct shuffle_in *in)
{
	size_t	i;

	shuffle_merge_free(in->merge);
	for (i = 0; i < in->n; i++)
		shuffle_reader_free(in->readers[i]);
	free(in->readers);
	free(in->maps);
	memset(in, 0, sizeof *in);
}

/* Push a record of the reduce side down the chain; a chain that stops
 * or fails ends the source. */
static int
shuffle_push(struct shuffle_reduce *x, const struct record *r)
{
	int	rc;

	(*x->records_in)++;
	if ((rc = chain_push(x->chain, r)) == OP_FAIL)
		x->chain_failed = 1;
	return (rc);
}

/* The record an entry is, as it was written. */
static void
shuffle_entry_record(const struct shuffle_entry *e, struct record *r)
{
	memset(r, 0, sizeof *r);
	r->kind = e->kind;
	if (e->kind == PLAN_KIND_RECORD) {
		r->data = e->knull ? NULL : e->key;
		r->len = e->knull ? 0 : e->klen;
		r->null = e->knull;
		return;
	}
	r->key = e->key;
	r->klen = e->klen;
	r->data = e->vnull ? NULL : e->value;
	r->len = e->vnull ? 0 : e->vlen;
	r->null = e->vnull;
}

/* Is e's key the current run's? */
static int
shuffle_same_key(const struct shuffle_reduce *x, const struct shuffle_entry *e)
{
	if (!x->have || x->knull != e->knull)
		return (0);
	return (e->knull || (x->klen == e->klen &&
	    (e->klen == 0 || memcmp(x->key, e->key, e->klen) == 0)));
}

/* Start a run of e's key: copy it. */
static void
shuffle_take_key(struct shuffle_reduce *x, const struct shuffle_entry *e)
{
	if (e->klen > x->ksize) {
		free(x->key);
		x->ksize = e->klen * 2;
		x->key = xmalloc(x->ksize);
	}
	if (e->klen > 0)
		memcpy(x->key, e->key, e->klen);
	x->klen = e->klen;
	x->knull = e->knull;
	x->have = 1;
	x->vlen = 0;
}

/* Fail: the run's values are more than may be held. */
static int
shuffle_too_many(struct shuffle_reduce *x, char **err)
{
	char	k[KEYED_SHOWN];

	keyed_show(x->key, x->klen, k, sizeof k);
	if (x->op->type == PLAN_OP_JOIN)
		xasprintf(err, "join: key \"%s\": its values on the right are "
		    "more than the %zu bytes of workers.shuffle_memory", k,
		    x->memory);
	else
		xasprintf(err, "group_by_key: key \"%s\": its values are more "
		    "than the %d MiB a group may hold", k,
		    EMBER_MAX_BATCH >> 20);
	return (OP_FAIL);
}

/* Append a value frame to the run's group: OP_OK, or OP_FAIL with *err
 * past what may be held (a group is sent whole in one batch; join holds
 * a key's right values in the task's memory). */
static int
shuffle_add_value(struct shuffle_reduce *x, const char *v, size_t vlen,
    int vnull, char **err)
{
	size_t	need = x->vlen + 4 + (vnull ? 0 : vlen);
	size_t	most = x->op->type == PLAN_OP_JOIN ? x->memory :
		    EMBER_MAX_BATCH - KEYED_HEAD - 4 - x->klen;

	if (need > most)
		return (shuffle_too_many(x, err));

	if (need > x->vsize) {
		x->vsize = need * 2;
		x->vals = xrealloc(x->vals, x->vsize);
	}
	be32_put((unsigned char *)x->vals + x->vlen, vnull ? EMBER_NULL :
	    (int32_t)vlen);
	if (!vnull && vlen > 0)
		memcpy(x->vals + x->vlen + 4, v, vlen);
	x->vlen = need;
	return (OP_OK);
}

/* Give the run's group (or reduce_by_key's pair) down the chain. */
static int
shuffle_emit_run(struct shuffle_reduce *x, struct kv_fold *fold)
{
	struct record	r = { NULL, 0, 0, PLAN_KIND_GROUP, NULL, 0 };

	if (!x->have)
		return (OP_OK);
	x->have = 0;
	r.key = x->key;
	r.klen = x->klen;
	if (fold != NULL) {
		r.kind = PLAN_KIND_PAIR;
		kv_fold_end(fold, &r.data, &r.len);
	} else {
		r.data = x->vals;
		r.len = x->vlen;
	}
	return (shuffle_push(x, &r));
}

/* reduce_by_key and group_by_key: fold or gather each run of a key. */
static int
shuffle_reduce_runs(struct shuffle_reduce *x, struct shuffle_in *in,
    char **err)
{
	struct shuffle_entry	 e;
	struct kv_fold		*fold = NULL;
	int			 rc;

	if (x->op->type == PLAN_OP_REDUCE_BY_KEY)
		fold = kv_fold_create(x->op->kv_fn, x->op->arg, x->op->arglen,
		    1);
	while ((rc = shuffle_in_next(in, &e, err)) == 1) {
		if (!shuffle_same_key(x, &e)) {
			if ((rc = shuffle_emit_run(x, fold)) != OP_OK)
				break;
			shuffle_take_key(x, &e);
			if (fold != NULL)
				kv_fold_begin(fold);
		}
		if (fold == NULL) {
			if ((rc = shuffle_add_value(x, e.value, e.vlen,
			    e.vnull, err)) != OP_OK)
				break;
		} else if (kv_fold_add(fold, e.key, e.klen, e.value, e.vlen,
		    e.vnull, err) == -1) {
			rc = OP_FAIL;
			break;
		}
	}
	if (rc == 0)
		rc = shuffle_emit_run(x, fold);
	kv_fold_free(fold);
	return (rc == OP_STOP ? OP_OK : rc);
}

/* distinct: the first of each run of equal entries; a pair comes back
 * out of the whole-pair key it was written under. */
static int
shuffle_reduce_distinct(struct shuffle_reduce *x, struct shuffle_in *in,
    char **err)
{
	struct shuffle_entry	 e;
	struct record		 r;
	int32_t			 vlen;
	int			 rc;

	while ((rc = shuffle_in_next(in, &e, err)) == 1) {
		if (shuffle_same_key(x, &e))
			continue;
		shuffle_take_key(x, &e);
		shuffle_entry_record(&e, &r);
		if (e.kind == PLAN_KIND_PAIR) {
			if (e.klen < 8 || (size_t)be32_get((const unsigned
			    char *)e.key) > e.klen - 8)
				return (shuffle_lost(in->stage, 0,
				    "a distinct pair cut short", err));
			r.klen = (size_t)be32_get((const unsigned char *)e.key);
			r.key = e.key + 4;
			vlen = be32_get((const unsigned char *)e.key + 4 +
			    r.klen);
			r.null = vlen == EMBER_NULL;
			r.data = r.null ? NULL : r.key + r.klen + 4;
			r.len = e.klen - 8 - r.klen;
		}
		if ((rc = shuffle_push(x, &r)) != OP_OK)
			break;
	}
	return (rc == OP_STOP ? OP_OK : rc);
}

/* repartition and union: every entry as it was written, in map order. */
static int
shuffle_reduce_all(struct shuffle_reduce *x, struct shuffle_in *in,
    char **err)
{
	struct shuffle_entry	 e;
	struct record		 r;
	int			 rc;

	while ((rc = shuffle_in_next(in, &e, err)) == 1) {
		shuffle_entry_record(&e, &r);
		if ((rc = shuffle_push(x, &r)) != OP_OK)
			break;
	}
	return (rc == OP_STOP ? OP_OK : rc);
}

/* join: a group of the key and [v, w] down the chain. */
static int
shuffle_join_emit(struct shuffle_reduce *x, const struct shuffle_entry *l,
    const char *w, size_t wlen, int wnull, char **buf, size_t *size)
{
	struct record	r = { NULL, 0, 0, PLAN_KIND_GROUP, NULL, 0 };
	size_t		need = 8 + (l->vnull ? 0 : l->vlen) + (wnull ? 0 :
			    wlen);
	unsigned char	*p;

	if (need > *size) {
		*size = need * 2;
		*buf = xrealloc(*buf, *size);
	}
	p = (unsigned char *)*buf;
	be32_put(p, l->vnull ? EMBER_NULL : (int32_t)l->vlen);
	if (!l->vnull && l->vlen > 0)
		memcpy(p + 4, l->value, l->vlen);
	p += 4 + (l->vnull ? 0 : l->vlen);
	be32_put(p, wnull ? EMBER_NULL : (int32_t)wlen);
	if (!wnull && wlen > 0)
		memcpy(p + 4, w, wlen);
	r.key = l->key;
	r.klen = l->klen;
	r.data = *buf;
	r.len = need;
	return (shuffle_push(x, &r));
}

/* join: each left value of a key with each right value gathered for it
 * (left: with null where the right has no such key). */
static int
shuffle_join_key(struct shuffle_reduce *x, struct shuffle_in *left,
    struct shuffle_entry *l, int *lrc, char **buf, size_t *size, char **err)
{
	const char	*p, *end, *w;
	size_t		 wlen;
	int		 wnull, rc;

	while (*lrc == 1 && shuffle_same_key(x, l)) {
		p = x->vals;
		end = x->vals + x->vlen;
		if (x->vlen == 0 && x->op->left &&
		    (rc = shuffle_join_emit(x, l, NULL, 0, 1, buf, size)) !=
		    OP_OK)
			return (rc);
		while (keyed_value_next(&p, end, &w, &wlen, &wnull))
			if ((rc = shuffle_join_emit(x, l, w, wlen, wnull, buf,
			    size)) != OP_OK)
				return (rc);
		if ((*lrc = shuffle_in_next(left, l, err)) == OP_FAIL)
			return (OP_FAIL);
	}
	return (OP_OK);
}

/* join: a merge join of the two inputs' streams, both sorted by key. */
static int
shuffle_reduce_join(struct shuffle_reduce *x, struct shuffle_in *left,
    struct shuffle_in *right, char **err)
{
	struct shuffle_entry	 l, r;
	char			*buf = NULL;
	size_t			 size = 0;
	int			 lrc, rrc = 0, c, rc = OP_OK;

	if ((lrc = shuffle_in_next(left, &l, err)) == OP_FAIL ||
	    (rrc = shuffle_in_next(right, &r, err)) == OP_FAIL)
		return (OP_FAIL);
	while (lrc == 1 && rc == OP_OK) {
		c = rrc == 1 ? shuffle_key_compare(SHUFFLE_ORDER_KEY, 0, l.key,
		    l.klen, r.key, r.klen) : -1;
		if (c > 0) {
			if ((rrc = shuffle_in_next(right, &r, err)) == OP_FAIL)
				rc = OP_FAIL;
			continue;
		}
		/* The right's values of the key (none when c < 0). */
		shuffle_take_key(x, &l);
		while (c == 0 && rrc == 1 && rc == OP_OK &&
		    shuffle_same_key(x, &r)) {
			if ((rc = shuffle_add_value(x, r.value, r.vlen,
			    r.vnull, err)) == OP_OK &&
			    (rrc = shuffle_in_next(right, &r, err)) == OP_FAIL)
				rc = OP_FAIL;
		}
		if (rc == OP_OK)
			rc = shuffle_join_key(x, left, &l, &lrc, &buf, &size,
			    err);
	}
	free(buf);
	if (rc == OP_OK && lrc == OP_FAIL)
		rc = OP_FAIL;
	return (rc == OP_STOP ? OP_OK : rc);
}

/* Seek every reader to the partition's lower boundary. */
static int
shuffle_sort_seek(struct shuffle_in *in, const struct shuffle_key *lo,
    char **err)
{
	char	*why = NULL;
	size_t	 i;

	for (i = 0; i < in->n; i++) {
		if (shuffle_reader_seek(in->readers[i], lo->key, lo->len,
		    &why) == -1) {
			shuffle_lost(in->stage, in->maps[i], why, err);
			free(why);
			return (OP_FAIL);
		}
	}
	return (OP_OK);
}

/* sort_by: the partition's range of the sorted runs of every map file,
 * [bounds[p - 1], bounds[p]) of the boundaries their samples give. */
static int
shuffle_reduce_sort(struct shuffle_reduce *x, struct shuffle_in *in,
    char **err)
{
	struct shuffle_key	*bounds = NULL;
	struct shuffle_entry	 e;
	struct record		 r;
	enum shuffle_order	 order;
	int			 parts = x->plan->partitions;
	int			 p = x->partition, desc, rc = OP_OK;
	char			*why = NULL;

	order = x->op->numeric ? SHUFFLE_ORDER_KEY_NUMERIC : SHUFFLE_ORDER_KEY;
	desc = x->op->descending;
	if (parts > 1 && shuffle_boundaries(in->readers, in->n, parts, order,
	    desc, &bounds, &why) == -1)
		return (shuffle_in_lost(in, why, err));
	if (p > 0 && shuffle_sort_seek(in, &bounds[p - 1], err) == OP_FAIL)
		rc = OP_FAIL;
	if (rc == OP_OK) {
		shuffle_in_merge(in);
		while ((rc = shuffle_in_next(in, &e, err)) == 1) {
			if (p < parts - 1 && shuffle_key_compare(order, desc,
			    e.knull ? NULL : e.key != NULL ? e.key : "", e.klen,
			    bounds[p].key, bounds[p].len) >= 0) {
				rc = OP_OK;
				break;
			}
			shuffle_entry_record(&e, &r);
			if ((rc = shuffle_push(x, &r)) != OP_OK)
				break;
		}
	}
	if (bounds != NULL)
		shuffle_boundaries_free(bounds, parts);
	return (rc == OP_STOP ? OP_OK : rc);
}

/* Open a reduce task's inputs and run its op's reduce side. */
static int
shuffle_reduce_run(struct shuffle_reduce *x, int opdir, struct shuffle_in *a,
    struct shuffle_in *b, char **err)
{
	const struct plan_shuffle_input	*in = x->plan->inputs;
	int				 p = x->partition;

	switch (x->op->type) {
	case PLAN_OP_UNION:
		if (p < in[0].maps && shuffle_in_open(a, opdir, in[0].stage, p,
		    1, 0, err) == OP_FAIL)
			return (OP_FAIL);
		if (p >= in[0].maps && shuffle_in_open(a, opdir, in[1].stage,
		    p - in[0].maps, 1, 0, err) == OP_FAIL)
			return (OP_FAIL);
		shuffle_in_merge(a);
		return (shuffle_reduce_all(x, a, err));
	case PLAN_OP_SORT_BY:
		if (shuffle_in_open(a, opdir, in[0].stage, 0, in[0].maps, 0,
		    err) == OP_FAIL)
			return (OP_FAIL);
		return (shuffle_reduce_sort(x, a, err));
	case PLAN_OP_JOIN:
		if (shuffle_in_open(a, opdir, in[0].stage, 0, in[0].maps, p,
		    err) == OP_FAIL || shuffle_in_open(b, opdir, in[1].stage,
		    0, in[1].maps, p, err) == OP_FAIL)
			return (OP_FAIL);
		shuffle_in_merge(a);
		shuffle_in_merge(b);
		return (shuffle_reduce_join(x, a, b, err));
	default:
		break;
	}
	if (shuffle_in_open(a, opdir, in[0].stage, 0, in[0].maps, p, err) ==
	    OP_FAIL)
		return (OP_FAIL);
	shuffle_in_merge(a);
	switch (x->op->type) {
	case PLAN_OP_REDUCE_BY_KEY:
	case PLAN_OP_GROUP_BY_KEY:
		return (shuffle_reduce_runs(x, a, err));
	case PLAN_OP_DISTINCT:
		return (shuffle_reduce_distinct(x, a, err));
	case PLAN_OP_REPARTITION:
		return (shuffle_reduce_all(x, a, err));
	default:
		fatalx("%s: not a wide op: %d", __func__, x->op->type);
	}
}

/* Run the reduce side of a shuffle source. */
int
shuffle_source_run(const struct plan *plan, int partition, int opdir,
    size_t memory, struct chain *chain, int64_t *records_in, char **err)
{
	struct shuffle_reduce	 x;
	struct shuffle_in	 a, b;
	int			 rc;

	*err = NULL;
	memset(&x, 0, sizeof x);
	memset(&a, 0, sizeof a);
	memset(&b, 0, sizeof b);
	if (plan->shuffle_op == NULL || plan->ninputs < 1 ||
	    (plan->ninputs < 2 && (plan->shuffle_op->type == PLAN_OP_JOIN ||
	    plan->shuffle_op->type == PLAN_OP_UNION)))
		fatalx("%s: a shuffle source without its inputs", __func__);
	x.plan = plan;
	x.op = plan->shuffle_op;
	x.partition = partition;
	x.chain = chain;
	x.records_in = records_in;
	x.memory = memory;
	rc = shuffle_reduce_run(&x, opdir, &a, &b, err);
	shuffle_in_close(&a);
	shuffle_in_close(&b);
	free(x.key);
	free(x.vals);
	if (rc == OP_FAIL && x.chain_failed) {
		free(*err);
		*err = NULL;
	}
	return (rc == OP_FAIL ? OP_FAIL : OP_OK);
}
