#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include <event2/buffer.h>
#include <jansson.h>

#include "frame.h"
#include "jread.h"
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

/* Append a JSON string. */
static void
taskdesc_add_string(struct evbuffer *out, const char *s)
{
	json_t		*js;
	char		*text;
	const char	*p;

	/* Plain ASCII, as an operation id always is, needs no escaping. */
	for (p = s; *p >= 0x20 && *p < 0x7f && *p != '"' && *p != '\\'; p++)
		;
	if (*p == '\0') {
		evbuffer_add(out, "\"", 1);
		evbuffer_add(out, s, (size_t)(p - s));
		evbuffer_add(out, "\"", 1);
		return;
	}
	js = json_string(s);
	if (js == NULL || (text = json_dumps(js, JSON_ENCODE_ANY |
	    JSON_COMPACT)) == NULL)
		fatalx("%s: cannot encode a string", __func__);
	json_decref(js);
	evbuffer_add(out, text, strlen(text));
	free(text);
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

/* Write a partition number (0 or more) in decimal at p; returns its
 * length.  evbuffer_add_printf costs about 1,000 instructions a number,
 * as much as the rest of a tiny task in emberd. */
static size_t
taskdesc_put_partition(char *p, int v)
{
	char	tmp[12];
	size_t	n = 0, i;

	do {
		tmp[n++] = (char)('0' + v % 10);
		v /= 10;
	} while (v > 0);
	for (i = 0; i < n; i++)
		p[i] = tmp[n - 1 - i];
	return (n);
}

/* Append the batch member: the partitions run after the first. */
static void
taskdesc_encode_batch(struct evbuffer *d, const int *batch, size_t n)
{
	char	buf[16 + EMBER_MAX_TASK_BATCH * 12], *p = buf;
	size_t	i;

	if (n == 0)
		return;
	if (n > EMBER_MAX_TASK_BATCH)	/* the buffer's bound */
		fatalx("a batch of %zu tasks", n + 1);
	memcpy(p, ",\"batch\":[", 10);
	p += 10;
	for (i = 0; i < n; i++) {
		if (i > 0)
			*p++ = ',';
		p += taskdesc_put_partition(p, batch[i]);
	}
	*p++ = ']';
	evbuffer_add(d, buf, (size_t)(p - buf));
}

/* Append a descriptor's frame. */
void
taskdesc_encode(struct evbuffer *out, const struct taskdesc *t,
    const struct taskdesc_broadcast *b, size_t n, const char *plan)
{
	struct evbuffer	*d = evbuffer_new();

	evbuffer_add(d, "{\"operation\":", 13);
	taskdesc_add_string(d, t->operation);
	evbuffer_add_printf(d, ",\"partition\":%d,\"partitions\":%d,"
	    "\"mode\":\"%s\"", t->partition, t->partitions,
	    taskdesc_mode_name(t->mode));
	if (t->mode == MODE_REDUCE)
		evbuffer_add_printf(d, ",\"fn\":\"%s\"", reduce_fn_name(t->fn));
	if (t->mode == MODE_RECORDS && t->skip > 0)
		evbuffer_add_printf(d, ",\"skip\":%lld", (long long)t->skip);
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
	if (t->source_dir_passed)
		evbuffer_add(d, ",\"source_fd\":true", 17);
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
	taskdesc_encode_batch(d, t->batch, t->nbatch);
	if (plan == NULL && t->reuse_plan)
		evbuffer_add(d, ",\"reuse_plan\":true", 18);
	if (plan != NULL) {
		evbuffer_add(d, ",", 1);
		evbuffer_add(d, plan, strlen(plan));
	}
	evbuffer_add(d, "}", 1);
	if (evbuffer_get_length(d) > EMBER_MAX_TASK_FRAME)
		fatalx("task descriptor of %zu bytes", evbuffer_get_length(d));
	evbuffer_add_int32(out, (int32_t)evbuffer_get_length(d));
	evbuffer_add_buffer(out, d);
	evbuffer_free(d);
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

/* Read the mode of a descriptor and what it needs. */
static int
taskdesc_decode_mode(json_t *root, struct taskdesc *t, char **err)
{
	const char	*mode = "records", *fn;

	if (jread_string(root, "", "mode", JREAD_OPTIONAL, &mode, err) == -1)
		return (-1);
	if (taskdesc_mode_from_string(mode, &t->mode) == -1)
		return (jread_fail(err, "mode", "unknown mode \"%s\"", mode));
	if (t->mode == MODE_REDUCE) {
		if (jread_string(root, "", "fn", JREAD_REQUIRED, &fn,
		    err) == -1)
			return (-1);
		if (reduce_fn_from_string(fn, &t->fn) == -1)
			return (jread_fail(err, "fn", "expected \"sum\", "
			    "\"min\" or \"max\""));
	}
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

/* Decode the batch member: partitions of the operation, in range. */
static int
taskdesc_decode_batch(json_t *batch, struct taskdesc *t, char **err)
{
	json_t	*p;
	size_t	 i;

	if (json_array_size(batch) >= EMBER_MAX_TASK_BATCH)
		return (jread_fail(err, "batch", "more than %d partitions",
		    EMBER_MAX_TASK_BATCH - 1));
	t->batch = xreallocarray(NULL, json_array_size(batch) + 1,
	    sizeof *t->batch);
	json_array_foreach(batch, i, p) {
		if (!json_is_integer(p) || json_integer_value(p) < 0 ||
		    json_integer_value(p) >= t->partitions)
			return (jread_fail(err, "batch", "element %zu: "
			    "expected a partition from 0 to %d", i,
			    t->partitions - 1));
		t->batch[t->nbatch++] = (int)json_integer_value(p);
	}
	return (0);
}

/* Decode a descriptor. */
int
taskdesc_decode(const char *data, size_t len, struct taskdesc *t, char **err)
{
	json_error_t	 jerr;
	json_int_t	 partition, partitions, skip = 0;
	json_t		*broadcasts = NULL, *batch = NULL;

	memset(t, 0, sizeof *t);
	t->source_dirfd = t->ckpt_dirfd = t->shuffle_dirfd = -1;
	if ((t->root = json_loadb(data, len, JSON_ALLOW_NUL, &jerr)) == NULL) {
		xasprintf(err, "not JSON: %s", jerr.text);
		return (-1);
	}
	if (!json_is_object(t->root)) {
		*err = xstrdup("not a JSON object");
		return (-1);
	}
	if (jread_string(t->root, "", "operation", JREAD_REQUIRED,
	    &t->operation, err) == -1 ||
	    jread_int(t->root, "", "partition", JREAD_REQUIRED, &partition,
	    err) == -1 ||
	    jread_int(t->root, "", "partitions", JREAD_REQUIRED, &partitions,
	    err) == -1 ||
	    jread_object(t->root, "", "plan", JREAD_OPTIONAL, &t->plan,
	    err) == -1 ||
	    jread_array(t->root, "", "files", JREAD_OPTIONAL, &t->files,
	    err) == -1 ||
	    jread_string(t->root, "", "checkpoint_dir", JREAD_OPTIONAL,
	    &t->source_dir, err) == -1 ||
	    jread_array(t->root, "", "broadcasts", JREAD_OPTIONAL,
	    &broadcasts, err) == -1 ||
	    jread_array(t->root, "", "batch", JREAD_OPTIONAL, &batch,
	    err) == -1 ||
	    jread_int(t->root, "", "skip", JREAD_OPTIONAL, &skip, err) == -1 ||
	    jread_bool(t->root, "", "source_fd", JREAD_OPTIONAL,
	    &t->source_dir_passed, err) == -1 ||
	    jread_bool(t->root, "", "reuse_plan", JREAD_OPTIONAL,
	    &t->reuse_plan, err) == -1)
		return (-1);
	if (t->reuse_plan && (t->plan != NULL || t->files != NULL ||
	    t->source_dir != NULL))
		return (jread_fail(err, "reuse_plan", "with plan members"));
	if (skip < 0)
		return (jread_fail(err, "skip", "must not be negative"));
	t->skip = skip;
	if (partitions < 1 || partitions > PLAN_MAX_PARTITIONS)
		return (jread_fail(err, "partitions", "must be from 1 to %d",
		    PLAN_MAX_PARTITIONS));
	if (partition < 0 || partition >= partitions)
		return (jread_fail(err, "partition", "must be from 0 to %lld",
		    (long long)partitions - 1));
	t->partition = (int)partition;
	t->partitions = (int)partitions;
	if (taskdesc_decode_mode(t->root, t, err) == -1)
		return (-1);
	if (batch != NULL && taskdesc_decode_batch(batch, t, err) == -1)
		return (-1);
	if (broadcasts != NULL)
		return (taskdesc_decode_broadcasts(broadcasts, t, err));
	return (0);
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
