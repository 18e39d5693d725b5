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
 * worker and error.  What the scheduler, a pool or a worker needs of the
 * operation that made a task it asks through the task's ops: below the
 * operation, modules know tasks, never operations.
 */
#ifndef EMBER_TASK_H
#define EMBER_TASK_H

#include <sys/types.h>

#include <stdint.h>

#include "protocol.h"
#include "queue.h"

struct broadcast;
struct evbuffer;
struct operation;
struct sched_flow;
struct spool;
struct task;
struct taskdesc;
struct worker;

/* What a worker does with a task whose client took none of its output
 * for stream.stall_timeout (task_ops.stalled). */
enum stall_action {
	STALL_SPOOL,		/* relay on into t->spool */
	STALL_PARK,		/* stop it: it is computed again later */
	STALL_FAIL,		/* neither can be */
};

/* What the scheduler, a pool and a worker ask about a task, of whoever
 * made it (its operation, which hands this table to task_create). */
struct task_ops {
	/* The ids of its operation and of that one's session (logs,
	 * status), and the client that owns it: its uid and gid. */
	const char	*(*operation_id)(const struct task *);
	const char	*(*session_id)(const struct task *);
	uid_t		 (*uid)(const struct task *);
	gid_t		 (*gid)(const struct task *);
	/* Tasks of its operation one worker may hold at once (1: no
	 * pipelining). */
	int		 (*pipeline_depth)(const struct task *);
	/* Its descriptor but broadcasts and plan (a save task's attempt
	 * gets a number of its own). */
	void		 (*describe)(const struct task *,
			     struct taskdesc *);
	/* The plan members of its descriptor, and the key a worker that
	 * has them already knows them by. */
	const char	*(*plan)(const struct task *, uint64_t *key);
	/* The broadcasts its operation's tasks use. */
	struct broadcast *const *(*broadcasts)(const struct task *,
			     size_t *);
	/* Whether its output is taken now; then a batch of it (relayed or
	 * merged): 0; -1 if the task should send none; -2 if it must
	 * stop, *err saying why (a spool over its limit). */
	int		 (*accepts_batch)(struct task *);
	int		 (*relay_batch)(struct task *, struct evbuffer *,
			     size_t bytes, int32_t records, char **err);
	/* Are its metrics possible?  -1 makes its worker corrupt. */
	int		 (*check_metrics)(const struct task *);
	/* Its client took none of its output for stream.stall_timeout:
	 * what to do with its worker.  STALL_FAIL sets *err. */
	enum stall_action (*stalled)(struct task *, char **err);
	/* Has its client taken nothing for stream.stall_timeout? */
	int		 (*client_stalled)(const struct task *,
			     uint64_t now);
};

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
	const struct task_ops	*ops;		/* what workers ask */
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
	uint64_t		 served_ns;	/* from its turn at its worker's
						   head to its end, as emberd
						   saw it */
	struct sched_flow	*flow;		/* the scheduler's, queued */
	struct spool		*spool;		/* the operation's: the rest of
						   a stalled stream's records */
	TAILQ_ENTRY(task)	 op_entry;	/* the operation's, by partition */
	TAILQ_ENTRY(task)	 queue_entry;	/* run queue, or the worker's */
};

/* Make a task for a partition of op, whose worker asks ops. */
struct task	*task_create(struct operation *, const struct task_ops *,
		     int partition, int reply_mode);
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
