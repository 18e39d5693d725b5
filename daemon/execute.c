/*
 * execute: the request read and checked (options, plan), the plan's
 * files and plugins checked by a helper, and the operation launched.
 */
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "closer.h"
#include "connection.h"
#include "emberd.h"
#include "heap.h"
#include "helper.h"
#include "jread.h"
#include "limit.h"
#include "log.h"
#include "plan.h"
#include "pool.h"
#include "pypreload.h"
#include "broadcast.h"
#include "checkpoint.h"
#include "commit.h"
#include "retry.h"
#include "session.h"
#include "stage.h"
#include "xmalloc.h"

#include "operation_private.h"

static uint64_t	 operation_next_serial = 1;

static void	operation_start(struct operation *op, struct connection *c,
		    struct session *s, struct request_answer *a);
static void	operation_answer_later(struct request_answer *a);

/* Add broadcast id, named by field, to the operation's; -1 with *err if
 * the session has no such broadcast. */
static int
operation_use_broadcast(struct operation *op, struct session *s, int64_t id,
    const char *field, char **err)
{
	struct broadcast	*b;
	size_t			 i;

	if ((b = broadcast_find(s, id)) == NULL) {
		xasprintf(err, "%s: no broadcast %lld in this session", field,
		    (long long)id);
		return (-1);
	}
	for (i = 0; i < op->nbroadcasts; i++) {
		if (op->broadcasts[i] == b)
			return (0);
	}
	op->broadcasts = xreallocarray(op->broadcasts, op->nbroadcasts + 1,
	    sizeof *op->broadcasts);
	op->broadcasts[op->nbroadcasts++] = b;
	broadcast_use(b);
	return (0);
}

/* Find the broadcasts the ops of the plan and of the plans nested in it
 * use; each must be the session's. */
static int
operation_find_broadcasts_in(struct operation *op, struct session *s,
    const struct plan *plan, const char *path, char **err)
{
	const struct plan_op	*o;
	char			 field[256];
	size_t			 i, j;

	for (i = 0; i < plan->nops; i++) {
		o = &plan->ops[i];
		if (o->type == PLAN_OP_FILTER_BROADCAST) {
			snprintf(field, sizeof field,
			    "%s.ops[%zu].filter.in_broadcast", path, i);
			if (operation_use_broadcast(op, s, o->broadcast, field,
			    err) == -1)
				return (-1);
		}
		for (j = 0; (o->type == PLAN_OP_UDF ||
		    o->type == PLAN_OP_PYTHON) && j < o->udf_nbroadcasts;
		    j++) {
			snprintf(field, sizeof field,
			    "%s.ops[%zu].%s.broadcasts[%zu]", path, i,
			    o->type == PLAN_OP_UDF ? "udf" : "python", j);
			if (operation_use_broadcast(op, s, o->udf_broadcasts[j],
			    field, err) == -1)
				return (-1);
		}
		/* A join's or union's plan runs in this operation's tasks
		 * too: its broadcasts go to the same workers. */
		if (o->other != NULL) {
			snprintf(field, sizeof field, "%s.ops[%zu].%s.plan",
			    path, i, o->type == PLAN_OP_JOIN ? "join" :
			    "union");
			if (operation_find_broadcasts_in(op, s, o->other,
			    field, err) == -1)
				return (-1);
		}
	}
	return (0);
}

static int
operation_find_broadcasts(struct operation *op, struct session *s,
    char **err)
{
	return (operation_find_broadcasts_in(op, s, op->plan, "plan", err));
}

/* Is id uid's operation, or one of its tombstones? */
static int
operation_id_taken(const char *id, void *arg)
{
	uid_t	uid = *(uid_t *)arg;

	return (operation_find(uid, id) != NULL ||
	    operation_find_tombstone(uid, id) != NULL);
}

/* Read the request's members but the plan into op. */
static int
operation_read_head(struct operation *op, uid_t uid, json_t *req,
    const char **class, char **err)
{
	struct execute_request	 er;

	if (request_read_execute(req, operation_id_taken, &uid, &er, class,
	    err) == -1)
		return (-1);
	op->action = er.action;
	strcpy(op->id, er.id);
	op->prefetch = er.prefetch;
	op->limit = er.limit;
	op->reattachable = er.reattachable;
	op->fn = er.fn;
	op->ckpt_local = er.ckpt_local;
	op->ckpt_eager = er.ckpt_eager;
	op->save_path = er.save_path != NULL ? xstrdup(er.save_path) : NULL;
	op->overwrite = er.overwrite;
	return (0);
}

/* Count the operation in daemon.max_operations_per_uid and
 * daemon.max_operations. */
static int
operation_count_in(struct operation *op, struct session *s,
    const char **class, char **err)
{
	*class = "LIMIT_EXCEEDED";
	if (limit_charge(session_uid(s), LIMIT_OPERATIONS, 1, err) == -1)
		return (-1);
	op->uid = session_uid(s);
	op->counted = 1;
	return (0);
}

/* A checkpoint source: the uid's checkpoint, whose partitions the plan
 * has (CHECKPOINT_NOT_FOUND for any other id). */
static int
operation_find_source(struct operation *op, struct session *s,
    json_t *plan_json, const char **class, char **err)
{
	struct checkpoint	*c;

	if (op->plan->source != PLAN_SOURCE_CHECKPOINT)
		return (0);
	if ((c = checkpoint_find(session_uid(s), op->plan->checkpoint)) ==
	    NULL)
		return (request_refuse(class, err, "CHECKPOINT_NOT_FOUND",
		    "plan.source.checkpoint: no checkpoint %s%s",
		    op->plan->checkpoint, checkpoint_scanning(session_uid(s)) ?
		    " (emberd is still reading checkpoint.dir)" : ""));
	if (json_object_get(plan_json, "partitions") != NULL &&
	    op->plan->partitions != checkpoint_partitions(c))
		return (request_refuse(class, err, "PLAN_INVALID",
		    "plan.partitions: checkpoint %s has %d partitions, not %d",
		    op->plan->checkpoint, checkpoint_partitions(c),
		    op->plan->partitions));
	op->plan->partitions = checkpoint_partitions(c);
	op->source = c;
	checkpoint_use(c);
	return (0);
}

/* Read and check the plan, and find the broadcasts and the checkpoint it
 * uses.  What it names outside itself is checked later, by a helper. */
static int
operation_read_plan(struct operation *op, struct session *s, json_t *req,
    const char **class, char **err)
{
	json_t	*plan_json = json_object_get(req, "plan");

	*class = "PLAN_INVALID";
	if (plan_json == NULL)
		return (request_refuse(class, err, "PLAN_INVALID",
		    "plan: missing"));
	if (plan_parse(plan_json, &op->plan, err) == -1)
		return (-1);
	/* count_by_value and reduce read plain records. */
	if ((op->action == ACTION_COUNT_BY_VALUE ||
	    op->action == ACTION_REDUCE) &&
	    (op->plan->kind == PLAN_KIND_PAIR ||
	    op->plan->kind == PLAN_KIND_GROUP)) {
		xasprintf(err, "plan: gives %s records; %s takes plain "
		    "records (map key or value makes them)",
		    plan_kind_name(op->plan->kind), action_names[op->action]);
		return (-1);
	}
	if (operation_find_broadcasts(op, s, err) == -1 ||
	    operation_find_source(op, s, plan_json, class, err) == -1)
		return (-1);
	op->plan_json = json_incref(plan_json);
	return (0);
}

/* Charge the operation's uid with the text of its plans, kept until it
 * ends: a parallelize source's records are in it. */
static int
operation_charge_plans(struct operation *op, const char **class, char **err)
{
	int64_t	bytes = 0;
	int	i;

	if (op->plan_text != NULL)
		bytes += (int64_t)strlen(op->plan_text);

	for (i = 0; i < op->nstages; i++)
		bytes += (int64_t)strlen(op->stages[i].plan_text);
	if (limit_charge(op->uid, LIMIT_PLAN_BYTES, bytes, err) == -1) {
		*class = "LIMIT_EXCEEDED";
		return (-1);
	}
	op->plan_charged = bytes;
	return (0);
}

/* The plan is checked: fix its partitions and the text tasks carry, and
 * cut it into stages if it has wide ops, charged to its uid.  -1 with
 * *class and *err. */
static int
operation_plan_done(struct operation *op, const char **class, char **err)
{
	plan_set_partitions(op->plan, ember_workers_max());
	op->npartitions = op->plan->partitions;
	if (operation_stages_prepare(op, op->plan_json, err) == -1) {
		*class = "PLAN_INVALID";
		return (-1);
	}
	/* An operation in stages runs its stages' plans alone. */
	if (op->nstages == 0)
		op->plan_text = taskdesc_encode_plan(op->plan_json,
		    op->plan->source == PLAN_SOURCE_TEXT ?
		    plan_files_to_json(op->plan) : NULL, op->source != NULL ?
		    checkpoint_dir(op->source) : NULL);
	if (operation_charge_plans(op, class, err) == -1)
		return (-1);
	json_decref(op->plan_json);
	op->plan_json = NULL;
	/* A big plan's tree is gone: give its pages back. */
	plan_drop_records(op->plan);
	heap_check_soon();
	return (0);
}

/* What the helper's reply gives each plan of the tree, in plan_walk's
 * order: the nested plans' files, the udfs. */
struct operation_checked {
	struct plan	*top;
	json_t		*nested;
	size_t		 nested_next;
	json_t		*udfs;
	size_t		 udfs_next;
	int		 bad;
};

static void
operation_take_checked(struct plan *plan, void *arg)
{
	struct operation_checked	*k = arg;
	json_t				*files;
	char				*e = NULL;
	size_t				 i;

	if (plan != k->top) {
		files = json_array_get(k->nested, k->nested_next++);
		if (plan->source == PLAN_SOURCE_TEXT &&
		    plan_files_from_json(plan, files, &e) == -1) {
			log_error("plan_check reply: %s", e);
			free(e);
			k->bad = 1;
		}
	}
	for (i = 0; i < plan->nops; i++) {
		if (plan->ops[i].type != PLAN_OP_UDF)
			continue;
		if (jread_bool(json_array_get(k->udfs, k->udfs_next++), "udfs",
		    "deterministic", JREAD_REQUIRED,
		    &plan->ops[i].udf_deterministic, &e) == -1) {
			log_error("plan_check reply: %s", e);
			free(e);
			k->bad = 1;
		}
	}
}

/*
 * Take what the helper found: the text files with their sizes, and
 * whether each udf is deterministic.  -1 with *class and *err: the
 * user's files are not right (PLAN_INVALID), or the reply does not fit
 * the plan (INTERNAL).
 */
static int
operation_take_check(struct operation *op, const struct hmsg_reply *reply,
    const char **class, char **err)
{
	const struct hmsg_plan_check	*check = &reply->u.plan_check;
	struct operation_checked	 k;
	char				*e = NULL;

	if (reply->error != NULL)
		return (request_refuse(class, err, "PLAN_INVALID", "%s",
		    reply->error));
	if (op->plan->source == PLAN_SOURCE_TEXT &&
	    plan_files_from_json(op->plan, check->files, &e) == -1) {
		log_error("operation %s: plan_check reply: %s", op->id, e);
		free(e);
		return (request_refuse(class, err, "INTERNAL", "plan: its "
		    "check answered files that do not fit it"));
	}
	k.top = op->plan;
	k.nested = check->nested;
	k.udfs = check->udfs;
	k.nested_next = k.udfs_next = 0;
	k.bad = 0;
	plan_walk(op->plan, operation_take_checked, &k);
	if (k.bad || k.udfs_next != json_array_size(k.udfs))
		return (request_refuse(class, err, "INTERNAL", "plan: its "
		    "check answered udfs or files that do not fit it"));
	return (0);
}

/* Make what the action gathers: the result, or the save's commit. */
static void
operation_prepare(struct operation *op, struct session *s)
{
	if (op->action == ACTION_COUNT_BY_VALUE)
		op->result = result_create(RESULT_COUNT_BY_VALUE, op->fn);
	else if (op->action == ACTION_REDUCE)
		op->result = result_create(RESULT_REDUCE, op->fn);
	else if (op->action == ACTION_SAVE)
		op->commit = commit_create(op->save_path, op->overwrite,
		    op->id, session_uid(s), session_gid(s));
}

/* The checkpoint action: the checkpoint its tasks write (a lazy one keeps
 * the plan, and its text files as the check found them, for its first
 * read).  -1 with *class and *err. */
static int
operation_prepare_checkpoint(struct operation *op, struct session *s,
    json_t *plan, const char **class, char **err)
{
	json_t	*files;

	if (op->action != ACTION_CHECKPOINT)
		return (0);
	files = op->plan->source == PLAN_SOURCE_TEXT ?
	    plan_files_to_json(op->plan) : NULL;
	op->ckpt = checkpoint_create(s, op, op->ckpt_local, op->ckpt_eager,
	    plan, files, op->npartitions, class, err);
	if (files != NULL)
		json_decref(files);
	return (op->ckpt == NULL ? -1 : 0);
}

/* The source is a checkpoint not computed yet: wait for it. */
static int
operation_wait_source(struct operation *op, struct session *s,
    const char **class, char **err)
{
	if (op->source == NULL || checkpoint_ready(op->source))
		return (0);
	op->waiting = 1;
	if (checkpoint_wait(op->source, op, s, err) == -1) {
		op->waiting = 0;
		*class = "CHECKPOINT_FAILED";
		return (-1);
	}
	return (0);
}

struct operation *
operation_materialize(struct session *s, struct checkpoint *c, json_t *plan,
    json_t *files, char **err)
{
	struct operation	*op;
	const char		*class;
	json_t			*req;

	op = xcalloc(1, sizeof *op);
	TAILQ_INIT(&op->tasks);
	TAILQ_INIT(&op->map_tasks);
	op->action = ACTION_CHECKPOINT;
	op->internal = 1;
	op->uid = session_uid(s);	/* whose shuffle files it writes */
	request_new_id(op->id);
	/* Its files were checked, and sized, when it was asked for. */
	req = json_pack("{s:O}", "plan", plan);
	if (operation_read_plan(op, s, req, &class, err) == -1 ||
	    (files != NULL && plan_files_from_json(op->plan, files,
	    err) == -1)) {
		json_decref(req);
		operation_free(op);
		return (NULL);
	}
	json_decref(req);
	if (operation_plan_done(op, &class, err) == -1) {
		operation_free(op);
		return (NULL);
	}
	if (op->npartitions != checkpoint_partitions(c)) {
		xasprintf(err, "its plan now has %d partitions, not %d",
		    op->npartitions, checkpoint_partitions(c));
		operation_free(op);
		return (NULL);
	}
	if (operation_wait_source(op, s, &class, err) == -1) {
		operation_free(op);
		return (NULL);
	}
	op->ckpt = c;
	operation_start(op, NULL, s, NULL);
	return (op);
}

/*
 * Have the user's fork-server load the big Python broadcasts the plan's
 * functions read, before any worker of the job is asked for: the workers
 * then share each object instead of each unpickling it (pypreload.h).
 * A join's or union's plan runs in the same tasks, so its functions count.
 */
static void
operation_preload_in(struct operation *op, const struct plan *plan)
{
	const struct plan_op	*o;
	struct pool		*p;
	size_t			 i, j, k;

	for (i = 0; i < plan->nops; i++) {
		o = &plan->ops[i];
		for (j = 0; o->type == PLAN_OP_PYTHON &&
		    j < o->udf_nbroadcasts; j++) {
			for (k = 0; k < op->nbroadcasts; k++) {
				if (broadcast_id(op->broadcasts[k]) !=
				    o->udf_broadcasts[j])
					continue;
				p = pool_of_client(operation_uid(op),
				    operation_gid(op));
				if (p != NULL)
					pypreload_want(p, op->broadcasts[k]);
			}
		}
		if (o->other != NULL)
			operation_preload_in(op, o->other);
	}
}

static void
operation_preload(struct operation *op)
{
	operation_preload_in(op, op->plan);
}

/* Start a checked operation: list it, hold the connection (a reply
 * action) or answer with its stream (*a), and start its first tasks. */
static void
operation_start(struct operation *op, struct connection *c,
    struct session *s, struct request_answer *a)
{
	op->serial = operation_next_serial++;
	op->session = s;
	op->conn = c;
	op->requested = op->action == ACTION_COLLECT;
	op->started_ms = ember_now_ms();
	op->attached_ms = op->started_ms;
	op->deterministic = plan_is_deterministic(op->plan);
	if (op->reattachable && ACTION_STREAMS(op->action))
		op->retry = retry_create(op->npartitions);
	TAILQ_INSERT_TAIL(&operations, op, entry);
	noperations++;
	session_add_operation(s, op);
	ember_counters.operations++;
	operation_preload(op);
	log_debug("operation %s: %s of %d partitions for pid %ld", op->id,
	    action_names[op->action], op->npartitions,
	    c != NULL ? (long)connection_pid(c) : -1L);

	if (!ACTION_STREAMS(op->action)) {
		if (a != NULL)
			operation_answer_later(a);
		if (c != NULL)
			connection_busy_begin(c, op);
		operation_fill(op);
		return;
	}
	/* The connection answers, begins the stream and resumes it. */
	if (a == NULL)
		fatalx("operation %s: a stream without a client", op->id);
	request_answer_ok(a, json_pack("{s:s,s:i,s:b}", "operation", op->id,
	    "partitions", op->npartitions, "reattachable", op->reattachable));
	a->kind = REQUEST_ANSWER_STREAM;
	a->op = op;
}

/* Refuse an operation that has not started (*a), and free it. */
static void
operation_refused(struct operation *op, struct request_answer *a,
    const char *class, char *err)
{
	request_answer_error(a, class, "%s", err);
	free(err);
	operation_free(op);
}

/*
 * Between execute and start the operation is in no list: before it starts,
 * check that it may still (its session open, emberd not draining, its id
 * still free).  0, or -1 with *class and *err.
 */
static int
operation_still_wanted(struct operation *op, struct session *s,
    const char *while_what, const char **class, char **err)
{
	if (session_closed(s))
		return (request_refuse(class, err, "INTERRUPTED", "the "
		    "session was closed while %s", while_what));
	if (ember_draining)
		return (request_refuse(class, err, "SHUTTING_DOWN", "emberd "
		    "is shutting down"));
	if (operation_find(session_uid(s), op->id) != NULL ||
	    operation_find_tombstone(session_uid(s), op->id) != NULL)
		return (request_refuse(class, err,
		    "OPERATION_ALREADY_EXISTS", "operation %s already exists",
		    op->id));
	return (0);
}

/* Answer nothing now (*a): the operation answers when it can. */
static void
operation_answer_later(struct request_answer *a)
{
	memset(a, 0, sizeof *a);
	a->kind = REQUEST_ANSWER_LATER;
}

/* Hold the connection while a helper works for an operation not started:
 * the reply waits for its answer. */
static void
operation_wait_helper(struct operation *op, struct connection *c,
    struct session *s, struct request_answer *a)
{
	operation_answer_later(a);
	op->planned_for = s;
	op->conn = c;
	connection_busy_begin(c, op);
}

/* The helper answered: give the connection back; it was op's. */
static struct connection *
operation_helper_done(struct operation *op)
{
	struct connection	*c = op->conn;

	op->conn = NULL;
	connection_busy_end(c);
	return (c);
}

/*
 * save_begin answered: PATH is checked and the operation's directory made,
 * as the user, or the save is refused.  Only then does the save start.
 */
static void
operation_begun_cb(const char *hclass, const char *herr, void *arg)
{
	struct operation	*op = arg;
	struct session		*s = op->planned_for;
	struct request_answer	 a;
	struct connection	*c;
	const char		*class = NULL;
	char			*err = NULL;

	op->beginning = 0;
	c = operation_helper_done(op);
	if (hclass != NULL && strcmp(hclass, "ACTION_INVALID") == 0)
		request_refuse(&class, &err, hclass, "%s", herr);
	else if (hclass != NULL)
		request_refuse(&class, &err, hclass, "options.path: checking "
		    "it as uid %ld: %s", (long)session_uid(s), herr);
	else
		operation_still_wanted(op, s, "the save began", &class, &err);
	if (class != NULL)	/* the refusal undoes the begin */
		operation_refused(op, &a, class, err);
	else
		operation_start(op, c, s, &a);
	connection_answer(c, &a);
}

/* The plan is checked: prepare what the action gathers and start; a save
 * begins first.  What to answer now, in *a. */
static void
operation_launch(struct operation *op, struct connection *c,
    struct session *s, struct request_answer *a)
{
	const char	*class = NULL;
	char		*err = NULL;
	json_t		*plan = json_incref(op->plan_json);

	if (operation_plan_done(op, &class, &err) == -1 ||
	    operation_prepare_checkpoint(op, s, plan, &class, &err) == -1 ||
	    operation_wait_source(op, s, &class, &err) == -1) {
		json_decref(plan);
		operation_refused(op, a, class, err);
		return;
	}
	json_decref(plan);
	if (op->action == ACTION_CHECKPOINT && !op->ckpt_eager) {
		/* Lazy: computed by the first operation that reads it. */
		request_answer_ok(a, operation_checkpoint_reply(op));
		op->ckpt = NULL;
		operation_free(op);
		return;
	}
	operation_prepare(op, s);
	if (op->commit == NULL) {
		operation_start(op, c, s, a);
		return;
	}
	if (commit_begin(op->commit, operation_begun_cb, op, &class,
	    &err) == -1) {
		operation_refused(op, a, class, err);
		return;
	}
	op->beginning = 1;
	operation_wait_helper(op, c, s, a);
}

/*
 * The helper checked the plan's files and plugins as the user, or could
 * not.  Meanwhile the connection was busy; it is handed back before the
 * refusal, or the operation starts on it.
 */
static void
operation_checked_cb(const struct hmsg_reply *reply, int *fds,
    size_t nfds, const char *hclass, const char *herr, void *arg)
{
	struct operation	*op = arg;
	struct session		*s = op->planned_for;
	struct request_answer	 a;
	struct connection	*c;
	const char		*class = NULL;
	char			*err = NULL;

	op->planning = NULL;
	while (nfds > 0)
		closer_close_drained(fds[--nfds]);
	c = operation_helper_done(op);
	if (hclass != NULL)
		request_refuse(&class, &err, hclass, "plan: checking what it "
		    "names as uid %ld: %s", (long)session_uid(s), herr);
	else if (operation_take_check(op, reply, &class, &err) == -1)
		;
	else
		operation_still_wanted(op, s, "the plan was checked", &class,
		    &err);
	if (class != NULL)
		operation_refused(op, &a, class, err);
	else
		operation_launch(op, c, s, &a);
	connection_answer(c, &a);
}

/* execute: read and check the request, then start the operation; when
 * the plan names files or plugins, a helper checks them first. */
void
operation_execute(struct connection *c, struct session *s, json_t *req,
    struct request_answer *a)
{
	struct operation	*op;
	const char		*class = NULL;
	char			*err = NULL;
	json_t			*args;

	op = xcalloc(1, sizeof *op);
	TAILQ_INIT(&op->tasks);
	TAILQ_INIT(&op->map_tasks);
	if (operation_read_head(op, session_uid(s), req, &class,
	    &err) == -1 ||
	    operation_read_plan(op, s, req, &class, &err) == -1 ||
	    operation_count_in(op, s, &class, &err) == -1) {
		operation_refused(op, a, class, err);
		return;
	}
	if (!plan_names_resources(op->plan)) {
		operation_launch(op, c, s, a);
		return;
	}
	args = json_pack("{s:O}", "plan", op->plan_json);
	op->planning = helper_run(session_uid(s), session_gid(s), "plan_check",
	    args, -1, operation_checked_cb, op, &class, &err);
	json_decref(args);
	if (op->planning == NULL) {
		operation_refused(op, a, class, err);
		return;
	}
	operation_wait_helper(op, c, s, a);
}
