/*
 * The worker pool: the workers the fork-server made for emberd, an idle
 * queue, and the relay of each worker's task output.  A worker that ended
 * its task cleanly is reused; one that failed, was interrupted or sent
 * anything unexpected is killed and never handed another task.
 */
#ifndef EMBER_POOL_H
#define EMBER_POOL_H

#include <sys/types.h>

#include <stddef.h>
#include <stdint.h>

#include <jansson.h>

struct task;
struct worker;

/* -1 (logged) if workers could not run: a bad workers.root_user. */
int		 pool_init(void);
void		 pool_shutdown(void);

/* A worker of t's pool that can take t now (idle, or pipelining reply
 * tasks), or NULL: the pool then wants one more worker. */
struct worker	*pool_take_worker(const struct task *);
/* After a dispatch: ask for the workers the tasks left waiting need. */
void		 pool_grow_wanted(void);
/* Queue a task descriptor; pool_flush writes every queued one, so tasks
 * dispatched together reach a worker in one write. */
void		 worker_assign(struct worker *, struct task *);
void		 pool_flush(void);
/* Stop a task where it runs: its worker is killed, its other tasks requeued. */
void		 pool_cancel_task(struct task *);
/* Look at the worker's buffered output again on the next loop turn. */
void		 worker_kick(struct worker *);

/* From a pool's fork-server. */
struct pool;
void		 pool_worker_forked(struct pool *, int32_t request, pid_t,
		     int fd);
void		 pool_fork_failed(struct pool *, int32_t request, int error);
void		 pool_worker_exited(struct pool *, pid_t, int status);
void		 pool_forkserver_ready(struct pool *);
void		 pool_forkserver_lost(struct pool *, const char *why,
		     int before_hello);
/* The user the jobs of client uid:gid run as: the client when emberd is
 * root, workers.root_user for root itself; emberd's user otherwise. */
int		 pool_job_user(uid_t, gid_t, uid_t *, gid_t *);
/* The pool that runs t's client's jobs (made on first use), or NULL. */
struct pool	*pool_of_task(const struct task *);

json_t		*pool_status_workers(void);
json_t		*pool_status(uid_t);

#endif
