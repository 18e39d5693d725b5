#include <sys/stat.h>
#include <sys/uio.h>

#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "checkpoint.h"
#include "frame.h"
#include "framebuf.h"
#include "keyed.h"
#include "jread.h"
#include "log.h"
#include "ops.h"
#include "plan.h"
#include "protocol.h"
#include "xmalloc.h"

/* Partition files are written and read through a buffer of this size. */
#define CKPT_BUFFER		(256 * 1024)
/* The largest record a partition file may hold. */
#define CKPT_MAX_RECORD		EMBER_MAX_BATCH
/* The most a pair or group takes, as the batch it was sent in would. */
#define CKPT_MAX_KEYED		EMBER_MAX_BATCH
/* How deep a removal goes: a checkpoint is one level, a stray tree a few. */
#define CKPT_MAX_DEPTH		8
/* Passes over a directory being cleaned, at most. */
#define CKPT_CLEAN_PASSES	4
#define CKPT_MANIFEST		"manifest.json"
#define CKPT_MANIFEST_TMP	".manifest.json.tmp"

struct ckpt_writer {
	int	 dirfd;
	int	 fd;
	int	 sync;
	int	 committed;
	char	 tmp[32];
	char	 name[32];
	char	*dir;		/* for errors */
	char	*buf;
	size_t	 used;
	int64_t	 bytes;
};

/* Open the checkpoint directory dir (PARENT/ID) as ID in pfd, PARENT's
 * descriptor as emberd passed it (never opened by name), making ID with
 * create. */
static int
ckpt_open_dir(const char *dir, int pfd, int create, char **err)
{
	const char	*name;
	int		 fd;

	if ((name = strrchr(dir, '/')) == NULL || !plan_is_uuid(name + 1)) {
		xasprintf(err, "checkpoint: %s is not a checkpoint directory",
		    dir);
		return (-1);
	}
	name++;
	if (pfd < 0) {
		xasprintf(err, "checkpoint: %s: no directory descriptor came "
		    "with the task", dir);
		return (-1);
	}
	if (create && mkdirat(pfd, name, 0700) == -1 && errno != EEXIST) {
		xasprintf(err, "checkpoint: %s: %s", dir, strerror(errno));
		fd = -1;
	} else if ((fd = openat(pfd, name, O_RDONLY | O_DIRECTORY |
	    O_NOFOLLOW | O_CLOEXEC)) == -1)
		xasprintf(err, "checkpoint: %s: %s", dir, strerror(errno));
	return (fd);
}

struct ckpt_writer *
ckpt_writer_open(const char *dir, int ufd, int partition, int sync,
    char **err)
{
	struct ckpt_writer	*w;
	int			 dirfd;

	if ((dirfd = ckpt_open_dir(dir, ufd, 1, err)) == -1)
		return (NULL);
	w = xcalloc(1, sizeof *w);
	w->dirfd = dirfd;
	w->sync = sync;
	w->dir = xstrdup(dir);
	snprintf(w->name, sizeof w->name, "part-%05d", partition);
	snprintf(w->tmp, sizeof w->tmp, ".part-%05d.tmp", partition);
	/* A task run again after its worker died finds its own file. */
	w->fd = openat(dirfd, w->tmp, O_WRONLY | O_CREAT | O_TRUNC |
	    O_NOFOLLOW | O_CLOEXEC | O_NOCTTY, 0600);
	if (w->fd == -1) {
		xasprintf(err, "checkpoint: %s/%s: %s", dir, w->tmp,
		    strerror(errno));
		w->committed = 1;	/* nothing of ours to remove */
		ckpt_writer_free(w);
		return (NULL);
	}
	w->buf = xmalloc(CKPT_BUFFER);
	return (w);
}

/* Write an iovec array out whole. */
static int
ckpt_writer_writev(struct ckpt_writer *w, struct iovec *iov, int n,
    char **err)
{
	if (fd_writev_full(w->fd, iov, n) == -1) {
		xasprintf(err, "checkpoint: %s/%s: %s", w->dir, w->tmp,
		    strerror(errno));
		return (-1);
	}
	return (0);
}

/* Write out what is buffered. */
static int
ckpt_writer_flush(struct ckpt_writer *w, char **err)
{
	struct iovec	iov;

	if (w->used == 0)
		return (0);
	iov.iov_base = w->buf;
	iov.iov_len = w->used;
	w->used = 0;
	return (ckpt_writer_writev(w, &iov, 1, err));
}

int
ckpt_writer_record(struct ckpt_writer *w, const void *data, size_t len,
    int null, char **err)
{
	unsigned char	hdr[4];
	struct iovec	iov[3];

	if (null)
		len = 0;
	if (len > CKPT_MAX_RECORD) {
		xasprintf(err, "checkpoint: a record of %zu bytes is over the "
		    "%d a checkpoint holds", len, CKPT_MAX_RECORD);
		return (-1);
	}
	be32_put(hdr, null ? EMBER_NULL : (int32_t)len);
	w->bytes += 4 + (int64_t)len;
	if (w->used + 4 + len <= CKPT_BUFFER) {
		memcpy(w->buf + w->used, hdr, 4);
		if (len > 0)
			memcpy(w->buf + w->used + 4, data, len);
		w->used += 4 + len;
		return (0);
	}
	iov[0].iov_base = w->buf;
	iov[0].iov_len = w->used;
	iov[1].iov_base = hdr;
	iov[1].iov_len = 4;
	iov[2].iov_base = (void *)data;
	iov[2].iov_len = len;
	w->used = 0;
	return (ckpt_writer_writev(w, iov, 3, err));
}

int
ckpt_writer_keyed(struct ckpt_writer *w, const struct record *r, char **err)
{
	struct iovec	 iov[2];
	size_t		 len = keyed_size(r);
	unsigned char	*p;
	int		 rc;

	if (len > CKPT_MAX_KEYED) {
		xasprintf(err, "checkpoint: a keyed record of %zu bytes is "
		    "over the %d a checkpoint holds", len, CKPT_MAX_KEYED);
		return (-1);
	}
	w->bytes += (int64_t)len;
	if (w->used + len <= CKPT_BUFFER) {
		keyed_put((unsigned char *)w->buf + w->used, r);
		w->used += len;
		return (0);
	}
	p = xmalloc(len);
	keyed_put(p, r);
	iov[0].iov_base = w->buf;
	iov[0].iov_len = w->used;
	iov[1].iov_base = p;
	iov[1].iov_len = len;
	w->used = 0;
	rc = ckpt_writer_writev(w, iov, 2, err);
	free(p);
	return (rc);
}

int
ckpt_writer_commit(struct ckpt_writer *w, char **err)
{
	unsigned char	end[4];

	be32_put(end, EMBER_END_OF_DATA_SECTION);
	if (w->used + 4 > CKPT_BUFFER && ckpt_writer_flush(w, err) == -1)
		return (-1);
	memcpy(w->buf + w->used, end, 4);
	w->used += 4;
	w->bytes += 4;
	if (ckpt_writer_flush(w, err) == -1)
		return (-1);
	if (w->sync && fsync(w->fd) == -1) {
		xasprintf(err, "checkpoint: %s/%s: fsync: %s", w->dir, w->tmp,
		    strerror(errno));
		return (-1);
	}
	if (close(w->fd) == -1) {
		w->fd = -1;
		xasprintf(err, "checkpoint: %s/%s: %s", w->dir, w->tmp,
		    strerror(errno));
		return (-1);
	}
	w->fd = -1;
	if (renameat(w->dirfd, w->tmp, w->dirfd, w->name) == -1) {
		xasprintf(err, "checkpoint: rename %s/%s: %s", w->dir, w->tmp,
		    strerror(errno));
		return (-1);
	}
	w->committed = 1;
	if (w->sync && fsync(w->dirfd) == -1) {
		xasprintf(err, "checkpoint: %s: fsync: %s", w->dir,
		    strerror(errno));
		return (-1);
	}
	return (0);
}

int64_t
ckpt_writer_bytes(const struct ckpt_writer *w)
{
	return (w->bytes);
}

void
ckpt_writer_free(struct ckpt_writer *w)
{
	if (w == NULL)
		return;
	if (w->fd != -1)
		close(w->fd);
	if (!w->committed)
		unlinkat(w->dirfd, w->tmp, 0);
	close(w->dirfd);
	free(w->dir);
	free(w->buf);
	free(w);
}

/* Read a partition file, for framebuf_fill. */
static ssize_t
ckpt_read_cb(void *arg, void *p, size_t len)
{
	return (read(*(int *)arg, p, len));
}

int
ckpt_source_run(const char *dir, int ufd, int partition, struct chain *chain,
    int64_t *records_in, char **err)
{
	struct record	 r;
	struct framebuf	 in;
	char		 name[32];
	size_t		 need;
	int32_t		 len;
	int		 dfd, fd, rc = OP_OK, ended = 0, got, n;

	*err = NULL;
	if ((dfd = ckpt_open_dir(dir, ufd, 0, err)) == -1)
		return (OP_FAIL);
	snprintf(name, sizeof name, "part-%05d", partition);
	fd = openat(dfd, name, O_RDONLY | O_NOFOLLOW | O_CLOEXEC | O_NOCTTY);
	close(dfd);
	if (fd == -1) {
		xasprintf(err, "checkpoint: %s/%s: %s", dir, name,
		    strerror(errno));
		return (OP_FAIL);
	}
	posix_fadvise(fd, 0, 0, POSIX_FADV_SEQUENTIAL);
	if (framebuf_init(&in, CKPT_BUFFER) == -1)
		fatalx("checkpoint: a read buffer: out of memory");
	while (!ended) {
		/* A whole frame buffered?  Else read until it is. */
		need = 4;
		if (framebuf_len(&in) >= 4) {
			len = be32_get(framebuf_data(&in));
			if (len == EMBER_END_OF_DATA_SECTION) {
				ended = 1;
				framebuf_take(&in, 4);
				break;
			}
			got = keyed_get((const char *)framebuf_data(&in),
			    framebuf_len(&in), CKPT_MAX_RECORD, &r, &need);
			if (got == -1 || need > CKPT_MAX_KEYED) {
				xasprintf(err, "checkpoint: %s/%s: corrupt "
				    "(a record of length %d)", dir, name, len);
				rc = OP_FAIL;
				break;
			}
			if (got == 1) {
				framebuf_take(&in, need);
				(*records_in)++;
				if ((rc = chain_push(chain, &r)) != OP_OK) {
					rc = rc == OP_STOP ? OP_OK : OP_FAIL;
					ended = 1;
				}
				continue;
			}
		}
		n = framebuf_fill(&in, need, CKPT_BUFFER, ckpt_read_cb, &fd);
		if (n == -1 && errno == ENOMEM)
			fatalx("checkpoint: a record of %zu bytes: out of "
			    "memory", need);
		if (n == -1) {
			xasprintf(err, "checkpoint: %s/%s: %s", dir, name,
			    strerror(errno));
			rc = OP_FAIL;
			break;
		}
		if (n == 0) {
			xasprintf(err, "checkpoint: %s/%s: truncated", dir,
			    name);
			rc = OP_FAIL;
			break;
		}
	}
	framebuf_free(&in);
	close(fd);
	return (rc);
}

/* Remove name in dfd, a tree of depth at most depth: 0, or -1 with
 * errno (ENOENT is not an error). */
static int
ckpt_remove_tree(int dfd, const char *name, int depth)
{
	DIR		*d;
	struct dirent	*e;
	int		 fd, rc = 0;

	if (unlinkat(dfd, name, 0) == 0 || errno == ENOENT)
		return (0);
	if (errno != EISDIR && errno != EPERM)
		return (-1);
	if (depth == 0) {
		errno = ELOOP;
		return (-1);
	}
	fd = openat(dfd, name, O_RDONLY | O_DIRECTORY | O_NOFOLLOW | O_CLOEXEC);
	if (fd == -1 || (d = fdopendir(fd)) == NULL) {
		if (fd != -1)
			close(fd);
		return (-1);
	}
	/* The manifest first: a half-removed checkpoint is never read. */
	unlinkat(fd, CKPT_MANIFEST, 0);
	while ((e = readdir(d)) != NULL) {
		if (strcmp(e->d_name, ".") == 0 || strcmp(e->d_name, "..") == 0)
			continue;
		if (ckpt_remove_tree(fd, e->d_name, depth - 1) == -1)
			rc = -1;
	}
	closedir(d);
	if (unlinkat(dfd, name, AT_REMOVEDIR) == -1 && errno != ENOENT)
		rc = -1;
	return (rc);
}

/* The uid's directory: the descriptor emberd opened and passed (never
 * args.dir, a name, which is for messages only), duplicated.  -1 with
 * *err. */
static int
ckpt_verb_dir(json_t *args, const int *fds_in, size_t nin, const char **dir,
    char **err)
{
	struct stat	st;
	int		fd;

	if (jread_string(args, "args", "dir", JREAD_REQUIRED, dir,
	    err) == -1)
		return (-1);
	if (nin != 1 || fstat(fds_in[0], &st) == -1 || !S_ISDIR(st.st_mode)) {
		xasprintf(err, "%s: no directory descriptor came with the "
		    "request", *dir);
		return (-1);
	}
	if ((fd = fcntl(fds_in[0], F_DUPFD_CLOEXEC, 3)) == -1)
		xasprintf(err, "%s: %s", *dir, strerror(errno));
	return (fd);
}

/* Read args.id, a checkpoint id. */
static int
ckpt_verb_id(json_t *args, const char **id, char **err)
{
	if (jread_string(args, "args", "id", JREAD_REQUIRED, id, err) == -1)
		return (-1);
	if (!plan_is_uuid(*id))
		return (jread_fail(err, "args.id", "\"%s\" is not a UUID",
		    *id));
	return (0);
}

/* Write text to name in dfd under a temporary name, fsync, rename. */
static int
ckpt_write_file(int dfd, const char *tmp, const char *name, const char *text,
    char **err)
{
	struct iovec	iov;
	int		fd;

	fd = openat(dfd, tmp, O_WRONLY | O_CREAT | O_TRUNC | O_NOFOLLOW |
	    O_CLOEXEC | O_NOCTTY, 0600);
	if (fd == -1) {
		xasprintf(err, "%s: %s", tmp, strerror(errno));
		return (-1);
	}
	iov.iov_base = (void *)text;
	iov.iov_len = strlen(text);
	if (fd_writev_full(fd, &iov, 1) == -1 || fsync(fd) == -1) {
		xasprintf(err, "%s: %s", tmp, strerror(errno));
		close(fd);
		unlinkat(dfd, tmp, 0);
		return (-1);
	}
	close(fd);
	if (renameat(dfd, tmp, dfd, name) == -1) {
		xasprintf(err, "rename %s: %s", tmp, strerror(errno));
		unlinkat(dfd, tmp, 0);
		return (-1);
	}
	return (0);
}

static json_t *
ckpt_commit(json_t *args, int ufd, const char *dir, char **err)
{
	const char	*id;
	json_t		*manifest;
	json_int_t	 partitions;
	struct stat	 st;
	char		 name[32], *text = NULL, *e = NULL;
	int		 dfd = -1, i, pending = 0;

	if (ckpt_verb_id(args, &id, err) == -1 ||
	    jread_object(args, "args", "manifest", JREAD_REQUIRED, &manifest,
	    err) == -1 ||
	    jread_int(manifest, "args.manifest", "partitions", JREAD_REQUIRED,
	    &partitions, err) == -1 ||
	    jread_bool(manifest, "args.manifest", "pending", JREAD_OPTIONAL,
	    &pending, err) == -1)
		goto fail;
	/* A lazy checkpoint's manifest comes before any partition. */
	if (pending && mkdirat(ufd, id, 0700) == -1 && errno != EEXIST) {
		xasprintf(err, "%s/%s: %s", dir, id, strerror(errno));
		goto fail;
	}
	if ((dfd = openat(ufd, id, O_RDONLY | O_DIRECTORY | O_NOFOLLOW |
	    O_CLOEXEC)) == -1) {
		xasprintf(err, "%s/%s: %s", dir, id, strerror(errno));
		goto fail;
	}
	/* Every partition's file must be there before the manifest is. */
	for (i = 0; !pending && i < partitions; i++) {
		snprintf(name, sizeof name, "part-%05d", i);
		errno = 0;
		if (fstatat(dfd, name, &st, AT_SYMLINK_NOFOLLOW) == -1 ||
		    !S_ISREG(st.st_mode)) {
			xasprintf(err, "%s/%s/%s: %s", dir, id, name,
			    errno != 0 ? strerror(errno) : "not a file");
			goto fail;
		}
	}
	if ((text = json_dumps(manifest, JSON_COMPACT)) == NULL)
		fatalx("json_dumps failed");
	if (ckpt_write_file(dfd, CKPT_MANIFEST_TMP, CKPT_MANIFEST, text,
	    &e) == -1) {
		xasprintf(err, "%s/%s/%s", dir, id, e);
		free(e);
		goto fail;
	}
	/* The manifest's name, and the checkpoint's, must survive a crash. */
	if (fsync(dfd) == -1 || fsync(ufd) == -1) {
		xasprintf(err, "%s/%s: fsync: %s", dir, id, strerror(errno));
		goto fail;
	}
	free(text);
	close(dfd);
	return (json_object());
fail:
	free(text);
	if (dfd != -1)
		close(dfd);
	return (NULL);
}

/* Remove the checkpoints args.ids names, each a UUID, in the uid's
 * directory ufd: {} or {"error": E, "failed": [ids that stay]}. */
static json_t *
ckpt_remove_many(int ufd, const char *dir, json_t *ids, char **err)
{
	json_t		*failed, *reply, *v;
	const char	*id;
	char		*first = NULL;
	size_t		 i;

	json_array_foreach(ids, i, v) {
		id = json_string_value(v);
		if (id == NULL || !plan_is_uuid(id)) {
			xasprintf(err, "args.ids[%zu]: not a UUID", i);
			return (NULL);
		}
	}
	failed = json_array();
	json_array_foreach(ids, i, v) {
		id = json_string_value(v);
		if (ckpt_remove_tree(ufd, id, 1) == 0)
			continue;
		if (first == NULL)
			xasprintf(&first, "%s/%s: %s", dir, id,
			    strerror(errno));
		json_array_append(failed, v);
	}
	fsync(ufd);
	if (first == NULL) {
		json_decref(failed);
		return (json_object());
	}
	reply = json_pack("{s:s,s:o}", "error", first, "failed", failed);
	free(first);
	return (reply);
}

static json_t *
ckpt_remove(json_t *args, int ufd, const char *dir, char **err)
{
	const char	*id;
	json_t		*ids = NULL;
	int		 rc;

	if (json_object_get(args, "ids") != NULL) {
		if (jread_array(args, "args", "ids", JREAD_REQUIRED, &ids,
		    err) == -1)
			return (NULL);
		return (ckpt_remove_many(ufd, dir, ids, err));
	}
	if (ckpt_verb_id(args, &id, err) == -1)
		return (NULL);
	rc = ckpt_remove_tree(ufd, id, 1);
	if (rc == -1)
		xasprintf(err, "%s/%s: %s", dir, id, strerror(errno));
	else
		fsync(ufd);
	return (rc == -1 ? NULL : json_object());
}

/* Is name one of keep's strings? */
static int
ckpt_kept(json_t *keep, const char *name)
{
	json_t	*v;
	size_t	 i;

	json_array_foreach(keep, i, v) {
		if (json_is_string(v) && strcmp(json_string_value(v),
		    name) == 0)
			return (1);
	}
	return (0);
}

/* Is name one a checkpoint's directory holds: its manifest, a
 * partition's file, or either's temporary name while it is written? */
static int
ckpt_owned_name(const char *name)
{
	const char	*p;
	size_t		 n;

	if (strcmp(name, CKPT_MANIFEST) == 0 ||
	    strcmp(name, CKPT_MANIFEST_TMP) == 0)
		return (1);
	p = name[0] == '.' ? name + 1 : name;
	if (strncmp(p, "part-", 5) != 0)
		return (0);
	p += 5;
	if ((n = strspn(p, "0123456789")) < 5)
		return (0);
	p += n;
	return (name[0] == '.' ? strcmp(p, ".tmp") == 0 : *p == '\0');
}

/*
 * Measure checkpoint id in ufd: the bytes its files hold on disk (the
 * larger of their sizes and their blocks), after removing what it does
 * not own (a file the user put there, a link, a directory).  -1 if id is
 * not a directory.
 */
static int64_t
ckpt_measure(int ufd, const char *dir, const char *id)
{
	struct dirent	*e;
	struct stat	 st;
	int64_t		 bytes = 0, blocks;
	DIR		*d;
	int		 fd;

	fd = openat(ufd, id, O_RDONLY | O_DIRECTORY | O_NOFOLLOW | O_CLOEXEC);
	if (fd == -1 || (d = fdopendir(fd)) == NULL) {
		if (fd != -1)
			close(fd);
		return (-1);
	}
	while ((e = readdir(d)) != NULL) {
		if (strcmp(e->d_name, ".") == 0 || strcmp(e->d_name, "..") == 0)
			continue;
		if (fstatat(fd, e->d_name, &st, AT_SYMLINK_NOFOLLOW) == -1)
			continue;	/* gone meanwhile */
		if (!ckpt_owned_name(e->d_name) || !S_ISREG(st.st_mode)) {
			if (ckpt_remove_tree(fd, e->d_name, CKPT_MAX_DEPTH) ==
			    -1)
				log_warn("%s/%s/%s: %s", dir, id, e->d_name,
				    strerror(errno));
			continue;
		}
		blocks = (int64_t)st.st_blocks * 512;
		bytes += blocks > st.st_size ? blocks : st.st_size;
	}
	closedir(d);
	return (bytes);
}

/*
 * Read and check checkpoint id's manifest (the user's own file, so input
 * like any other): one of at most max bytes, a JSON object with the
 * fields of a manifest.  Its summary, what emberd needs and nothing of
 * unbounded size: {id, partitions, records, eager, pending}; or NULL.
 */
static json_t *
ckpt_read_summary(int ufd, const char *id, int64_t max)
{
	json_error_t	 jerr;
	json_t		*m, *plan, *summary = NULL;
	json_int_t	 partitions = 0, records = 0, bytes = 0;
	struct stat	 st;
	char		*buf, *err = NULL;
	int		 dfd, fd, eager = 1, pending = 0;

	if ((dfd = openat(ufd, id, O_RDONLY | O_DIRECTORY | O_NOFOLLOW |
	    O_CLOEXEC)) == -1)
		return (NULL);
	fd = openat(dfd, CKPT_MANIFEST, O_RDONLY | O_NOFOLLOW | O_CLOEXEC |
	    O_NOCTTY | O_NONBLOCK);
	close(dfd);
	if (fd == -1)
		return (NULL);
	if (fstat(fd, &st) == -1 || !S_ISREG(st.st_mode) || st.st_size > max ||
	    st.st_size == 0) {
		close(fd);
		return (NULL);
	}
	buf = xmalloc((size_t)st.st_size);
	if (pread(fd, buf, (size_t)st.st_size, 0) != st.st_size) {
		free(buf);
		close(fd);
		return (NULL);
	}
	close(fd);
	m = json_loadb(buf, (size_t)st.st_size, JSON_REJECT_DUPLICATES, &jerr);
	free(buf);
	if (m == NULL)
		return (NULL);
	if (json_is_object(m) &&
	    jread_int(m, "manifest", "partitions", JREAD_REQUIRED, &partitions,
	    &err) == 0 &&
	    jread_bool(m, "manifest", "pending", JREAD_OPTIONAL, &pending,
	    &err) == 0 &&
	    jread_int(m, "manifest", "records", !pending, &records,
	    &err) == 0 &&
	    jread_int(m, "manifest", "bytes", JREAD_OPTIONAL, &bytes,
	    &err) == 0 &&
	    jread_object(m, "manifest", "plan", pending, &plan, &err) == 0 &&
	    jread_bool(m, "manifest", "eager", JREAD_OPTIONAL, &eager,
	    &err) == 0 && partitions >= 1 &&
	    partitions <= PLAN_MAX_PARTITIONS && records >= 0 && bytes >= 0)
		summary = json_pack("{s:s,s:I,s:I,s:b,s:b}", "id", id,
		    "partitions", partitions, "records", pending ? 0 : records,
		    "eager", pending ? 0 : eager, "pending", pending);
	free(err);
	json_decref(m);
	return (summary);
}

/* Has an entry been there since before before_ms?  Its ctime, which its
 * owner cannot set (as she can its mtime, to the future). */
static int
ckpt_older(const struct stat *st, int64_t before)
{
	return ((int64_t)st->st_ctim.tv_sec * 1000 +
	    st->st_ctim.tv_nsec / 1000000 < before);
}

static json_t *
ckpt_clean(json_t *args, int ufd, const char *dir, char **err)
{
	json_t		*keep = NULL, *found, *sizes, *m;
	json_int_t	 before = 0, removed = 0, max = 0, max_manifest = 0;
	json_int_t	 refused = 0, more = 0, before_pass;
	int64_t		 bytes;
	int		 complete = 0, fd, pass;
	struct stat	 st;
	struct dirent	*e;
	DIR		*d;

	if (jread_array(args, "args", "keep", JREAD_OPTIONAL, &keep,
	    err) == -1 ||
	    jread_int(args, "args", "before_ms", JREAD_REQUIRED, &before,
	    err) == -1 ||
	    jread_bool(args, "args", "complete", JREAD_OPTIONAL, &complete,
	    err) == -1 ||
	    jread_int(args, "args", "max", complete, &max, err) == -1 ||
	    jread_int(args, "args", "max_manifest", complete, &max_manifest,
	    err) == -1)
		return (NULL);
	if ((fd = dup(ufd)) == -1 || (d = fdopendir(fd)) == NULL) {
		xasprintf(err, "%s: %s", dir, strerror(errno));
		if (fd != -1)
			close(fd);
		return (NULL);
	}
	found = json_array();
	sizes = json_object();
	/* Entries removed while the directory is read may let the read skip
	 * one (tmpfs): a pass that removed some is followed by another. */
	for (pass = 0; pass < CKPT_CLEAN_PASSES; pass++) {
		before_pass = removed;
		rewinddir(d);
		while ((e = readdir(d)) != NULL) {
			if (strcmp(e->d_name, ".") == 0 ||
			    strcmp(e->d_name, "..") == 0)
				continue;
			if (fstatat(ufd, e->d_name, &st,
			    AT_SYMLINK_NOFOLLOW) == -1)
				continue;	/* gone meanwhile */
			if (keep != NULL && ckpt_kept(keep, e->d_name)) {
				if (S_ISDIR(st.st_mode) && (bytes =
				    ckpt_measure(ufd, dir, e->d_name)) >= 0)
					json_object_set_new(sizes, e->d_name,
					    json_integer(bytes));
				continue;
			}
			if (complete && S_ISDIR(st.st_mode) &&
			    plan_is_uuid(e->d_name) &&
			    (m = ckpt_read_summary(ufd, e->d_name,
			    max_manifest)) != NULL) {
				if ((json_int_t)json_array_size(found) >=
				    max) {
					more++;		/* kept, not served */
					json_decref(m);
					continue;
				}
				json_object_set_new(m, "bytes", json_integer(
				    ckpt_measure(ufd, dir, e->d_name)));
				json_array_append_new(found, m);
				continue;
			}
			if (!ckpt_older(&st, before))
				continue;	/* made since: being written */
			if (complete && S_ISDIR(st.st_mode) &&
			    plan_is_uuid(e->d_name))
				refused++;
			if (ckpt_remove_tree(ufd, e->d_name,
			    CKPT_MAX_DEPTH) == 0)
				removed++;
			else
				log_warn("%s/%s: %s", dir, e->d_name,
				    strerror(errno));
		}
		if (complete || removed == before_pass)
			break;
	}
	closedir(d);
	if (removed > 0)
		fsync(ufd);
	return (json_pack("{s:I,s:o,s:o,s:I,s:I}", "removed", removed,
	    "checkpoints", found, "sizes", sizes, "refused", refused, "more",
	    more));
}

/* checkpoint_plan: the plan (and text files) of a lazy checkpoint's
 * manifest, of at most args.max bytes, for its first computation. */
static json_t *
ckpt_plan(json_t *args, int ufd, const char *dir, char **err)
{
	json_error_t	 jerr;
	json_t		*m, *plan, *files = NULL, *reply;
	json_int_t	 max;
	struct stat	 st;
	const char	*id;
	char		*buf;
	int		 dfd, fd, pending = 0;

	if (ckpt_verb_id(args, &id, err) == -1 ||
	    jread_int(args, "args", "max", JREAD_REQUIRED, &max, err) == -1)
		return (NULL);
	if ((dfd = openat(ufd, id, O_RDONLY | O_DIRECTORY | O_NOFOLLOW |
	    O_CLOEXEC)) == -1 || (fd = openat(dfd, CKPT_MANIFEST, O_RDONLY |
	    O_NOFOLLOW | O_CLOEXEC | O_NOCTTY | O_NONBLOCK)) == -1) {
		xasprintf(err, "%s/%s: %s", dir, id, strerror(errno));
		if (dfd != -1)
			close(dfd);
		return (NULL);
	}
	close(dfd);
	if (fstat(fd, &st) == -1 || !S_ISREG(st.st_mode) || st.st_size > max ||
	    st.st_size == 0) {
		xasprintf(err, "%s/%s/%s: not a file of at most %lld bytes",
		    dir, id, CKPT_MANIFEST, (long long)max);
		close(fd);
		return (NULL);
	}
	buf = xmalloc((size_t)st.st_size);
	if (pread(fd, buf, (size_t)st.st_size, 0) != st.st_size) {
		xasprintf(err, "%s/%s/%s: short", dir, id, CKPT_MANIFEST);
		free(buf);
		close(fd);
		return (NULL);
	}
	close(fd);
	m = json_loadb(buf, (size_t)st.st_size, JSON_REJECT_DUPLICATES, &jerr);
	free(buf);
	if (m == NULL || !json_is_object(m) ||
	    jread_bool(m, "manifest", "pending", JREAD_REQUIRED, &pending,
	    err) == -1 ||
	    jread_object(m, "manifest", "plan", JREAD_REQUIRED, &plan,
	    err) == -1 ||
	    jread_array(m, "manifest", "files", JREAD_OPTIONAL, &files,
	    err) == -1) {
		if (*err == NULL)
			xasprintf(err, "%s/%s/%s: not a manifest", dir, id,
			    CKPT_MANIFEST);
		json_decref(m);
		return (NULL);
	}
	reply = json_pack("{s:O}", "plan", plan);
	if (files != NULL)
		json_object_set(reply, "files", files);
	json_decref(m);
	return (reply);
}

/* A verb's reply: what it made, or {"error": why} (the user's files are
 * not as they should be, or emberd asked for something that makes no
 * sense: either way emberd logs it and the checkpoint is not served). */
static json_t *
ckpt_verb(json_t *(*fn)(json_t *, int, const char *, char **), json_t *args,
    const int *fds_in, size_t nin, size_t *nout)
{
	json_t		*reply = NULL;
	const char	*dir;
	char		*err = NULL;
	int		 ufd;

	*nout = 0;
	if ((ufd = ckpt_verb_dir(args, fds_in, nin, &dir, &err)) != -1) {
		reply = fn(args, ufd, dir, &err);
		close(ufd);
	}
	if (reply != NULL)
		return (reply);
	reply = json_pack("{s:s}", "error", err != NULL ? err : "failed");
	free(err);
	return (reply);
}

json_t *
ckpt_verb_commit(json_t *args, const int *fds_in, size_t nin, int *fds_out,
    size_t *nout, char **err)
{
	(void)fds_out; (void)err;
	return (ckpt_verb(ckpt_commit, args, fds_in, nin, nout));
}

json_t *
ckpt_verb_remove(json_t *args, const int *fds_in, size_t nin, int *fds_out,
    size_t *nout, char **err)
{
	(void)fds_out; (void)err;
	return (ckpt_verb(ckpt_remove, args, fds_in, nin, nout));
}

json_t *
ckpt_verb_clean(json_t *args, const int *fds_in, size_t nin, int *fds_out,
    size_t *nout, char **err)
{
	(void)fds_out; (void)err;
	return (ckpt_verb(ckpt_clean, args, fds_in, nin, nout));
}

json_t *
ckpt_verb_plan(json_t *args, const int *fds_in, size_t nin, int *fds_out,
    size_t *nout, char **err)
{
	(void)fds_out; (void)err;
	return (ckpt_verb(ckpt_plan, args, fds_in, nin, nout));
}
