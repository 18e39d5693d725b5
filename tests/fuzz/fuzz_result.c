/*
 * Fuzzing target: daemon/result.c on the bytes a worker sends for a
 * count_by_value or reduce task.  A worker runs as the job's user, with
 * the user's code in it, so what it sends is hostile to emberd: batches of
 * record frames, merged, bounded by a budget, and turned into a reply.
 *
 * The first byte picks the action (and reduce's fn), the second and third
 * a budget; the rest is cut into batches at each "\xffBATCH" marker.
 */
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include <jansson.h>

#include "fuzz.h"
#include "result.h"

static const unsigned char	 marker[] = "\xff" "BATCH";

int
LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
	struct result		*r;
	const unsigned char	*p, *end, *next;
	json_t			*reply;
	char			*err, *text;
	size_t			 budget;

	if (size < 3)
		return (0);
	if (data[0] % 4 == 0)
		r = result_create(RESULT_COUNT_BY_VALUE, REDUCE_SUM);
	else
		r = result_create(RESULT_REDUCE, data[0] % 4 == 1 ? REDUCE_SUM :
		    data[0] % 4 == 2 ? REDUCE_MIN : REDUCE_MAX);
	budget = ((size_t)data[1] << 8 | data[2]) * 64;
	if (budget != 0)
		result_set_budget(r, budget);
	p = data + 3;
	end = data + size;
	while (p <= end) {
		next = memmem(p, (size_t)(end - p), marker, sizeof marker - 1);
		if (next == NULL)
			next = end;
		err = NULL;
		if (result_absorb(r, p, (size_t)(next - p), &err) == -1) {
			/* Refused, and says why: the task would fail. */
			if (err == NULL)
				abort();
			free(err);
			break;
		}
		if (err != NULL)
			abort();
		if (budget != 0 && result_over(r) == 0 &&
		    result_size(r) > budget)
			abort();
		p = next + sizeof marker - 1;
	}
	reply = result_reply(r);
	/* The reply is text a client can load back. */
	if ((text = json_dumps(reply, JSON_COMPACT)) == NULL)
		abort();
	json_decref(reply);
	if ((reply = json_loads(text, JSON_ALLOW_NUL, NULL)) == NULL)
		abort();
	json_decref(reply);
	free(text);
	result_free(r);
	return (0);
}
