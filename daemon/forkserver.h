/*
 * emberd's side of the fork-servers (ember-worker --fork-server): one per
 * user that workers run as, started on first use with a SOCK_SEQPACKET
 * control channel, restarted with a delay if it dies.  When emberd runs as
 * root, each is told to drop to its user before it runs anything else.
 * docs/protocol.md section 2 describes the messages.
 */
#ifndef EMBER_FORKSERVER_H
#define EMBER_FORKSERVER_H

#include <sys/types.h>

#include <stdint.h>

struct forkserver;
struct pool;

/* Check that ember-worker can be run; -1 (logged) if not. */
int		 forkserver_init(void);
/* Start a fork-server for pool's workers, running as uid:gid (--user when
 * emberd is root).  NULL (logged) if it cannot be started. */
struct forkserver *forkserver_create(struct pool *, uid_t, gid_t);
/* Stop one (its workers die with it), or all at exit. */
void		 forkserver_free(struct forkserver *);
void		 forkserver_stop_all(void);
/* SIGCHLD arrived: see which fork-servers exited. */
void		 forkserver_reap(void);
/* 0 if the request went out, -1 if the fork-server is not running now. */
int		 forkserver_fork(struct forkserver *, int32_t request);
void		 forkserver_kill(struct forkserver *, pid_t, int signal);
int		 forkserver_running(const struct forkserver *);
pid_t		 forkserver_pid(const struct forkserver *);

#endif
