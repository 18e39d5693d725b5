/*
 * The save action's commit, from emberd's side.  emberd touches none of a
 * save's files: each step of the output committer (worker/savecommit.c)
 * runs in a helper (daemon/helper.c) as the job's user, and the operation
 * waits for its answer before it goes on.  save_begin checks or creates
 * PATH and makes PATH/_temporary/OPERATION before any task runs;
 * save_commit moves the parts into PATH and writes _SUCCESS when every
 * task succeeded; save_abort removes what the save made when it failed.
 * A save abandoned while a step runs is aborted once that step answers,
 * with nobody waiting.  A step whose helper dies is done in part: a
 * save_commit is run again (a few times, then the save is aborted), a
 * save_abort until it is done, and a save_begin is undone by name before
 * the caller hears HELPER_FAILED.
 */
#ifndef EMBER_COMMIT_H
#define EMBER_COMMIT_H

#include <sys/types.h>

#include <stddef.h>

#include <jansson.h>

struct commit;

/* A step's answer: class NULL if it succeeded, else an error class and a
 * message ("options.path: ..." for the user's files). */
typedef void	(*commit_cb)(const char *class, const char *error, void *arg);

/* A save to the absolute path, for the client uid:gid.  Nothing is asked
 * yet. */
struct commit	*commit_create(const char *path, int overwrite,
		     const char *operation, uid_t, gid_t);
/* Where tasks write their part files: a name, nothing is looked at. */
const char	*commit_task_dir(const struct commit *);

/*
 * Ask for a step; cb gets its answer (never from within the call).  -1
 * with *class and *err (allocated) if it cannot be asked now (a helper
 * limit, no fork-server).  commit_abort of a save not begun answers at
 * once that there is nothing to undo (1); else it is never refused (0):
 * an undo that cannot be asked is tried again, and cb hears of it after
 * a few tries while it goes on.
 */
int		 commit_begin(struct commit *, commit_cb, void *,
		     const char **class, char **err);
int		 commit_finish(struct commit *, int partitions, commit_cb,
		     void *, const char **class, char **err);
int		 commit_abort(struct commit *, commit_cb, void *,
		     const char **class, char **err);

/* Forget a commit: no callback comes any more.  A save begun (or still
 * beginning) and not committed is aborted, nobody waiting. */
void		 commit_free(struct commit *);
/* A save a past run of emberd left (savelog.c): with partitions (not -1)
 * its commit had started and is run again; else, or if that fails, it is
 * undone (by name if ids is NULL).  Nobody waits for it. */
void		 commit_recover(const char *path, const char *operation,
		     int overwrite, uid_t, gid_t, json_t *ids, int partitions);
/* Saves being undone with nobody waiting (emberd's drain waits for them,
 * up to its grace period). */
size_t		 commit_pending(void);
/* Cancel every step still running, at exit. */
void		 commit_free_all(void);

#endif
