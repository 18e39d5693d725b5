/*
 * The operation chain a task's records flow through, push style: the source
 * pushes each record into the first op, each op pushes what it makes into
 * the next, and the last is the sink (what the task's mode does with the
 * records: send them, count them, write them to a file...).  finish() runs
 * once after the source ends and must reach the sink too.
 *
 * push() and finish() answer OP_OK, OP_STOP (the op wants no more input:
 * the source stops early, finish() still runs) or OP_FAIL (the chain's
 * error is set; the task fails).
 *
 * A record pushed is only borrowed: its bytes are valid during the call,
 * so ops pass on pointers into their input or into a buffer of their own
 * and nothing is allocated per record.
 *
 * Two optional entries take many records in one call, for the text
 * source's lines, where a call per line costs more than the work:
 * push_lines() takes a block of whole lines, each ending in '\n' (the
 * newline is no part of the record), and says in *used how far it got:
 * all of it, or to the end of the line that stopped or failed the chain.
 * push_pieces() takes the same block split at a byte as flat_map split
 * splits each line (every piece a record, empty ones too), and is offered
 * only by ops that never stop the chain.  push_pair_pieces() takes the
 * same block with every piece a pair whose key and value are both the
 * piece, as key_by of the whole record makes them; key_by offers
 * push_pieces when the op after it takes those.  An op that has none of
 * them gets its records one push() at a time.
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

/*
 * A record: bytes, or null (data NULL, len 0).  Or, by kind (an enum
 * plan_kind, 0 for a plain record), a pair: the key (never null) and the
 * value in data; or a group: the key and its values as frames in data
 * (worker/keyed.h).  Ops that pass a record on as it came keep all of it.
 */
struct record {
	const char	*data;
	size_t		 len;
	int		 null;
	int		 kind;
	const char	*key;
	size_t		 klen;
};

struct chain;

struct op {
	int		(*push)(struct op *, const struct record *);
	int		(*finish)(struct op *);
	void		(*free)(struct op *);
	int		(*push_lines)(struct op *, const char *, size_t,
			     size_t *);
	int		(*push_pieces)(struct op *, const char *, size_t,
			     char);
	int		(*push_pair_pieces)(struct op *, const char *,
			     size_t, char);
	struct op	*next;
	struct chain	*chain;
};

/*
 * Build the chain for a partition of a plan, ending in sink, which the
 * chain owns from then on (it is freed with the chain, even on failure).
 * out is the task's output (NULL when the mode sends no records), which
 * ops that block flush first.  NULL with *err when an op cannot be made:
 * a udf that does not load, a broadcast the worker does not hold.
 */
struct chain	*chain_create(const struct plan *, int partition,
		     struct output *out, struct op *sink, char **err);
void		 chain_free(struct chain *);

/* Push a record into the chain; finish it.  OP_OK, OP_STOP or OP_FAIL. */
int		 chain_push(struct chain *, const struct record *);
int		 chain_finish(struct chain *);
/* Does the chain take whole blocks of lines?  Push such a block (see
 * push_lines above; *used says how much of it was taken, *lines how
 * many lines that is). */
int		 chain_takes_lines(const struct chain *);
int		 chain_push_lines(struct chain *, const char *, size_t,
		     size_t *used, int64_t *lines);
/* How many times byte c is in [p, p + len). */
size_t		 ops_count_byte(const char *p, size_t len, char c);

/* Did emberd stop the task (STOP_TASK) before the source ended?  Then
 * the chain is not finished: the task ends with what it sent. */
int		 chain_halted(const struct chain *);
/* The partition the chain runs. */
int		 chain_partition(const struct chain *);
/* Records the ops dropped as unusable (map json). */
int64_t		 chain_dropped(const struct chain *);
/* The error of a failed chain (owned by the chain), or NULL. */
const char	*chain_error(const struct chain *);

/* For ops: the output (or NULL), failing with a message, counting a
 * dropped record. */
struct output	*chain_output(struct chain *);
/* For the first op, from push_lines: how many lines it took, when it
 * counted them anyway (else the chain counts them). */
void		 chain_lines_taken(struct op *, size_t lines);
int		 op_fail(struct op *, const char *, ...)
		     __attribute__((format(printf, 2, 3)));
/* Take an allocated message as the chain's error. */
int		 op_fail_take(struct op *, char *);
void		 op_drop(struct op *);

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
