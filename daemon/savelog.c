#include <sys/stat.h>

#include <errno.h>
#include <fcntl.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include <jansson.h>

#include "commit.h"
#include "jread.h"
#include "localdir.h"
#include "log.h"
#include "savelog.h"
#include "xmalloc.h"

#define SAVELOG_NAME	"saves"
/* A file past this is not read: emberd never writes so much. */
#define SAVELOG_MAX	(16 * 1024 * 1024)

static int	savelog_fd = -1;
static size_t	savelog_live;	/* saves noted and not ended */

/* Append one line; a failure is logged, the save goes on. */
static void
savelog_write(json_t *line)
{
	char	*text;
	size_t	 len;

	if (savelog_fd == -1) {
		json_decref(line);
		return;
	}
	if ((text = json_dumps(line, JSON_COMPACT)) == NULL)
		fatalx("json_dumps");
	json_decref(line);
	len = strlen(text);
	text[len++] = '\n';	/* json_dumps's NUL */
	if (write(savelog_fd, text, len) != (ssize_t)len)
		log_warn("%s/%s: %s", localdir_path(), SAVELOG_NAME,
		    strerror(errno));
	free(text);
}

void
savelog_begun(uid_t uid, gid_t gid, const char *path, const char *operation,
    int overwrite, json_t *ids)
{
	json_t	*line;

	line = json_pack("{s:s,s:I,s:I,s:s,s:b}", "begun", operation, "uid",
	    (json_int_t)uid, "gid", (json_int_t)gid, "path", path, "overwrite",
	    overwrite);
	if (ids != NULL)
		json_object_set(line, "ids", ids);
	savelog_live++;
	savelog_write(line);
}

void
savelog_committing(uid_t uid, const char *operation, int partitions)
{
	savelog_write(json_pack("{s:s,s:I,s:i}", "committing", operation,
	    "uid", (json_int_t)uid, "partitions", partitions));
}

void
savelog_ended(uid_t uid, const char *operation)
{
	if (savelog_live > 0 && --savelog_live == 0 && savelog_fd != -1) {
		/* Nothing is left to finish: start the file again. */
		if (ftruncate(savelog_fd, 0) == -1)
			log_warn("%s/%s: %s", localdir_path(), SAVELOG_NAME,
			    strerror(errno));
		return;
	}
	savelog_write(json_pack("{s:s,s:I}", "ended", operation, "uid",
	    (json_int_t)uid));
}

/* The key of a save in the table of those left: "UID OPERATION". */
static char *
savelog_key(json_int_t uid, const char *operation)
{
	char	*key;

	xasprintf(&key, "%lld %s", (long long)uid, operation);
	return (key);
}

/* Play one line into left.  0, or -1 with *err. */
static int
savelog_play(json_t *left, json_t *line, char **err)
{
	static const char *const keys[] = { "begun", "committing", "ended",
	    "uid", "gid", "path", "overwrite", "ids", "partitions", NULL };
	const char	*op = NULL;
	json_int_t	 uid;
	json_t		*save;
	char		*key;

	if (jread_only(line, "line", keys, err) == -1 ||
	    jread_int(line, "line", "uid", JREAD_REQUIRED, &uid, err) == -1)
		return (-1);
	if (json_object_get(line, "begun") != NULL) {
		if (jread_string(line, "line", "begun", JREAD_REQUIRED, &op,
		    err) == -1)
			return (-1);
		key = savelog_key(uid, op);
		json_object_set(left, key, line);
	} else if (json_object_get(line, "committing") != NULL) {
		if (jread_string(line, "line", "committing", JREAD_REQUIRED,
		    &op, err) == -1)
			return (-1);
		key = savelog_key(uid, op);
		if ((save = json_object_get(left, key)) != NULL)
			json_object_set(save, "partitions",
			    json_object_get(line, "partitions"));
	} else {
		if (jread_string(line, "line", "ended", JREAD_REQUIRED, &op,
		    err) == -1)
			return (-1);
		key = savelog_key(uid, op);
		json_object_del(left, key);
	}
	free(key);
	return (0);
}

/* Hand one save left to the commit that finishes it. */
static void
savelog_recover(json_t *save)
{
	const char	*path = NULL, *op = NULL;
	json_int_t	 uid = -1, gid = -1, partitions = -1;
	json_t		*ids = NULL;
	int		 overwrite = 0;
	char		*err = NULL;

	if (jread_string(save, "line", "begun", JREAD_REQUIRED, &op,
	    &err) == -1 ||
	    jread_string(save, "line", "path", JREAD_REQUIRED, &path,
	    &err) == -1 ||
	    jread_int(save, "line", "gid", JREAD_REQUIRED, &gid, &err) == -1 ||
	    jread_bool(save, "line", "overwrite", JREAD_REQUIRED, &overwrite,
	    &err) == -1 ||
	    jread_object(save, "line", "ids", JREAD_OPTIONAL, &ids,
	    &err) == -1 ||
	    jread_int(save, "line", "partitions", JREAD_OPTIONAL, &partitions,
	    &err) == -1) {
		log_warn("%s/%s: %s", localdir_path(), SAVELOG_NAME, err);
		free(err);
		return;
	}
	jread_int(save, "line", "uid", JREAD_REQUIRED, &uid, &err);
	savelog_begun((uid_t)uid, (gid_t)gid, path, op, overwrite, ids);
	if (partitions >= 0)
		savelog_committing((uid_t)uid, op, (int)partitions);
	commit_recover(path, op, overwrite, (uid_t)uid, (gid_t)gid, ids,
	    (int)partitions);
}

/* Read the file of the last run: the saves it left, by key.  NULL if
 * there is none. */
static json_t *
savelog_read(int fd)
{
	json_error_t	 je;
	struct stat	 sb;
	json_t		*left, *line;
	char		*buf, *p, *nl, *err = NULL;
	ssize_t		 n;

	if (fstat(fd, &sb) == -1 || !S_ISREG(sb.st_mode) ||
	    sb.st_uid != geteuid() || sb.st_size > SAVELOG_MAX) {
		log_warn("%s/%s: not emberd's own file, or too big: ignored",
		    localdir_path(), SAVELOG_NAME);
		return (NULL);
	}
	buf = xmalloc((size_t)sb.st_size + 1);
	if ((n = pread(fd, buf, (size_t)sb.st_size, 0)) == -1)
		n = 0;
	buf[n] = '\0';
	left = json_object();
	for (p = buf; *p != '\0'; p = nl + 1) {
		if ((nl = strchr(p, '\n')) == NULL)
			break;		/* a line cut by a crash */
		*nl = '\0';
		if ((line = json_loads(p, 0, &je)) == NULL ||
		    !json_is_object(line) || savelog_play(left, line,
		    &err) == -1) {
			log_warn("%s/%s: a line is not understood: %s",
			    localdir_path(), SAVELOG_NAME, err != NULL ? err :
			    je.text);
			free(err);
			err = NULL;
		}
		json_decref(line);
	}
	free(buf);
	return (left);
}

void
savelog_open(void)
{
	const char	*key;
	json_t		*left = NULL, *save;
	int		 fd;

	fd = localdir_open_file(SAVELOG_NAME, O_RDWR | O_APPEND);
	if (fd == -1 && errno == ENOENT)
		fd = localdir_create(SAVELOG_NAME, O_RDWR | O_APPEND, 0600);
	else if (fd != -1)
		left = savelog_read(fd);
	if (fd == -1) {
		log_warn("%s/%s: %s; saves left by a crash will not be undone",
		    localdir_path(), SAVELOG_NAME, strerror(errno));
		return;
	}
	if (ftruncate(fd, 0) == -1)
		log_warn("%s/%s: %s", localdir_path(), SAVELOG_NAME,
		    strerror(errno));
	savelog_fd = fd;
	if (left == NULL)
		return;
	json_object_foreach(left, key, save)
		savelog_recover(save);
	json_decref(left);
}

void
savelog_close(void)
{
	if (savelog_fd == -1)
		return;
	close(savelog_fd);
	savelog_fd = -1;
	/* An empty one goes, so that the local directory can. */
	if (savelog_live == 0)
		localdir_unlink(SAVELOG_NAME);
	savelog_live = 0;
}
