/*
 * The wire contract of every ember socket.  Bump EMBER_PROTOCOL_VERSION
 * whenever a client's message changes shape, EMBER_WORKER_PROTOCOL_VERSION
 * whenever one between emberd and ember-worker does; docs/protocol.md
 * describes each message in prose and must change with this file.
 *
 * Every integer on the wire is big-endian.  A frame is an int32 length
 * followed by that many bytes; a negative length is one of the special
 * values below and carries no bytes of its own.
 */
#ifndef EMBER_PROTOCOL_H
#define EMBER_PROTOCOL_H

#include <stdint.h>

/* The client protocol: emberd's socket, the result stream (section 1 of
 * docs/protocol.md).  Clients depend on it: it changes only with them. */
#define EMBER_PROTOCOL_VERSION 1

/*
 * The worker protocol: every link between emberd and ember-worker, which
 * are emberd's private business: the fs_msg packets, the task descriptor
 * (common/taskdesc.c), the worker's messages (common/wmsg.c) and the
 * helper's (common/hmsg.c).  The fork-server says it in FS_HELLO, and
 * emberd refuses one that speaks another: an ember-worker installed while
 * an older emberd runs, or daemon.worker_path naming another build.  Bump
 * it when any of these changes, however slightly.  (1 was the client's
 * number, which ember-workers of before this one sent: they are refused.)
 */
#define EMBER_WORKER_PROTOCOL_VERSION 2

/* Special lengths, the same numbers as PySpark's SpecialLengths. */
#define EMBER_END_OF_DATA_SECTION	(-1)
#define EMBER_EXCEPTION_THROWN		(-2)
#define EMBER_TIMING_DATA		(-3)
#define EMBER_END_OF_STREAM		(-4)
#define EMBER_NULL			(-5)
/* Worker -> emberd only: int32 records, int32 bytes, then that many bytes
 * of record frames, relayed to the client without being re-framed. */
#define EMBER_RECORD_BATCH		(-6)
/* Worker -> emberd only: int32 tasks, int32 metrics, then for each task
 * in the order they ran, its int32 partition and that many int64
 * metrics: the clean ends of several tasks in one message. */
#define EMBER_TASKS_DONE		(-9)
/* emberd -> worker only, a frame length with no payload: stop the task
 * that runs when it is read (ignored between tasks). */
#define EMBER_STOP_TASK			(-7)
/* In a record batch and the result stream, where a record's frame would
 * start: a pair (key frame, value frame; the key never null) or a group
 * (key frame, int32 n, n value frames).  Each is one record.  A plan
 * without keyed ops never gives them. */
#define EMBER_PAIR			(-7)
#define EMBER_GROUP			(-8)

/* Result stream responses, emberd -> client (section 2.2). */
#define EMBER_STREAM_DONE		0
#define EMBER_STREAM_PARTITION		1
#define EMBER_STREAM_DETACHED		2
#define EMBER_STREAM_ERROR		(-1)

/* Result stream requests, client -> emberd. */
#define EMBER_REQUEST_STOP		0
#define EMBER_REQUEST_NEXT		1

/* Limits. */
#define EMBER_MAX_BATCH			(64 * 1024 * 1024)
#define EMBER_MAX_TASK_FRAME		(64 * 1024 * 1024)
#define EMBER_MAX_ERROR_FRAME		(64 * 1024)
/* The most tasks one descriptor (its "batch") or one TASKS_DONE holds. */
#define EMBER_MAX_TASK_BATCH		256

/* A worker's exit status when an allocation failed under its
 * address-space limit (twice workers.max_memory): emberd reports the
 * limit, not a crash. */
#define EMBER_EXIT_NOMEM		3

/*
 * Task metrics after EMBER_TIMING_DATA: int32 count, then count int64s in
 * this order.  New metrics are appended; readers ignore the ones they do
 * not know and treat missing ones as zero.
 */
enum ember_metric {
	EMBER_METRIC_RECORDS_IN,
	EMBER_METRIC_RECORDS_OUT,
	EMBER_METRIC_BYTES_OUT,
	EMBER_METRIC_ELAPSED_NS,
	EMBER_METRIC_DROPPED,
	EMBER_METRIC_COUNT
};

/*
 * emberd <-> fork-server control channel: a SOCK_SEQPACKET socketpair, one
 * message per packet, four int32 fields.  FS_FORKED carries the emberd end of
 * the new worker's socketpair as SCM_RIGHTS.
 */
enum fs_msg_type {
	FS_HELLO = 1,	/* fs -> emberd: id = EMBER_WORKER_PROTOCOL_VERSION,
			 * pid = own pid; first, and only once */
	FS_FORK = 2,	/* emberd -> fs: id = request id, value = ms to
			 * keep the next worker forked ahead (0: none) */
	FS_FORKED = 3,	/* fs -> emberd: id = request id, pid = worker pid,
			 * value = its generation (FS_PYLOAD and FS_PYDROP
			 * handled before the fork), + fd */
	FS_FORK_FAILED = 4, /* fs -> emberd: id = request id, value = errno */
	FS_KILL = 5,	/* emberd -> fs: pid, value = signal */
	FS_EXIT = 6,	/* fs -> emberd: pid, value = wait status (workers
			 * and helpers) */
	FS_HELPER = 7,	/* emberd -> fs: id = request id */
	FS_HELPER_FORKED = 8, /* fs -> emberd: id, pid = helper pid, + fd */
	FS_HELPER_FAILED = 9, /* fs -> emberd: id, value = errno */
	FS_PYLOAD = 10,	/* emberd -> fs: id = broadcast id, + its sealed
			 * memfd: unpickle it for the workers forked after */
	FS_PYDROP = 11,	/* emberd -> fs: id = broadcast id: let it go */
};

struct fs_msg {
	int32_t	type;
	int32_t	id;
	int32_t	pid;
	int32_t	value;
};
#define FS_MSG_SIZE 16

/*
 * emberd <-> helper: a SOCK_STREAM socketpair.  emberd writes one request
 * frame, {"verb": V, "args": {...}}, with the descriptors it passes riding
 * on the frame's first bytes; the helper answers one reply frame,
 * {"ok": true, "reply": {...}} or {"ok": false, "error": E}, its
 * descriptors likewise, and exits.
 */
#define HELPER_MAX_REQUEST		(64 * 1024 * 1024)
#define HELPER_MAX_REPLY		(64 * 1024 * 1024)
#define HELPER_MAX_FDS			4

#endif
