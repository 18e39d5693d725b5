/*
 * The output committer of the save action, as Hadoop's: tasks write their
 * part files under PATH/_temporary/OPERATION/, the job's commit moves them
 * to PATH and writes _SUCCESS last; an abort removes the temporary
 * directory, so a failed job leaves neither _SUCCESS nor partial parts.
 */
#ifndef EMBER_COMMIT_H
#define EMBER_COMMIT_H

#include <sys/types.h>

struct commit;

/* Prepare PATH (created if missing; refused if it holds anything unless
 * overwrite, which removes earlier part files and _SUCCESS).  Directories
 * made for a uid other than emberd's are given to that uid. */
struct commit	*commit_begin(const char *path, int overwrite,
		     const char *operation, uid_t, gid_t, char **err);
/* Where tasks write their part files. */
const char	*commit_task_dir(const struct commit *);
/* Move partitions' part files into place, then write _SUCCESS. */
int		 commit_finish(struct commit *, int partitions, char **err);
/* Remove what the tasks wrote; nothing is committed. */
void		 commit_abort(struct commit *);
void		 commit_free(struct commit *);

#endif
