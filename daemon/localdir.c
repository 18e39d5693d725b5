#include <sys/stat.h>

#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "emberd.h"
#include "localdir.h"
#include "log.h"
#include "xmalloc.h"

static char	*localdir;
static int	 localdir_fd = -1;

/* The names a past run may have left: only those are removed. */
static const char *const localdir_ours[] = { "broadcast-", NULL };

const char *
localdir_path(void)
{
	return (localdir);
}

/* Is the directory p, above path, safe: writable by nobody but root or
 * emberd (sticky bit aside)?  0, or -1 with *err. */
static int
localdir_check_parent(const char *p, const char *path, char **err)
{
	struct stat	st;
	int		saved;

	if (stat(p, &st) == -1) {
		saved = errno;
		xasprintf(err, "%s: checking %s above it: %s", path, p,
		    strerror(errno));
		errno = saved;
		return (-1);
	}
	if (st.st_uid != 0 && st.st_uid != geteuid()) {
		xasprintf(err, "%s is owned by uid %lu, who could replace %s",
		    p, (unsigned long)st.st_uid, path);
		errno = EPERM;
		return (-1);
	}
	if ((st.st_mode & (S_IWGRP | S_IWOTH)) != 0 &&
	    (st.st_mode & S_ISVTX) == 0) {
		xasprintf(err, "%s is writable by others without the sticky "
		    "bit (mode %04o): anyone could replace %s", p,
		    (unsigned)(st.st_mode & 07777), path);
		errno = EPERM;
		return (-1);
	}
	return (0);
}

int
localdir_check_parents(const char *path, char **err)
{
	char	*p = xstrdup(path), *slash;
	int	 rc;

	rc = localdir_check_parent("/", path, err);
	for (slash = strchr(p + 1, '/'); rc == 0 && slash != NULL;
	    slash = strchr(slash + 1, '/')) {
		*slash = '\0';
		rc = localdir_check_parent(p, path, err);
		*slash = '/';
	}
	free(p);
	return (rc);
}

int
localdir_check_above(const char *key, const char *path)
{
	char	*err;

	if (localdir_check_parents(path, &err) == 0)
		return (0);
	log_error("%s: %s; choose another %s", key, err, key);
	free(err);
	return (-1);
}

/* Is an existing directory emberd's own, and closed to others?  0, or
 * -1 (logged). */
static int
localdir_check_own(const char *path, const struct stat *st)
{
	if (S_ISLNK(st->st_mode)) {
		log_error("daemon.local_dir: %s is a symbolic link; emberd "
		    "makes its local directory itself (remove it, or set "
		    "daemon.local_dir elsewhere)", path);
		return (-1);
	}
	if (!S_ISDIR(st->st_mode)) {
		log_error("daemon.local_dir: %s exists and is not a "
		    "directory", path);
		return (-1);
	}
	if (st->st_uid != geteuid()) {
		log_error("daemon.local_dir: %s is owned by uid %lu, not by "
		    "emberd (uid %lu): someone made it before emberd did; "
		    "remove it, or set daemon.local_dir elsewhere", path,
		    (unsigned long)st->st_uid, (unsigned long)geteuid());
		return (-1);
	}
	if ((st->st_mode & 0066) != 0) {
		log_error("daemon.local_dir: %s has mode %04o: others may read "
		    "or write it (emberd wants 0700 or 0711); remove it, or "
		    "set daemon.local_dir elsewhere", path,
		    (unsigned)(st->st_mode & 07777));
		return (-1);
	}
	return (0);
}

/* Remove what a past run left: emberd's own names only, never through a
 * link (unlinkat removes the link itself). */
static void
localdir_clean(void)
{
	struct dirent	*e;
	DIR		*d;
	size_t		 i;
	int		 fd;

	if (localdir_fd == -1 ||
	    (fd = fcntl(localdir_fd, F_DUPFD_CLOEXEC, 0)) == -1)
		return;
	if ((d = fdopendir(fd)) == NULL) {
		close(fd);
		return;
	}
	while ((e = readdir(d)) != NULL) {
		for (i = 0; localdir_ours[i] != NULL; i++) {
			if (strncmp(e->d_name, localdir_ours[i],
			    strlen(localdir_ours[i])) == 0)
				unlinkat(localdir_fd, e->d_name, 0);
		}
	}
	closedir(d);
}

int
localdir_open(void)
{
	struct stat	 before, after;
	char		*err = NULL;
	int		 made = 0;

	if (*ember_conf.daemon_local_dir != '\0')
		localdir = xstrdup(ember_conf.daemon_local_dir);
	else
		xasprintf(&localdir, "%s.local", ember_conf.daemon_socket);
	if (*localdir != '/') {
		log_error("daemon.local_dir: %s is not an absolute path",
		    localdir);
		goto fail;
	}
	if (localdir_check_parents(localdir, &err) == -1) {
		log_error("daemon.local_dir: %s; choose another "
		    "daemon.local_dir (or daemon.socket)", err);
		free(err);
		goto fail;
	}
	if (mkdir(localdir, 0711) == 0)
		made = 1;
	else if (errno != EEXIST) {
		log_error("daemon.local_dir: %s: %s", localdir,
		    strerror(errno));
		goto fail;
	}
	if (lstat(localdir, &before) == -1) {
		log_error("daemon.local_dir: %s: %s", localdir,
		    strerror(errno));
		goto fail;
	}
	if (localdir_check_own(localdir, &before) == -1)
		goto fail;
	localdir_fd = open(localdir, O_RDONLY | O_DIRECTORY | O_NOFOLLOW |
	    O_CLOEXEC | O_NOCTTY);
	if (localdir_fd == -1 || fstat(localdir_fd, &after) == -1 ||
	    after.st_dev != before.st_dev || after.st_ino != before.st_ino ||
	    localdir_check_own(localdir, &after) == -1) {
		log_error("daemon.local_dir: %s changed while emberd opened "
		    "it", localdir);
		goto fail;
	}
	/* 0711 when emberd made it, whatever the umask: others may reach a
	 * file in it they were given the name of, never list it. */
	if (made && fchmod(localdir_fd, 0711) == -1)
		log_warn("chmod %s: %s", localdir, strerror(errno));
	localdir_clean();
	return (0);
fail:
	if (localdir_fd != -1)
		close(localdir_fd);
	localdir_fd = -1;
	free(localdir);
	localdir = NULL;
	return (-1);
}

void
localdir_close(int remove)
{
	if (localdir_fd == -1)
		return;
	localdir_clean();
	close(localdir_fd);
	localdir_fd = -1;
	/* Only an empty directory goes: what it holds now is not ours. */
	if (remove)
		rmdir(localdir);
	free(localdir);
	localdir = NULL;
}

int
localdir_create(const char *name, int flags, mode_t mode)
{
	if (localdir_fd == -1) {
		errno = EBADF;
		return (-1);
	}
	return (openat(localdir_fd, name, flags | O_CREAT | O_EXCL |
	    O_NOFOLLOW | O_CLOEXEC | O_NOCTTY, mode));
}

int
localdir_open_file(const char *name, int flags)
{
	if (localdir_fd == -1) {
		errno = EBADF;
		return (-1);
	}
	return (openat(localdir_fd, name, flags | O_NOFOLLOW | O_CLOEXEC |
	    O_NOCTTY));
}

int
localdir_unlink(const char *name)
{
	if (localdir_fd == -1) {
		errno = EBADF;
		return (-1);
	}
	return (unlinkat(localdir_fd, name, 0));
}
