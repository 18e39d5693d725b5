#include <sys/stat.h>

#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "commit.h"
#include "log.h"
#include "xmalloc.h"

struct commit {
	char	*path;		/* the target directory */
	char	*temporary;	/* PATH/_temporary */
	char	*task_dir;	/* PATH/_temporary/OPERATION */
	uid_t	 uid;
	gid_t	 gid;
};

/* mkdir that gives the directory to the job's user when emberd is root. */
static int
commit_mkdir(const struct commit *c, const char *dir)
{
	if (mkdir(dir, 0777) == -1)
		return (errno == EEXIST ? 0 : -1);
	if (geteuid() == 0 && c->uid != 0 && chown(dir, c->uid, c->gid) == -1)
		return (-1);
	return (0);
}

/* mkdir -p, for the target directory. */
static int
commit_mkdirs(const struct commit *c, const char *path)
{
	char	*copy = xstrdup(path), *p;
	int	 rc = 0;

	for (p = copy + 1; *p != '\0' && rc == 0; p++) {
		if (*p != '/')
			continue;
		*p = '\0';
		rc = commit_mkdir(c, copy);
		*p = '/';
	}
	if (rc == 0)
		rc = commit_mkdir(c, copy);
	free(copy);
	return (rc);
}

/* Is name something a save writes: part-*, _SUCCESS, _temporary? */
static int
commit_ours(const char *name)
{
	return (strncmp(name, "part-", 5) == 0 ||
	    strcmp(name, "_SUCCESS") == 0 || strcmp(name, "_temporary") == 0);
}

/* Remove a directory of files (one level deep is all a save makes). */
static void
commit_remove_tree(const char *dir)
{
	DIR		*d;
	struct dirent	*e;
	char		*p;

	if ((d = opendir(dir)) == NULL)
		return;
	while ((e = readdir(d)) != NULL) {
		if (strcmp(e->d_name, ".") == 0 || strcmp(e->d_name, "..") == 0)
			continue;
		xasprintf(&p, "%s/%s", dir, e->d_name);
		if (unlink(p) == -1 && errno == EISDIR)
			commit_remove_tree(p);
		free(p);
	}
	closedir(d);
	rmdir(dir);
}

/* Look at what PATH holds: 0 if empty (or cleared for overwrite). */
static int
commit_check_target(const char *path, int overwrite, char **err)
{
	DIR		*d;
	struct dirent	*e;
	char		*p;
	int		 foreign = 0, ours = 0;

	if ((d = opendir(path)) == NULL) {
		if (errno == ENOENT)
			return (0);
		xasprintf(err, "options.path: %s: %s", path, strerror(errno));
		return (-1);
	}
	while ((e = readdir(d)) != NULL) {
		if (strcmp(e->d_name, ".") == 0 || strcmp(e->d_name, "..") == 0)
			continue;
		if (commit_ours(e->d_name))
			ours++;
		else
			foreign++;
	}
	if (foreign > 0 || (ours > 0 && !overwrite)) {
		closedir(d);
		xasprintf(err, "options.path: %s is not empty%s", path,
		    foreign > 0 ? " (it holds files a save did not write)" :
		    " (set options.overwrite to replace it)");
		return (-1);
	}
	rewinddir(d);
	while ((e = readdir(d)) != NULL) {
		if (!commit_ours(e->d_name))
			continue;
		xasprintf(&p, "%s/%s", path, e->d_name);
		if (strcmp(e->d_name, "_temporary") == 0)
			commit_remove_tree(p);
		else
			unlink(p);
		free(p);
	}
	closedir(d);
	return (0);
}

struct commit *
commit_begin(const char *path, int overwrite, const char *operation,
    uid_t uid, gid_t gid, char **err)
{
	struct commit	*c;

	if (path[0] != '/') {
		xasprintf(err, "options.path: \"%s\" is not an absolute path",
		    path);
		return (NULL);
	}
	if (commit_check_target(path, overwrite, err) == -1)
		return (NULL);
	c = xcalloc(1, sizeof *c);
	c->path = xstrdup(path);
	c->uid = uid;
	c->gid = gid;
	xasprintf(&c->temporary, "%s/_temporary", path);
	xasprintf(&c->task_dir, "%s/%s", c->temporary, operation);
	if (commit_mkdirs(c, c->path) == -1 ||
	    commit_mkdir(c, c->temporary) == -1 ||
	    commit_mkdir(c, c->task_dir) == -1) {
		xasprintf(err, "options.path: %s: %s", path, strerror(errno));
		commit_abort(c);
		commit_free(c);
		return (NULL);
	}
	return (c);
}

const char *
commit_task_dir(const struct commit *c)
{
	return (c->task_dir);
}

/* fsync a directory so the renames in it are on disk. */
static void
commit_sync_dir(const char *dir)
{
	int	fd;

	if ((fd = open(dir, O_RDONLY | O_DIRECTORY | O_CLOEXEC)) == -1)
		return;
	fsync(fd);
	close(fd);
}

int
commit_finish(struct commit *c, int partitions, char **err)
{
	char	 from[4096], to[4096];
	int	 i, fd;

	for (i = 0; i < partitions; i++) {
		snprintf(from, sizeof from, "%s/part-%05d", c->task_dir, i);
		snprintf(to, sizeof to, "%s/part-%05d", c->path, i);
		if (rename(from, to) == -1) {
			xasprintf(err, "commit: %s: %s", from, strerror(errno));
			return (-1);
		}
	}
	commit_sync_dir(c->path);
	rmdir(c->task_dir);
	rmdir(c->temporary);	/* only if no other save uses it */

	/* _SUCCESS last: a reader that sees it sees every part. */
	snprintf(to, sizeof to, "%s/_SUCCESS", c->path);
	fd = open(to, O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0666);
	if (fd == -1 || fsync(fd) == -1) {
		xasprintf(err, "commit: %s: %s", to, strerror(errno));
		if (fd != -1)
			close(fd);
		return (-1);
	}
	if (geteuid() == 0 && c->uid != 0 && fchown(fd, c->uid, c->gid) == -1)
		log_warn("chown %s: %s", to, strerror(errno));
	close(fd);
	commit_sync_dir(c->path);
	return (0);
}

void
commit_abort(struct commit *c)
{
	commit_remove_tree(c->task_dir);
	rmdir(c->temporary);
}

void
commit_free(struct commit *c)
{
	if (c == NULL)
		return;
	free(c->path);
	free(c->temporary);
	free(c->task_dir);
	free(c);
}
