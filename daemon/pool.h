/*
 * Worker pools: one per user that jobs run as, each with the fork-server
 * that makes its workers.  The pools decide how many workers there are:
 * growth within workers.max, the crash-storm back-off, eviction of another
 * pool's idle workers, and the limits checked on a timer (task timeouts,
 * memory, idle workers, warm ones).  The workers themselves are worker.c's.
 */
#ifndef EMBER_POOL_H
#define EMBER_POOL_H

#include <sys/types.h>

#include <stddef.h>
#include <stdint.h>

#include <jansson.h>

#include "worker.h"

struct fslink;
struct pool;
struct task;

/* -1 (logged) if workers could not run: a bad workers.root_user. */
int		 pool_init(void);
void		 pool_shutdown(void);

/* A worker of p that can take t now (idle, or with behind, pipelining
 * reply tasks behind a busy one), or NULL. */
struct worker	*pool_take_worker(struct pool *, const struct task *,
		     int behind);
/* Ask p's fork-server for one more worker, within workers.max and the
 * crash-storm back-off: 1 if it was asked. */
int		 pool_grow_one(struct pool *);
/* The same past workers.max, within workers.max_total: for a user who
 * holds no worker while others hold them all. */
int		 pool_grow_past(struct pool *);
/* Workers p's fork-server is making; room left within workers.max, and
 * within workers.max_total. */
int		 pool_pending(const struct pool *);
int		 pool_room(void);
int		 pool_room_past(void);
/* The uid whose jobs p runs (emberd's own when it is not root). */
uid_t		 pool_client(const struct pool *);
/* The user and group its workers run as. */
void		 pool_job_user(const struct pool *, uid_t *, gid_t *);
/* The pool that runs t's client's jobs (made on first use), or NULL. */
struct pool	*pool_of_task(const struct task *);
/* The pool that runs client uid:gid's jobs (made on first use), or NULL. */
struct pool	*pool_of_client(uid_t, gid_t);

/* Whether the first pool's fork-server is up with min_idle workers idle. */
int		 pool_first_warm(void);

/* From its workers: what status counts, and the crash-storm count. */
struct fslink *pool_fslink(struct pool *);
/* What its fork-server holds of Python broadcasts (pypreload.h). */
struct pypreload *pool_pypreload(struct pool *);
void		 pool_count_retired(struct pool *, enum retire_cause);
void		 pool_count_reuse(struct pool *);
void		 pool_count_crash(struct pool *);
void		 pool_count_success(struct pool *);

json_t		*pool_status(uid_t);

/* A pool's numbers, as status shows them. */
struct pool_stats {
	uid_t		 client;	/* whose jobs it runs */
	int		 workers, idle, busy;
	int		 starting;	/* forks asked for, not made yet */
	uint64_t	 forks, reuses;
	uint64_t	 retired[RETIRE_CAUSES];	/* by cause */
};
/* Every pool's numbers: an array of *n, to free. */
struct pool_stats *pool_stats_all(size_t *n);

#endif
