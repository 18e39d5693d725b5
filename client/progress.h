/*
 * The progress line the CLI shows on a terminal's standard error: the
 * partitions done, the records and the time so far, drawn by a thread of
 * its own every 100ms, however seldom records come, and erased at the
 * end.  When standard output is the same terminal, the records are
 * written between an erase and a redraw (progress_hold, progress_let_go),
 * so that the line always sits below them, as Spark's console progress
 * bar does.
 */
#ifndef EMBER_PROGRESS_H
#define EMBER_PROGRESS_H

#include <stdint.h>

struct progress;

/* NULL (and every call a no-op) when standard error is not a terminal.
 * partitions is 0 when not known yet.  The line is erased at exit and on
 * SIGINT, SIGTERM and SIGHUP too. */
struct progress	*progress_create(int64_t partitions);
/* A stream's position, from the loop that reads it: two stores, cheap
 * enough for every record. */
void		 progress_stream(struct progress *, int64_t done,
		     int64_t records);
/* Watch operation in emberd's status, on a connection of its own, until
 * progress_free: for actions that answer with one reply. */
void		 progress_watch(struct progress *, const char *socket_path,
		     const char *operation);
/* Around a write to standard output: erase the line and keep it off the
 * terminal, then draw it again below what was written.  No-ops unless
 * standard output is the line's terminal. */
void		 progress_hold(struct progress *);
void		 progress_let_go(struct progress *);
void		 progress_free(struct progress *);

#endif
