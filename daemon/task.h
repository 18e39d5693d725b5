/*
 * Tasks: one partition of an operation on its way through emberd.  This
 * file and task.c are the whole life of a task; no other module changes
 * its state.
 *
 *	NEW -> QUEUED		task_queue: the scheduler takes it
 *	QUEUED -> ASSIGNED	task_assign: sent to a worker
 *	ASSIGNED -> QUEUED	task_requeue: its worker went before running it
 *	ASSIGNED -> PARKED	task_park: stopped to give its worker back,
 *				its client not reading (stream.stall_timeout)
 *	PARKED -> QUEUED	task_queue: its client reads again; it is
 *				computed again, skipping what was relayed
 *	ASSIGNED -> DONE	task_finish: it ended cleanly
 *	ASSIGNED -> QUEUED	task_lose: its worker was lost; it runs
 *				again, skipping what was relayed
 *	ASSIGNED -> PARKED	task_fail: a shuffle file it read was lost;
 *				its operation runs the map task that wrote
 *				it again, then queues this one (waiting_input
 *				until then)
 *	QUEUED, ASSIGNED -> FAILED
 *				task_fail: it ended with an error, or could
 *				not be given to a worker
 *	any -> (freed)		task_free: stopped where it is
 *
 * The operation, the scheduler and the worker link tasks into their lists
 * (op_entry, queue_entry) and read the fields; only task.c writes state,
 * worker and error.
 */
#ifndef EMBER_TASK_H
#define EMBER_TASK_H

#include <sys/types.h>

#include <stdint.h>

#include "protocol.h"
#include "queue.h"

struct operation;
struct sched_flow;
struct spool;
struct worker;

enum task_state {
	TASK_NEW,		/* made, not queued yet */
	TASK_QUEUED,		/* in the scheduler's run queue */
	TASK_ASSIGNED,		/* sent to a worker, which runs it or will next */
	TASK_PARKED,		/* stopped while its client did not read */
	TASK_DONE,		/* ended cleanly; every record was relayed */
	TASK_FAILED,		/* ended with error */
};

struct task {
	struct operation	*op;
	int			 partition;
	int			 stage;		/* its operation's stage */
	int			 reply_mode;	/* its output is for emberd, not
						   the client: pipelined */
	enum task_state		 state;
	struct worker		*worker;	/* TASK_ASSIGNED, until it ends */
	int64_t			 records;	/* records relayed so far */
	int64_t			 skip;		/* records the worker drops
						   first: a recompute */
	int64_t			 parked_records; /* records when it was last
						   parked, in skip since */
	int			 retries;	/* runs again after a lost worker */
	int			 merged;	/* a partial result of it was
						   merged: it cannot run again */
	int			 waiting_input;	/* parked until a lost shuffle
						   file is written again */
	int			 rerun;		/* a map task run again for a
						   lost shuffle file */
	int64_t			 metrics[EMBER_METRIC_COUNT];
	char			*error;		/* TASK_FAILED */
	uint64_t		 queued_ms;
	struct sched_flow	*flow;		/* the scheduler's, queued */
	struct spool		*spool;		/* the operation's: the rest of
						   a stalled stream's records */
	TAILQ_ENTRY(task)	 op_entry;	/* the operation's, by partition */
	TAILQ_ENTRY(task)	 queue_entry;	/* run queue, or the worker's */
};

struct task	*task_create(struct operation *, int partition, int reply_mode);
/* Stop a task wherever it is (out of the run queue, or its worker
 * killed) and free it. */
void		 task_free(struct task *);

void		 task_queue(struct task *);
void		 task_requeue(struct task *);
void		 task_assign(struct task *, struct worker *);
/* Its worker was stopped while its client did not read: what it relayed
 * is skipped when it runs again. */
void		 task_park(struct task *);
/* Its worker sent the end: the operation is told. */
void		 task_finish(struct task *);
/* It failed on worker pid (0: before any worker ran it); the operation
 * is told. */
void		 task_fail(struct task *, pid_t, const char *cause);
/* Its worker was lost (killed from outside, or with its fork-server): run
 * it again on another worker if its operation may (workers.task_retries),
 * else fail it with cause. */
void		 task_lose(struct task *, pid_t, const char *cause);
/* Let its worker relay what it holds for it, if it has one. */
void		 task_kick(struct task *);

const char	*task_state_name(enum task_state);

#endif
