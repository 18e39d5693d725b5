/*
 * The saves emberd has begun and not ended, noted in its local directory
 * (file "saves", one JSON object a line, emberd's own), so that a restart
 * after a crash, or an exit whose undo could not finish, finishes them:
 * each one left is committed again if its commit had started, else
 * undone (commit_recover).  A line is written when a save begins, when
 * its commit starts and when it ends; the file is emptied whenever no save
 * is left.  It is not synced: a crash of the machine may lose a line,
 * and the save's _temporary stays as before.
 */
#ifndef EMBER_SAVELOG_H
#define EMBER_SAVELOG_H

#include <sys/types.h>

#include <jansson.h>

/* Read what the last run left, then note anew; each save left goes to
 * commit_recover.  Logged, never fatal. */
void	savelog_open(void);
/* Close the file at exit; what is noted in it stays for the next run (an
 * empty one is removed). */
void	savelog_close(void);

/* A save began (ids NULL: its beginning's answer was lost). */
void	savelog_begun(uid_t, gid_t, const char *path, const char *operation,
	    int overwrite, json_t *ids);
/* Its commit started, for that many partitions. */
void	savelog_committing(uid_t, const char *operation, int partitions);
/* It ended: committed, or undone. */
void	savelog_ended(uid_t, const char *operation);

#endif
