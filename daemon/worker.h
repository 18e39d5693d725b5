/*
 * The daemon's view of a worker process: its socket, the tasks it holds
 * (the head runs, the rest wait behind it), the plan and broadcasts it
 * has, and the relay of its task output.  A worker that ended its task
 * cleanly is reused; one that failed, was interrupted or sent anything
 * unexpected is killed and never handed another task.  Its pool decides
 * when workers are made, kept and stopped.
 */
#ifndef EMBER_WORKER_H
#define EMBER_WORKER_H

/* Output buffered from one worker before emberd stops reading it: what a
 * task computed ahead of its turn holds in emberd, at most (a batch). */
#define WORKER_READ_HIGH	(256 * 1024)
/* What a worker waiting for its turn holds in emberd: a batch, which is
 * 256 KiB of records, or up to 512 KiB for a block of a text file's lines
 * (worker/output.c). */
#define WORKER_BATCH_HELD	(512 * 1024)
/* What emberd reads of a worker before it knows how long the next message
 * is.  Once a batch's header is in, reads go to the batch's end and no
 * further (but for the least worth a read): its bytes fill chains of their
 * own, which move to the client whole, where a chain shared with the next
 * batch would be copied. */
#define WORKER_READ_FIRST	(16 * 1024)

#include <sys/types.h>

#include <stdint.h>

#include <jansson.h>

struct pool;
struct task;
struct worker;

/* Why a worker stopped being used; each pool's status counts each. */
enum retire_cause {
	RETIRE_EXITED,		/* it died on its own */
	RETIRE_FAILED,		/* its task failed; it exits by itself */
	RETIRE_INTERRUPTED,	/* its task was stopped: killed */
	RETIRE_CORRUPT,		/* it broke the protocol: killed */
	RETIRE_IDLE_TIMEOUT,	/* idle past workers.idle_timeout */
	RETIRE_MAX_TASKS,	/* recycled after workers.max_tasks */
	RETIRE_NO_REUSE,	/* workers.reuse is off */
	RETIRE_MAX_MEMORY,	/* past workers.max_memory */
	RETIRE_TASK_TIMEOUT,	/* its task ran past workers.task_timeout */
	RETIRE_FORKSERVER,	/* its fork-server died */
	RETIRE_EVICTED,		/* idle, and another user's pool needed room */
	RETIRE_STALLED,		/* its stream's client did not read */
	RETIRE_STALE,		/* forked before its fork-server loaded or
				 * dropped a Python broadcast */
	RETIRE_CAUSES
};
const char	*worker_retire_name(enum retire_cause);

/* A worker p's fork-server made, idle, on its end of a socketpair, at the
 * fork-server's generation gen (pypreload.h). */
struct worker	*worker_create(struct pool *, pid_t, int fd, int32_t gen);
/* Free a worker holding no task, once its exit is known. */
void		 worker_free(struct worker *);
/* Free every worker, at shutdown: their tasks are dropped. */
void		 worker_free_all(void);
/* The worker with pid in pool p, or NULL. */
struct worker	*worker_find(struct pool *, pid_t);
/* Workers in every pool, dead ones too. */
int		 worker_count(void);
/* Workers of p, and how many of them are idle. */
void		 worker_count_pool(const struct pool *, int *all, int *idle);

/* Stop using a worker: it is killed if cause says so, the tasks it had
 * not started go back to the scheduler. */
void		 worker_retire(struct worker *, enum retire_cause);

/* An idle worker of p that can take t now, preferring one that has the
 * plan of t's operation, then one that holds the same plan members of
 * t's user (task_ops.plan); dead ones found are retired.  NULL if
 * none. */
struct worker	*worker_take_idle(struct pool *, const struct task *);
/* A busy worker that can queue t behind the tasks of t's operation it
 * runs (pipelining), or NULL. */
struct worker	*worker_take_behind(const struct task *);
/* Queue a task descriptor; worker_flush_all writes every queued one, so
 * tasks dispatched together reach a worker in one write. */
void		 worker_assign(struct worker *, struct task *);
void		 worker_flush_all(void);
/* Let the idle workers holding broadcast id go of it: it was dropped. */
void		 worker_drop_broadcast(int64_t id);
/* Take a task off its worker, which is killed: t is being stopped. */
void		 worker_cancel_task(struct worker *, struct task *);
/* Look at the worker's buffered output again on the next loop turn. */
void		 worker_kick(struct worker *);

/* The exit of a worker, reported by its fork-server. */
void		 worker_exited(struct worker *, int status);
/* p's fork-server died, and its workers with it. */
void		 worker_lost_pool(struct pool *, const char *why);

/* Fail and kill the busy workers past workers.task_timeout or
 * workers.max_memory. */
void		 worker_check_limits(void);
/* Retire p's idle workers past workers.idle_timeout, but the keep most
 * recently idle. */
void		 worker_expire_idle(struct pool *, int keep);
/* Retire the newest idle worker of another pool than p for which may
 * says yes: 0, or -1 if there is none. */
int		 worker_evict_other(const struct pool *,
		     int (*may)(const struct pool *, void *), void *);
/* Retire p's idle workers forked before its fork-server's Python
 * broadcasts last changed (pypreload.h). */
void		 worker_retire_stale(struct pool *);
/* Retire idle workers while more than max would be left. */
void		 worker_trim_idle(int max);
/* Workers retired to make room whose exit is not known yet. */
int		 worker_count_evicting(void);
/* Busy workers running a task of uid's. */
int		 worker_count_busy(uid_t);

/* The workers uid's jobs run on (all for root), for status. */
json_t		*worker_status_all(uid_t);
/* Count every worker by state: counts[0] idle, [1] busy, [2] dead. */
void		 worker_count_states(uint64_t counts[3]);

#endif
