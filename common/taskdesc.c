#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include <event2/buffer.h>
#include <jansson.h>

#include "frame.h"
#include "jread.h"
#include "jwrite.h"
#include "log.h"
#include "plan.h"
#include "protocol.h"
#include "taskdesc.h"
#include "xmalloc.h"

static const char *const taskdesc_modes[] = { "records", "count",
    "count_by_value", "reduce", "save", "checkpoint", "shuffle" };
static const char *const reduce_fns[] = { "sum", "min", "max" };

#define nitems(a)	(sizeof (a) / sizeof (a)[0])
/* The largest plan members remembered for the next operation. */
#define TASKDESC_PLAN_KEPT_MAX	16384

/* Look a name up in a table: its index, or -1. */
static int
taskdesc_lookup(const char *const *names, size_t n, const char *s)
{
	size_t	i;

	for (i = 0; i < n; i++) {
		if (strcmp(names[i], s) == 0)
			return ((int)i);
	}
	return (-1);
}

/* Name a mode. */
const char *
taskdesc_mode_name(enum taskdesc_mode mode)
{
	return (taskdesc_modes[mode]);
}

/* Read a mode's name: 0, or -1 if there is no such mode. */
int
taskdesc_mode_from_string(const char *s, enum taskdesc_mode *mode)
{
	int	i;

	if ((i = taskdesc_lookup(taskdesc_modes, nitems(taskdesc_modes),
	    s)) == -1)
		return (-1);
	*mode = (enum taskdesc_mode)i;
	return (0);
}

/* Name a reduce function. */
const char *
reduce_fn_name(enum reduce_fn fn)
{
	return (reduce_fns[fn]);
}

/* Read a reduce function's name: 0, or -1 if there is none so named. */
int
reduce_fn_from_string(const char *s, enum reduce_fn *fn)
{
	int	i;

	if ((i = taskdesc_lookup(reduce_fns, nitems(reduce_fns), s)) == -1)
		return (-1);
	*fn = (enum reduce_fn)i;
	return (0);
}

/* Append to an evbuffer: jwrite's callback. */
static int
taskdesc_add_cb(const char *s, size_t len, void *arg)
{
	return (evbuffer_add(arg, s, len));
}

/* Append a JSON string. */
static void
taskdesc_add_string(struct evbuffer *out, const char *s)
{
	if (jwrite_string(s, strlen(s), taskdesc_add_cb, out) == -1)
		fatalx("%s: cannot encode a string", __func__);
}

/*
 * The last plan members made, and what they were made of: the next
 * operation of a plan is often the same plan (a job run again), and
 * comparing the values costs a tenth of dumping them.
 */
static struct {
	json_t	*plan;
	json_t	*files;
	char	*checkpoint_dir;
	char	*text;
} taskdesc_last;

/* Whether two optional values are equal. */
static int
taskdesc_same(json_t *a, json_t *b)
{
	return (a == NULL ? b == NULL : b != NULL && json_equal(a, b));
}

/* Whether the plan members of plan, files and checkpoint_dir are the last
 * ones made. */
static int
taskdesc_plan_is_last(json_t *plan, json_t *files,
    const char *checkpoint_dir)
{
	const char	*last_dir = taskdesc_last.checkpoint_dir;

	return (taskdesc_last.text != NULL &&
	    json_equal(plan, taskdesc_last.plan) &&
	    taskdesc_same(files, taskdesc_last.files) &&
	    (checkpoint_dir == NULL ? last_dir == NULL : last_dir != NULL &&
	    strcmp(checkpoint_dir, last_dir) == 0));
}

/* Remember the plan members made of plan, files and checkpoint_dir, if
 * they are small: an equal plan gets the same bytes without a dump. */
static void
taskdesc_plan_remember(json_t *plan, json_t *files,
    const char *checkpoint_dir, const char *text)
{
	if (taskdesc_last.text != NULL) {
		json_decref(taskdesc_last.plan);
		if (taskdesc_last.files != NULL)
			json_decref(taskdesc_last.files);
		free(taskdesc_last.checkpoint_dir);
		free(taskdesc_last.text);
		memset(&taskdesc_last, 0, sizeof taskdesc_last);
	}
	if (strlen(text) > TASKDESC_PLAN_KEPT_MAX)
		return;
	taskdesc_last.plan = json_incref(plan);
	taskdesc_last.files = files != NULL ? json_incref(files) : NULL;
	taskdesc_last.checkpoint_dir = checkpoint_dir != NULL ?
	    xstrdup(checkpoint_dir) : NULL;
	taskdesc_last.text = xstrdup(text);
}

/* Make the plan members of an operation's descriptors. */
char *
taskdesc_encode_plan(json_t *plan, json_t *files, const char *checkpoint_dir)
{
	json_t	*o;
	char	*text, *inner;
	size_t	 len;

	if (taskdesc_plan_is_last(plan, files, checkpoint_dir)) {
		if (files != NULL)
			json_decref(files);
		return (xstrdup(taskdesc_last.text));
	}
	o = json_pack("{s:O}", "plan", plan);
	if (files != NULL)
		json_object_set(o, "files", files);
	if (checkpoint_dir != NULL)
		json_object_set_new(o, "checkpoint_dir",
		    json_string(checkpoint_dir));
	if ((text = json_dumps(o, JSON_COMPACT)) == NULL)
		fatalx("json_dumps failed");
	json_decref(o);
	/* Keep the members without the braces, to splice into descriptors. */
	len = strlen(text);
	inner = xstrndup(text + 1, len - 2);
	free(text);
	taskdesc_plan_remember(plan, files, checkpoint_dir, inner);
	if (files != NULL)
		json_decref(files);
	return (inner);
}

/* Append the broadcasts member. */
static void
taskdesc_encode_broadcasts(struct evbuffer *d,
    const struct taskdesc_broadcast *b, size_t n)
{
	size_t	i;

	if (n == 0)
		return;
	evbuffer_add(d, ",\"broadcasts\":[", 15);
	for (i = 0; i < n; i++) {
		if (i > 0)
			evbuffer_add(d, ",", 1);
		if (!b[i].add) {
			/* -id-1: a removal. */
			evbuffer_add_printf(d, "{\"id\":%lld}",
			    (long long)(-b[i].id - 1));
			continue;
		}
		evbuffer_add_printf(d, "{\"id\":%lld,\"size\":%lld",
		    (long long)b[i].id, (long long)b[i].size);
		if (b[i].index > 0)
			evbuffer_add_printf(d, ",\"index\":%lld",
			    (long long)b[i].index);
		evbuffer_add(d, "}", 1);
	}
	evbuffer_add(d, "]", 1);
}

/* Whether a descriptor has members beyond its header: JSON to encode. */
static int
taskdesc_has_members(const struct taskdesc *t, size_t n, const char *plan)
{
	return (plan != NULL || n > 0 || t->mode == MODE_SAVE ||
	    t->mode == MODE_CHECKPOINT || t->shuffle_dir != NULL);
}

/* Append the JSON members of a descriptor, each after a comma. */
static void
taskdesc_encode_members(struct evbuffer *d, const struct taskdesc *t,
    const struct taskdesc_broadcast *b, size_t n, const char *plan)
{
	if (t->mode == MODE_SAVE) {
		evbuffer_add(d, ",\"save\":{\"dir\":", 15);
		taskdesc_add_string(d, t->save_dir);
		evbuffer_add_printf(d, ",\"attempt\":%lld}",
		    (long long)t->save_attempt);
	}
	if (t->mode == MODE_CHECKPOINT) {
		evbuffer_add(d, ",\"checkpoint\":{\"dir\":", 21);
		taskdesc_add_string(d, t->ckpt_dir);
		evbuffer_add_printf(d, ",\"sync\":%s%s}", t->ckpt_sync ?
		    "true" : "false", t->ckpt_dir_passed ? ",\"fd\":true" :
		    "");
	}
	if (t->shuffle_dir != NULL) {
		evbuffer_add(d, ",\"shuffle\":{\"dir\":", 18);
		taskdesc_add_string(d, t->shuffle_dir);
		evbuffer_add_printf(d, ",\"fd\":%s,\"memory\":%lld",
		    t->shuffle_dir_passed ? "true" : "false",
		    (long long)t->shuffle_memory);
		if (t->mode == MODE_SHUFFLE)
			evbuffer_add_printf(d, ",\"stage\":%d,\"buckets\":%d,"
			    "\"op\":%s", t->shuffle_stage, t->shuffle_buckets,
			    t->shuffle_op_text);
		evbuffer_add(d, "}", 1);
	}
	taskdesc_encode_broadcasts(d, b, n);
	if (plan != NULL) {
		evbuffer_add(d, ",", 1);
		evbuffer_add(d, plan, strlen(plan));
	}
}

/* Write the fixed header of a descriptor at head, with reuse_plan if
 * reuse; returns its length. */
static size_t
taskdesc_encode_header(unsigned char *head, const struct taskdesc *t,
    int reuse)
{
	unsigned char	*p = head;
	size_t		 oplen = strlen(t->operation), i;
	int32_t		 flags = 0;

	if (oplen == 0 || oplen > TASKDESC_MAX_OPERATION)
		fatalx("operation id of %zu bytes", oplen);
	if (t->nbatch >= EMBER_MAX_TASK_BATCH)	/* TASKS_DONE's bound */
		fatalx("a batch of %zu tasks", t->nbatch + 1);
	if (reuse)
		flags |= TASKDESC_REUSE_PLAN;
	if (t->source_dir_passed)
		flags |= TASKDESC_SOURCE_FD;
	if (t->held_only)
		flags |= TASKDESC_HELD_ONLY;
	be32_put(p, t->partition);
	be32_put(p + 4, t->partitions);
	be32_put(p + 8, (int32_t)t->mode);
	be32_put(p + 12, t->mode == MODE_REDUCE ? (int32_t)t->fn : 0);
	be32_put(p + 16, flags);
	be64_put(p + 20, t->mode == MODE_RECORDS ? t->skip : 0);
	be32_put(p + 28, (int32_t)oplen);
	p += TASKDESC_HEADER_FIXED;
	memcpy(p, t->operation, oplen);
	p += oplen;
	be32_put(p, (int32_t)t->nbatch);
	p += 4;
	for (i = 0; i < t->nbatch; i++, p += 4)
		be32_put(p, t->batch[i]);
	return ((size_t)(p - head));
}

/* Append a descriptor's frame: its header, then its JSON members if it
 * has any (a count of a plan the worker holds has none). */
void
taskdesc_encode(struct evbuffer *out, const struct taskdesc *t,
    const struct taskdesc_broadcast *b, size_t n, const char *plan)
{
	unsigned char	 head[TASKDESC_HEADER_MAX];
	struct evbuffer	*m = NULL;
	size_t		 hlen, mlen = 0;

	/* Plan members sent make the worker parse them: no reuse. */
	hlen = taskdesc_encode_header(head, t, plan == NULL && t->reuse_plan);
	if (taskdesc_has_members(t, n, plan)) {
		m = evbuffer_new();
		taskdesc_encode_members(m, t, b, n, plan);
		/* The first member's comma becomes the object's brace. */
		evbuffer_drain(m, 1);
		evbuffer_prepend(m, "{", 1);
		evbuffer_add(m, "}", 1);
		mlen = evbuffer_get_length(m);
	}
	if (hlen + mlen > EMBER_MAX_TASK_FRAME)
		fatalx("task descriptor of %zu bytes", hlen + mlen);
	evbuffer_add_int32(out, (int32_t)(hlen + mlen));
	evbuffer_add(out, head, hlen);
	if (m != NULL) {
		evbuffer_add_buffer(out, m);
		evbuffer_free(m);
	}
}

/* Read where a save task writes: a directory, and the attempt that names
 * its temporary file. */
static int
taskdesc_decode_save(json_t *root, struct taskdesc *t, char **err)
{
	static const char *const keys[] = { "dir", "attempt", NULL };
	json_t		*save;
	json_int_t	 attempt;

	if (jread_object(root, "", "save", JREAD_REQUIRED, &save, err) == -1 ||
	    jread_only(save, "save", keys, err) == -1 ||
	    jread_string(save, "save", "dir", JREAD_REQUIRED, &t->save_dir,
	    err) == -1 ||
	    jread_int(save, "save", "attempt", JREAD_REQUIRED, &attempt,
	    err) == -1)
		return (-1);
	if (*t->save_dir != '/')
		return (jread_fail(err, "save.dir", "is not an absolute path"));
	if (attempt < 0)
		return (jread_fail(err, "save.attempt", "must not be "
		    "negative"));
	t->save_attempt = attempt;
	return (0);
}

/* Read where a checkpoint task writes: an absolute directory. */
static int
taskdesc_decode_checkpoint(json_t *root, struct taskdesc *t, char **err)
{
	static const char *const keys[] = { "dir", "sync", "fd", NULL };
	json_t	*c;

	if (jread_object(root, "", "checkpoint", JREAD_REQUIRED, &c,
	    err) == -1 ||
	    jread_only(c, "checkpoint", keys, err) == -1 ||
	    jread_string(c, "checkpoint", "dir", JREAD_REQUIRED, &t->ckpt_dir,
	    err) == -1 ||
	    jread_bool(c, "checkpoint", "sync", JREAD_REQUIRED, &t->ckpt_sync,
	    err) == -1 ||
	    jread_bool(c, "checkpoint", "fd", JREAD_OPTIONAL,
	    &t->ckpt_dir_passed, err) == -1)
		return (-1);
	if (t->ckpt_dir[0] != '/')
		return (jread_fail(err, "checkpoint.dir", "\"%s\" is not an "
		    "absolute path", t->ckpt_dir));
	return (0);
}

/* Read a stage task's shuffle member: its operation's directory, and a
 * map task's stage, buckets, memory and wide op. */
static int
taskdesc_decode_shuffle(json_t *root, struct taskdesc *t, char **err)
{
	static const char *const keys[] = { "dir", "fd", "stage", "buckets",
	    "memory", "op", NULL };
	json_t		*sh = NULL;
	json_int_t	 stage = 0, buckets = 0, memory = 0;
	int		 map = t->mode == MODE_SHUFFLE;

	if (jread_object(root, "", "shuffle", map ? JREAD_REQUIRED :
	    JREAD_OPTIONAL, &sh, err) == -1)
		return (-1);
	if (sh == NULL)
		return (0);
	if (jread_only(sh, "shuffle", keys, err) == -1 ||
	    jread_string(sh, "shuffle", "dir", JREAD_REQUIRED,
	    &t->shuffle_dir, err) == -1 ||
	    jread_bool(sh, "shuffle", "fd", JREAD_REQUIRED,
	    &t->shuffle_dir_passed, err) == -1 ||
	    jread_int(sh, "shuffle", "stage", map, &stage, err) == -1 ||
	    jread_int(sh, "shuffle", "buckets", map, &buckets, err) == -1 ||
	    jread_int(sh, "shuffle", "memory", JREAD_REQUIRED, &memory,
	    err) == -1 ||
	    jread_object(sh, "shuffle", "op", map, &t->shuffle_op, err) == -1)
		return (-1);
	/* The directory is a name in the uid's shuffle directory. */
	if (*t->shuffle_dir == '\0' || strchr(t->shuffle_dir, '/') != NULL ||
	    *t->shuffle_dir == '.')
		return (jread_fail(err, "shuffle.dir", "\"%s\" is not a "
		    "name", t->shuffle_dir));
	if (memory < 0 || (map && (stage < 0 || stage > 4096 ||
	    buckets < 1 || buckets > PLAN_MAX_PARTITIONS)))
		return (jread_fail(err, "shuffle", "stage, buckets or memory "
		    "out of range"));
	t->shuffle_stage = (int)stage;
	t->shuffle_buckets = (int)buckets;
	t->shuffle_memory = memory;
	return (0);
}

/* Read the members the mode needs. */
static int
taskdesc_decode_mode(json_t *root, struct taskdesc *t, char **err)
{
	if (taskdesc_decode_shuffle(root, t, err) == -1)
		return (-1);
	if (t->mode == MODE_SAVE)
		return (taskdesc_decode_save(root, t, err));
	if (t->mode == MODE_CHECKPOINT)
		return (taskdesc_decode_checkpoint(root, t, err));
	return (0);
}

/* Decode one change of the broadcasts member. */
static int
taskdesc_decode_broadcast(json_t *c, const char *where,
    struct taskdesc_broadcast *b, char **err)
{
	json_int_t	id, size, index = 0;

	b->fd = b->index_fd = -1;
	b->index = 0;
	if (!json_is_object(c))
		return (jread_fail(err, where, "expected an object"));
	if (jread_int(c, where, "id", JREAD_REQUIRED, &id, err) == -1)
		return (-1);
	if (id < 0) {
		/* -id-1, written so that INT64_MIN cannot overflow. */
		b->id = -(id + 1);
		b->add = 0;
		b->fd = -1;
		b->size = 0;
		return (0);
	}
	if (jread_int(c, where, "size", JREAD_REQUIRED, &size, err) == -1 ||
	    jread_int(c, where, "index", JREAD_OPTIONAL, &index, err) == -1)
		return (-1);
	b->add = 1;
	if (size < 0)
		return (jread_fail(err, where, "size: must not be negative"));
	if (index < 0)
		return (jread_fail(err, where, "index: must not be negative"));
	b->id = id;
	b->size = size;
	b->index = index;
	return (0);
}

/* Decode the broadcasts member: adds and removals, in order. */
int
taskdesc_decode_broadcasts(json_t *changes, struct taskdesc *t, char **err)
{
	json_t	*c;
	char	 where[64];
	size_t	 i;

	if (!json_is_array(changes))
		return (jread_fail(err, "broadcasts", "expected an array"));
	t->broadcasts = xreallocarray(NULL, json_array_size(changes) + 1,
	    sizeof *t->broadcasts);
	json_array_foreach(changes, i, c) {
		snprintf(where, sizeof where, "broadcasts[%zu]", i);
		if (taskdesc_decode_broadcast(c, where, &t->broadcasts[i],
		    err) == -1)
			return (-1);
		t->nbroadcasts++;
	}
	return (0);
}

/* Read the operation's id of n bytes at p, len bytes on: its length is
 * in range and it holds no NUL.  Returns the bytes read, or 0. */
static size_t
taskdesc_decode_operation(int32_t n, const unsigned char *p, size_t len,
    struct taskdesc *t, char **err)
{

	if (n < 1 || n > TASKDESC_MAX_OPERATION || (size_t)n > len) {
		jread_fail(err, "operation", "length %d: expected 1 to %d in "
		    "the %zu bytes left", n, TASKDESC_MAX_OPERATION, len);
		return (0);
	}
	if (memchr(p, '\0', (size_t)n) != NULL) {
		jread_fail(err, "operation", "holds a NUL");
		return (0);
	}
	memcpy(t->operation_id, p, (size_t)n);
	t->operation_id[n] = '\0';
	t->operation = t->operation_id;
	return ((size_t)n);
}

/* Read the batch of the header at p, len bytes on (its count first):
 * partitions of the operation, in range.  Returns the bytes read, or 0. */
static size_t
taskdesc_decode_batch(const unsigned char *p, size_t len, struct taskdesc *t,
    char **err)
{
	int32_t	n, v;
	size_t	i;

	if (len < 4) {
		jread_fail(err, "batch", "missing");
		return (0);
	}
	n = be32_get(p);
	if (n < 0 || n >= EMBER_MAX_TASK_BATCH) {
		jread_fail(err, "batch", "%d partitions: expected 0 to %d", n,
		    EMBER_MAX_TASK_BATCH - 1);
		return (0);
	}
	if ((size_t)n > (len - 4) / 4) {
		jread_fail(err, "batch", "%d partitions in %zu bytes", n,
		    len - 4);
		return (0);
	}
	if (n > 0)
		t->batch = xreallocarray(NULL, (size_t)n, sizeof *t->batch);
	for (i = 0; i < (size_t)n; i++) {
		v = be32_get(p + 4 + 4 * i);
		if (v < 0 || v >= t->partitions) {
			jread_fail(err, "batch", "element %zu: expected a "
			    "partition from 0 to %d", i, t->partitions - 1);
			return (0);
		}
		t->batch[t->nbatch++] = v;
	}
	return (4 + 4 * (size_t)n);
}

/* Read a descriptor's fixed header: 0, or -1 with *err. */
static int
taskdesc_decode_fixed(const unsigned char *p, struct taskdesc *t, char **err)
{
	int32_t	partition, partitions, mode, fn, flags;

	partition = be32_get(p);
	partitions = be32_get(p + 4);
	mode = be32_get(p + 8);
	fn = be32_get(p + 12);
	flags = be32_get(p + 16);
	t->skip = be64_get(p + 20);
	if (partitions < 1 || partitions > PLAN_MAX_PARTITIONS)
		return (jread_fail(err, "partitions", "must be from 1 to %d",
		    PLAN_MAX_PARTITIONS));
	if (partition < 0 || partition >= partitions)
		return (jread_fail(err, "partition", "must be from 0 to %d",
		    partitions - 1));
	if (mode < 0 || (size_t)mode >= nitems(taskdesc_modes))
		return (jread_fail(err, "mode", "unknown mode %d", mode));
	if (fn < 0 || (size_t)fn >= nitems(reduce_fns) ||
	    (fn != 0 && mode != MODE_REDUCE))
		return (jread_fail(err, "fn", "unknown function %d", fn));
	if ((flags & ~(TASKDESC_REUSE_PLAN | TASKDESC_SOURCE_FD |
	    TASKDESC_HELD_ONLY)) != 0)
		return (jread_fail(err, "flags", "unknown flags %#x", flags));
	if (t->skip < 0 || (t->skip > 0 && mode != MODE_RECORDS))
		return (jread_fail(err, "skip", "must not be negative, nor "
		    "set but in records mode"));
	t->partition = partition;
	t->partitions = partitions;
	t->mode = (enum taskdesc_mode)mode;
	t->fn = (enum reduce_fn)fn;
	t->reuse_plan = (flags & TASKDESC_REUSE_PLAN) != 0;
	t->source_dir_passed = (flags & TASKDESC_SOURCE_FD) != 0;
	t->held_only = (flags & TASKDESC_HELD_ONLY) != 0;
	return (0);
}

/* Read a descriptor's JSON members, if it has any: 0, or -1 with *err. */
static int
taskdesc_decode_members(const char *data, size_t len, struct taskdesc *t,
    char **err)
{
	json_error_t	 jerr;
	json_t		*broadcasts = NULL;

	if (len > 0) {
		if ((t->root = json_loadb(data, len, JSON_ALLOW_NUL,
		    &jerr)) == NULL) {
			xasprintf(err, "members: not JSON: %s", jerr.text);
			return (-1);
		}
		if (!json_is_object(t->root)) {
			*err = xstrdup("members: not a JSON object");
			return (-1);
		}
	}
	/* Without members, t->root is NULL: each optional member is
	 * absent, each required one missing. */
	if (jread_object(t->root, "", "plan", JREAD_OPTIONAL, &t->plan,
	    err) == -1 ||
	    jread_array(t->root, "", "files", JREAD_OPTIONAL, &t->files,
	    err) == -1 ||
	    jread_string(t->root, "", "checkpoint_dir", JREAD_OPTIONAL,
	    &t->source_dir, err) == -1 ||
	    jread_array(t->root, "", "broadcasts", JREAD_OPTIONAL,
	    &broadcasts, err) == -1)
		return (-1);
	if (t->reuse_plan && (t->plan != NULL || t->files != NULL ||
	    t->source_dir != NULL))
		return (jread_fail(err, "reuse_plan", "with plan members"));
	if (taskdesc_decode_mode(t->root, t, err) == -1)
		return (-1);
	if (broadcasts != NULL)
		return (taskdesc_decode_broadcasts(broadcasts, t, err));
	return (0);
}

/* A descriptor of removals alone holds nothing else: 0, or -1 with *err. */
static int
taskdesc_check_held_only(const struct taskdesc *t, char **err)
{
	size_t	i;

	if (!t->held_only)
		return (0);
	if (t->nbroadcasts == 0)
		return (jread_fail(err, "held_only", "without broadcasts"));
	for (i = 0; i < t->nbroadcasts; i++) {
		if (t->broadcasts[i].add)
			return (jread_fail(err, "held_only", "with an add"));
	}
	if (t->reuse_plan || t->source_dir_passed || t->nbatch > 0 ||
	    t->plan != NULL || t->files != NULL || t->source_dir != NULL ||
	    t->mode != MODE_COUNT || t->shuffle_dir != NULL)
		return (jread_fail(err, "held_only", "with a task's members"));
	return (0);
}

/* Decode a descriptor: its header, then its members. */
int
taskdesc_decode(const char *data, size_t len, struct taskdesc *t, char **err)
{
	const unsigned char	*p = (const unsigned char *)data;
	size_t			 n, off;

	memset(t, 0, sizeof *t);
	t->source_dirfd = t->ckpt_dirfd = t->shuffle_dirfd = -1;
	if (len < TASKDESC_HEADER_FIXED) {
		xasprintf(err, "header: %zu bytes, short of %d", len,
		    TASKDESC_HEADER_FIXED);
		return (-1);
	}
	if (taskdesc_decode_fixed(p, t, err) == -1)
		return (-1);
	off = TASKDESC_HEADER_FIXED;
	if ((n = taskdesc_decode_operation(be32_get(p + 28), p + off,
	    len - off, t, err)) == 0)
		return (-1);
	off += n;
	if ((n = taskdesc_decode_batch(p + off, len - off, t, err)) == 0)
		return (-1);
	off += n;
	if (taskdesc_decode_members(data + off, len - off, t, err) == -1)
		return (-1);
	return (taskdesc_check_held_only(t, err));
}

/* Free what a decoded descriptor holds. */
void
taskdesc_clear(struct taskdesc *t)
{
	if (t->source_dir_passed && t->source_dirfd >= 0)
		close(t->source_dirfd);
	if (t->ckpt_dir_passed && t->ckpt_dirfd >= 0)
		close(t->ckpt_dirfd);
	if (t->shuffle_dir_passed && t->shuffle_dirfd >= 0)
		close(t->shuffle_dirfd);
	free(t->broadcasts);
	free(t->batch);
	if (t->root != NULL)
		json_decref(t->root);
	memset(t, 0, sizeof *t);
}
