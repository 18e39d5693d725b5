#include <errno.h>
#include <fcntl.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <sys/uio.h>
#include <unistd.h>

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
 * and counts; a slot with count 0 is free. */
struct run_cbv_slot {
	const char	*key;
	size_t		 len;
	uint64_t	 hash;
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

/* Double the table. */
static void
run_cbv_grow(struct run_cbv *c)
{
	struct run_cbv_slot	*old = c->slots, *s;
	size_t			 oldsize = c->mask + 1, i, j;

	c->mask = oldsize * 2 - 1;
	c->slots = xcalloc(c->mask + 1, sizeof *c->slots);
	for (i = 0; i < oldsize; i++) {
		if (old[i].count == 0)
			continue;
		for (j = old[i].hash & c->mask; c->slots[j].count != 0;
		    j = (j + 1) & c->mask)
			;
		s = &c->slots[j];
		*s = old[i];
	}
	free(old);
}

/* count_by_value: count a record. */
static int
run_cbv_push_cb(struct op *op, const struct record *r)
{
	struct run_cbv		*c = (struct run_cbv *)op;
	struct run_cbv_slot	*s;
	uint64_t		 h;
	size_t			 i;

	c->sink.records++;
	if (r->null) {
		c->nulls++;
		return (OP_OK);
	}
	h = run_hash(r->data, r->len);
	for (i = h & c->mask;; i = (i + 1) & c->mask) {
		s = &c->slots[i];
		if (s->count == 0)
			break;
		if (s->hash == h && s->len == r->len &&
		    memcmp(s->key, r->data, r->len) == 0) {
			s->count++;
			return (OP_OK);
		}
	}
	s->key = r->len == 0 ? "" : run_cbv_copy(c, r->data, r->len);
	s->len = r->len;
	s->hash = h;
	s->count = 1;
	/* Grow at 70% full: linear probing slows down past that. */
	if (++c->used * 10 >= (c->mask + 1) * 7)
		run_cbv_grow(c);
	return (OP_OK);
}

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
		if (s->count != 0 &&
		    run_cbv_send(c, s->key, s->len, 0, s->count) != OP_OK)
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
