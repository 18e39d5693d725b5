/*
 * Job logs: what a user's processes (the fork-server, its workers and
 * helpers, their commands and plugins) write on their stdout and stderr,
 * one pipe per fork-server.  emberd reads it off its loop without ever
 * blocking, and logs each line as that user's: "uid N: line", escaped by
 * the log.  Lines are cut at JOBLOG_LINE_MAX bytes and logged at most
 * JOBLOG_RATE a second (JOBLOG_BURST at once); the others are counted and
 * dropped, never queued, and the pipe is always drained, so a user who
 * writes without end costs emberd bounded memory and log, and blocks no
 * process of the user's for long.
 */
#ifndef EMBER_JOBLOG_H
#define EMBER_JOBLOG_H

#include <sys/types.h>

#define JOBLOG_LINE_MAX	1024	/* bytes of a line logged; the rest cut */
#define JOBLOG_RATE	50	/* lines a second, per fork-server */
#define JOBLOG_BURST	500	/* lines at once */

struct joblog;

/* Make the pipe for uid's processes and watch its read end; *wfd is the
 * write end, for the child's fds 1 and 2 (close-on-exec: the caller
 * dup2s it, and closes it once the child has it).  NULL (logged) if the
 * pipe cannot be made. */
struct joblog	*joblog_open(uid_t uid, int *wfd);
/* Log what the pipe holds now, up to 64 KiB, without waiting: 0 when it
 * is empty for now, -1 at its end (every writer gone) or on an error.
 * The loop calls it; so does a caller that waits for the fork-server off
 * the loop, so that its last words do not fill the pipe and hold it up. */
int		 joblog_read(struct joblog *);
/* Log what the pipe still holds (a dying process's last words) and close
 * it: a process that outlived its fork-server writes into nothing. */
void		 joblog_close(struct joblog *);

#endif
