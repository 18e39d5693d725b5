#include <sys/types.h>
#include <sys/mman.h>
#include <sys/socket.h>
#include <sys/stat.h>

#include <errno.h>
#include <fcntl.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#include <jansson.h>

#include "bindex.h"
#include "checkpoint.h"
#include "fdpass.h"
#include "frame.h"
#include "helper.h"
#include "hmsg.h"
#include "jread.h"
#include "log.h"
#include "plan.h"
#include "protocol.h"
#include "savecommit.h"
#include "xmalloc.h"

static json_t	*helper_plan_check(json_t *, const int *, size_t, int *,
		    size_t *, char **);
static json_t	*helper_save_begin(json_t *, const int *, size_t, int *,
		    size_t *, char **);
static json_t	*helper_save_commit(json_t *, const int *, size_t, int *,
		    size_t *, char **);
static json_t	*helper_save_abort(json_t *, const int *, size_t, int *,
		    size_t *, char **);
static json_t	*helper_broadcast_read(json_t *, const int *, size_t, int *,
		    size_t *, char **);
static json_t	*helper_broadcast_index(json_t *, const int *, size_t,
		    int *, size_t *, char **);
static json_t	*helper_release(json_t *, const int *, size_t, int *,
		    size_t *, char **);

/* What a helper can be asked to do: common/hmsg.h's table of verbs. */
static const helper_verb_fn helper_verbs[HMSG_NVERBS] = {
#define HELPER_VERB(id, name, fn, rd)	[HMSG_##id] = fn,
	HMSG_VERBS(HELPER_VERB)
#undef HELPER_VERB
};

/* Find a verb by name. */
helper_verb_fn
helper_find_verb(const char *name)
{
	int	verb;

	if ((verb = hmsg_verb_find(name)) == -1)
		return (NULL);
	return (helper_verbs[verb]);
}

/*
 * plan_check: {"plan": P}.  Check what the plan names outside itself as
 * the user sees it: expand the text paths' globs, open and size each file,
 * check each udf's library and symbol.  Replies {"error": E} (E starts
 * with the plan field at fault), or {"files": [...]} for a text source
 * and {"udfs": [{"deterministic": B}, ...]}, one per udf op in order; a
 * plan with nested plans (join, union) also has {"nested": [F, ...]}, the
 * files of each (null if not text), and their udfs in "udfs", in
 * plan_walk's order.
 */
struct helper_checked {
	struct plan	*top;
	json_t		*nested;
	json_t		*udfs;
};

/* Add what the check found in one plan of the tree to the reply. */
static void
helper_plan_checked(struct plan *plan, void *arg)
{
	struct helper_checked	*c = arg;
	size_t			 i;

	if (plan != c->top) {
		if (c->nested == NULL)
			c->nested = json_array();
		json_array_append_new(c->nested,
		    plan->source == PLAN_SOURCE_TEXT ?
		    plan_files_to_json(plan) : json_null());
	}
	for (i = 0; i < plan->nops; i++) {
		if (plan->ops[i].type == PLAN_OP_UDF)
			json_array_append_new(c->udfs, json_pack("{s:b}",
			    "deterministic", plan->ops[i].udf_deterministic));
	}
}

static json_t *
helper_plan_check(json_t *args, const int *fds_in, size_t nin,
    int *fds_out, size_t *nout, char **err)
{
	static const char *const keys[] = { "plan", NULL };
	struct plan		*plan = NULL;
	struct helper_checked	 c;
	json_t			*plan_json, *reply;
	char			*perr = NULL;

	(void)fds_in; (void)nin; (void)fds_out;
	*nout = 0;
	if (jread_only(args, "args", keys, err) == -1 ||
	    jread_object(args, "args", "plan", JREAD_REQUIRED, &plan_json,
	    err) == -1)
		return (NULL);
	if (plan_parse(plan_json, &plan, &perr) == -1 ||
	    plan_check_resources(plan, &perr) == -1) {
		reply = json_pack("{s:s}", "error", perr);
		free(perr);
		plan_free(plan);
		return (reply);
	}
	reply = json_object();
	if (plan->source == PLAN_SOURCE_TEXT)
		json_object_set_new(reply, "files", plan_files_to_json(plan));
	c.top = plan;
	c.nested = NULL;
	c.udfs = json_array();
	plan_walk(plan, helper_plan_checked, &c);
	json_object_set_new(reply, "udfs", c.udfs);
	if (c.nested != NULL)
		json_object_set_new(reply, "nested", c.nested);
	plan_free(plan);
	return (reply);
}

/* The keys of what save_begin made, as its reply carries them. */
static const char *const helper_save_id_keys[] = { "target_dev",
    "target_ino", "task_dev", "task_ino", NULL };

/* Read a save step's arguments: path and operation, and with ids what
 * save_begin made.  0, or -1 with *err. */
static int
helper_save_args(json_t *args, const char *const *keys, const char **path,
    const char **operation, struct savecommit_ids *ids, char **err)
{
	json_t		*j;
	json_int_t	 v[4];
	size_t		 i;

	if (jread_only(args, "args", keys, err) == -1 ||
	    jread_string(args, "args", "path", JREAD_REQUIRED, path,
	    err) == -1 ||
	    jread_string(args, "args", "operation", JREAD_REQUIRED, operation,
	    err) == -1)
		return (-1);
	if (ids == NULL)
		return (0);
	if (jread_object(args, "args", "ids", JREAD_REQUIRED, &j, err) == -1 ||
	    jread_only(j, "args.ids", helper_save_id_keys, err) == -1)
		return (-1);
	for (i = 0; i < 4; i++) {
		if (jread_int(j, "args.ids", helper_save_id_keys[i],
		    JREAD_REQUIRED, &v[i], err) == -1)
			return (-1);
	}
	/* Sent as int64: an inode number may use the top bit. */
	ids->target_dev = (uint64_t)v[0];
	ids->target_ino = (uint64_t)v[1];
	ids->task_dev = (uint64_t)v[2];
	ids->task_ino = (uint64_t)v[3];
	return (0);
}

/* The reply of a save step: {} or {"error": E}; frees serr. */
static json_t *
helper_save_reply(int rc, char *serr)
{
	json_t	*reply;

	if (rc == 0)
		return (json_object());
	reply = json_pack("{s:s}", "error", serr);
	free(serr);
	return (reply);
}

/*
 * save_begin: {"path": P, "operation": O, "overwrite": B}.  Check or
 * create P and make P/_temporary/O (worker/savecommit.c).  Replies
 * {"ids": {...}}, what it made, for the next steps to check; or
 * {"error": E}, E starting with "options.path".
 */
static json_t *
helper_save_begin(json_t *args, const int *fds_in, size_t nin,
    int *fds_out, size_t *nout, char **err)
{
	static const char *const keys[] = { "path", "operation", "overwrite",
	    NULL };
	struct savecommit_ids	 ids;
	const char		*path, *operation;
	char			*serr = NULL;
	int			 overwrite;

	(void)fds_in; (void)nin; (void)fds_out;
	*nout = 0;
	if (helper_save_args(args, keys, &path, &operation, NULL, err) == -1 ||
	    jread_bool(args, "args", "overwrite", JREAD_REQUIRED, &overwrite,
	    err) == -1)
		return (NULL);
	if (savecommit_begin(path, operation, overwrite, &ids, &serr) == -1)
		return (helper_save_reply(-1, serr));
	return (json_pack("{s:{s:I,s:I,s:I,s:I}}", "ids",
	    "target_dev", (json_int_t)ids.target_dev,
	    "target_ino", (json_int_t)ids.target_ino,
	    "task_dev", (json_int_t)ids.task_dev,
	    "task_ino", (json_int_t)ids.task_ino));
}

/*
 * save_commit: {"path", "operation", "partitions": N, "overwrite": B,
 * "ids"}.  Move the N parts into P, then _SUCCESS.  Replies {} or
 * {"error": E}.
 */
static json_t *
helper_save_commit(json_t *args, const int *fds_in, size_t nin,
    int *fds_out, size_t *nout, char **err)
{
	static const char *const keys[] = { "path", "operation", "partitions",
	    "overwrite", "ids", NULL };
	struct savecommit_ids	 ids;
	const char		*path, *operation;
	char			*serr = NULL;
	json_int_t		 partitions;
	int			 overwrite, rc;

	(void)fds_in; (void)nin; (void)fds_out;
	*nout = 0;
	if (helper_save_args(args, keys, &path, &operation, &ids, err) == -1 ||
	    jread_int(args, "args", "partitions", JREAD_REQUIRED, &partitions,
	    err) == -1 ||
	    jread_bool(args, "args", "overwrite", JREAD_REQUIRED, &overwrite,
	    err) == -1)
		return (NULL);
	if (partitions < 0 || partitions > INT32_MAX) {
		xasprintf(err, "args.partitions: %lld is out of range",
		    (long long)partitions);
		return (NULL);
	}
	rc = savecommit_finish(path, operation, (int)partitions, overwrite,
	    &ids, &serr);
	return (helper_save_reply(rc, serr));
}

/* save_abort: {"path", "operation", "ids"}.  Remove what the save made;
 * without ids (save_begin's answer was lost), what a beginning makes.
 * Replies {} or {"error": E}. */
static json_t *
helper_save_abort(json_t *args, const int *fds_in, size_t nin,
    int *fds_out, size_t *nout, char **err)
{
	static const char *const keys[] = { "path", "operation", "ids", NULL };
	struct savecommit_ids	 ids;
	const char		*path, *operation;
	char			*serr = NULL;
	int			 rc;

	(void)fds_in; (void)nin; (void)fds_out;
	*nout = 0;
	if (json_object_get(args, "ids") == NULL) {
		if (helper_save_args(args, keys, &path, &operation, NULL,
		    err) == -1)
			return (NULL);
		rc = savecommit_unbegin(path, operation, &serr);
		return (helper_save_reply(rc, serr));
	}
	if (helper_save_args(args, keys, &path, &operation, &ids, err) == -1)
		return (NULL);
	rc = savecommit_abort(path, operation, &ids, &serr);
	return (helper_save_reply(rc, serr));
}

/* Copy len bytes of from (at offset 0) to the start of to; 0, or -1
 * with *why. */
static int
helper_copy(int from, int to, int64_t len, const char **why)
{
	char	 buf[64 * 1024];
	loff_t	 in = 0, out = 0;
	ssize_t	 n, w;
	int	 fallback = 0;

	while (in < len) {
		if (!fallback) {
			n = copy_file_range(from, &in, to, &out,
			    (size_t)(len - in), 0);
			if (n == -1 && errno == EINTR)
				continue;
			if (n == -1 && (errno == EXDEV || errno == EINVAL ||
			    errno == ENOSYS || errno == EOPNOTSUPP)) {
				fallback = 1;
				continue;
			}
		} else {
			n = pread(from, buf, (size_t)(len - in) < sizeof buf ?
			    (size_t)(len - in) : sizeof buf, in);
			if (n == -1 && errno == EINTR)
				continue;
			for (w = 0; n > 0 && w < n;) {
				ssize_t k = pwrite(to, buf + w, (size_t)(n - w),
				    out + w);

				if (k == -1 && errno == EINTR)
					continue;
				if (k <= 0) {
					*why = strerror(errno);
					return (-1);
				}
				w += k;
			}
			if (n > 0) {
				in += n;
				out += n;
			}
		}
		if (n == 0) {
			*why = "shorter than it was";
			return (-1);
		}
		if (n == -1) {
			*why = strerror(errno);
			return (-1);
		}
	}
	return (0);
}

/*
 * The broadcast verbs' arguments, {"max": N, "max_key": K}, and their two
 * descriptors: 0, or -1 with *err.
 */
static int
helper_broadcast_args(json_t *args, size_t nin, json_int_t *max,
    const char **key, char **err)
{
	static const char *const keys[] = { "max", "max_key", NULL };

	if (jread_only(args, "args", keys, err) == -1 ||
	    jread_int(args, "args", "max", JREAD_REQUIRED, max, err) == -1 ||
	    jread_string(args, "args", "max_key", JREAD_REQUIRED, key,
	    err) == -1)
		return (-1);
	if (nin != 2) {
		xasprintf(err, "%zu descriptors, expected 2", nin);
		return (-1);
	}
	return (0);
}

/*
 * broadcast_read: {"max": N, "max_key": K}, with two descriptors: the one
 * the client passed, and emberd's memfd.  Copy the whole file behind the
 * client's descriptor into the memfd, reading through that descriptor as
 * the user, never by a name.  Replies {"size": S} or {"error": E}.
 */
static json_t *
helper_broadcast_read(json_t *args, const int *fds_in, size_t nin,
    int *fds_out, size_t *nout, char **err)
{
	struct stat	 st;
	json_int_t	 max;
	const char	*key, *why;
	json_t		*reply;
	char		*msg;
	int		 mode;

	(void)fds_out;
	*nout = 0;
	if (helper_broadcast_args(args, nin, &max, &key, err) == -1)
		return (NULL);
	if (fstat(fds_in[0], &st) == -1 || !S_ISREG(st.st_mode))
		return (json_pack("{s:s}", "error", "not a regular file"));
	mode = fcntl(fds_in[0], F_GETFL);
	if (mode == -1 || (mode & O_PATH) == O_PATH ||
	    (mode & O_ACCMODE) == O_WRONLY)
		return (json_pack("{s:s}", "error", "not open for reading"));
	if (st.st_size > max) {
		xasprintf(&msg, "%lld bytes, over %s (%lld more may be held)",
		    (long long)st.st_size, key, (long long)max);
		reply = json_pack("{s:s,s:I}", "error", msg, "over",
		    (json_int_t)st.st_size);
		free(msg);
		return (reply);
	}
	if (helper_copy(fds_in[0], fds_in[1], st.st_size, &why) == -1)
		return (json_pack("{s:s}", "error", why));
	return (json_pack("{s:I}", "size", (json_int_t)st.st_size));
}

/* Build the index of a mapping into a memfd of size bytes: NULL, or why
 * not. */
static const char *
helper_index_build(const void *bytes, size_t len, size_t lines, int ifd,
    size_t size, struct bindex_stats *st)
{
	void	*out;

	if (ftruncate(ifd, (off_t)size) == -1)
		return (strerror(errno));
	out = mmap(NULL, size, PROT_READ | PROT_WRITE, MAP_SHARED |
	    MAP_POPULATE, ifd, 0);
	if (out == MAP_FAILED)
		return (strerror(errno));
	bindex_build(bytes, len, lines, out, size, st);
	/* emberd cannot seal it while a writable mapping is left. */
	munmap(out, size);
	return (NULL);
}

/*
 * broadcast_index: {"max": N, "max_key": K}, with two descriptors:
 * emberd's sealed memfd of a broadcast's bytes and an empty memfd for
 * their set index (common/bindex.h).  Build the index into it, as the
 * user, if it takes at most max bytes.  Replies {"size": S, "lines": L,
 * "distinct": D, "ms": M} or {"error": E} (with "over": S past max).
 */
static json_t *
helper_broadcast_index(json_t *args, const int *fds_in, size_t nin,
    int *fds_out, size_t *nout, char **err)
{
	struct bindex_stats	 st;
	struct timespec		 t0, t1;
	struct stat		 sb;
	json_int_t		 max;
	const char		*key, *why;
	json_t			*reply;
	void			*map = NULL;
	size_t			 len, lines, size;
	char			*msg;

	(void)fds_out;
	*nout = 0;
	if (helper_broadcast_args(args, nin, &max, &key, err) == -1)
		return (NULL);
	clock_gettime(CLOCK_MONOTONIC, &t0);
	if (fstat(fds_in[0], &sb) == -1)
		return (json_pack("{s:s}", "error", strerror(errno)));
	len = (size_t)sb.st_size;
	if (len > 0 && (map = mmap(NULL, len, PROT_READ, MAP_SHARED,
	    fds_in[0], 0)) == MAP_FAILED)
		return (json_pack("{s:s}", "error", strerror(errno)));
	if ((size = bindex_size(map, len, &lines)) == 0)
		reply = json_pack("{s:s}", "error", "too large to index");
	else if ((json_int_t)size > max) {
		xasprintf(&msg, "%zu bytes for %zu lines, over %s (%lld "
		    "more may be held)", size, lines, key, (long long)max);
		reply = json_pack("{s:s,s:I}", "error", msg, "over",
		    (json_int_t)size);
		free(msg);
	} else if ((why = helper_index_build(map, len, lines, fds_in[1],
	    size, &st)) != NULL)
		reply = json_pack("{s:s}", "error", why);
	else {
		clock_gettime(CLOCK_MONOTONIC, &t1);
		reply = json_pack("{s:I,s:I,s:I,s:I}", "size",
		    (json_int_t)size, "lines", (json_int_t)st.lines,
		    "distinct", (json_int_t)st.distinct, "ms",
		    (json_int_t)((t1.tv_sec - t0.tv_sec) * 1000 +
		    (t1.tv_nsec - t0.tv_nsec) / 1000000));
	}
	if (map != NULL)
		munmap(map, len);
	return (reply);
}

/*
 * release: {}, with descriptors to close.  emberd hands over the last
 * reference of a big memfd so that freeing its pages costs this process
 * the time, not emberd's loop (helper_main closes what came).
 */
static json_t *
helper_release(json_t *args, const int *fds_in, size_t nin, int *fds_out,
    size_t *nout, char **err)
{
	static const char *const keys[] = { NULL };

	(void)fds_in; (void)nin; (void)fds_out;
	*nout = 0;
	if (jread_only(args, "args", keys, err) == -1)
		return (NULL);
	return (json_object());
}

/* Read exactly len bytes, collecting descriptors: 0, or -1. */
static int
helper_read(int sock, void *buf, size_t len, int *fds, size_t *nfds)
{
	int	overflow = 0;
	ssize_t	n;

	while (len > 0) {
		n = fd_recv_many(sock, buf, len, fds, HELPER_MAX_FDS, nfds,
		    &overflow);
		if (n <= 0)
			return (-1);
		buf = (char *)buf + n;
		len -= (size_t)n;
	}
	return (overflow ? -1 : 0);
}

/* Read the request frame: its bytes, *len of them; NULL (logged) if it
 * cannot be. */
static char *
helper_read_request(int sock, int *fds, size_t *nfds, size_t *size)
{
	unsigned char	 hdr[4];
	char		*buf;
	int32_t		 len;

	if (helper_read(sock, hdr, sizeof hdr, fds, nfds) == -1) {
		log_error("helper: reading the request: %s",
		    errno != 0 ? strerror(errno) : "end of file");
		return (NULL);
	}
	len = be32_get(hdr);
	if (len <= 0 || len > HELPER_MAX_REQUEST) {
		log_error("helper: request of %d bytes", len);
		return (NULL);
	}
	buf = xmalloc((size_t)len);
	if (helper_read(sock, buf, (size_t)len, fds, nfds) == -1) {
		log_error("helper: reading the request: short");
		free(buf);
		return (NULL);
	}
	*size = (size_t)len;
	return (buf);
}

/* Write the reply frame (text, len bytes, which this frees), the
 * descriptors with its first bytes. */
static int
helper_write_reply(int sock, char *text, size_t len, const int *fds,
    size_t nfds)
{
	unsigned char	*buf;
	size_t		 off = 0;
	ssize_t		 n;

	if (len > HELPER_MAX_REPLY) {
		free(text);
		text = hmsg_reply_encode_error("the reply is too large", &len);
		nfds = 0;
	}
	buf = xmalloc(len + 4);
	be32_put(buf, (int32_t)len);
	memcpy(buf + 4, text, len);
	free(text);
	len += 4;
	n = fd_send_many(sock, buf, len, fds, nfds);
	while (n > 0 && (off += (size_t)n) < len) {
		do
			n = send(sock, buf + off, len - off, MSG_NOSIGNAL);
		while (n == -1 && errno == EINTR);
	}
	free(buf);
	if (n <= 0) {
		log_error("helper: writing the reply: %s", strerror(errno));
		return (-1);
	}
	return (0);
}

/* Run the request's verb: the reply's text, ok or not, *len bytes. */
static char *
helper_dispatch(const char *buf, size_t size, const int *fds, size_t nfds,
    int *out, size_t *nout, size_t *len)
{
	enum hmsg_verb	 verb;
	json_t		*req, *args, *reply;
	char		*err = NULL, *text;

	if (hmsg_request_decode(buf, size, &req, &verb, &args, &err) == -1)
		goto fail;
	log_debug("helper %ld: %s", (long)getpid(), hmsg_verb_name(verb));
	if ((reply = helper_verbs[verb](args, fds, nfds, out, nout,
	    &err)) == NULL) {
		*nout = 0;
		goto fail;
	}
	json_decref(req);
	text = hmsg_reply_encode(reply, len);
	json_decref(reply);
	return (text);
fail:
	json_decref(req);
	log_error("helper: bad request: %s", err);
	text = hmsg_reply_encode_error(err, len);
	free(err);
	return (text);
}

int
helper_main(int sock)
{
	char	*req, *reply;
	int	 in[HELPER_MAX_FDS], out[HELPER_MAX_FDS], rc;
	size_t	 nin = 0, nout = 0, i, size, len;

	if ((req = helper_read_request(sock, in, &nin, &size)) == NULL) {
		for (i = 0; i < nin; i++)
			close(in[i]);
		return (1);
	}
	reply = helper_dispatch(req, size, in, nin, out, &nout, &len);
	free(req);
	for (i = 0; i < nin; i++)
		close(in[i]);
	rc = helper_write_reply(sock, reply, len, out, nout) == -1 ? 1 : 0;
	for (i = 0; i < nout; i++)
		close(out[i]);
	return (rc);
}
