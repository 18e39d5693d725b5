/*
 * emberd: process-wide state shared by the daemon's modules.  One libevent
 * loop runs everything; nothing here is touched from another thread.
 */
#ifndef EMBERD_H
#define EMBERD_H

#include <stdint.h>

#include "conf.h"

struct event_base;

/* Counters shown by status, under these names; they only ever grow. */
#define EMBER_COUNTERS(X)						\
	X(connections)							\
	X(connections_refused)						\
	X(connections_timed_out)	/* request or idle timeout */ \
	X(requests)							\
	X(request_errors)						\
	X(operations)							\
	X(operations_completed)						\
	X(operations_failed)						\
	X(operations_interrupted)					\
	X(tasks)							\
	X(tasks_completed)						\
	X(tasks_failed)							\
	X(tasks_retried)		/* lost, and run again */	\
	X(stages)			/* map stages run */		\
	X(shuffle_bytes)		/* written by map tasks */	\
	X(records_sent)							\
	X(bytes_sent)							\
	X(workers_forked)						\
	X(workers_exited)						\
	X(workers_killed)						\
	X(workers_crashed)						\
	X(worker_reuses)						\
	X(plans_sent)			/* in a task descriptor */	\
	X(plans_reused)			/* a worker's, by another op */	\
	X(forkserver_restarts)						\
	X(broadcasts)							\
	X(broadcasts_sent)		/* to a worker: once per worker */ \
	X(broadcast_bytes_sent)						\
	X(broadcasts_removed)

struct ember_counters {
#define EMBER_COUNTER_FIELD(name)	uint64_t name;
	EMBER_COUNTERS(EMBER_COUNTER_FIELD)
#undef EMBER_COUNTER_FIELD
};

extern struct event_base	*ember_base;
extern struct conf		 ember_conf;
extern struct ember_counters	 ember_counters;
extern int			 ember_draining;
extern uint64_t			 ember_started_ms;

/* Milliseconds on the monotonic clock. */
uint64_t	ember_now_ms(void);
/* The same clock in nanoseconds. */
uint64_t	ember_now_ns(void);
/* workers.max, with "auto" resolved to the number of CPUs. */
int		ember_workers_max(void);
/* The hard cap on workers, workers.max_total: never below workers.max;
 * 0 in the conf is twice workers.max. */
int		ember_workers_total(void);
/* The directory for emberd's own files (broadcasts). */
const char	*ember_local_dir(void);
/* Called whenever an operation ends, so a drain can finish. */
void		ember_check_drained(void);

#endif
