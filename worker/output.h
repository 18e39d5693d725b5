/*
 * The task output stream to emberd: records packed into RECORD_BATCH
 * frames, and the trailers that end a task (docs/protocol.md section 3).
 */
#ifndef EMBER_WORKER_OUTPUT_H
#define EMBER_WORKER_OUTPUT_H

#include <stddef.h>
#include <stdint.h>

struct output;
struct record;

struct output	*output_create(int fd);
void		 output_free(struct output *);

/* Start a task: forget the counters and any broken state. */
void		 output_reset(struct output *);
/* Name the partition of the task that runs next: a held end names it. */
void		 output_set_partition(struct output *, int partition);

/*
 * Append one record (data is ignored for a null record).  0, or -1 with
 * *err allocated: the record is too large or emberd is gone.
 */
int		 output_record(struct output *, const void *, size_t, int null,
		     char **err);
/*
 * Append the lines of [data, data + len), each ending in '\n' (no part
 * of its record), as records; *lines says how many.  Records buffered
 * before are sent first when the block would take the buffer past a
 * batch; the block itself stays in one batch when it fits (up to twice
 * a batch), so none of its bytes leave before the next call, a flush or
 * the task's end; the rest of a larger one is sent as the buffer fills.
 * 0, or -1 with *err: a line too large or emberd is gone.
 */
int		 output_lines(struct output *, const char *, size_t,
		     size_t *lines, char **err);
/* Forget the records buffered and not yet sent: a task that fails on
 * bytes it cannot vouch for (a file cut while mapped) sends none. */
void		 output_discard(struct output *);
/*
 * Append a pair or a group (worker/keyed.h), one record, in one batch
 * whatever its size.  0, or -1 with *err: too large, or emberd is gone.
 */
int		 output_keyed(struct output *, const struct record *,
		     char **err);
/*
 * Append a counted record (common/record.h): a count_by_value record and
 * its count, which travel in the same batch, as emberd merges each batch
 * on its own.  0, or -1 with *err.
 */
int		 output_counted(struct output *, const void *, size_t,
		     int null, int64_t count, char **err);
/* Send the records buffered so far as one batch, and any held task ends.
 * 0, or -1 with *err. */
int		 output_flush(struct output *, char **err);

/*
 * Called between records as a task runs: send the buffered records when
 * the oldest has waited OUTPUT_LATENCY_MS (a sparse output reaches its
 * client at once, not when the buffer is full), and ask the stop check
 * whether emberd wants the task stopped.  1: stop; 0: go on; -1 with
 * *err: emberd is gone.
 */
int		 output_tick(struct output *, char **err);
/* The stop check output_tick asks: 1 when emberd sent STOP_TASK. */
void		 output_set_stop_check(struct output *, int (*)(void *),
		     void *);

/*
 * While guard is set (NULL: unset), a record is copied into the buffer,
 * however large, rather than written from the caller's memory, and every
 * write first asks guard, which answers 1 when bytes read before may not
 * be what they were meant to be (a mapped file cut under the reads):
 * then nothing is sent and the write fails.
 */
void		 output_set_guard(struct output *, int (*guard)(void));

/* Bytes of batch payload since output_reset, sent or buffered. */
int64_t		 output_bytes(const struct output *);
/* Whether a write to emberd has failed: nothing more can be sent. */
int		 output_broken(const struct output *);

/*
 * End a clean task: the last batch, END_OF_DATA_SECTION, TIMING_DATA with
 * the metrics and END_OF_STREAM, in one write.  With hold, a task that sent
 * no records may have its end held back, to go out with the next write (a
 * quick task behind it, or output_flush) as an entry of one TASKS_DONE:
 * the caller must flush before it blocks or starts anything slow.  0, or
 * -1 with *err.
 */
int		 output_finish(struct output *, const int64_t *metrics,
		     int nmetrics, int hold, char **err);
/* End a failed task: the last batch, EXCEPTION_THROWN and the message.
 * 0, or -1 if emberd is gone. */
int		 output_fail(struct output *, const char *message);

#endif
