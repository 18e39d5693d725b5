/*
 * emberd: process-wide state shared by the daemon's modules.  One libevent
 * loop runs everything; nothing here is touched from another thread.
 */
#ifndef EMBERD_H
#define EMBERD_H

#include <stdint.h>

#include "conf.h"

struct event_base;

/* Counters shown by status; they only ever grow. */
struct ember_counters {
	uint64_t	connections;
	uint64_t	connections_refused;
	uint64_t	requests;
	uint64_t	request_errors;
	uint64_t	operations;
	uint64_t	operations_completed;
	uint64_t	operations_failed;
	uint64_t	operations_interrupted;
	uint64_t	tasks;
	uint64_t	tasks_completed;
	uint64_t	tasks_failed;
	uint64_t	records_sent;
	uint64_t	bytes_sent;
	uint64_t	workers_forked;
	uint64_t	workers_exited;
	uint64_t	workers_killed;
	uint64_t	workers_crashed;
	uint64_t	worker_reuses;
	uint64_t	forkserver_restarts;
	uint64_t	broadcasts;
	uint64_t	broadcasts_sent;	/* to a worker: once per worker */
	uint64_t	broadcast_bytes_sent;
	uint64_t	broadcasts_removed;
};

extern struct event_base	*ember_base;
extern struct conf		 ember_conf;
extern struct ember_counters	 ember_counters;
extern int			 ember_draining;
extern uint64_t			 ember_started_ms;

/* Milliseconds on the monotonic clock. */
uint64_t	ember_now_ms(void);
/* workers.max, with "auto" resolved to the number of CPUs. */
int		ember_workers_max(void);
/* The directory for emberd's own files (broadcasts). */
const char	*ember_local_dir(void);
/* Called whenever an operation ends, so a drain can finish. */
void		ember_check_drained(void);

#endif
