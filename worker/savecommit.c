#include <sys/file.h>
#include <sys/stat.h>

#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "log.h"
#include "savecommit.h"
#include "xmalloc.h"

#define SAVECOMMIT_TEMPORARY	"_temporary"
#define SAVECOMMIT_SUCCESS	"_SUCCESS"
/* Directories a save creates on its way to PATH, at most. */
#define SAVECOMMIT_MAX_MADE	64
/* Tries to open a _temporary that other saves remove meanwhile. */
#define SAVECOMMIT_TRIES	16

/* Directories begin made, deepest last: removed if begin fails. */
struct savecommit_made {
	int	 parent[SAVECOMMIT_MAX_MADE];
	char	*name[SAVECOMMIT_MAX_MADE];
	int	 n;
};

struct savecommit_part {
	int	 dirfd;
	int	 fd;
	char	*dir;		/* for errors */
	char	 tmp[64];
	char	 name[32];
	int	 committed;
};

/* Flags of a directory opened to work in. */
#define SAVECOMMIT_DIR	(O_RDONLY | O_DIRECTORY | O_CLOEXEC | O_NOCTTY)

/* Close fd if open. */
static void
savecommit_close(int *fd)
{
	if (*fd != -1)
		close(*fd);
	*fd = -1;
}

/* Is name digits only, and not empty? */
static int
savecommit_digits(const char *s, size_t len)
{
	size_t	i;

	if (len == 0)
		return (0);
	for (i = 0; i < len; i++) {
		if (s[i] < '0' || s[i] > '9')
			return (0);
	}
	return (1);
}

/* Is name a committed part file's: part-*? */
static int
savecommit_is_part(const char *name)
{
	return (strncmp(name, "part-", 5) == 0);
}

/* Is name one a task writes in the operation's directory: part-N, or
 * .part-N.ATTEMPT.tmp (or an older .part-N.tmp)? */
static int
savecommit_is_task_file(const char *name)
{
	const char	*p, *dot;
	size_t		 len = strlen(name);

	if (strncmp(name, "part-", 5) == 0)
		return (savecommit_digits(name + 5, len - 5));
	if (strncmp(name, ".part-", 6) != 0 || len < 11 ||
	    strcmp(name + len - 4, ".tmp") != 0)
		return (0);
	p = name + 6;
	if ((dot = memchr(p, '.', (size_t)(name + len - 4 - p))) == NULL)
		return (savecommit_digits(p, (size_t)(name + len - 4 - p)));
	return (savecommit_digits(p, (size_t)(dot - p)) &&
	    savecommit_digits(dot + 1, (size_t)(name + len - 5 - dot)));
}

/* Is an operation id a plain file name? */
static int
savecommit_valid_name(const char *name)
{
	return (*name != '\0' && strchr(name, '/') == NULL &&
	    strcmp(name, ".") != 0 && strcmp(name, "..") != 0 &&
	    strlen(name) < 256);
}

/* Open the directory name in at, not following a symbolic link there;
 * errno ELOOP for a link. */
static int
savecommit_open_dir(int at, const char *name)
{
	int	fd;

	fd = openat(at, name, SAVECOMMIT_DIR | O_NOFOLLOW);
	if (fd == -1 && errno == ENOTDIR) {
		struct stat	sb;

		if (fstatat(at, name, &sb, AT_SYMLINK_NOFOLLOW) == 0 &&
		    S_ISLNK(sb.st_mode))
			errno = ELOOP;
		else
			errno = ENOTDIR;
	}
	return (fd);
}

/* Say why a directory could not be opened or made, for errors. */
static const char *
savecommit_why(int error)
{
	if (error == ELOOP)
		return ("is a symbolic link");
	return (strerror(error));
}

/* Remove the directories begin made, deepest first; they are empty unless
 * someone raced it, and then they stay. */
static void
savecommit_unmake(struct savecommit_made *m)
{
	while (m->n > 0) {
		m->n--;
		unlinkat(m->parent[m->n], m->name[m->n], AT_REMOVEDIR);
		close(m->parent[m->n]);
		free(m->name[m->n]);
	}
}

/* Forget what begin made: it stays. */
static void
savecommit_keep(struct savecommit_made *m)
{
	while (m->n > 0) {
		m->n--;
		close(m->parent[m->n]);
		free(m->name[m->n]);
	}
}

/* Open, or with made make, one component of the target's path in at. */
static int
savecommit_step(int at, const char *name, int last, struct savecommit_made *m)
{
	int	fd, made = 0;

	fd = openat(at, name, SAVECOMMIT_DIR | (last ? O_NOFOLLOW : 0));
	if (fd == -1 && errno == ENOENT && m != NULL) {
		if (m->n == SAVECOMMIT_MAX_MADE) {
			errno = ENAMETOOLONG;
			return (-1);
		}
		if (mkdirat(at, name, 0777) == 0)
			made = 1;
		else if (errno != EEXIST)
			return (-1);
		fd = savecommit_open_dir(at, name);
		if (fd != -1 && made) {
			if ((m->parent[m->n] = dup(at)) == -1) {
				close(fd);
				return (-1);
			}
			m->name[m->n++] = xstrdup(name);
		}
	} else if (fd == -1 && last && errno == ENOTDIR)
		return (savecommit_open_dir(at, name));
	return (fd);
}

/*
 * Open the target directory PATH as the user would, following links on
 * the way but not a link at its end; with made, create what is missing.
 * The descriptor, or -1 with *err.
 */
static int
savecommit_open_target(const char *path, struct savecommit_made *m,
    char **err)
{
	char	*copy, *p, *name, *next;
	int	 fd, nfd, saved;

	if (path[0] != '/') {
		xasprintf(err, "options.path: \"%s\" is not an absolute path",
		    path);
		return (-1);
	}
	if ((fd = open("/", SAVECOMMIT_DIR)) == -1) {
		xasprintf(err, "options.path: /: %s", strerror(errno));
		return (-1);
	}
	copy = xstrdup(path);
	p = copy;
	while ((name = strsep(&p, "/")) != NULL) {
		if (*name == '\0')
			continue;
		while (p != NULL && *p == '/')
			p++;
		next = p != NULL && *p != '\0' ? p : NULL;
		nfd = savecommit_step(fd, name, next == NULL, m);
		if (nfd == -1) {
			saved = errno;
			xasprintf(err, "options.path: %s: %s", path,
			    savecommit_why(saved));
			close(fd);
			free(copy);
			errno = saved;
			return (-1);
		}
		close(fd);
		fd = nfd;
	}
	free(copy);
	return (fd);
}

/* Does the directory fd hold the device and inode given? */
static int
savecommit_same(int fd, uint64_t dev, uint64_t ino)
{
	struct stat	sb;

	return (fstat(fd, &sb) == 0 && (uint64_t)sb.st_dev == dev &&
	    (uint64_t)sb.st_ino == ino);
}

/* Remember the device and inode of fd. */
static void
savecommit_id(int fd, uint64_t *dev, uint64_t *ino)
{
	struct stat	sb;

	if (fstat(fd, &sb) == -1)
		fatal("fstat");
	*dev = (uint64_t)sb.st_dev;
	*ino = (uint64_t)sb.st_ino;
}

/*
 * Open PATH/_temporary, making it (mode 0700) with create, and take its
 * lock.  It must be the user's own.  A _temporary another save removed
 * between the open and the lock is opened again.  The descriptor, or -1
 * with errno (ENOENT: there is none).
 */
static int
savecommit_open_temporary(int target, int create)
{
	struct stat	sb;
	int		fd, tries;

	for (tries = 0; tries < SAVECOMMIT_TRIES; tries++) {
		if (create && mkdirat(target, SAVECOMMIT_TEMPORARY, 0700) ==
		    -1 && errno != EEXIST)
			return (-1);
		fd = savecommit_open_dir(target, SAVECOMMIT_TEMPORARY);
		if (fd == -1) {
			if (errno == ENOENT && create)
				continue;
			return (-1);
		}
		if (fstat(fd, &sb) == -1 || sb.st_uid != geteuid()) {
			close(fd);
			errno = EPERM;
			return (-1);
		}
		while (flock(fd, LOCK_EX) == -1) {
			if (errno != EINTR) {
				close(fd);
				return (-1);
			}
		}
		if (fstat(fd, &sb) == -1 || sb.st_nlink == 0) {
			close(fd);	/* removed meanwhile */
			continue;
		}
		if ((sb.st_mode & 077) != 0)
			fchmod(fd, 0700);
		return (fd);
	}
	errno = EAGAIN;
	return (-1);
}

/* Format an error about PATH/_temporary from errno. */
static void
savecommit_temporary_error(const char *path, char **err)
{
	if (errno == EPERM)
		xasprintf(err, "options.path: %s/%s belongs to another user",
		    path, SAVECOMMIT_TEMPORARY);
	else
		xasprintf(err, "options.path: %s/%s: %s", path,
		    SAVECOMMIT_TEMPORARY, savecommit_why(errno));
}

/* What a target directory holds. */
struct savecommit_scan {
	int	foreign;	/* files a save does not write */
	int	output;		/* part-* and _SUCCESS */
	int	temporary;	/* _temporary */
};

/* Look at what the directory fd holds.  0, or -1 with errno. */
static int
savecommit_scan(int fd, struct savecommit_scan *s)
{
	DIR		*d;
	struct dirent	*e;
	int		 dfd;

	memset(s, 0, sizeof *s);
	if ((dfd = dup(fd)) == -1)
		return (-1);
	if ((d = fdopendir(dfd)) == NULL) {
		close(dfd);
		return (-1);
	}
	rewinddir(d);	/* dfd shares its offset with fd */
	while ((e = readdir(d)) != NULL) {
		if (strcmp(e->d_name, ".") == 0 || strcmp(e->d_name, "..") == 0)
			continue;
		if (strcmp(e->d_name, SAVECOMMIT_TEMPORARY) == 0)
			s->temporary++;
		else if (strcmp(e->d_name, SAVECOMMIT_SUCCESS) == 0 ||
		    savecommit_is_part(e->d_name))
			s->output++;
		else
			s->foreign++;
	}
	closedir(d);
	return (0);
}

/*
 * Remove an earlier save's output from the target: _SUCCESS first, so
 * that no reader takes what is left for whole, then the part files (never
 * a directory, never through a link: unlinkat removes the link).  0, or -1
 * with *err.
 */
static int
savecommit_remove_output(int target, const char *path, char **err)
{
	DIR		*d;
	struct dirent	*e;
	int		 dfd, rc = 0;

	if (unlinkat(target, SAVECOMMIT_SUCCESS, 0) == -1 && errno != ENOENT) {
		xasprintf(err, "options.path: %s/%s: %s", path,
		    SAVECOMMIT_SUCCESS, strerror(errno));
		return (-1);
	}
	if ((dfd = dup(target)) == -1 || (d = fdopendir(dfd)) == NULL) {
		xasprintf(err, "options.path: %s: %s", path, strerror(errno));
		if (dfd != -1)
			close(dfd);
		return (-1);
	}
	rewinddir(d);
	while (rc == 0 && (e = readdir(d)) != NULL) {
		if (!savecommit_is_part(e->d_name))
			continue;
		if (unlinkat(target, e->d_name, 0) == -1 && errno != ENOENT) {
			xasprintf(err, "options.path: %s/%s: %s", path,
			    e->d_name, strerror(errno));
			rc = -1;
		}
	}
	closedir(d);
	if (rc == 0)
		fsync(target);
	return (rc);
}

/* Refuse a target that holds what a save may not replace.  0, or -1 with
 * *err. */
static int
savecommit_check_target(int target, const char *path, int overwrite,
    int temporary_too, char **err)
{
	struct savecommit_scan	s;

	if (savecommit_scan(target, &s) == -1) {
		xasprintf(err, "options.path: %s: %s", path, strerror(errno));
		return (-1);
	}
	if (s.foreign > 0) {
		xasprintf(err, "options.path: %s is not empty (it holds files "
		    "a save did not write)", path);
		return (-1);
	}
	if (!overwrite && (s.output > 0 || (temporary_too && s.temporary))) {
		xasprintf(err, "options.path: %s is not empty (set "
		    "options.overwrite to replace it)", path);
		return (-1);
	}
	return (0);
}

/* Make the operation's directory in _temporary and remember it.  0, or -1
 * with *err. */
static int
savecommit_make_task_dir(int temporary, const char *path,
    const char *operation, struct savecommit_ids *ids, char **err)
{
	int	fd;

	if (mkdirat(temporary, operation, 0700) == -1) {
		xasprintf(err, "options.path: %s/%s/%s: %s", path,
		    SAVECOMMIT_TEMPORARY, operation, strerror(errno));
		return (-1);
	}
	if ((fd = savecommit_open_dir(temporary, operation)) == -1) {
		xasprintf(err, "options.path: %s/%s/%s: %s", path,
		    SAVECOMMIT_TEMPORARY, operation, savecommit_why(errno));
		unlinkat(temporary, operation, AT_REMOVEDIR);
		return (-1);
	}
	savecommit_id(fd, &ids->task_dev, &ids->task_ino);
	close(fd);
	fsync(temporary);
	return (0);
}

/* Begin a save to path. */
int
savecommit_begin(const char *path, const char *operation, int overwrite,
    struct savecommit_ids *ids, char **err)
{
	struct savecommit_made	 made;
	struct stat		 sb;
	int			 target = -1, temporary = -1, rc = -1;
	int			 had_temporary = 1;

	*err = NULL;
	memset(ids, 0, sizeof *ids);
	made.n = 0;
	if (!savecommit_valid_name(operation)) {
		xasprintf(err, "operation: \"%s\" cannot name a directory",
		    operation);
		return (-1);
	}
	if ((target = savecommit_open_target(path, &made, err)) == -1)
		goto out;
	/* A first look, before anything is made in PATH. */
	if (savecommit_check_target(target, path, overwrite, 1, err) == -1)
		goto out;
	if (fstatat(target, SAVECOMMIT_TEMPORARY, &sb,
	    AT_SYMLINK_NOFOLLOW) == -1)
		had_temporary = 0;
	if ((temporary = savecommit_open_temporary(target, 1)) == -1) {
		savecommit_temporary_error(path, err);
		goto out;
	}
	/* Again under the lock: another save may have committed. */
	if (savecommit_check_target(target, path, overwrite, 0, err) == -1)
		goto out;
	if (overwrite && savecommit_remove_output(target, path, err) == -1)
		goto out;
	if (savecommit_make_task_dir(temporary, path, operation, ids,
	    err) == -1)
		goto out;
	savecommit_id(target, &ids->target_dev, &ids->target_ino);
	fsync(target);
	rc = 0;
out:
	if (rc == -1 && temporary != -1 && !had_temporary)
		unlinkat(target, SAVECOMMIT_TEMPORARY, AT_REMOVEDIR);
	savecommit_close(&temporary);
	savecommit_close(&target);
	if (rc == 0)
		savecommit_keep(&made);
	else
		savecommit_unmake(&made);
	return (rc);
}

/*
 * Open what a save began, checking it is what it made: PATH into *target,
 * its _temporary (locked) into *temporary, the operation's directory into
 * *task.  0; or -1 with *err (the descriptors opened so far stay open, for
 * the caller to close); or -1 with no *err if one of them is gone.
 */
static int
savecommit_reopen(const char *path, const char *operation,
    const struct savecommit_ids *ids, int *target, int *temporary,
    int *task, char **err)
{
	*target = *temporary = *task = -1;
	if (!savecommit_valid_name(operation)) {
		xasprintf(err, "operation: \"%s\" cannot name a directory",
		    operation);
		return (-1);
	}
	if ((*target = savecommit_open_target(path, NULL, err)) == -1) {
		if (errno == ENOENT) {
			free(*err);
			*err = NULL;
			errno = ENOENT;
		}
		return (-1);
	}
	if (!savecommit_same(*target, ids->target_dev, ids->target_ino)) {
		xasprintf(err, "options.path: %s is no longer the directory "
		    "the save began in", path);
		return (-1);
	}
	if ((*temporary = savecommit_open_temporary(*target, 0)) == -1) {
		if (errno == ENOENT)
			return (-1);
		savecommit_temporary_error(path, err);
		return (-1);
	}
	if ((*task = savecommit_open_dir(*temporary, operation)) == -1) {
		if (errno == ENOENT)
			return (-1);
		xasprintf(err, "options.path: %s/%s/%s: %s", path,
		    SAVECOMMIT_TEMPORARY, operation, savecommit_why(errno));
		return (-1);
	}
	if (!savecommit_same(*task, ids->task_dev, ids->task_ino)) {
		xasprintf(err, "options.path: %s/%s/%s is no longer the "
		    "directory the save made", path, SAVECOMMIT_TEMPORARY,
		    operation);
		return (-1);
	}
	return (0);
}

/*
 * Remove the operation's directory: the files its tasks wrote (never a
 * directory, never through a link), then itself.  0, or -1 with *err
 * naming what stays.
 */
static int
savecommit_remove_task_dir(int temporary, int task, const char *path,
    const char *operation, char **err)
{
	DIR		*d;
	struct dirent	*e;
	int		 dfd;

	if ((dfd = dup(task)) == -1 || (d = fdopendir(dfd)) == NULL) {
		if (dfd != -1)
			close(dfd);
		xasprintf(err, "%s/%s/%s: %s", path, SAVECOMMIT_TEMPORARY,
		    operation, strerror(errno));
		return (-1);
	}
	rewinddir(d);
	while ((e = readdir(d)) != NULL) {
		if (savecommit_is_task_file(e->d_name))
			unlinkat(task, e->d_name, 0);
	}
	closedir(d);
	if (unlinkat(temporary, operation, AT_REMOVEDIR) == -1 &&
	    errno != ENOENT) {
		xasprintf(err, "%s/%s/%s: %s", path, SAVECOMMIT_TEMPORARY,
		    operation, strerror(errno));
		return (-1);
	}
	return (0);
}

/* Remove _temporary if no other save uses it. */
static void
savecommit_remove_temporary(int target)
{
	unlinkat(target, SAVECOMMIT_TEMPORARY, AT_REMOVEDIR);
}

/* Check that every part is in the operation's directory, a file of its
 * own, and on disk.  0, or -1 with *err. */
static int
savecommit_check_parts(int task, const char *path, const char *operation,
    int partitions, char **err)
{
	char	name[32];
	int	i, fd;

	for (i = 0; i < partitions; i++) {
		snprintf(name, sizeof name, "part-%05d", i);
		fd = openat(task, name, O_RDONLY | O_NOFOLLOW | O_NONBLOCK |
		    O_CLOEXEC | O_NOCTTY);
		if (fd == -1 || fsync(fd) == -1) {
			xasprintf(err, "commit: %s/%s/%s/%s: %s", path,
			    SAVECOMMIT_TEMPORARY, operation, name,
			    savecommit_why(errno));
			if (fd != -1)
				close(fd);
			return (-1);
		}
		close(fd);
	}
	return (0);
}

/* Is name in the target the very file of that name in the operation's
 * directory (a link the commit made)? */
static int
savecommit_ours(int task, int target, const char *name)
{
	struct stat	a, b;

	return (fstatat(task, name, &a, AT_SYMLINK_NOFOLLOW) == 0 &&
	    fstatat(target, name, &b, AT_SYMLINK_NOFOLLOW) == 0 &&
	    S_ISREG(a.st_mode) && a.st_dev == b.st_dev &&
	    a.st_ino == b.st_ino);
}

/* Is name in at a regular file (not a link to one)? */
static int
savecommit_is_file(int at, const char *name)
{
	struct stat	sb;

	return (fstatat(at, name, &sb, AT_SYMLINK_NOFOLLOW) == 0 &&
	    S_ISREG(sb.st_mode));
}

/*
 * Did an earlier run of this commit get as far as _SUCCESS?  Then every
 * part is in the target, and each one still in the operation's directory
 * (its removal had not reached it) is the same file.
 */
static int
savecommit_committed(int task, int target, int partitions)
{
	char	name[32];
	int	i;

	if (!savecommit_is_file(target, SAVECOMMIT_SUCCESS))
		return (0);
	for (i = 0; i < partitions; i++) {
		snprintf(name, sizeof name, "part-%05d", i);
		if (!savecommit_is_file(target, name))
			return (0);
		if (faccessat(task, name, F_OK, AT_SYMLINK_NOFOLLOW) == 0 &&
		    !savecommit_ours(task, target, name))
			return (0);
	}
	return (1);
}

/* Count the target's output files that this save did not put there:
 * another save's part files and _SUCCESS.  0, or -1 with errno. */
static int
savecommit_foreign_output(int task, int target, int *n)
{
	DIR		*d;
	struct dirent	*e;
	int		 dfd;

	*n = 0;
	if ((dfd = dup(target)) == -1)
		return (-1);
	if ((d = fdopendir(dfd)) == NULL) {
		close(dfd);
		return (-1);
	}
	rewinddir(d);
	while ((e = readdir(d)) != NULL) {
		if (strcmp(e->d_name, SAVECOMMIT_SUCCESS) == 0 ||
		    (savecommit_is_part(e->d_name) &&
		    !savecommit_ours(task, target, e->d_name)))
			(*n)++;
	}
	closedir(d);
	return (0);
}

/*
 * Link the parts into the target, each under its name, keeping them in
 * the operation's directory until _SUCCESS exists: so a run of the commit
 * cut short leaves what the next run (or the abort) can tell for its own.
 * A part an earlier run linked is taken as it is.  If one cannot be
 * linked, those linked are removed again.  0, or -1 with *err.
 */
static int
savecommit_link_parts(int task, int target, const char *path,
    int partitions, char **err)
{
	char	name[32];
	int	i;

	for (i = 0; i < partitions; i++) {
		snprintf(name, sizeof name, "part-%05d", i);
		if (linkat(task, name, target, name, 0) == 0 ||
		    (errno == EEXIST && savecommit_ours(task, target, name)))
			continue;
		xasprintf(err, "commit: %s/%s: %s", path, name,
		    strerror(errno));
		while (i-- > 0) {
			snprintf(name, sizeof name, "part-%05d", i);
			if (savecommit_ours(task, target, name))
				unlinkat(target, name, 0);
		}
		return (-1);
	}
	return (0);
}

/*
 * Take back what a commit cut short put in the target: the part files
 * that are the operation's own, and first _SUCCESS if there is one of
 * them (no other save commits over them without removing them).  0, or
 * -1 with *err.
 */
static int
savecommit_unpublish(int task, int target, const char *path, char **err)
{
	DIR		*d;
	struct dirent	*e;
	int		 dfd, rc = 0, success_gone = 0;

	if ((dfd = dup(task)) == -1 || (d = fdopendir(dfd)) == NULL) {
		if (dfd != -1)
			close(dfd);
		xasprintf(err, "options.path: %s: %s", path, strerror(errno));
		return (-1);
	}
	rewinddir(d);
	while (rc == 0 && (e = readdir(d)) != NULL) {
		if (!savecommit_is_part(e->d_name) ||
		    !savecommit_ours(task, target, e->d_name))
			continue;
		if (!success_gone && unlinkat(target, SAVECOMMIT_SUCCESS,
		    0) == -1 && errno != ENOENT) {
			xasprintf(err, "options.path: %s/%s: %s", path,
			    SAVECOMMIT_SUCCESS, strerror(errno));
			rc = -1;
			break;
		}
		success_gone = 1;
		if (unlinkat(target, e->d_name, 0) == -1 && errno != ENOENT) {
			xasprintf(err, "options.path: %s/%s: %s", path,
			    e->d_name, strerror(errno));
			rc = -1;
		}
	}
	closedir(d);
	if (success_gone)
		fsync(target);
	return (rc);
}

/* Create _SUCCESS, a new file, and sync it.  0, or -1 with *err. */
static int
savecommit_success(int target, const char *path, char **err)
{
	int	fd;

	fd = openat(target, SAVECOMMIT_SUCCESS, O_WRONLY | O_CREAT | O_EXCL |
	    O_NOFOLLOW | O_CLOEXEC | O_NOCTTY, 0666);
	if (fd == -1 || fsync(fd) == -1) {
		xasprintf(err, "commit: %s/%s: %s", path, SAVECOMMIT_SUCCESS,
		    strerror(errno));
		if (fd != -1)
			close(fd);
		return (-1);
	}
	close(fd);
	if (fsync(target) == -1) {
		xasprintf(err, "commit: %s: %s", path, strerror(errno));
		return (-1);
	}
	return (0);
}

/* Put the parts in the target and _SUCCESS after them, unless another
 * save's output is there (overwrite: removed first).  0, or -1 with
 * *err. */
static int
savecommit_publish(int task, int target, const char *path,
    const char *operation, int partitions, int overwrite, char **err)
{
	int	foreign;

	if (savecommit_check_parts(task, path, operation, partitions,
	    err) == -1)
		return (-1);
	if (savecommit_foreign_output(task, target, &foreign) == -1) {
		xasprintf(err, "commit: %s: %s", path, strerror(errno));
		return (-1);
	}
	if (foreign > 0 && !overwrite) {
		xasprintf(err, "options.path: %s was written by another save "
		    "meanwhile", path);
		return (-1);
	}
	if (foreign > 0 && savecommit_remove_output(target, path, err) == -1)
		return (-1);
	if (savecommit_link_parts(task, target, path, partitions, err) == -1)
		return (-1);
	if (fsync(target) == -1) {
		xasprintf(err, "commit: %s: %s", path, strerror(errno));
		return (-1);
	}
	/* _SUCCESS last: a reader that sees it sees every part. */
	return (savecommit_success(target, path, err));
}

/* Commit a save; a run cut short is finished by the next. */
int
savecommit_finish(const char *path, const char *operation, int partitions,
    int overwrite, const struct savecommit_ids *ids, char **err)
{
	char	*uerr = NULL;
	int	 target, temporary, task, rc = -1;

	*err = NULL;
	if (savecommit_reopen(path, operation, ids, &target, &temporary,
	    &task, err) == -1) {
		/* The directory goes only after _SUCCESS is made. */
		if (*err == NULL && target != -1 &&
		    savecommit_is_file(target, SAVECOMMIT_SUCCESS))
			rc = 0;
		else if (*err == NULL)
			xasprintf(err, "commit: %s/%s/%s is gone", path,
			    SAVECOMMIT_TEMPORARY, operation);
		goto out;
	}
	if (!savecommit_committed(task, target, partitions) &&
	    savecommit_publish(task, target, path, operation, partitions,
	    overwrite, err) == -1) {
		if (savecommit_unpublish(task, target, path, &uerr) == -1)
			free(uerr);
		goto out;
	}
	rc = 0;
	/* What is left is cleaning up: the save has succeeded. */
	if (savecommit_remove_task_dir(temporary, task, path, operation,
	    err) == 0)
		savecommit_remove_temporary(target);
	else {
		free(*err);
		*err = NULL;
	}
out:
	savecommit_close(&task);
	savecommit_close(&temporary);
	savecommit_close(&target);
	return (rc);
}

/* Abort a save. */
int
savecommit_abort(const char *path, const char *operation,
    const struct savecommit_ids *ids, char **err)
{
	int	target, temporary, task, rc = -1;

	*err = NULL;
	if (savecommit_reopen(path, operation, ids, &target, &temporary,
	    &task, err) == -1) {
		if (*err != NULL)
			goto out;
		rc = 0;		/* nothing of it is left */
		if (temporary != -1)
			savecommit_remove_temporary(target);
		goto out;
	}
	if (savecommit_unpublish(task, target, path, err) == -1 ||
	    savecommit_remove_task_dir(temporary, task, path, operation,
	    err) == -1)
		goto out;
	savecommit_remove_temporary(target);
	rc = 0;
out:
	savecommit_close(&task);
	savecommit_close(&temporary);
	savecommit_close(&target);
	return (rc);
}

/* Undo a beginning whose answer was lost. */
int
savecommit_unbegin(const char *path, const char *operation, char **err)
{
	int	target = -1, temporary = -1, rc = -1;

	*err = NULL;
	if (!savecommit_valid_name(operation)) {
		xasprintf(err, "operation: \"%s\" cannot name a directory",
		    operation);
		return (-1);
	}
	if ((target = savecommit_open_target(path, NULL, err)) == -1) {
		if (errno == ENOENT) {
			free(*err);
			*err = NULL;
			rc = 0;
		}
		goto out;
	}
	if ((temporary = savecommit_open_temporary(target, 0)) == -1) {
		if (errno == ENOENT)
			rc = 0;
		else
			savecommit_temporary_error(path, err);
		goto out;
	}
	/* Empty, or not the beginning's: no task ran in it. */
	if (unlinkat(temporary, operation, AT_REMOVEDIR) == -1 &&
	    errno != ENOENT) {
		xasprintf(err, "options.path: %s/%s/%s: %s", path,
		    SAVECOMMIT_TEMPORARY, operation, strerror(errno));
		goto out;
	}
	savecommit_remove_temporary(target);
	rc = 0;
out:
	savecommit_close(&temporary);
	savecommit_close(&target);
	return (rc);
}

/* Create a part's temporary file. */
struct savecommit_part *
savecommit_part_create(const char *dir, int partition, uint64_t attempt,
    char **err)
{
	struct savecommit_part	*p;

	p = xcalloc(1, sizeof *p);
	p->fd = -1;
	p->dir = xstrdup(dir);
	snprintf(p->name, sizeof p->name, "part-%05d", partition);
	snprintf(p->tmp, sizeof p->tmp, ".part-%05d.%" PRIu64 ".tmp",
	    partition, attempt);
	if ((p->dirfd = savecommit_open_dir(AT_FDCWD, dir)) == -1) {
		xasprintf(err, "save: %s: %s", dir, savecommit_why(errno));
		p->committed = 1;
		savecommit_part_free(p);
		return (NULL);
	}
	p->fd = openat(p->dirfd, p->tmp, O_WRONLY | O_CREAT | O_EXCL |
	    O_NOFOLLOW | O_CLOEXEC | O_NOCTTY, 0666);
	if (p->fd == -1) {
		xasprintf(err, "save: %s/%s: %s", dir, p->tmp,
		    strerror(errno));
		p->committed = 1;	/* not ours to remove */
		savecommit_part_free(p);
		return (NULL);
	}
	return (p);
}

/* Return the descriptor to write the part to. */
int
savecommit_part_fd(const struct savecommit_part *p)
{
	return (p->fd);
}

/* Return the temporary file's name. */
const char *
savecommit_part_name(const struct savecommit_part *p)
{
	return (p->tmp);
}

/* Give the part its name. */
int
savecommit_part_commit(struct savecommit_part *p, char **err)
{
	if (fsync(p->fd) == -1 || close(p->fd) == -1) {
		p->fd = -1;
		xasprintf(err, "save: %s/%s: %s", p->dir, p->tmp,
		    strerror(errno));
		return (-1);
	}
	p->fd = -1;
	if (renameat(p->dirfd, p->tmp, p->dirfd, p->name) == -1) {
		xasprintf(err, "save: rename %s/%s to %s: %s", p->dir, p->tmp,
		    p->name, strerror(errno));
		return (-1);
	}
	p->committed = 1;
	/* The rename itself must survive a crash. */
	fsync(p->dirfd);
	return (0);
}

/* Free a part; its temporary file goes unless committed. */
void
savecommit_part_free(struct savecommit_part *p)
{
	if (p == NULL)
		return;
	savecommit_close(&p->fd);
	if (!p->committed && p->dirfd != -1)
		unlinkat(p->dirfd, p->tmp, 0);
	if (p->dirfd != -1)
		close(p->dirfd);
	free(p->dir);
	free(p);
}
