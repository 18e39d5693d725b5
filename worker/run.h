/*
 * A run: one task as the worker runs it, a partition of a plan through
 * its ops into what the task's mode makes of the records (docs/protocol.md,
 * "Task output").  emberd's side of a task is daemon/task.c.
 */
#ifndef EMBER_WORKER_RUN_H
#define EMBER_WORKER_RUN_H

#include <stdint.h>

#include <jansson.h>

#include "protocol.h"
#include "taskdesc.h"

struct output;
struct plan;

struct run {
	const struct plan	*plan;
	int			 partition;
	enum taskdesc_mode	 mode;
	enum reduce_fn		 fn;		/* reduce */
	const char		*save_dir;	/* save: the directory, */
	uint64_t		 save_attempt;	/* and the task's attempt */
	int64_t			 skip;		/* records: drop the first */
	const char		*ckpt_dir;	/* checkpoint: the directory */
	int			 ckpt_dirfd;	/* its parent, from emberd */
	int			 ckpt_sync;	/* and whether to fsync */
	int			 source_dirfd;	/* a checkpoint source's
						   parent, from emberd */
	/* An operation in stages: its directory in the uid's shuffle
	 * directory (from emberd); a map task's stage, buckets, the wide
	 * op it writes for and the memory it sorts in. */
	const char		*shuffle_dir;
	int			 shuffle_dirfd;
	int			 shuffle_stage;
	int			 shuffle_buckets;
	json_t			*shuffle_op;
	int64_t			 shuffle_memory;
};

/*
 * Run a task.  metrics gets records in, records out (those that reached
 * the mode: sent, counted or written), bytes out and records dropped (the
 * caller adds the elapsed time).  0, or -1 with *err allocated.  The last
 * batch stays buffered either way, for output_finish or output_fail.
 */
int	run_execute(const struct run *, struct output *,
	    int64_t metrics[EMBER_METRIC_COUNT], char **err);

/* Whether a task takes no time worth waiting for (it is counted without
 * reading anything), so that the end of the one before may wait for it. */
int	run_is_quick(const struct run *);

/* Whether the worker keeps memory for its next tasks (count_by_value's
 * spare tables, MiBs) that run_release_spares would give back. */
int	run_holds_spares(void);
/* Give that memory back to the system, for a worker about to sit idle;
 * the next tasks run as before, touching fresh pages. */
void	run_release_spares(void);

#endif
