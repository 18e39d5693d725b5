#include <stdlib.h>
#include <string.h>

#include "ops.h"
#include "output.h"
#include "plan.h"
#include "source.h"
#include "task.h"
#include "xmalloc.h"

/* Tell whether a task is answered without reading its source. */
int
task_is_quick(const struct plan *plan, int partition, enum task_mode mode)
{
	int64_t	count;

	return (mode == TASK_COUNT && plan->nops == 0 &&
	    source_count(plan, partition, &count) == 0);
}

/* Run a task and gather its metrics. */
int
task_run(const struct plan *plan, int partition, enum task_mode mode,
    struct output *out, int64_t metrics[EMBER_METRIC_COUNT], char **err)
{
	struct chain	*chain;
	int64_t		 in = 0, count;
	char		*serr = NULL;
	int		 rc;

	memset(metrics, 0, EMBER_METRIC_COUNT * sizeof *metrics);
	*err = NULL;

	/* Counting a source that knows its size needs no reading. */
	if (task_is_quick(plan, partition, mode)) {
		source_count(plan, partition, &count);
		metrics[EMBER_METRIC_RECORDS_IN] = count;
		metrics[EMBER_METRIC_RECORDS_OUT] = count;
		return (0);
	}

	chain = chain_create(plan, mode == TASK_COUNT ? NULL : out);
	rc = source_run(plan, partition, chain, &in, &serr);
	if (rc == OP_OK)
		rc = chain_finish(chain);
	if (rc == OP_FAIL) {
		if (serr != NULL)
			*err = serr;
		else if (chain_error(chain) != NULL)
			*err = xstrdup(chain_error(chain));
		else
			*err = xstrdup("task failed");
	}
	metrics[EMBER_METRIC_RECORDS_IN] = in;
	metrics[EMBER_METRIC_RECORDS_OUT] = chain_records_out(chain);
	chain_free(chain);	/* stops and reaps any command still running */

	if (mode == TASK_RECORDS)
		metrics[EMBER_METRIC_BYTES_OUT] = output_bytes(out);
	return (rc == OP_FAIL ? -1 : 0);
}
