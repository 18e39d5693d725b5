/*
 * Operations: one executed job.  An operation owns its plan, its tasks and
 * its stream position (which partition is being delivered, whether the
 * client asked for it), apart from the connection that happens to carry its
 * stream.  Tasks are created as a window moves over the partitions, so a job
 * of a million partitions costs memory for the few that are in flight.
 */
#ifndef EMBER_OPERATION_H
#define EMBER_OPERATION_H

#include <sys/types.h>

#include <stdint.h>

#include <jansson.h>

#include "protocol.h"
#include "queue.h"
#include "task.h"

struct connection;
struct evbuffer;
struct operation;
struct session;
struct taskdesc;

/* execute: check the request and the plan, then start the operation.
 * What to answer now in *a; an answer that waits for a helper comes
 * later, through connection_answer. */
struct request_answer;
void		 operation_execute(struct connection *, struct session *,
		     json_t *request, struct request_answer *a);

/* Stream input from the client (requests): 1 if one was taken. */
int		 operation_stream_input(struct operation *, struct evbuffer *);
/* The client's output drained: relay more. */
void		 operation_stream_writable(struct operation *);
/* The connection went away: a reattachable operation is detached and
 * goes on, any other ends. */
void		 operation_detach(struct operation *);
/* The client of a complete stream sent another request on the connection
 * it ended on: it has the end, so the operation ends.  And the connection
 * a complete stream ended on went away. */
void		 operation_confirm(struct operation *);
void		 operation_forget_connection(struct operation *);

/*
 * reattach, release and interrupt, from connection c (pid) of session s:
 * what to answer, in *a, which c answers with.  A reattach to a stream
 * answers REQUEST_ANSWER_STREAM: c sends the reply, begins the stream,
 * then calls operation_stream_resume; one to a reply action answers
 * later (REQUEST_ANSWER_LATER), when its reply is there.
 */
void		 operation_reattach(struct connection *c, struct session *s,
		     json_t *request, struct request_answer *a);
void		 operation_stream_resume(struct operation *);
void		 operation_release(struct connection *c, struct session *s,
		     json_t *request, struct request_answer *a);
void		 operation_interrupt(struct session *s, json_t *request,
		     pid_t pid, struct request_answer *a);

/* The maintenance timer: the reaper of detached operations, and session
 * expiry.  Started with emberd, stopped at exit. */
void		 operation_maintenance_start(void);
void		 operation_maintenance_stop(void);
/* Run the maintenance no later than due (ember_now_ms's clock): the
 * deadline of a session or an operation just left without a client. */
void		 operation_maintenance_due(uint64_t due);
/* Does the stream wait for the client's request for the next partition? */
int		 operation_stream_waiting(const struct operation *);

/* Interrupt operations, telling their clients why. */
void		 operation_interrupt_all(const char *why);
void		 operation_interrupt_session(struct session *, const char *why);
/* The grace is over: refuse op with SHUTTING_DOWN if a helper is still
 * checking it (not started); else nothing. */
void		 operation_shutdown_unstarted(struct operation *);
/* Operations a drain waits for: those with a client attached. */
size_t		 operation_count(void);
json_t		*operation_status(uid_t);
/* Count every operation by state: counts[0] attached, [1] detached,
 * [2] complete (as status names them). */
void		 operation_count_states(uint64_t counts[3]);

/* Who op is, for the modules that meet it (the scheduler, the pools and
 * the workers ask a task's ops instead: task.h). */
uint64_t	 operation_serial(const struct operation *);
const char	*operation_id(const struct operation *);
int		 operation_partitions(const struct operation *);
/* The uid of the client whose session owns op, and the session's id. */
uid_t		 operation_uid(const struct operation *);
const char	*operation_session_id(const struct operation *);
gid_t		 operation_gid(const struct operation *);
/* May t, whose worker was lost, run again?  Not past
 * workers.task_retries, not if op's plan is not deterministic, nor once a
 * partial result of it was merged. */
int		 operation_may_retry(const struct operation *,
		     const struct task *);
/* The checkpoint op reads is computed (why NULL), or could not be. */
void		 operation_checkpoint_ready(struct operation *,
		     const char *why);
/* Compute lazy checkpoint c (of plan, whose text files were found and
 * sized when it was asked for: files, or NULL) in session s, for its first
 * read: the operation, or NULL with *err. */
struct checkpoint;
struct operation *operation_materialize(struct session *,
		     struct checkpoint *, json_t *plan, json_t *files,
		     char **err);

/* Called by task.c as a task of op ends. */
void		 operation_task_finished(struct operation *, struct task *);
void		 operation_task_failed(struct operation *, struct task *);
/* A task failed saying a shuffle file it read was lost (cause starts
 * "SHUFFLE_LOST stage K map M: "): 1 if the operation runs that map task
 * again and then t (which the caller parks), 0 if t simply fails. */
int		 operation_input_lost(struct operation *, struct task *,
		     const char *cause);
/* At start, once local_dir is open: unmount what a killed emberd left
 * in LOCALDIR/shuffle, and decide whether each uid's directory is a mount
 * (shufflefs.h). */
void		 shuffle_start(void);
/* At start: have each uid's shuffle files of an earlier run removed, as
 * the user. */
void		 shuffle_clean_stale(void);
/* At exit: remove the uids' empty shuffle directories, and the base. */
void		 shuffle_shutdown(void);

#endif
