/*
 * What the files of an operation share: operation.c (its life, its
 * tasks' window and ends, the reply actions, status), execute.c,
 * stream.c and reattach.c.  Nothing outside them includes it: the rest of
 * emberd sees operation.h.
 */
#ifndef EMBER_OPERATION_PRIVATE_H
#define EMBER_OPERATION_PRIVATE_H

#include <stdint.h>

#include <jansson.h>

#include "request.h"
#include "operation.h"
#include "queue.h"
#include "result.h"
#include "task.h"
#include "taskdesc.h"

struct connection;
struct evbuffer;
struct stage;
struct task;
struct tombstone;

#define ACTION_STREAMS(a)	((a) == ACTION_ITERATE || (a) == ACTION_COLLECT)

struct operation {
	char			 id[37];
	uint64_t		 serial;
	struct session		*session;
	struct connection	*conn;		/* attached, or NULL */
	enum action		 action;
	int			 prefetch;	/* -1: as many as fit */
	struct plan		*plan;
	char			*plan_text;	/* "plan":...,"files":... */
	int			 npartitions;
	int			 next_start;	/* first partition not started */
	int			 next_deliver;	/* partition the client gets next */
	int			 requested;	/* the client asked for it */
	int			 partition_open; /* its "1" went out */
	int			 live;		/* tasks started, not retired */
	int			 done;		/* tasks retired (count) */
	int64_t			 count;		/* records out, tasks retired */
	int64_t			 task_ns;	/* tasks retired took, by
						   emberd's clock (not their
						   workers' word): sizes the
						   pipeline */
	struct result		*result;	/* count_by_value, reduce */
	int64_t			 result_charged; /* to daemon.max_results */
	int64_t			 count_distinct; /* records in the result */
	uid_t			 uid;		/* whose limits it is charged to */
	int			 counted;
	int64_t			 plan_charged;	/* its plans' text, to uid */
	const char		*result_class;	/* result over its bound: */
	char			*result_error;	/* freed, and the op fails */
	enum reduce_fn		 fn;
	struct commit		*commit;	/* save: its steps run as the
						   user, the operation waits */
	int			 beginning;	/* save_begin runs: not started */
	int			 failing;	/* save_abort runs, then the
						   error goes out */
	const char		*fail_class;
	char			*fail_error;
	uint64_t		 save_attempts;	/* tasks sent, each a number of
						   its own for its part file */
	struct checkpoint	*ckpt;		/* checkpoint: what it writes,
						   until committed */
	int			 ckpt_local, ckpt_eager;
	struct checkpoint	*source;	/* the checkpoint it reads */
	int			 waiting;	/* for source to be computed */
	int			 internal;	/* computes a lazy checkpoint
						   for its first read */
	struct broadcast	**broadcasts;	/* the plan uses, each once */
	size_t			 nbroadcasts;
	int64_t			 records_sent;
	uint64_t		 bytes_sent;
	int64_t			 limit;		/* records in all, 0: no limit */
	int			 limit_reached;
	struct event		*limit_ev;	/* ends a stream at its limit */
	struct event		*pump_ev;	/* delivers, on the next turn */
	uint64_t		 client_idle_ms; /* since when its client has
						   taken nothing, or 0 */
	uint64_t		 started_ms;

	/* Reattachable operations (docs/protocol.md, "Reattach"). */
	int			 reattachable;
	int			 deterministic;	/* its plan can be recomputed */
	struct retry		*retry;		/* reattachable streams */
	int64_t			 delivered;	/* records of next_deliver sent
						   on this attachment */
	int			 complete;	/* its end went out; it waits
						   for release all */
	json_t			*reply;		/* a reply action's, kept for
						   a reattach */
	struct connection	*completed_on;	/* its end went out there */
	uint64_t		 detached_ms;	/* when it lost its client */
	uint64_t		 attached_ms;	/* when its stream began */
	uint64_t		 attached_bytes; /* sent on that stream */
	int			 skip_partition; /* the next task of it skips */
	int64_t			 skip;

	/* Between execute and start: the plan's files and plugins being
	 * checked by a helper, as the user.  The connection is busy. */
	struct helper		*planning;
	struct session		*planned_for;
	json_t			*plan_json;
	char			*save_path;
	int			 overwrite;

	/* An operation in stages (shuffle.c); nstages is 0 for a plan
	 * without wide ops.  Its map stages run first, one at a time; the
	 * tasks above are the last stage's. */
	struct stage		*stages;
	int			 nstages;
	int			 stage;		/* the stage running */
	int			 stage_next;	/* its first task not started */
	int			 stage_done;	/* its tasks ended */
	int			 map_live;
	int64_t			 shuffle_bytes;	/* charged to the uid */
	int			 reruns;	/* of map tasks, for lost files */
	TAILQ_HEAD(, task)	 map_tasks;

	TAILQ_HEAD(, task)	 tasks;		/* live tasks, by partition */
	TAILQ_ENTRY(operation)	 entry;
};
TAILQ_HEAD(operation_list, operation);
/* Every started operation, in start order, and how many. */
extern struct operation_list	 operations;
extern size_t			 noperations;

/* What the workers of op's tasks ask of it (operation_task_ops). */
extern const struct task_ops operation_task_ops;
/* Tasks of op one worker may hold at once (1: no pipelining). */
int		 operation_pipeline_depth(const struct operation *);
/* The plan members of a task's descriptor, and the key a worker that has
 * them already knows them by (its operation and stage). */
const char	*operation_task_plan(const struct operation *,
		     const struct task *, uint64_t *key);
/* Fill in the descriptor of one attempt of t but its broadcasts and plan
 * (a save task's attempt gets a number of its own). */
void		 operation_describe_task(struct operation *,
		     const struct task *, struct taskdesc *);
/* The broadcasts the operation's tasks use. */
struct broadcast *const *operation_broadcasts(const struct operation *,
		     size_t *);
/* As a task's output arrives: whether the operation takes a batch now,
 * and the batch (task_ops.relay_batch). */
int		 operation_accepts_batch(struct operation *, struct task *);
int		 operation_relay_batch(struct operation *, struct task *,
		     struct evbuffer *, size_t bytes, int32_t records,
		     char **err);
/* A task's client took none of its output for stream.stall_timeout. */
enum stall_action operation_task_stalled(struct operation *, struct task *,
		     char **err);
/* Has op's client taken nothing for stream.stall_timeout? */
int		 operation_client_stalled(struct operation *, uint64_t now);
/* Are the task's metrics possible?  -1 makes its worker corrupt. */
int		 operation_check_metrics(const struct operation *,
		     const struct task *);

/* operation.c: an operation's life. */
/* Find uid's operation id: ids are the uid's own. */
struct operation *operation_find(uid_t uid, const char *id);
/* Start tasks while the window has room. */
void		 operation_fill(struct operation *);
/* Retire a task: stop it wherever it is and free it. */
void		 operation_retire(struct operation *, struct task *);
/* Free the merged result and what it held of daemon.max_results. */
void		 operation_drop_result(struct operation *);
/* Free an operation: its tasks are stopped and its workers not reused.
 * One refused before it started is in no list and has no task. */
void		 operation_free(struct operation *);
/* Give the connection back to control frames and free the operation. */
void		 operation_end(struct operation *);
/* Interrupt op and tell its client, if any, why: an error reply, or on a
 * stream an error frame that starts with the same class. */
void		 operation_abort(struct operation *, const char *class,
		     const char *why);
/* Keep what a detached stream needs, and no more than its bound. */
void		 operation_unplug(struct operation *);
/* Send a reply action's reply to c, and end.  The reply's bytes, not the
 * merged result's, are held against the uid's results until the client
 * takes them; past the bounds it is LIMIT_EXCEEDED instead. */
void		 operation_reply_deliver(struct operation *,
		     struct connection *, json_t *reply);
/* A checkpoint action's reply fields. */
json_t		*operation_checkpoint_reply(const struct operation *);

/* shuffle.c: the stages of an operation with wide ops. */
/* Cut the plan (its partitions set) into stages, if it has wide ops,
 * and fix the operation's partitions to the last stage's: -1 with *err
 * (PLAN_INVALID). */
int		 operation_stages_prepare(struct operation *, json_t *plan,
		     char **err);
/* Does a map stage still run, before the operation's own tasks? */
int		 operation_in_map_stage(const struct operation *);
void		 operation_stage_fill(struct operation *);
void		 operation_stage_task_finished(struct operation *,
		     struct task *);
void		 operation_stage_task_failed(struct operation *, struct task *);
/* What a descriptor says of a task in stages, past operation.c's. */
void		 operation_stage_describe(struct operation *,
		     const struct task *, struct taskdesc *);
/* The stage's plan members for a task, and the key a worker that has
 * them already knows them by. */
const char	*operation_stage_plan(const struct operation *,
		     const struct task *, uint64_t *key);
/* Stop the map tasks and have the shuffle files removed, as the user. */
void		 operation_stages_free(struct operation *);

/* stream.c: the result stream. */
/* End a stream with an error: -1 before the partition's first record,
 * -2 (EXCEPTION_THROWN) after it, then the message frame. */
void		 operation_stream_error(struct operation *, const char *msg);
/* Deliver what can be delivered, in partition order. */
void		 operation_pump(struct operation *);

/* reattach.c: detach, reattach, tombstones, the reaper. */
/* Find uid's tombstone for id. */
struct tombstone *operation_find_tombstone(uid_t uid, const char *id);
/* Remember why a reattachable operation is gone, in a bounded list. */
void		 operation_bury(struct operation *, const char *class,
		     const char *fmt, ...)
		     __attribute__((format(printf, 3, 4)));

#endif
