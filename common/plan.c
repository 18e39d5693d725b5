#include <errno.h>
#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "jread.h"
#include "plan.h"
#include "xmalloc.h"

static const char *const plan_keys[] = { "source", "partitions", "ops", NULL };

void
plan_free(struct plan *plan)
{
	size_t	i;

	if (plan == NULL)
		return;
	for (i = 0; i < plan->nfiles; i++)
		free(plan->files[i].path);
	free(plan->files);
	for (i = 0; i < plan->nops; i++)
		free(plan->ops[i].arg);
	free(plan->ops);
	json_decref(plan->records);
	free(plan);
}

/* How many elements a range has; more than INT64_MAX for the widest. */
static __int128
plan_range_count(int64_t start, int64_t end, int64_t step)
{
	__int128	span = (__int128)end - start;

	if (step > 0)
		return (span <= 0 ? 0 : (span + step - 1) / step);
	return (span >= 0 ? 0 : (-span + -(__int128)step - 1) /
	    -(__int128)step);
}

static int
plan_parse_range(struct plan *plan, json_t *range, char **err)
{
	static const char *const keys[] = { "start", "end", "step", NULL };
	const char	*path = "plan.source.range";
	json_int_t	 start = 0, end = 0, step = 1;

	if (jread_only(range, path, keys, err) == -1 ||
	    jread_int(range, path, "start", JREAD_OPTIONAL, &start, err) == -1 ||
	    jread_int(range, path, "end", JREAD_REQUIRED, &end, err) == -1 ||
	    jread_int(range, path, "step", JREAD_OPTIONAL, &step, err) == -1)
		return (-1);
	if (step == 0)
		return (jread_fail(err, "plan.source.range.step",
		    "must not be 0"));
	/* Counts are int64s, from the slices to the count action. */
	if (plan_range_count(start, end, step) > INT64_MAX)
		return (jread_fail(err, path, "more than %lld elements",
		    (long long)INT64_MAX));
	plan->source = PLAN_SOURCE_RANGE;
	plan->range_start = start;
	plan->range_end = end;
	plan->range_step = step;
	return (0);
}

static int
plan_parse_text(struct plan *plan, json_t *text, char **err)
{
	static const char *const keys[] = { "paths", NULL };
	const char	*path = "plan.source.text";
	json_t		*paths, *p;
	size_t		 i;

	if (jread_only(text, path, keys, err) == -1 ||
	    jread_array(text, path, "paths", JREAD_REQUIRED, &paths, err) == -1)
		return (-1);
	if (json_array_size(paths) == 0)
		return (jread_fail(err, "plan.source.text.paths",
		    "needs at least one path"));
	plan->source = PLAN_SOURCE_TEXT;
	plan->files = xcalloc(json_array_size(paths), sizeof *plan->files);
	json_array_foreach(paths, i, p) {
		if (!json_is_string(p) || json_string_length(p) == 0)
			return (jread_fail(err, "plan.source.text.paths",
			    "item %zu: expected a non-empty string", i));
		plan->files[i].path = xstrdup(json_string_value(p));
		plan->files[i].size = -1;
		plan->nfiles++;
	}
	return (0);
}

static int
plan_parse_parallelize(struct plan *plan, json_t *par, char **err)
{
	static const char *const keys[] = { "records", NULL };
	const char	*path = "plan.source.parallelize";
	json_t		*records, *r;
	size_t		 i;

	if (jread_only(par, path, keys, err) == -1 ||
	    jread_array(par, path, "records", JREAD_REQUIRED, &records,
	    err) == -1)
		return (-1);
	json_array_foreach(records, i, r) {
		if (!json_is_string(r) && !json_is_null(r))
			return (jread_fail(err, "plan.source.parallelize.records",
			    "item %zu: expected a string or null", i));
	}
	plan->source = PLAN_SOURCE_PARALLELIZE;
	plan->records = json_incref(records);
	return (0);
}

static int
plan_parse_source(struct plan *plan, json_t *source, char **err)
{
	const char	*key;
	json_t		*value;

	if (json_object_size(source) != 1)
		return (jread_fail(err, "plan.source",
		    "expected exactly one of range, text, parallelize"));
	json_object_foreach(source, key, value) {
		if (strcmp(key, "range") == 0 || strcmp(key, "text") == 0 ||
		    strcmp(key, "parallelize") == 0) {
			if (!json_is_object(value))
				return (jread_fail(err, "plan.source",
				    "%s: expected an object", key));
		}
		if (strcmp(key, "range") == 0)
			return (plan_parse_range(plan, value, err));
		if (strcmp(key, "text") == 0)
			return (plan_parse_text(plan, value, err));
		if (strcmp(key, "parallelize") == 0)
			return (plan_parse_parallelize(plan, value, err));
		if (strcmp(key, "checkpoint") == 0)
			return (jread_fail(err, "plan.source.checkpoint",
			    "checkpoints are not supported yet"));
		return (jread_fail(err, "plan.source", "unknown source \"%s\"",
		    key));
	}
	return (-1);
}

/* One string argument of an op: {"filter": {"contains": "x"}}. */
static int
plan_op_string(struct plan_op *op, json_t *obj, const char *path,
    const char *key, char **err)
{
	const char	*keys[] = { key, NULL };
	json_t		*v;

	if (!json_is_object(obj))
		return (jread_fail(err, path, "expected an object"));
	if (jread_only(obj, path, keys, err) == -1)
		return (-1);
	v = json_object_get(obj, key);
	if (v == NULL || !json_is_string(v)) {
		char *p = jread_path(path, key);
		jread_fail(err, p, v == NULL ? "missing" : "expected a string");
		free(p);
		return (-1);
	}
	op->arglen = json_string_length(v);
	op->arg = xmalloc(op->arglen + 1);
	memcpy(op->arg, json_string_value(v), op->arglen + 1);
	return (0);
}

static int
plan_parse_op(struct plan_op *op, json_t *o, size_t index, char **err)
{
	char		 path[64], sub[96];
	const char	*name, *kind;
	json_t		*arg;
	int		 rc = -1;

	snprintf(path, sizeof path, "plan.ops[%zu]", index);
	if (!json_is_object(o) || json_object_size(o) != 1)
		return (jread_fail(err, path,
		    "expected an object with one operation"));
	json_object_foreach(o, name, arg) {
		snprintf(sub, sizeof sub, "%s.%s", path, name);
		if (strcmp(name, "filter") == 0) {
			op->type = PLAN_OP_FILTER_CONTAINS;
			rc = plan_op_string(op, arg, sub, "contains", err);
		} else if (strcmp(name, "map") == 0) {
			if (!json_is_string(arg))
				return (jread_fail(err, sub,
				    "expected \"upper\", \"lower\" or \"trim\""));
			kind = json_string_value(arg);
			if (strcmp(kind, "upper") == 0)
				op->type = PLAN_OP_MAP_UPPER;
			else if (strcmp(kind, "lower") == 0)
				op->type = PLAN_OP_MAP_LOWER;
			else if (strcmp(kind, "trim") == 0)
				op->type = PLAN_OP_MAP_TRIM;
			else
				return (jread_fail(err, sub,
				    "unknown map \"%s\"", kind));
			rc = 0;
		} else if (strcmp(name, "pipe") == 0) {
			op->type = PLAN_OP_PIPE;
			rc = plan_op_string(op, arg, sub, "command", err);
			if (rc == 0 && op->arglen == 0)
				rc = jread_fail(err, sub, "command: is empty");
		} else
			rc = jread_fail(err, path, "unknown operation \"%s\"",
			    name);
	}
	return (rc);
}

int
plan_parse(json_t *j, struct plan **out, char **err)
{
	struct plan	*plan;
	json_t		*source, *ops = NULL, *o;
	json_int_t	 partitions = 0;
	size_t		 i;

	*out = NULL;
	if (!json_is_object(j))
		return (jread_fail(err, "plan", "expected an object"));
	plan = xcalloc(1, sizeof *plan);
	if (jread_only(j, "plan", plan_keys, err) == -1 ||
	    jread_object(j, "plan", "source", JREAD_REQUIRED, &source,
	    err) == -1 ||
	    plan_parse_source(plan, source, err) == -1 ||
	    jread_int(j, "plan", "partitions", JREAD_OPTIONAL, &partitions,
	    err) == -1 ||
	    jread_array(j, "plan", "ops", JREAD_OPTIONAL, &ops, err) == -1)
		goto fail;
	if (json_object_get(j, "partitions") != NULL &&
	    (partitions < 1 || partitions > PLAN_MAX_PARTITIONS)) {
		jread_fail(err, "plan.partitions", "must be from 1 to %d",
		    PLAN_MAX_PARTITIONS);
		goto fail;
	}
	plan->partitions = (int)partitions;
	if (ops != NULL) {
		if (json_array_size(ops) > PLAN_MAX_OPS) {
			jread_fail(err, "plan.ops", "more than %d operations",
			    PLAN_MAX_OPS);
			goto fail;
		}
		plan->ops = xcalloc(json_array_size(ops), sizeof *plan->ops);
		json_array_foreach(ops, i, o) {
			/* Count it first: a refused op may hold its arg. */
			plan->nops++;
			if (plan_parse_op(&plan->ops[i], o, i, err) == -1)
				goto fail;
		}
	}
	*out = plan;
	return (0);
fail:
	plan_free(plan);
	return (-1);
}

void
plan_set_partitions(struct plan *plan, int default_partitions)
{
	if (plan->partitions > 0)
		return;
	if (plan->source == PLAN_SOURCE_TEXT)
		plan->partitions = (int)plan->nfiles;
	else
		plan->partitions = default_partitions > 0 ?
		    default_partitions : 1;
}

int
plan_stat_files(struct plan *plan, char **err)
{
	struct stat	 st;
	size_t		 i;
	int		 fd;
	char		 path[64];

	for (i = 0; i < plan->nfiles; i++) {
		snprintf(path, sizeof path, "plan.source.text.paths[%zu]", i);
		/* Non-blocking: opening a FIFO must not wait for a writer. */
		fd = open(plan->files[i].path, O_RDONLY | O_NONBLOCK |
		    O_CLOEXEC);
		if (fd == -1)
			return (jread_fail(err, path, "%s: %s",
			    plan->files[i].path, strerror(errno)));
		if (fstat(fd, &st) == -1 || !S_ISREG(st.st_mode)) {
			close(fd);
			return (jread_fail(err, path, "%s: not a regular file",
			    plan->files[i].path));
		}
		close(fd);
		plan->files[i].size = st.st_size;
	}
	return (0);
}

json_t *
plan_files_to_json(const struct plan *plan)
{
	json_t	*files = json_array();
	size_t	 i;

	for (i = 0; i < plan->nfiles; i++)
		json_array_append_new(files, json_pack("{s:s,s:I}", "path",
		    plan->files[i].path, "size", (json_int_t)plan->files[i].size));
	return (files);
}

int
plan_files_from_json(struct plan *plan, json_t *files, char **err)
{
	json_t		*f;
	size_t		 i;
	const char	*path;
	json_int_t	 size;

	if (!json_is_array(files) || json_array_size(files) != plan->nfiles)
		return (jread_fail(err, "files", "do not match the plan"));
	json_array_foreach(files, i, f) {
		if (jread_string(f, "files", "path", JREAD_REQUIRED, &path,
		    err) == -1 ||
		    jread_int(f, "files", "size", JREAD_REQUIRED, &size,
		    err) == -1)
			return (-1);
		free(plan->files[i].path);
		plan->files[i].path = xstrdup(path);
		plan->files[i].size = size;
	}
	return (0);
}

void
plan_slice(int64_t n, int partitions, int partition, int64_t *begin,
    int64_t *end)
{
	*begin = (int64_t)((__int128)n * partition / partitions);
	*end = (int64_t)((__int128)n * (partition + 1) / partitions);
}

void
plan_range_slice(const struct plan *plan, int partition, int64_t *first,
    int64_t *count)
{
	int64_t	n, begin, end;

	n = (int64_t)plan_range_count(plan->range_start, plan->range_end,
	    plan->range_step);
	plan_slice(n, plan->partitions, partition, &begin, &end);
	*first = (int64_t)(plan->range_start + (__int128)begin * plan->range_step);
	*count = end - begin;
}
