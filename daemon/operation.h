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

struct connection;
struct evbuffer;
struct operation;
struct session;
struct worker;

enum task_state {
	TASK_QUEUED,		/* in the scheduler's run queue */
	TASK_ASSIGNED,		/* sent to a worker, which runs it or will next */
	TASK_DONE,		/* ended cleanly; every record was relayed */
	TASK_FAILED,		/* ended with error */
};

/* One partition's task; the scheduler, the pool and the operation share it. */
struct task {
	struct operation	*op;
	int			 partition;
	int			 reply_mode;	/* its output is for emberd, not
						   the client: pipelined */
	enum task_state		 state;
	struct worker		*worker;	/* TASK_ASSIGNED */
	int64_t			 records;	/* records relayed so far */
	int64_t			 metrics[EMBER_METRIC_COUNT];
	char			*error;		/* TASK_FAILED */
	uint64_t		 queued_ms;
	TAILQ_ENTRY(task)	 op_entry;	/* the operation's, by partition */
	TAILQ_ENTRY(task)	 queue_entry;	/* run queue, or the worker's */
};

/* execute: check the request and the plan, then start the operation. */
void		 operation_execute(struct connection *, struct session *,
		     json_t *request);

/* Stream input from the client (requests): 1 if one was taken. */
int		 operation_stream_input(struct operation *, struct evbuffer *);
/* The client's output drained: relay more. */
void		 operation_stream_writable(struct operation *);
/* The connection went away. */
void		 operation_detach(struct operation *);

/* Interrupt operations, telling their clients why. */
void		 operation_interrupt_all(const char *why);
void		 operation_interrupt_session(struct session *, const char *why);
size_t		 operation_count(void);
json_t		*operation_status(uid_t);

/* What a worker needs to run a task of op. */
uint64_t	 operation_serial(const struct operation *);
const char	*operation_id(const struct operation *);
int		 operation_partitions(const struct operation *);
/* The uid of the client whose session owns op. */
uid_t		 operation_uid(const struct operation *);
gid_t		 operation_gid(const struct operation *);
/* Tasks of op one worker may hold at once (1: no pipelining). */
int		 operation_pipeline_depth(const struct operation *);
/* The plan and its resolved files as JSON text, for task descriptors. */
const char	*operation_plan_text(const struct operation *);
/* The descriptor members that say what t sends back (",\"mode\":..."),
 * written to buf as snprintf does. */
int		 operation_task_fields(const struct task *, char *, size_t);
/* The broadcasts the operation's tasks use. */
struct broadcast *const *operation_broadcasts(const struct operation *,
		     size_t *);

/* Called by the pool as a worker's output for a task arrives. */
int		 task_accepts_batch(struct task *);
/* Relay (or merge) a batch: -1 if the operation expects none. */
int		 task_relay_batch(struct task *, struct evbuffer *, size_t bytes,
		     int32_t records);
void		 task_finished(struct task *);
/* The task failed on worker pid (0: before any worker ran it). */
void		 task_failed(struct task *, pid_t, const char *cause);

#endif
