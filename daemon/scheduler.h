/*
 * The scheduler: the tasks waiting for a worker, shared fairly between
 * users (client uids) and between a user's operations, within
 * workers.max and workers.max_per_user.  Dispatch is deferred to the event
 * loop, so the code that submits a task never runs a worker's callbacks
 * underneath itself.
 */
#ifndef EMBER_SCHEDULER_H
#define EMBER_SCHEDULER_H

#include <stddef.h>

struct task;

void	scheduler_init(void);
void	scheduler_free(void);
/* Queue at the back of its operation's flow; requeue (a task a dead
 * worker never started) at the front. */
void	scheduler_submit(struct task *);
void	scheduler_requeue(struct task *);
void	scheduler_remove(struct task *);
/* Fail the queued tasks of a pool: its workers cannot be made. */
struct pool;
void	scheduler_fail_pool(struct pool *, const char *why);
/* Run dispatch on the next loop turn. */
void	scheduler_kick(void);
size_t	scheduler_queued(void);

#endif
