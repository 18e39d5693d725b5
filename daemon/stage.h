/*
 * Stages: a plan with wide ops cut at each of them (docs/plans.md,
 * "Stages").  Every stage but the last is a map stage: its tasks write
 * their records, partitioned for the next wide op, into shuffle files.
 * The next stage's tasks read those files as their source.  The last
 * stage runs the operation's action.  Stages are in the order they run:
 * every stage a stage reads comes before it.
 */
#ifndef EMBER_STAGE_H
#define EMBER_STAGE_H

#include <jansson.h>

struct plan;

/* At most this many stages to a plan. */
#define STAGE_MAX	1024

struct stage {
	int		 partitions;	/* its tasks */
	json_t		*plan;		/* the stage's plan, until its text is
					   made */
	const struct plan *from;	/* the plan whose source it reads, or
					   NULL for a shuffle source */
	char		*out_op;	/* map stages: the wide op written for,
					   as JSON text for the descriptors */
	int		 buckets;	/* and the buckets of each map file */
	char		*name;		/* "OPID/sK": the worker's plan key */
	char		*plan_text;	/* the descriptor's plan members */
};

/*
 * Cut a plan whose partitions are set (plan_set_partitions) into stages;
 * json is the plan as the client sent it.  NULL with *err (the field at
 * fault) for what stages cannot do.
 */
struct stage	*stage_cut(const struct plan *, json_t *json, int *nstages,
		     char **err);
void		 stage_free_all(struct stage *, int nstages);

#endif
