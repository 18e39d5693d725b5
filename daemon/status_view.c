#include <sys/types.h>

#include <string.h>

#include "status_view.h"

/* What one view knows as it goes. */
struct view_ctx {
	const struct status_viewer	*viewer;
	json_t				*sessions;	/* ids shown */
	json_t				*operations;	/* ids shown */
	size_t				 hidden;	/* operations not */
};

#define F(name, rule)		{ name, rule, NULL }
#define SUB(name, rule, kind)	{ name, rule, kind }
#define END			{ NULL, VIEW_ANY, NULL }

static const struct view_field session_fields[] = {
	F("id", VIEW_ANY), F("uid", VIEW_ANY), F("connections", VIEW_ANY),
	F("operations", VIEW_ANY), F("age_ms", VIEW_ANY),
	F("idle_ms", VIEW_ANY), END
};
static const struct view_kind session_kind = { VIEW_UID, VIEW_SESSIONS,
    session_fields };

static const struct view_field operation_fields[] = {
	F("id", VIEW_ANY), F("session", VIEW_ANY), F("action", VIEW_ANY),
	F("state", VIEW_ANY), F("partitions", VIEW_ANY), F("done", VIEW_ANY),
	F("running", VIEW_ANY), F("attached", VIEW_ANY),
	F("records_sent", VIEW_ANY), F("age_ms", VIEW_ANY),
	F("bytes_sent", VIEW_ANY), F("spooled_bytes", VIEW_ANY),
	F("parked", VIEW_ANY), F("what", VIEW_ANY), F("detached_ms", VIEW_ANY),
	F("sent", VIEW_ANY), F("buffered_from", VIEW_ANY),
	F("buffered_bytes", VIEW_ANY), F("stages", VIEW_ANY), END
};
static const struct view_kind operation_kind = { VIEW_SESSION,
    VIEW_OPERATIONS, operation_fields };

static const struct view_field broadcast_fields[] = {
	F("id", VIEW_ANY), F("session", VIEW_ANY), F("size", VIEW_ANY),
	F("index", VIEW_ANY), F("operations", VIEW_ANY), F("complete", VIEW_ANY),
	END
};
static const struct view_kind broadcast_kind = { VIEW_SESSION, VIEW_FORGET,
    broadcast_fields };

static const struct view_field checkpoint_fields[] = {
	F("id", VIEW_ANY), F("uid", VIEW_ANY), F("kind", VIEW_ANY),
	F("eager", VIEW_ANY), F("state", VIEW_ANY),
	F("partitions", VIEW_ANY), F("records", VIEW_ANY),
	F("bytes", VIEW_ANY), F("readers", VIEW_ANY), F("age_ms", VIEW_ANY),
	F("session", VIEW_ANY), END
};
static const struct view_kind checkpoint_kind = { VIEW_UID, VIEW_FORGET,
    checkpoint_fields };

/* A uid's usage of each limit, and everyone's: numbers by limit name. */
static const struct view_field limit_user_fields[] = {
	F("uid", VIEW_ANY), F("limits", VIEW_TREE), END
};
static const struct view_kind limit_user_kind = { VIEW_UID, VIEW_FORGET,
    limit_user_fields };
static const struct view_field limits_fields[] = {
	SUB("users", VIEW_RECORDS, &limit_user_kind), F("total", VIEW_TREE),
	END
};
static const struct view_kind limits_kind = { VIEW_PUBLIC, VIEW_FORGET,
    limits_fields };

/* Workers and pools are emberd's: every viewer sees them, but a task's
 * operation only where the operation is shown. */
static const struct view_field task_fields[] = {
	F("operation", VIEW_OPERATION), F("partition", VIEW_ANY),
	F("age_ms", VIEW_ANY), END
};
static const struct view_kind task_kind = { VIEW_PUBLIC, VIEW_FORGET,
    task_fields };
static const struct view_field worker_fields[] = {
	F("pid", VIEW_ANY), F("state", VIEW_ANY), F("tasks", VIEW_ANY),
	F("age_ms", VIEW_ANY), F("rss_kb", VIEW_ANY),
	F("broadcasts", VIEW_TREE), F("stopping", VIEW_ANY),
	SUB("task", VIEW_OBJECT, &task_kind), END
};
static const struct view_kind worker_kind = { VIEW_PUBLIC, VIEW_FORGET,
    worker_fields };
static const struct view_field pool_fields[] = {
	F("client", VIEW_ANY), F("uid", VIEW_ANY), F("gid", VIEW_ANY),
	F("workers", VIEW_ANY), F("idle", VIEW_ANY), F("busy", VIEW_ANY),
	F("starting", VIEW_ANY), F("crashes_in_a_row", VIEW_ANY),
	F("forks", VIEW_ANY), F("reuses", VIEW_ANY), F("retired", VIEW_TREE),
	F("forkserver", VIEW_ANY), END
};
static const struct view_kind pool_kind = { VIEW_PUBLIC, VIEW_FORGET,
    pool_fields };

static const struct view_field failure_fields[] = {
	F("time_ms", VIEW_ANY), F("age_ms", VIEW_ANY), F("uid", VIEW_ANY),
	F("operation", VIEW_ANY), F("partition", VIEW_ANY),
	F("message", VIEW_ANY), END
};
static const struct view_kind failure_kind = { VIEW_UID, VIEW_FORGET,
    failure_fields };

/* In status.c's order: what a view remembers (sessions, then operations)
 * is looked at first whatever the order. */
static const struct view_field web_fields[] = {
	F("server", VIEW_ANY), F("pid", VIEW_ANY), F("uptime_ms", VIEW_ANY),
	F("draining", VIEW_ANY), F("workers_max", VIEW_ANY),
	F("tasks_queued", VIEW_ANY),
	SUB("workers", VIEW_RECORDS, &worker_kind),
	SUB("pools", VIEW_RECORDS, &pool_kind),
	SUB("sessions", VIEW_RECORDS, &session_kind),
	SUB("operations", VIEW_RECORDS, &operation_kind),
	SUB("broadcasts", VIEW_RECORDS, &broadcast_kind),
	SUB("checkpoints", VIEW_RECORDS, &checkpoint_kind),
	SUB("limits", VIEW_OBJECT, &limits_kind),
	F("user_bounds", VIEW_TREE), F("shuffle_bounds", VIEW_TREE),
	F("counters", VIEW_TREE),
	SUB("failures", VIEW_RECORDS, &failure_kind), END
};
const struct view_kind status_view_web = { VIEW_PUBLIC, VIEW_FORGET,
    web_fields };

/* Is record o, of kind k, one the viewer may see?  No owner found is no. */
static int
status_view_owned(struct view_ctx *ctx, const struct view_kind *k,
    json_t *o)
{
	json_t		*uid;
	const char	*session;

	switch (k->owner) {
	case VIEW_PUBLIC:
		return (1);
	case VIEW_UID:
		uid = json_object_get(o, "uid");
		return (json_is_integer(uid) && json_integer_value(uid) >= 0 &&
		    ctx->viewer->allows((uid_t)json_integer_value(uid),
		    ctx->viewer->arg));
	case VIEW_SESSION:
		session = json_string_value(json_object_get(o, "session"));
		return (session != NULL &&
		    json_object_get(ctx->sessions, session) != NULL);
	}
	return (0);
}

/* Note that record o, shown, is a session or an operation. */
static void
status_view_remember(struct view_ctx *ctx, const struct view_kind *k,
    json_t *o)
{
	const char	*id = json_string_value(json_object_get(o, "id"));

	if (id == NULL || k->remember == VIEW_FORGET)
		return;
	json_object_set_new(k->remember == VIEW_SESSIONS ? ctx->sessions :
	    ctx->operations, id, json_true());
}

/* Find the sessions and operations the viewer is shown, before anything
 * that refers to them is copied. */
static void
status_view_collect(struct view_ctx *ctx, const struct view_kind *k,
    json_t *src)
{
	const struct view_field	*f;
	json_t			*v, *o;
	size_t			 i;

	for (f = k->fields; f->name != NULL; f++) {
		if (f->rule != VIEW_RECORDS ||
		    f->kind->remember == VIEW_FORGET ||
		    !json_is_array(v = json_object_get(src, f->name)))
			continue;
		json_array_foreach(v, i, o) {
			if (json_is_object(o) &&
			    status_view_owned(ctx, f->kind, o))
				status_view_remember(ctx, f->kind, o);
		}
	}
}

static json_t	*status_view_object(struct view_ctx *,
		    const struct view_kind *, json_t *);

/* The records of array a the viewer is shown, each by kind k's rules. */
static json_t *
status_view_records(struct view_ctx *ctx, const struct view_kind *k,
    json_t *a)
{
	json_t	*out = json_array(), *o;
	size_t	 i;

	json_array_foreach(a, i, o) {
		if (json_is_object(o) && status_view_owned(ctx, k, o))
			json_array_append_new(out,
			    status_view_object(ctx, k, o));
		else if (k->remember == VIEW_OPERATIONS)
			ctx->hidden++;
	}
	return (out);
}

/* Field f's value v as the viewer is shown it, or NULL. */
static json_t *
status_view_field(struct view_ctx *ctx, const struct view_field *f,
    json_t *v)
{
	switch (f->rule) {
	case VIEW_ANY:
		/* A value, never a container: what a container holds
		 * needs rules of its own. */
		if (json_is_object(v) || json_is_array(v))
			return (NULL);
		return (json_incref(v));
	case VIEW_TREE:
		return (json_deep_copy(v));
	case VIEW_OPERATION:
		if (!json_is_string(v) || json_object_get(ctx->operations,
		    json_string_value(v)) == NULL)
			return (NULL);
		return (json_incref(v));
	case VIEW_OBJECT:
		if (!json_is_object(v))
			return (NULL);
		return (status_view_object(ctx, f->kind, v));
	case VIEW_RECORDS:
		if (!json_is_array(v))
			return (NULL);
		return (status_view_records(ctx, f->kind, v));
	}
	return (NULL);
}

/* Copy what kind k's rules show of object src. */
static json_t *
status_view_object(struct view_ctx *ctx, const struct view_kind *k,
    json_t *src)
{
	const struct view_field	*f;
	json_t			*out = json_object(), *v, *shown;

	status_view_collect(ctx, k, src);
	for (f = k->fields; f->name != NULL; f++) {
		if ((v = json_object_get(src, f->name)) == NULL)
			continue;
		if ((shown = status_view_field(ctx, f, v)) != NULL)
			json_object_set_new(out, f->name, shown);
	}
	return (out);
}

json_t *
status_view(json_t *full, const struct view_kind *kind,
    const struct status_viewer *viewer, size_t *hidden)
{
	struct view_ctx	 ctx;
	json_t		*out;

	memset(&ctx, 0, sizeof ctx);
	ctx.viewer = viewer;
	ctx.sessions = json_object();
	ctx.operations = json_object();
	out = status_view_object(&ctx, kind, full);
	json_decref(ctx.sessions);
	json_decref(ctx.operations);
	if (hidden != NULL)
		*hidden = ctx.hidden;
	return (out);
}
