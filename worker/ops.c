#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "log.h"
#include "ops.h"
#include "output.h"
#include "pipe.h"
#include "plan.h"
#include "xmalloc.h"

struct chain {
	struct op	*head;
	struct output	*out;		/* NULL: count mode */
	char		*error;
	int64_t		 records_out;
	int		 stopped;
};

/* filter contains: keep records holding a substring; a null holds none. */
struct ops_filter {
	struct op	 op;
	const char	*needle;	/* the plan's, which outlives the op */
	size_t		 len;
};

/* map upper, lower, trim: ASCII; a null passes through unchanged. */
struct ops_map {
	struct op	 op;
	enum plan_op_type type;
	char		*scratch;
	size_t		 size;
};

/* The output, or NULL in count mode. */
struct output *
chain_output(struct chain *chain)
{
	return (chain->out);
}

/* Take an allocated message as the error; the first error wins. */
int
op_fail_take(struct op *op, char *message)
{
	struct chain	*chain = op->chain;

	if (chain->error == NULL)
		chain->error = message;
	else
		free(message);
	return (OP_FAIL);
}

/* Fail the chain with a formatted message. */
int
op_fail(struct op *op, const char *fmt, ...)
{
	va_list	 ap;
	char	*message;

	va_start(ap, fmt);
	if (vasprintf(&message, fmt, ap) == -1)
		fatalx("vasprintf failed");
	va_end(ap);
	return (op_fail_take(op, message));
}

/* Pass finish() on to the next op. */
static int
ops_finish_next_cb(struct op *op)
{
	return (op->next->finish(op->next));
}

/* Free an op that owns nothing else. */
static void
ops_free_cb(struct op *op)
{
	free(op);
}

/* Sink: send a record to emberd. */
static int
ops_sink_output_cb(struct op *op, const struct record *r)
{
	struct chain	*chain = op->chain;
	char		*err;

	chain->records_out++;
	if (output_record(chain->out, r->data, r->len, r->null, &err) == -1)
		return (op_fail_take(op, err));
	return (OP_OK);
}

/* Sink: count a record. */
static int
ops_sink_count_cb(struct op *op, __attribute__((unused)) const struct record *r)
{
	op->chain->records_out++;
	return (OP_OK);
}

/* Sink: nothing is left to finish. */
static int
ops_sink_finish_cb(__attribute__((unused)) struct op *op)
{
	return (OP_OK);
}

/* Keep a record if it holds the substring. */
static int
ops_filter_push_cb(struct op *op, const struct record *r)
{
	struct ops_filter	*f = (struct ops_filter *)op;

	if (r->null)
		return (OP_OK);
	if (f->len != 0 && memmem(r->data, r->len, f->needle, f->len) == NULL)
		return (OP_OK);
	return (op_next(op, r));
}

/* Grow a map's scratch buffer to hold len bytes. */
static char *
ops_map_scratch(struct ops_map *m, size_t len)
{
	if (len > m->size) {
		free(m->scratch);
		m->size = len < 256 ? 256 : len;
		m->scratch = xmalloc(m->size);
	}
	return (m->scratch);
}

/* Is c ASCII whitespace? */
static int
ops_is_space(char c)
{
	return (c == ' ' || c == '\t' || c == '\n' || c == '\r' || c == '\v' ||
	    c == '\f');
}

/* Transform a record with a text map. */
static int
ops_map_push_cb(struct op *op, const struct record *r)
{
	struct ops_map	*m = (struct ops_map *)op;
	struct record	 out = *r;
	char		*s;
	size_t		 i;

	if (r->null)
		return (op_next(op, r));
	switch (m->type) {
	case PLAN_OP_MAP_UPPER:
		s = ops_map_scratch(m, r->len);
		for (i = 0; i < r->len; i++) {
			char c = r->data[i];
			s[i] = (c >= 'a' && c <= 'z') ? c - 'a' + 'A' : c;
		}
		out.data = s;
		break;
	case PLAN_OP_MAP_LOWER:
		s = ops_map_scratch(m, r->len);
		for (i = 0; i < r->len; i++) {
			char c = r->data[i];
			s[i] = (c >= 'A' && c <= 'Z') ? c - 'A' + 'a' : c;
		}
		out.data = s;
		break;
	case PLAN_OP_MAP_TRIM:
		while (out.len > 0 && ops_is_space(out.data[0])) {
			out.data++;
			out.len--;
		}
		while (out.len > 0 && ops_is_space(out.data[out.len - 1]))
			out.len--;
		break;
	default:
		fatalx("%s: not a map: %d", __func__, m->type);
	}
	return (op_next(op, &out));
}

/* Free a map op. */
static void
ops_map_free_cb(struct op *op)
{
	struct ops_map	*m = (struct ops_map *)op;

	free(m->scratch);
	free(m);
}

/* Make the op for one plan op. */
static struct op *
ops_create(const struct plan_op *p)
{
	struct ops_filter	*f;
	struct ops_map		*m;

	switch (p->type) {
	case PLAN_OP_FILTER_CONTAINS:
		f = xcalloc(1, sizeof *f);
		f->op.push = ops_filter_push_cb;
		f->op.finish = ops_finish_next_cb;
		f->op.free = ops_free_cb;
		f->needle = p->arg;
		f->len = p->arglen;
		return (&f->op);
	case PLAN_OP_MAP_UPPER:
	case PLAN_OP_MAP_LOWER:
	case PLAN_OP_MAP_TRIM:
		m = xcalloc(1, sizeof *m);
		m->op.push = ops_map_push_cb;
		m->op.finish = ops_finish_next_cb;
		m->op.free = ops_map_free_cb;
		m->type = p->type;
		return (&m->op);
	case PLAN_OP_PIPE:
		return (pipe_create(p->arg));
	}
	fatalx("%s: unknown op type %d", __func__, p->type);
}

/* Build the chain: the plan's ops, then the sink. */
struct chain *
chain_create(const struct plan *plan, struct output *out)
{
	struct chain	*chain;
	struct op	*op, *next;
	size_t		 i;

	chain = xcalloc(1, sizeof *chain);
	chain->out = out;

	next = xcalloc(1, sizeof *next);
	next->push = out != NULL ? ops_sink_output_cb : ops_sink_count_cb;
	next->finish = ops_sink_finish_cb;
	next->free = ops_free_cb;
	next->chain = chain;
	for (i = plan->nops; i > 0; i--) {
		op = ops_create(&plan->ops[i - 1]);
		op->next = next;
		op->chain = chain;
		next = op;
	}
	chain->head = next;
	return (chain);
}

/* Free a chain and its ops. */
void
chain_free(struct chain *chain)
{
	struct op	*op, *next;

	if (chain == NULL)
		return;
	for (op = chain->head; op != NULL; op = next) {
		next = op->next;
		op->free(op);
	}
	free(chain->error);
	free(chain);
}

/* Push a record from the source. */
int
chain_push(struct chain *chain, const struct record *r)
{
	int	rc;

	if (chain->stopped)
		return (OP_STOP);
	rc = chain->head->push(chain->head, r);
	if (rc != OP_OK)
		chain->stopped = 1;
	return (rc);
}

/* Finish the chain once the source has ended. */
int
chain_finish(struct chain *chain)
{
	int	rc;

	rc = chain->head->finish(chain->head);
	if (rc == OP_FAIL)
		return (rc);
	if (chain->error != NULL)
		return (OP_FAIL);
	return (OP_OK);
}

/* Records that reached the sink. */
int64_t
chain_records_out(const struct chain *chain)
{
	return (chain->records_out);
}

/* The chain's error, or NULL. */
const char *
chain_error(const struct chain *chain)
{
	return (chain->error);
}
