/*
 * emberd's side of the fork-server (ember-worker --fork-server): started at
 * launch with a SOCK_SEQPACKET control channel, restarted with a delay if it
 * dies.  docs/protocol.md section 2 describes the messages.
 */
#ifndef EMBER_FORKSERVER_H
#define EMBER_FORKSERVER_H

#include <sys/types.h>

#include <stdint.h>

int	forkserver_start(void);
void	forkserver_stop(void);
/* SIGCHLD arrived: see whether the fork-server exited. */
void	forkserver_reap(void);
/* 0 if the request went out, -1 if there is no fork-server right now. */
int	forkserver_fork(int32_t request);
void	forkserver_kill(pid_t, int signal);
int	forkserver_running(void);

#endif
