/*
 * The save action's output committer, run as the user who saves: Hadoop's
 * file output committer, on directory handles.  A save's tasks write their
 * part files in PATH/_temporary/OPERATION (savecommit_part_*); the commit
 * links them into PATH and creates _SUCCESS last, then removes the
 * operation's directory; an abort removes what the operation made.
 *
 * Every step opens PATH anew and works from there with *at() calls on
 * descriptors: PATH's last component, _temporary, the operation's
 * directory and every file a save makes are never followed when they are
 * symbolic links, files are created with O_EXCL, nothing is removed
 * recursively, and the commit and the abort check that they work on the
 * very directories the beginning made (device and inode).  The steps of
 * the saves to one PATH take turns on a lock of PATH/_temporary (mode
 * 0700, the user's own).  So a user who races their own save can make it
 * fail, never make it touch other files; and as it runs with the user's
 * rights, it cannot touch what the user could not.
 */
#ifndef EMBER_WORKER_SAVECOMMIT_H
#define EMBER_WORKER_SAVECOMMIT_H

#include <stdint.h>

/* What savecommit_begin made, for the commit and the abort to check. */
struct savecommit_ids {
	uint64_t	target_dev;	/* PATH */
	uint64_t	target_ino;
	uint64_t	task_dev;	/* PATH/_temporary/OPERATION */
	uint64_t	task_ino;
};

/*
 * Begin a save to the absolute path PATH: create it (and its missing
 * parents) if it is missing; refuse it if it holds anything but an earlier
 * save's output, or that too unless overwrite, which removes the earlier
 * part files and _SUCCESS; make PATH/_temporary/OPERATION.  0 and *ids, or
 * -1 with *err ("options.path: ..."): nothing is left made.
 */
int	savecommit_begin(const char *path, const char *operation,
	    int overwrite, struct savecommit_ids *ids, char **err);
/*
 * Commit: check that part-00000 ... part-(PARTITIONS-1) are all in the
 * operation's directory, link them into PATH (if another save committed
 * to PATH meanwhile: fail, or with overwrite, remove its output first),
 * create _SUCCESS, remove the operation's directory.  Run again after a
 * run cut short (its helper killed), it finishes that run's work, or
 * answers 0 if that run had made _SUCCESS.  0, or -1 with *err: then none
 * of the parts is left in PATH.
 */
int	savecommit_finish(const char *path, const char *operation,
	    int partitions, int overwrite, const struct savecommit_ids *ids,
	    char **err);
/*
 * Abort: take back from PATH what a commit cut short linked there (its
 * parts, and _SUCCESS first), remove the part files and temporary files of
 * the operation's directory, the directory, and _temporary if it is then
 * empty.  0, or -1 with *err if something could not be removed (or PATH
 * is no longer the directory the save began in: then nothing is).
 */
int	savecommit_abort(const char *path, const char *operation,
	    const struct savecommit_ids *ids, char **err);
/*
 * Undo a savecommit_begin whose answer was lost (its helper killed): no
 * ids to check, so only the operation's directory if it is empty, and
 * _temporary if it is then empty.  Directories it made on the way to PATH
 * stay.  0, or -1 with *err.
 */
int	savecommit_unbegin(const char *path, const char *operation,
	    char **err);

/* A task's part file, written under a temporary name. */
struct savecommit_part;

/*
 * Create the temporary file of partition's part in the directory dir
 * (PATH/_temporary/OPERATION), named after the partition and attempt, a
 * number the task's attempts never share.  NULL with *err.
 */
struct savecommit_part *savecommit_part_create(const char *dir,
		    int partition, uint64_t attempt, char **err);
/* Where to write the part's bytes. */
int		 savecommit_part_fd(const struct savecommit_part *);
/* The temporary file's name, for errors. */
const char	*savecommit_part_name(const struct savecommit_part *);
/* Sync the file, give it its name part-NNNNN, sync the directory.  0, or
 * -1 with *err. */
int		 savecommit_part_commit(struct savecommit_part *, char **err);
/* Close the part; a temporary file not committed is removed. */
void		 savecommit_part_free(struct savecommit_part *);

#endif
