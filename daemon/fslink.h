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

/*
 * What a fork-server's messages are for: each part of emberd that has it
 * fork processes adds its calls once (as tmux's proc_add_peer), the
 * pools for their workers and helper.c for its helpers, and fslink.c
 * hands each message to the one it is for.  A call may be NULL.
 */
struct fslink_peer {
	/* It started (requests may be sent now), it said hello. */
	void	(*ready)(struct fslink *);
	void	(*hello)(struct fslink *);
	/* Its answer to fork request id: the child, emberd's end of its
	 * socket and the fork-server's generation then (pypreload.h), or
	 * the errno why not. */
	void	(*forked)(struct fslink *, int32_t id, pid_t, int fd,
		    int32_t gen);
	void	(*fork_failed)(struct fslink *, int32_t id, int error);
	/* A child of it exited: 1 if it was this peer's. */
	int	(*exited)(struct fslink *, pid_t, int status);
	/* It is gone; restarting: it is started again; before_hello: it
	 * died before its hello. */
	void	(*lost)(struct fslink *, const char *why, int restarting,
		    int before_hello);
};
/* Whose forks: FS_FORKED answers the workers', FS_HELPER_FORKED the
 * helpers'.  Exits and losses go to the helpers first. */
enum fslink_kind {
	FSLINK_WORKERS,
	FSLINK_HELPERS,
	FSLINK_KINDS
};
void		 fslink_add_peer(enum fslink_kind, const struct fslink_peer *);
/* The pool whose workers fs forks. */
struct pool	*fslink_pool(const struct fslink *);

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
/* Kill the fork-server if it has left fork requests unanswered past
 * python.broadcast_preload_timeout (stalled by its user's code); its
 * exit restarts it. */
void		 fslink_check_answers(struct fslink *, uint64_t now);
/* Kill the fork-server, which broke its contract (why), unless it is
 * already down; its exit restarts it as any death does. */
void		 fslink_abort(struct fslink *, const char *why);
/* Have it unpickle broadcast id from fd (the broadcast's memfd, which the
 * caller keeps), or let it go (pypreload.h): 0, or -1 as fslink_fork. */
int		 fslink_pyload(struct fslink *, int32_t id, int fd);
int		 fslink_pydrop(struct fslink *, int32_t id);
int		 fslink_running(const struct fslink *);
/* Is it down, with a restart to come? */
int		 fslink_restarting(const struct fslink *);
pid_t		 fslink_pid(const struct fslink *);

#endif
