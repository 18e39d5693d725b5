/*
 * The udf op: a partition function from a plugin (include/ember/udf.h),
 * run as a coroutine so that its pull-style loop fits the push-style chain.
 * Plugins are loaded once per worker and kept while the worker lives.
 */
#ifndef EMBER_WORKER_UDF_H
#define EMBER_WORKER_UDF_H

struct chain;
struct op;
struct plan_op;

/*
 * Make the op for a PLAN_OP_UDF, loading its library if this worker has not
 * yet.  The plan op must outlive the op.  NULL with *err allocated when the
 * library cannot be loaded, was built for another ABI or lacks the symbol.
 */
struct op	*udf_op_create(const struct plan_op *, struct chain *,
		     char **err);

#endif
