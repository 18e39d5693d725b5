/*
 * What a reply action gathers from its tasks' partial results:
 * count_by_value merges each partition's (record, count) pairs, reduce
 * folds each partition's partial sum, min or max.  The merged result
 * becomes the fields of the execute reply.
 */
#ifndef EMBER_RESULT_H
#define EMBER_RESULT_H

#include <stddef.h>
#include <stdint.h>

#include <jansson.h>

#include "taskdesc.h"

enum result_kind {
	RESULT_COUNT_BY_VALUE,
	RESULT_REDUCE,
};

struct result;

struct result	*result_create(enum result_kind, enum reduce_fn);
void		 result_free(struct result *);
/* Take a batch of a task's record frames; -1 with *err if malformed. */
int		 result_absorb(struct result *, const unsigned char *, size_t,
		     char **err);
/* Bytes the merged result holds, to bound it. */
size_t		 result_size(const struct result *);
/* The most result_size may grow to: what would pass it is not merged,
 * and result_over says how many bytes more were wanted (0: none). */
void		 result_set_budget(struct result *, size_t);
size_t		 result_over(const struct result *);
/* How many distinct records count_by_value holds. */
size_t		 result_distinct(const struct result *);
/* The reply fields: counts and nulls, or value and count. */
json_t		*result_reply(struct result *);

#endif
