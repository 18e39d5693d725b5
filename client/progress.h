/*
 * The progress line the CLI shows on a terminal's standard error: the
 * partitions done, the records and the time so far, redrawn at most ten
 * times a second and erased at the end.
 */
#ifndef EMBER_PROGRESS_H
#define EMBER_PROGRESS_H

#include <stdint.h>

struct progress;

/* NULL (and every call a no-op) when standard error is not a terminal or
 * is the terminal standard output writes to.  The line is erased at exit
 * and on SIGINT, SIGTERM and SIGHUP too. */
struct progress	*progress_create(int64_t partitions);
/* A stream's position, from the loop that reads it. */
void		 progress_stream(struct progress *, int64_t done,
		     int64_t records);
/* Watch operation in emberd's status, on a connection of its own, until
 * progress_free: for actions that answer with one reply. */
void		 progress_watch(struct progress *, const char *socket_path,
		     const char *operation);
void		 progress_free(struct progress *);

#endif
