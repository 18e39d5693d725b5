/*
 * The operation chain a task's records flow through, push style: the source
 * pushes each record into the first op, each op pushes what it makes into
 * the next, and the last is the sink (the output, or a counter).  finish()
 * runs once after the source ends and must reach the sink too.
 *
 * push() and finish() answer OP_OK, OP_STOP (the op wants no more input:
 * the source stops early, finish() still runs) or OP_FAIL (the chain's
 * error is set; the task fails).
 */
#ifndef EMBER_WORKER_OPS_H
#define EMBER_WORKER_OPS_H

#include <stddef.h>
#include <stdint.h>

struct output;
struct plan;
struct plan_op;

#define OP_OK	0
#define OP_STOP	1
#define OP_FAIL	(-1)

/* A record: bytes, or null (data NULL, len 0). */
struct record {
	const char	*data;
	size_t		 len;
	int		 null;
};

struct chain;

struct op {
	int		(*push)(struct op *, const struct record *);
	int		(*finish)(struct op *);
	void		(*free)(struct op *);
	struct op	*next;
	struct chain	*chain;
};

/* Build the chain for a plan's ops, ending in the output (out non-NULL)
 * or in a counter (out NULL: count mode). */
struct chain	*chain_create(const struct plan *, struct output *);
void		 chain_free(struct chain *);

/* Push a record into the chain; finish it.  OP_OK, OP_STOP or OP_FAIL. */
int		 chain_push(struct chain *, const struct record *);
int		 chain_finish(struct chain *);

/* Records that reached the sink. */
int64_t		 chain_records_out(const struct chain *);
/* The error of a failed chain (owned by the chain), or NULL. */
const char	*chain_error(const struct chain *);

/* For ops: the output (NULL in count mode), and failing with a message. */
struct output	*chain_output(struct chain *);
int		 op_fail(struct op *, const char *, ...)
		     __attribute__((format(printf, 2, 3)));
/* Take an allocated message as the chain's error. */
int		 op_fail_take(struct op *, char *);

/* Pass a record to the next op. */
static inline int
op_next(struct op *op, const struct record *r)
{
	return (op->next->push(op->next, r));
}

/* Pass finish() on to the next op. */
static inline int
op_next_finish(struct op *op)
{
	return (op->next->finish(op->next));
}

#endif
