/*
 * Fork-server links: emberd's side of the fork-servers (ember-worker
 * --fork-server, worker/forkserver.c), one per user that workers run as,
 * started on first use with a SOCK_SEQPACKET control channel, restarted
 * with a delay if it dies.  When emberd runs as
 * root, each is told to drop to its user before it runs anything else.
 * docs/protocol.md section 2 describes the messages.
 */
#ifndef EMBER_FSLINK_H
#define EMBER_FSLINK_H

#include <sys/types.h>

#include <stdint.h>

struct fslink;
struct pool;

/* Check that ember-worker can be run; -1 (logged) if not. */
int		 fslink_init(void);
/* Start a fork-server for pool's workers, running as uid:gid (--user when
 * emberd is root).  NULL (logged) if it cannot be started. */
struct fslink *fslink_create(struct pool *, uid_t, gid_t);
/* Stop one (its workers die with it), or all at exit. */
void		 fslink_free(struct fslink *);
void		 fslink_stop_all(void);
/* SIGCHLD arrived: see which fork-servers exited. */
void		 fslink_reap(void);
/* 0 if the request went out, -1 if the fork-server is not running now. */
int		 fslink_fork(struct fslink *, int32_t request);
/* Ask for a helper (daemon/helper.c): 0, or -1 as fslink_fork. */
int		 fslink_helper(struct fslink *, int32_t request);
void		 fslink_kill(struct fslink *, pid_t, int signal);
int		 fslink_running(const struct fslink *);
/* Is it down, with a restart to come? */
int		 fslink_restarting(const struct fslink *);
pid_t		 fslink_pid(const struct fslink *);

#endif
