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

void		 pool_init(void);
void		 pool_shutdown(void);

/* A worker that can take t now (idle, or pipelining counts), or NULL. */
struct worker	*pool_take_worker(const struct task *);
/* Ask the fork-server for workers while queued tasks wait and there is room. */
void		 pool_grow(size_t queued);
/* Queue a task descriptor; pool_flush writes every queued one, so tasks
 * dispatched together reach a worker in one write. */
void		 worker_assign(struct worker *, struct task *);
void		 pool_flush(void);
/* Stop a task where it runs: its worker is killed, its other tasks requeued. */
void		 pool_cancel_task(struct task *);
/* Look at the worker's buffered output again on the next loop turn. */
void		 worker_kick(struct worker *);

/* From the fork-server. */
void		 pool_worker_forked(int32_t request, pid_t, int fd);
void		 pool_fork_failed(int32_t request, int error);
void		 pool_worker_exited(pid_t, int status);
void		 pool_forkserver_lost(const char *why);

json_t		*pool_status_workers(void);
json_t		*pool_status(void);

#endif
