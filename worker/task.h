/* One task: a partition of a plan through its ops, into the output. */
#ifndef EMBER_WORKER_TASK_H
#define EMBER_WORKER_TASK_H

#include <stdint.h>

#include "protocol.h"

struct output;
struct plan;

enum task_mode {
	TASK_RECORDS,	/* send the records */
	TASK_COUNT,	/* count them, send none */
};

/*
 * Run a task.  metrics gets records in, records out and bytes out (the
 * caller adds the elapsed time).  0, or -1 with *err allocated.  The last
 * batch stays buffered either way, for output_finish or output_fail.
 */
int	task_run(const struct plan *, int partition, enum task_mode,
	    struct output *, int64_t metrics[EMBER_METRIC_COUNT], char **err);

/* Whether a task takes no time worth waiting for (it is counted without
 * reading anything), so that the end of the one before may wait for it. */
int	task_is_quick(const struct plan *, int partition, enum task_mode);

#endif
