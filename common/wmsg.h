/*
 * Worker messages: a worker's task output to emberd (docs/protocol.md,
 * "Task output").  Each message is an int32 type (a special length of
 * protocol.h) and the fixed fields of that type; a record batch, the
 * metrics and an error message are followed by a payload whose size the
 * fields give.  ember-worker encodes them and emberd decodes them with the
 * functions here, so the sizes live in one place.
 */
#ifndef EMBER_WMSG_H
#define EMBER_WMSG_H

#include <stddef.h>
#include <stdint.h>

#include "protocol.h"

#define WMSG_TYPE_SIZE		4	/* every message starts so */
#define WMSG_BATCH_SIZE		12	/* RECORD_BATCH, records, bytes */
#define WMSG_TIMING_SIZE	8	/* TIMING_DATA, metrics that follow */
#define WMSG_ERROR_SIZE		8	/* EXCEPTION_THROWN, message length */
#define WMSG_DONE_SIZE		12	/* TASKS_DONE, tasks, metrics each */
#define WMSG_MAX_SIZE		12	/* the largest of the above */
#define WMSG_METRIC_SIZE	8	/* an int64 of TIMING_DATA */
#define WMSG_MAX_METRICS	64	/* more is a corrupt message */

/* One message's fixed fields. */
struct wmsg {
	int32_t	type;		/* EMBER_RECORD_BATCH, EMBER_END_OF_STREAM... */
	int32_t	records;	/* RECORD_BATCH: records in the payload;
				   TASKS_DONE: tasks */
	int32_t	length;		/* RECORD_BATCH: payload bytes; TIMING_DATA
				   and TASKS_DONE: metrics (each task's);
				   EXCEPTION_THROWN: message bytes */
};

/* The size of a message of type, without its payload; 0 if unknown. */
size_t		 wmsg_size(int32_t type);
/* The payload bytes that follow a decoded message. */
size_t		 wmsg_payload(const struct wmsg *);
/* The name of a type, for logs ("RECORD_BATCH"; "unknown" if none). */
const char	*wmsg_type_name(int32_t type);

/* Encode m at p (wmsg_size(m->type) bytes); returns the bytes written. */
size_t		 wmsg_put(unsigned char *, const struct wmsg *);
/* Decode exactly one message of len bytes: 0, or -1 with *err (a static
 * string: "message too short", "not at end", "unknown message", or the
 * field that is out of range). */
int		 wmsg_get(const unsigned char *, size_t len, struct wmsg *,
		     const char **err);

/* Encode n metrics; returns the bytes written (n * WMSG_METRIC_SIZE). */
size_t		 wmsg_put_metrics(unsigned char *, const int64_t *, int n);
/* Decode the len bytes of a TIMING_DATA payload of n metrics into
 * metrics[0..max): those past max are skipped, those missing stay as they
 * were.  0, or -1 with *err. */
int		 wmsg_get_metrics(const unsigned char *, size_t len, int32_t n,
		     int64_t *metrics, int max, const char **err);
/* The bytes of one task's entry in the TASKS_DONE m: its int32 partition,
 * then its metrics. */
size_t		 wmsg_done_entry(const struct wmsg *m);

/*
 * A record batch's payload checked once, where it enters emberd, before
 * anything walks it: exactly the records the header gives, each an int32
 * length of zero or more (or EMBER_NULL) and that many bytes, or a keyed
 * record (EMBER_PAIR: a key frame, never null, and a value frame;
 * EMBER_GROUP: a key frame, an int32 count of zero or more and that many
 * value frames), filling the payload to its last byte.  The payload is fed
 * in pieces, as it lies in a buffer's chains; a frame header may be split
 * between two.
 */
struct wmsg_batch {
	int32_t		frames;		/* records still to come */
	size_t		left;		/* payload bytes not fed yet */
	size_t		body;		/* bytes of the current record to pass */
	unsigned char	hdr[4];		/* a record's length split between */
	int		have;		/* pieces, and how much of it is here */
	int		keyed;		/* inside a pair or group: what is next */
	int32_t		owed;		/* a group's values still to come */
};

/* Begin checking the payload of the RECORD_BATCH m. */
void		 wmsg_batch_begin(struct wmsg_batch *, const struct wmsg *m);
/* Check the next len bytes of the payload: 0, or -1 with *err (static). */
int		 wmsg_batch_feed(struct wmsg_batch *, const unsigned char *,
		     size_t len, const char **err);
/* After the last piece: 0 if the batch was whole and exact, or -1. */
int		 wmsg_batch_end(const struct wmsg_batch *, const char **err);

#endif
