/*
 * Fuzzing target: common/plan.c's plan_parse on arbitrary bytes read as
 * JSON, then what emberd does with a plan it accepted before it looks at
 * files (partitions, slices, determinism, the files' JSON).
 */
#include <stdint.h>
#include <stdlib.h>

#include <jansson.h>

#include "fuzz.h"
#include "plan.h"

int
LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
	struct plan	*plan = NULL;
	json_t		*j, *files;
	int64_t		 first, count, begin, end;
	char		*err = NULL;

	j = json_loadb((const char *)data, size,
	    JSON_DECODE_ANY | JSON_ALLOW_NUL, NULL);
	if (j == NULL)
		return (0);
	if (plan_parse(j, &plan, &err) == -1) {
		/* A refusal always says why. */
		if (err == NULL)
			abort();
		free(err);
		json_decref(j);
		return (0);
	}
	plan_set_partitions(plan, 4);
	if (plan->partitions < 1 || plan->partitions > PLAN_MAX_PARTITIONS)
		abort();
	(void)plan_is_deterministic(plan);
	if (plan->source == PLAN_SOURCE_RANGE) {
		plan_range_slice(plan, 0, &first, &count);
		plan_range_slice(plan, plan->partitions - 1, &first, &count);
		if (count < 0)
			abort();
	}
	if (plan->source == PLAN_SOURCE_PARALLELIZE) {
		plan_slice((int64_t)json_array_size(plan->records),
		    plan->partitions, plan->partitions - 1, &begin, &end);
		if (begin > end)
			abort();
	}
	files = plan_files_to_json(plan);
	json_decref(files);
	plan_free(plan);
	json_decref(j);
	return (0);
}
