/*
 * The checkpoint registry: each checkpoint's id, owner, state, readers
 * and writer, its manifest's commit, drops, status, and emberd's start and
 * exit.  What lies on disk is checkpoint_store.c's.
 */
#include <errno.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include <uuid/uuid.h>

#include "emberd.h"
#include "jread.h"
#include "limit.h"
#include "log.h"
#include "operation.h"
#include "plan.h"
#include "request.h"
#include "session.h"
#include "xmalloc.h"

#include "checkpoint_private.h"

static const char *const ckpt_state_names[] = { "pending", "writing",
    "ready" };

struct checkpoint_list checkpoints = TAILQ_HEAD_INITIALIZER(checkpoints);
static int64_t	 ckpt_started;		/* ms since the epoch: what is older
					   is a leftover */

static void	checkpoint_commit_manifest(struct checkpoint *);
static void	checkpoint_write_manifest(struct checkpoint *, json_t *,
		    helper_cb);
static void	checkpoint_record(struct checkpoint *, json_t *);
static void	checkpoint_collect(struct checkpoint *);

const char *
checkpoint_id(const struct checkpoint *c)
{
	return (c->id);
}

int
checkpoint_partitions(const struct checkpoint *c)
{
	return (c->partitions);
}

const char *
checkpoint_dir(const struct checkpoint *c)
{
	return (c->dir);
}

int
checkpoint_sync(const struct checkpoint *c)
{
	return (!c->local);
}

int64_t
checkpoint_records(const struct checkpoint *c)
{
	return (c->records);
}

int64_t
checkpoint_bytes(const struct checkpoint *c)
{
	return (c->bytes);
}

int
checkpoint_ready(const struct checkpoint *c)
{
	return (c->state == CKPT_READY);
}

/* A lazy checkpoint's plan as it keeps it. */
static char *
checkpoint_plan_text(json_t *plan)
{
	char	*text;

	if ((text = json_dumps(plan, JSON_COMPACT | JSON_ENCODE_ANY)) == NULL)
		fatalx("%s: out of memory", __func__);
	return (text);
}

/* Free a checkpoint that is out of the registry and of every list. */
static void
checkpoint_free(struct checkpoint *c)
{
	free(c->plan);
	if (c->files != NULL)
		json_decref(c->files);
	free(c->uid_dir);
	free(c->dir);
	free(c);
}

/* Charge a new checkpoint to its uid. */
int
checkpoint_charge(uid_t uid, char **err)
{
	return (limit_charge(uid, LIMIT_CHECKPOINTS, 1, err));
}

struct checkpoint *
checkpoint_create(struct session *s, struct operation *writer, int local,
    int eager, json_t *plan, json_t *files, int partitions, const char **class,
    char **err)
{
	struct checkpoint	*c;
	uuid_t			 u;
	char			*e = NULL;
	int			 base;
	const char		*basepath;

	*class = "CHECKPOINT_FAILED";
	if ((base = checkpoint_base(local, err)) == -1)
		return (NULL);
	basepath = local ? ckpt_local_path : ckpt_reliable_path;
	if (checkpoint_charge(session_uid(s), &e) == -1) {
		*class = "LIMIT_EXCEEDED";
		*err = e;
		return (NULL);
	}
	c = xcalloc(1, sizeof *c);
	TAILQ_INIT(&c->waiters);
	c->uid = session_uid(s);
	c->gid = session_gid(s);
	if ((c->uid_dir = checkpoint_uid_dir(base, basepath, c->uid, c->gid,
	    &e)) == NULL) {
		xasprintf(err, "%s%s", local ? "" : "checkpoint.dir: ", e);
		free(e);
		limit_release(c->uid, LIMIT_CHECKPOINTS, 1);
		free(c);
		return (NULL);
	}
	uuid_generate(u);
	uuid_unparse_lower(u, c->id);
	xasprintf(&c->dir, "%s/%s", c->uid_dir, c->id);
	c->session = local ? s : NULL;
	c->local = local;
	c->eager = eager;
	c->partitions = partitions;
	c->created_ms = ember_now_ms();
	c->state = eager ? CKPT_WRITING : CKPT_PENDING;
	c->writer = eager ? writer : NULL;
	if (!eager) {
		c->plan = checkpoint_plan_text(plan);
		c->files = files != NULL ? json_incref(files) : NULL;
	}
	TAILQ_INSERT_TAIL(&checkpoints, c, entry);
	log_debug("checkpoint %s: %s %s of %d partitions for uid %ld", c->id,
	    eager ? "eager" : "lazy", local ? "local" : "reliable",
	    partitions, (long)c->uid);
	if (!eager && !local)
		checkpoint_record(c, plan);
	return (c);
}

int
checkpoint_written(struct checkpoint *c, int64_t records, int64_t bytes,
    char **err)
{
	if (bytes > 0 && limit_charge(c->uid, LIMIT_CHECKPOINT_BYTES, bytes,
	    err) == -1)
		return (-1);
	c->bytes += bytes;
	c->records += records;
	c->written++;
	return (0);
}

/* Forget what a computation wrote, and give back its bytes. */
static void
checkpoint_reset(struct checkpoint *c)
{
	if (c->bytes > 0)
		limit_release(c->uid, LIMIT_CHECKPOINT_BYTES, c->bytes);
	c->bytes = 0;
	c->records = 0;
	c->written = 0;
}

/* Tell the reads waiting for c that it is ready, or why it is not. */
static void
checkpoint_wake(struct checkpoint *c, const char *why)
{
	TAILQ_HEAD(, ckpt_waiter) list = TAILQ_HEAD_INITIALIZER(list);
	struct ckpt_waiter	*w;

	/* An operation told may end, and a drop may be waiting for that:
	 * c is held until every one was told. */
	while ((w = TAILQ_FIRST(&c->waiters)) != NULL) {
		TAILQ_REMOVE(&c->waiters, w, entry);
		TAILQ_INSERT_TAIL(&list, w, entry);
	}
	c->users++;
	while ((w = TAILQ_FIRST(&list)) != NULL) {
		TAILQ_REMOVE(&list, w, entry);
		operation_checkpoint_ready(w->op, why);
		free(w);
	}
	checkpoint_unuse(c);
}

/* The manifest is written (or not): tell the writing operation. */
static void
checkpoint_committed_cb(const struct hmsg_reply *reply, int *fds,
    size_t nfds, const char *class, const char *error, void *arg)
{
	struct checkpoint	*c = arg;
	struct operation	*op = c->writer;
	const char		*why;
	char			*msg = NULL;

	(void)class;
	c->helper = NULL;
	ember_check_drained();
	if ((why = checkpoint_call_error(reply, fds, nfds, error)) != NULL)
		xasprintf(&msg, "checkpoint %s: %s", c->id, why);
	c->writer = NULL;
	if (msg == NULL) {
		c->state = CKPT_READY;
		log_info("checkpoint %s ready: %d partitions, %lld records, "
		    "%lld bytes", c->id, c->partitions, (long long)c->records,
		    (long long)c->bytes);
	}
	/* The operation answers its client (and may end) first; it
	 * forgets c then. */
	if (op != NULL && c->done != NULL)
		c->done(op, msg);
	c->done = NULL;
	if (msg != NULL)
		checkpoint_abandon(c, NULL);
	else
		checkpoint_wake(c, NULL);	/* c may be gone */
	free(msg);
}

void
checkpoint_commit(struct checkpoint *c, struct operation *op,
    void (*done)(struct operation *, const char *))
{
	c->writer = op;
	c->done = done;
	if (c->written != c->partitions)
		fatalx("checkpoint %s: %d of %d partitions written", c->id,
		    c->written, c->partitions);
	if (c->local) {
		/* Only emberd knows of it: no manifest to write. */
		c->state = CKPT_READY;
		c->writer = NULL;
		c->done = NULL;
		done(op, NULL);
		checkpoint_wake(c, NULL);	/* c may be gone */
		return;
	}
	if (c->recording) {
		/* Its pending manifest is being written: this one after. */
		c->commit_waits = 1;
		return;
	}
	checkpoint_commit_manifest(c);
}

/* Have the user's helper write c's manifest, last. */
static void
checkpoint_commit_manifest(struct checkpoint *c)
{
	checkpoint_write_manifest(c, json_pack("{s:i,s:i,s:I,s:I,s:b,s:I}",
	    "version", 1, "partitions", c->partitions, "records",
	    (json_int_t)c->records, "bytes", (json_int_t)c->bytes, "eager",
	    c->eager, "created", (json_int_t)time(NULL)),
	    checkpoint_committed_cb);
}

/* Have the user's helper write manifest m (stolen) as c's; cb answers. */
static void
checkpoint_write_manifest(struct checkpoint *c, json_t *m, helper_cb cb)
{
	json_t		*args;
	const char	*class;
	char		*err = NULL;

	args = json_pack("{s:s,s:s,s:o}", "dir", c->uid_dir, "id", c->id,
	    "manifest", m);
	c->helper = checkpoint_run(c->uid, c->gid, 0, 0, "checkpoint_commit",
	    args, cb, c, &class, &err);
	json_decref(args);
	if (c->helper == NULL) {
		cb(NULL, NULL, 0, class, err, c);
		free(err);
	}
}

/* The pending manifest of a lazy reliable checkpoint is written (or not:
 * the checkpoint is served, but would not outlive emberd). */
static void
checkpoint_recorded_cb(const struct hmsg_reply *reply, int *fds,
    size_t nfds, const char *class, const char *error, void *arg)
{
	struct checkpoint	*c = arg;

	(void)class;
	c->helper = NULL;
	c->recording = 0;
	ember_check_drained();
	if ((error = checkpoint_call_error(reply, fds, nfds, error)) != NULL)
		log_warn("checkpoint %s: its manifest: %s (it will not "
		    "outlive this emberd until it is computed)", c->id, error);
	if (c->commit_waits) {
		c->commit_waits = 0;
		checkpoint_commit_manifest(c);
		return;
	}
	checkpoint_collect(c);		/* c may be gone */
}

/* Write the manifest of a lazy reliable checkpoint, which keeps its plan
 * (and its text files as checked), so that it outlives emberd. */
static void
checkpoint_record(struct checkpoint *c, json_t *plan)
{
	json_t	*m;

	m = json_pack("{s:i,s:b,s:b,s:i,s:O,s:I}", "version", 1, "pending", 1,
	    "eager", 0, "partitions", c->partitions, "plan", plan,
	    "created", (json_int_t)time(NULL));
	if (c->files != NULL)
		json_object_set(m, "files", c->files);
	c->recording = 1;
	checkpoint_write_manifest(c, m, checkpoint_recorded_cb);
}

void
checkpoint_abandon(struct checkpoint *c, struct operation *op)
{
	if (op != NULL && c->writer != op)
		return;
	if (c->helper != NULL && !c->recording) {
		helper_cancel(c->helper);
		c->helper = NULL;
	}
	c->commit_waits = 0;
	c->writer = NULL;
	c->done = NULL;
	checkpoint_reset(c);
	if (c->eager || (c->dropped && c->users == 0 && !c->recording)) {
		/* Nobody has its id yet, or nobody wants it. */
		checkpoint_remove_files(c);
		checkpoint_remove(c);
		return;
	}
	/* A lazy one waits to be computed again, with its manifest; the
	 * next computation writes its partition files over these. */
	c->state = CKPT_PENDING;
	checkpoint_wake(c, "computing it failed");	/* c may be gone */
}

/* Take c out of the registry and free it; its files go too. */
void
checkpoint_remove(struct checkpoint *c)
{
	TAILQ_REMOVE(&checkpoints, c, entry);
	limit_release(c->uid, LIMIT_CHECKPOINTS, 1);
	checkpoint_reset(c);
	checkpoint_free(c);
}

struct checkpoint *
checkpoint_find(uid_t uid, const char *id)
{
	struct checkpoint	*c;

	TAILQ_FOREACH(c, &checkpoints, entry) {
		if (c->uid == uid && !c->dropped && strcmp(c->id, id) == 0)
			return (c);
	}
	return (NULL);
}

void
checkpoint_use(struct checkpoint *c)
{
	c->users++;
}

/* Drop c now if it is dropped and nobody uses it any more. */
static void
checkpoint_collect(struct checkpoint *c)
{
	if (!c->dropped || c->users > 0 || c->writer != NULL ||
	    c->recording || c->helper != NULL)
		return;
	checkpoint_remove_files(c);
	checkpoint_remove(c);
}

void
checkpoint_unuse(struct checkpoint *c)
{
	if (c->users <= 0)
		fatalx("checkpoint %s: unused too often", c->id);
	c->users--;
	checkpoint_collect(c);
}

/* Compute c, pending with its plan, in s: 0, or -1 with *err. */
static int
checkpoint_compute(struct checkpoint *c, struct session *s, char **err)
{
	char		*e = NULL;
	json_t		*plan;
	json_error_t	 jerr;

	/* emberd's own text, which it parsed once already. */
	if ((plan = json_loads(c->plan, JSON_ALLOW_NUL, &jerr)) == NULL)
		fatalx("checkpoint %s: its plan: %s", c->id, jerr.text);
	c->state = CKPT_WRITING;
	c->writer = operation_materialize(s, c, plan, c->files, &e);
	json_decref(plan);
	if (c->writer == NULL) {
		c->state = CKPT_PENDING;
		xasprintf(err, "plan.source.checkpoint: computing checkpoint "
		    "%s: %s", c->id, e);
		free(e);
		return (-1);
	}
	return (0);
}

/* The plan of an adopted lazy checkpoint came from its manifest (or
 * not): compute it for the reads waiting. */
static void
checkpoint_planned_cb(const struct hmsg_reply *reply, int *fds,
    size_t nfds, const char *class, const char *error, void *arg)
{
	struct checkpoint	*c = arg;
	struct session		*s = c->loader;
	char			*err = NULL;

	(void)class;
	c->helper = NULL;
	c->loader = NULL;
	c->state = CKPT_PENDING;
	ember_check_drained();
	error = checkpoint_call_error(reply, fds, nfds, error);
	if (error == NULL && s == NULL)
		error = "the session that read it closed";
	if (error != NULL) {
		xasprintf(&err, "checkpoint %s: reading its manifest: %s",
		    c->id, error);
		checkpoint_wake(c, err);	/* c may be gone */
		free(err);
		return;
	}
	c->plan = checkpoint_plan_text(reply->u.checkpoint_plan.plan);
	c->files = json_incref(reply->u.checkpoint_plan.files);
	if (TAILQ_EMPTY(&c->waiters)) {
		checkpoint_collect(c);		/* c may be gone */
		return;
	}
	if (checkpoint_compute(c, s, &err) == -1) {
		checkpoint_wake(c, err);	/* c may be gone */
		free(err);
	}
}

/* Have the user's helper read the plan of c, adopted lazy, from its
 * manifest (it is the user's data: emberd's scan kept only a summary). */
static int
checkpoint_fetch_plan(struct checkpoint *c, struct session *s, char **err)
{
	const char	*class;
	json_t		*args;
	char		*e = NULL;

	args = json_pack("{s:s,s:s,s:I}", "dir", c->uid_dir, "id", c->id,
	    "max", (json_int_t)CKPT_MAX_MANIFEST);
	c->helper = checkpoint_run(c->uid, c->gid, 0, 0, "checkpoint_plan",
	    args, checkpoint_planned_cb, c, &class, &e);
	json_decref(args);
	if (c->helper == NULL) {
		xasprintf(err, "plan.source.checkpoint: checkpoint %s: "
		    "reading its manifest: %s", c->id, e);
		free(e);
		return (-1);
	}
	c->state = CKPT_WRITING;
	c->loader = s;
	return (0);
}

int
checkpoint_wait(struct checkpoint *c, struct operation *op,
    struct session *s, char **err)
{
	struct ckpt_waiter	*w;

	/* The first read: compute it, once. */
	if (c->state == CKPT_PENDING && c->plan == NULL &&
	    checkpoint_fetch_plan(c, s, err) == -1)
		return (-1);
	if (c->state == CKPT_PENDING && checkpoint_compute(c, s, err) == -1)
		return (-1);
	w = xcalloc(1, sizeof *w);
	w->op = op;
	TAILQ_INSERT_TAIL(&c->waiters, w, entry);
	return (0);
}

void
checkpoint_unwait(struct checkpoint *c, struct operation *op)
{
	struct ckpt_waiter	*w;

	TAILQ_FOREACH(w, &c->waiters, entry) {
		if (w->op == op) {
			TAILQ_REMOVE(&c->waiters, w, entry);
			free(w);
			return;
		}
	}
}

/* Drop c: out of the lookups now, its files once nobody reads it. */
static void
checkpoint_drop(struct checkpoint *c)
{
	log_debug("checkpoint %s dropped (%d reading it)", c->id, c->users);
	c->dropped = 1;
	c->session = NULL;	/* it may be freed before c */
	checkpoint_collect(c);
}

void
checkpoint_drop_request(struct session *s, json_t *req,
    struct request_answer *a)
{
	static const char *const keys[] = { "op", "checkpoint", NULL };
	struct checkpoint	*c;
	const char		*id = NULL;
	char			*err;

	if (jread_only(req, "", keys, &err) == -1 ||
	    jread_string(req, "", "checkpoint", JREAD_REQUIRED, &id,
	    &err) == -1) {
		request_answer_error(a, "REQUEST_INVALID",
		    "checkpoint_drop: %s", err);
		free(err);
		return;
	}
	if (!plan_is_uuid(id)) {
		request_answer_error(a, "REQUEST_INVALID",
		    "checkpoint_drop: checkpoint: \"%s\" is not a UUID", id);
		return;
	}
	if ((c = checkpoint_find(session_uid(s), id)) == NULL) {
		request_answer_error(a, "CHECKPOINT_NOT_FOUND",
		    "no checkpoint %s", id);
		return;
	}
	checkpoint_drop(c);
	request_answer_ok(a, NULL);
}

void
checkpoint_drop_session(struct session *s)
{
	struct checkpoint	*c, *next;

	TAILQ_FOREACH_SAFE(c, &checkpoints, entry, next) {
		if (c->loader == s)
			c->loader = NULL;	/* the fetch fails then */
		if (c->session == s && !c->dropped)
			checkpoint_drop(c);
	}
}

json_t *
checkpoint_status(uid_t uid)
{
	json_t			*a = json_array(), *o;
	struct checkpoint	*c;
	uint64_t		 now = ember_now_ms();

	TAILQ_FOREACH(c, &checkpoints, entry) {
		if ((uid != 0 && c->uid != uid) || c->dropped)
			continue;
		o = json_pack("{s:s,s:I,s:s,s:b,s:s,s:i,s:I,s:I,s:i,s:I}",
		    "id", c->id, "uid", (json_int_t)c->uid,
		    "kind", c->local ? "local" : "reliable", "eager", c->eager,
		    "state", ckpt_state_names[c->state],
		    "partitions", c->partitions,
		    "records", (json_int_t)c->records,
		    "bytes", (json_int_t)c->bytes, "readers", c->users,
		    "age_ms", (json_int_t)(now - c->created_ms));
		if (c->session != NULL)
			json_object_set_new(o, "session",
			    json_string(session_id(c->session)));
		json_array_append_new(a, o);
	}
	return (a);
}

void
checkpoint_init(void)
{
	char		*err = NULL;

	ckpt_started = checkpoint_now_ms();
	/* Local checkpoints of a run that crashed, if any. */
	xasprintf(&ckpt_local_path, "%s/checkpoints", ember_local_dir());
	if ((ckpt_local_fd = checkpoint_open_base(ckpt_local_path, 0,
	    &err)) == -1 && errno != ENOENT)
		log_error("daemon.local_dir: %s", err);
	free(err);
	err = NULL;
	ckpt_reliable_path = xstrdup(ember_conf.checkpoint_dir);
	if ((ckpt_reliable_fd = checkpoint_open_reliable(&err)) == -1) {
		/* A user's ds.checkpoint() will fail: the operator hears
		 * of it at start, whatever the cause. */
		if (errno == ENOENT || errno == ENOTDIR || errno == EROFS ||
		    errno == EACCES)
			log_warn("checkpoint.dir: %s; reliable checkpoints are "
			    "refused until it can be made", err);
		else
			log_error("checkpoint.dir: %s; reliable checkpoints "
			    "are refused", err);
		ckpt_reliable_error = err;
	}
	/* What a run that ended (or crashed) left: local ones all go,
	 * reliable ones without a manifest go, the others are kept. */
	checkpoint_clean_base(ckpt_local_fd, ckpt_local_path, 1, 0,
	    ckpt_started);
	if (ckpt_reliable_fd != -1)
		checkpoint_load_removals();
	checkpoint_clean_base(ckpt_reliable_fd, ckpt_reliable_path, 0, 1,
	    ckpt_started);
	checkpoint_retry_removals();
	ckpt_timer = evtimer_new(ember_base, checkpoint_timer_cb, NULL);
	checkpoint_arm_cleaner();
}

size_t
checkpoint_drain(void)
{
	static int		 dropped;
	struct checkpoint	*c, *next;
	struct ckpt_call	*k;
	size_t			 n = 0;

	if (!dropped) {
		dropped = 1;
		TAILQ_FOREACH_SAFE(c, &checkpoints, entry, next) {
			if (c->local && !c->dropped)
				checkpoint_drop(c);
		}
	}
	TAILQ_FOREACH(k, &ckpt_calls, entry)
		n++;
	TAILQ_FOREACH(c, &checkpoints, entry) {
		if (c->helper != NULL)
			n++;
	}
	return (n);
}

void
checkpoint_shutdown(void)
{
	struct checkpoint	*c;
	struct ckpt_call	*k;

	if (ckpt_timer != NULL)
		event_free(ckpt_timer);
	ckpt_timer = NULL;
	while ((k = TAILQ_FIRST(&ckpt_calls)) != NULL) {
		if (k->helper != NULL)
			helper_cancel(k->helper);
		checkpoint_call_free(k);
	}
	while ((k = TAILQ_FIRST(&ckpt_retries)) != NULL) {
		TAILQ_REMOVE(&ckpt_retries, k, entry);
		free(k->uid_dir);
		free(k->id);
		free(k);
	}
	while ((c = TAILQ_FIRST(&checkpoints)) != NULL) {
		if (c->helper != NULL)
			helper_cancel(c->helper);
		TAILQ_REMOVE(&checkpoints, c, entry);
		checkpoint_free(c);
	}
	if (ckpt_local_fd != -1) {
		/* The uids' directories that are empty, and the base if it
		 * is then: what is left goes at the next start. */
		checkpoint_remove_empty(ckpt_local_fd);
		close(ckpt_local_fd);
		rmdir(ckpt_local_path);
	}
	if (ckpt_reliable_fd != -1)
		close(ckpt_reliable_fd);
	ckpt_local_fd = ckpt_reliable_fd = -1;
	free(ckpt_local_path);
	free(ckpt_reliable_path);
	free(ckpt_reliable_error);
	ckpt_local_path = ckpt_reliable_path = ckpt_reliable_error = NULL;
}
