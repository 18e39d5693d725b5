/*
 * Fuzzing target: the worker's reader of a task descriptor
 * (common/taskdesc.c), its fixed header and its JSON members, on any
 * bytes as a descriptor's frame.  emberd is the worker's trusted peer,
 * but a header whose lengths lie must still be refused, never read
 * past: a descriptor decoded must hold what struct taskdesc promises.
 */
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "fuzz.h"
#include "plan.h"
#include "protocol.h"
#include "taskdesc.h"

/* Check what the reader promised of a decoded descriptor. */
static void
fuzz_check(const struct taskdesc *t)
{
	size_t	i;

	if (t->partitions < 1 || t->partitions > PLAN_MAX_PARTITIONS ||
	    t->partition < 0 || t->partition >= t->partitions)
		abort();
	if (t->mode < MODE_RECORDS || t->mode > MODE_SHUFFLE ||
	    t->fn < REDUCE_SUM || t->fn > REDUCE_MAX || t->skip < 0)
		abort();
	if (t->operation == NULL || *t->operation == '\0' ||
	    strlen(t->operation) > TASKDESC_MAX_OPERATION)
		abort();
	if (t->nbatch >= EMBER_MAX_TASK_BATCH)
		abort();
	for (i = 0; i < t->nbatch; i++) {
		if (t->batch[i] < 0 || t->batch[i] >= t->partitions)
			abort();
	}
	if (t->reuse_plan && (t->plan != NULL || t->files != NULL ||
	    t->source_dir != NULL))
		abort();
	if (t->mode == MODE_SAVE && (t->save_dir == NULL ||
	    *t->save_dir != '/'))
		abort();
}

int
LLVMFuzzerTestOneInput(const uint8_t *data, size_t len)
{
	struct taskdesc	 t;
	char		*err = NULL;

	if (taskdesc_decode((const char *)data, len, &t, &err) == 0)
		fuzz_check(&t);
	else if (err == NULL)
		abort();
	free(err);
	taskdesc_clear(&t);
	return (0);
}
