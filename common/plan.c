#include <sys/stat.h>

#include <errno.h>
#include <fcntl.h>
#include <glob.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#define PCRE2_CODE_UNIT_WIDTH 8
#include <pcre2.h>
#include <uuid/uuid.h>

#include "jread.h"
#include "log.h"
#include "plan.h"
#include "plugin.h"
#include "utf8.h"
#include "xmalloc.h"

static const char *const plan_keys[] = { "source", "partitions", "ops", NULL };

/* Free what an op holds. */
static void
plan_op_clear(struct plan_op *op)
{
	free(op->arg);
	pcre2_code_free(op->regex);
	free(op->udf_broadcasts);
	free(op->udf_library);
	free(op->udf_symbol);
	free(op->udf_args);
	free(op->py_fn);
	free(op->py_zero);
}

/* Free a plan. */
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
		plan_op_clear(&plan->ops[i]);
	free(plan->ops);
	json_decref(plan->records);
	free(plan->checkpoint_dir);
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
/* Parse a range source. */

/* Parse a range source. */
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
/* Parse a text source: its paths, expanded later. */

/* Parse a text source: its paths, expanded later. */
/*
 * A path a plan names must be absolute: emberd has no working directory
 * of the client's to resolve it against (clients make their paths
 * absolute before sending them).  It must hold no NUL either.  field is
 * a format for the field's name.
 */
static int __attribute__((format(printf, 3, 4)))
plan_check_absolute(json_t *p, char **err, const char *field, ...)
{
	const char	*path = json_string_value(p);
	char		*name;
	va_list		 ap;
	int		 rc = 0;

	if (path[0] == '/' && strlen(path) == json_string_length(p))
		return (0);
	va_start(ap, field);
	xvasprintf(&name, field, ap);
	va_end(ap);
	if (path[0] != '/')
		rc = jread_fail(err, name, "\"%s\" is not an absolute path "
		    "(emberd does not know the client's working directory)",
		    path);
	else
		rc = jread_fail(err, name, "holds a NUL byte");
	free(name);
	return (rc);
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
		if (plan_check_absolute(p, err, "plan.source.text.paths[%zu]",
		    i) == -1)
			return (-1);
		plan->files[i].path = xstrdup(json_string_value(p));
		plan->files[i].size = -1;
		plan->nfiles++;
	}
	return (0);
}
/* Parse a parallelize source. */

/* Parse a parallelize source. */
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
/* Is s a UUID in its canonical text form? */
int
plan_is_uuid(const char *s)
{
	uuid_t	u;

	return (strlen(s) == 36 && uuid_parse(s, u) == 0);
}

/* Parse a checkpoint source: the id of a checkpoint.  emberd checks that
 * the client's uid holds one so named. */
static int
plan_parse_checkpoint(struct plan *plan, json_t *value, char **err)
{
	if (!json_is_string(value))
		return (jread_fail(err, "plan.source.checkpoint",
		    "expected a checkpoint id (a string)"));
	if (json_string_length(value) != 36 ||
	    !plan_is_uuid(json_string_value(value)))
		return (jread_fail(err, "plan.source.checkpoint",
		    "\"%s\" is not a UUID", json_string_value(value)));
	plan->source = PLAN_SOURCE_CHECKPOINT;
	strcpy(plan->checkpoint, json_string_value(value));
	return (0);
}

/* Parse the source: exactly one kind. */
static int
plan_parse_source(struct plan *plan, json_t *source, char **err)
{
	const char	*key;
	json_t		*value;

	if (json_object_size(source) != 1)
		return (jread_fail(err, "plan.source",
		    "expected exactly one of range, text, parallelize, "
		    "checkpoint"));
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
			return (plan_parse_checkpoint(plan, value, err));
		return (jread_fail(err, "plan.source", "unknown source \"%s\"",
		    key));
	}
	return (-1);
}

/* Take a string argument, which may hold NULs, as the op's arg. */
static void
plan_op_set_arg(struct plan_op *op, json_t *v)
{
	op->arglen = json_string_length(v);
	op->arg = xmalloc(op->arglen + 1);
	memcpy(op->arg, json_string_value(v), op->arglen + 1);
}

/* Read obj.key as a string into the op's arg; with nonempty, refuse "". */
static int
plan_op_arg(struct plan_op *op, json_t *obj, const char *path,
    const char *key, int nonempty, char **err)
{
	json_t	*v = json_object_get(obj, key);
	char	*p;
	int	 rc = 0;

	p = jread_path(path, key);
	if (v == NULL)
		rc = jread_fail(err, p, "missing");
	else if (!json_is_string(v))
		rc = jread_fail(err, p, "expected a string");
	else if (nonempty && json_string_length(v) == 0)
		rc = jread_fail(err, p, "must not be empty");
	else
		plan_op_set_arg(op, v);
	free(p);
	return (rc);
}

/* Check an op's argument is an object with only the given keys. */
static int
plan_op_object(json_t *arg, const char *path, const char *const *keys,
    char **err)
{
	if (!json_is_object(arg))
		return (jread_fail(err, path, "expected an object"));
	return (jread_only(arg, path, keys, err));
}

/* Read an integer field that must be at least min. */
static int
plan_op_int(json_t *obj, const char *path, const char *key, int required,
    int64_t min, int64_t *out, char **err)
{
	json_int_t	 v = *out;
	char		*p;
	int		 rc = 0;

	if (jread_int(obj, path, key, required, &v, err) == -1)
		return (-1);
	if (v < min) {
		p = jread_path(path, key);
		rc = jread_fail(err, p, "must be %lld or more", (long long)min);
		free(p);
	}
	*out = v;
	return (rc);
}

/* Compile a regex filter's pattern; the error is PCRE2's, with where. */
static int
plan_op_regex(struct plan_op *op, const char *path, char **err)
{
	PCRE2_UCHAR	 message[256];
	PCRE2_SIZE	 offset;
	uint32_t	 options = 0;
	int		 code;

#ifdef PCRE2_MATCH_INVALID_UTF
	/* A pattern that turns UTF-8 on must not fail on a record that is
	 * not UTF-8: such a record simply does not match. */
	options |= PCRE2_MATCH_INVALID_UTF;
#endif
	op->regex = pcre2_compile((PCRE2_SPTR)op->arg, op->arglen, options,
	    &code, &offset, NULL);
	if (op->regex != NULL)
		return (0);
	if (pcre2_get_error_message(code, message, sizeof message) < 0)
		snprintf((char *)message, sizeof message, "error %d", code);
	return (jread_fail(err, path, "%s at offset %zu", (char *)message,
	    (size_t)offset));
}

/* {"filter": {"contains": s} | {"regex": s} | {"in_broadcast": id}} */
static int
plan_parse_filter(struct plan_op *op, json_t *arg, const char *path,
    char **err)
{
	static const char *const keys[] = { "contains", "regex",
	    "in_broadcast", NULL };
	char	*p;
	int	 rc;

	if (plan_op_object(arg, path, keys, err) == -1)
		return (-1);
	if (json_object_size(arg) != 1)
		return (jread_fail(err, path,
		    "expected exactly one of contains, regex, in_broadcast"));
	if (json_object_get(arg, "contains") != NULL) {
		op->type = PLAN_OP_FILTER_CONTAINS;
		return (plan_op_arg(op, arg, path, "contains", 0, err));
	}
	if (json_object_get(arg, "regex") != NULL) {
		op->type = PLAN_OP_FILTER_REGEX;
		if (plan_op_arg(op, arg, path, "regex", 0, err) == -1)
			return (-1);
		p = jread_path(path, "regex");
		rc = plan_op_regex(op, p, err);
		free(p);
		return (rc);
	}
	op->type = PLAN_OP_FILTER_BROADCAST;
	return (plan_op_int(arg, path, "in_broadcast", JREAD_REQUIRED, 0,
	    &op->broadcast, err));
}

/* Check a json path: dot-separated names, none empty. */
static int
plan_check_json_path(const struct plan_op *op, const char *path, char **err)
{
	size_t	i;

	if (memchr(op->arg, '\0', op->arglen) != NULL)
		return (jread_fail(err, path, "must not hold a NUL"));
	for (i = 0; i <= op->arglen; i++) {
		if ((i == 0 || op->arg[i - 1] == '.') &&
		    (i == op->arglen || op->arg[i] == '.'))
			return (jread_fail(err, path, "\"%s\": a name between "
			    "dots is empty", op->arg));
	}
	return (0);
}

/* {"map": "upper" | "lower" | "trim" | {"field": {...}} | {"json": p}} */
static int
plan_parse_map(struct plan_op *op, json_t *arg, const char *path, char **err)
{
	static const char *const keys[] = { "field", "json", NULL };
	static const char *const field_keys[] = { "sep", "index", NULL };
	const char	*kind;
	json_t		*field;
	char		*p;
	int		 rc;

	if (json_is_string(arg)) {
		kind = json_string_value(arg);
		if (strcmp(kind, "upper") == 0)
			op->type = PLAN_OP_MAP_UPPER;
		else if (strcmp(kind, "lower") == 0)
			op->type = PLAN_OP_MAP_LOWER;
		else if (strcmp(kind, "trim") == 0)
			op->type = PLAN_OP_MAP_TRIM;
		else
			return (jread_fail(err, path, "unknown map \"%s\"",
			    kind));
		return (0);
	}
	if (!json_is_object(arg))
		return (jread_fail(err, path, "expected \"upper\", \"lower\", "
		    "\"trim\" or an object"));
	if (jread_only(arg, path, keys, err) == -1)
		return (-1);
	if (json_object_size(arg) != 1)
		return (jread_fail(err, path,
		    "expected exactly one of field, json"));
	if (json_object_get(arg, "json") != NULL) {
		op->type = PLAN_OP_MAP_JSON;
		if (plan_op_arg(op, arg, path, "json", 1, err) == -1)
			return (-1);
		p = jread_path(path, "json");
		rc = plan_check_json_path(op, p, err);
		free(p);
		return (rc);
	}
	op->type = PLAN_OP_MAP_FIELD;
	field = json_object_get(arg, "field");
	p = jread_path(path, "field");
	rc = -1;
	if (plan_op_object(field, p, field_keys, err) == 0 &&
	    plan_op_arg(op, field, p, "sep", 1, err) == 0 &&
	    plan_op_int(field, p, "index", JREAD_REQUIRED, INT64_MIN,
	    &op->index, err) == 0)
		rc = 0;
	free(p);
	return (rc);
}

/* {"sample": {"fraction": f, "seed": n}} */
static int
plan_parse_sample(struct plan_op *op, json_t *arg, const char *path,
    char **err)
{
	static const char *const keys[] = { "fraction", "seed", NULL };
	json_t	*f;
	char	*p;
	int	 rc = 0;

	op->type = PLAN_OP_SAMPLE;
	if (plan_op_object(arg, path, keys, err) == -1 ||
	    plan_op_int(arg, path, "seed", JREAD_OPTIONAL, INT64_MIN,
	    &op->seed, err) == -1)
		return (-1);
	p = jread_path(path, "fraction");
	f = json_object_get(arg, "fraction");
	if (f == NULL)
		rc = jread_fail(err, p, "missing");
	else if (!json_is_number(f))
		rc = jread_fail(err, p, "expected a number");
	else {
		op->fraction = json_number_value(f);
		if (!(op->fraction >= 0 && op->fraction <= 1))
			rc = jread_fail(err, p, "must be from 0 to 1");
	}
	free(p);
	return (rc);
}

/* The "broadcasts" of a udf or python op: the ids of those it reads. */
static int
plan_parse_broadcasts(struct plan_op *op, json_t *ids, const char *path,
    char **err)
{
	json_t	*id;
	size_t	 i;

	op->udf_broadcasts = xcalloc(json_array_size(ids) + 1,
	    sizeof *op->udf_broadcasts);
	json_array_foreach(ids, i, id) {
		if (!json_is_integer(id) || json_integer_value(id) < 0)
			return (jread_fail(err, path, "broadcasts[%zu]: "
			    "expected a broadcast id", i));
		op->udf_broadcasts[op->udf_nbroadcasts++] =
		    json_integer_value(id);
	}
	return (0);
}

/* {"udf": {"library": path, "symbol": name, "args": {...},
 * "broadcasts": [ids]}}: the broadcasts the function reads. */
static int
plan_parse_udf(struct plan_op *op, json_t *arg, const char *path, char **err)
{
	static const char *const keys[] = { "library", "symbol", "args",
	    "broadcasts", NULL };
	const char	*library, *symbol;
	json_t		*args = NULL, *ids = NULL;

	op->type = PLAN_OP_UDF;
	if (plan_op_object(arg, path, keys, err) == -1 ||
	    jread_string(arg, path, "library", JREAD_REQUIRED, &library,
	    err) == -1 ||
	    jread_string(arg, path, "symbol", JREAD_REQUIRED, &symbol,
	    err) == -1 ||
	    jread_object(arg, path, "args", JREAD_OPTIONAL, &args, err) == -1 ||
	    jread_array(arg, path, "broadcasts", JREAD_OPTIONAL, &ids,
	    err) == -1)
		return (-1);
	if (ids != NULL && plan_parse_broadcasts(op, ids, path, err) == -1)
		return (-1);
	if (*library == '\0')
		return (jread_fail(err, path, "library: is empty"));
	if (plan_check_absolute(json_object_get(arg, "library"), err,
	    "%s.library", path) == -1)
		return (-1);
	if (*symbol == '\0')
		return (jread_fail(err, path, "symbol: is empty"));
	op->udf_library = xstrdup(library);
	op->udf_symbol = xstrdup(symbol);
	if (args == NULL)
		op->udf_args = xstrdup("{}");
	else if ((op->udf_args = json_dumps(args, JSON_COMPACT)) == NULL)
		fatalx("json_dumps failed");
	return (0);
}

static const char *const plan_python_kinds[] = { "map", "filter",
    "flat_map", "map_partitions", "reduce", "fold", NULL };

/* The name of a python op's kind. */
const char *
plan_python_kind_name(enum plan_python_kind kind)
{
	return (plan_python_kinds[kind]);
}

/* Check the Python major.minor the client pickled with against the
 * workers': a pickled function only loads in the same one. */
static int
plan_check_python_version(const char *version, const char *path, char **err)
{
#ifdef HAVE_PYTHON
	if (strcmp(version, EMBER_PYTHON_VERSION) == 0)
		return (0);
	return (jread_fail(err, path, "version: the client runs Python %s, "
	    "ember's workers run Python %s: a function pickled by one does "
	    "not load in the other", version, EMBER_PYTHON_VERSION));
#else
	(void)version;
	return (jread_fail(err, path, "this ember was built without Python "
	    "(./configure --without-python)"));
#endif
}

/* {"python": {KIND: fn, "version": "3.11", "zero": z, "broadcasts": [ids]}}:
 * KIND one of plan_python_kinds, fn and z base64 text of cloudpickle. */
static int
plan_parse_python(struct plan_op *op, json_t *arg, const char *path,
    char **err)
{
	static const char *const keys[] = { "map", "filter", "flat_map",
	    "map_partitions", "reduce", "fold", "zero", "version",
	    "broadcasts", "deterministic", NULL };
	const char	*fn = NULL, *zero = NULL, *version;
	json_t		*ids = NULL;
	size_t		 i, n = 0;

	op->type = PLAN_OP_PYTHON;
	if (plan_op_object(arg, path, keys, err) == -1)
		return (-1);
	for (i = 0; plan_python_kinds[i] != NULL; i++) {
		if (json_object_get(arg, plan_python_kinds[i]) == NULL)
			continue;
		n++;
		op->py_kind = (enum plan_python_kind)i;
		if (jread_string(arg, path, plan_python_kinds[i],
		    JREAD_REQUIRED, &fn, err) == -1)
			return (-1);
		if (*fn == '\0')
			return (jread_fail(err, path, "%s: is empty",
			    plan_python_kinds[i]));
	}
	if (n != 1)
		return (jread_fail(err, path, "expected exactly one of map, "
		    "filter, flat_map, map_partitions, reduce, fold"));
	if (jread_string(arg, path, "version", JREAD_REQUIRED, &version,
	    err) == -1 ||
	    jread_string(arg, path, "zero", op->py_kind == PLAN_PYTHON_FOLD ?
	    JREAD_REQUIRED : JREAD_OPTIONAL, &zero, err) == -1 ||
	    jread_array(arg, path, "broadcasts", JREAD_OPTIONAL, &ids,
	    err) == -1 ||
	    jread_bool(arg, path, "deterministic", JREAD_OPTIONAL,
	    &op->py_deterministic, err) == -1)
		return (-1);
	if (zero != NULL && op->py_kind != PLAN_PYTHON_FOLD)
		return (jread_fail(err, path, "zero: only for fold"));
	if (ids != NULL && plan_parse_broadcasts(op, ids, path, err) == -1)
		return (-1);
	if (plan_check_python_version(version, path, err) == -1)
		return (-1);
	op->py_fn = xstrdup(fn);
	if (zero != NULL)
		op->py_zero = xstrdup(zero);
	return (0);
}

/* Parse one op: an object with one key, the op's name. */
static int
plan_parse_op(struct plan_op *op, json_t *o, size_t index, char **err)
{
	static const char *const flat_map_keys[] = { "split", NULL };
	char		 path[64], sub[96];
	const char	*name;
	json_t		*arg;
	int		 rc = -1;

	snprintf(path, sizeof path, "plan.ops[%zu]", index);
	if (!json_is_object(o) || json_object_size(o) != 1)
		return (jread_fail(err, path,
		    "expected an object with one operation"));
	json_object_foreach(o, name, arg) {
		snprintf(sub, sizeof sub, "%s.%s", path, name);
		if (strcmp(name, "filter") == 0)
			rc = plan_parse_filter(op, arg, sub, err);
		else if (strcmp(name, "map") == 0)
			rc = plan_parse_map(op, arg, sub, err);
		else if (strcmp(name, "flat_map") == 0) {
			op->type = PLAN_OP_FLAT_MAP_SPLIT;
			if (plan_op_object(arg, sub, flat_map_keys, err) == 0)
				rc = plan_op_arg(op, arg, sub, "split", 1, err);
		} else if (strcmp(name, "sample") == 0)
			rc = plan_parse_sample(op, arg, sub, err);
		else if (strcmp(name, "limit") == 0) {
			op->type = PLAN_OP_LIMIT;
			rc = plan_op_int(o, path, "limit", JREAD_REQUIRED, 0,
			    &op->limit, err);
		} else if (strcmp(name, "pipe") == 0) {
			static const char *const keys[] = { "command", NULL };

			op->type = PLAN_OP_PIPE;
			if (plan_op_object(arg, sub, keys, err) == 0)
				rc = plan_op_arg(op, arg, sub, "command", 0,
				    err);
			if (rc == 0 && op->arglen == 0)
				rc = jread_fail(err, sub, "command: is empty");
		} else if (strcmp(name, "udf") == 0)
			rc = plan_parse_udf(op, arg, sub, err);
		else if (strcmp(name, "python") == 0)
			rc = plan_parse_python(op, arg, sub, err);
		else
			rc = jread_fail(err, path, "unknown operation \"%s\"",
			    name);
	}
	return (rc);
}

/* Parse and check a plan. */
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
/* Fix the partition count. */

/* Fix the partition count. */
void
plan_set_partitions(struct plan *plan, int default_partitions)
{
	if (plan->partitions > 0)
		return;
	if (plan->source == PLAN_SOURCE_TEXT)
		plan->partitions = plan->nfiles > PLAN_MAX_PARTITIONS ?
		    PLAN_MAX_PARTITIONS : (int)plan->nfiles;
	else
		plan->partitions = default_partitions > 0 ?
		    default_partitions : 1;
}

/* Open a text file to check it and take its size; field names the plan's
 * path it came from. */
static int
plan_stat_file(struct plan_file *f, const char *field, char **err)
{
	struct stat	 st;
	int		 fd;

	/* Non-blocking: opening a FIFO must not wait for a writer; and a
	 * terminal named here never becomes anyone's controlling one. */
	if ((fd = open(f->path, O_RDONLY | O_NONBLOCK | O_CLOEXEC |
	    O_NOCTTY)) == -1)
		return (jread_fail(err, field, "%s: %s", f->path,
		    strerror(errno)));
	if (fstat(fd, &st) == -1 || !S_ISREG(st.st_mode)) {
		close(fd);
		return (jread_fail(err, field, "%s: not a regular file",
		    f->path));
	}
	close(fd);
	f->size = st.st_size;
	return (0);
}

/* Append a file to a growing list. */
static void
plan_add_file(struct plan_file **files, size_t *n, size_t *size,
    const char *path)
{
	if (*n == *size) {
		*size = *size == 0 ? 8 : *size * 2;
		*files = xreallocarray(*files, *size, sizeof **files);
	}
	(*files)[*n].path = xstrdup(path);
	(*files)[*n].size = -1;
	(*n)++;
}

/* Expand one of the plan's paths: a glob to its matches, sorted, or a
 * plain path to itself. */
static int
plan_expand_path(const char *pattern, const char *field,
    struct plan_file **files, size_t *n, size_t *size, char **err)
{
	glob_t	g;
	size_t	i;
	int	rc;

	if (strpbrk(pattern, "*?[") == NULL) {
		plan_add_file(files, n, size, pattern);
		return (0);
	}
	memset(&g, 0, sizeof g);
	rc = glob(pattern, 0, NULL, &g);
	if (rc == GLOB_NOMATCH) {
		globfree(&g);
		/* A name that only looks like a pattern. */
		if (access(pattern, F_OK) == 0) {
			plan_add_file(files, n, size, pattern);
			return (0);
		}
		return (jread_fail(err, field, "%s: no file matches", pattern));
	}
	if (rc != 0) {
		globfree(&g);
		return (jread_fail(err, field, "%s: %s", pattern,
		    rc == GLOB_NOSPACE ? "out of memory" : "read error"));
	}
	for (i = 0; i < g.gl_pathc; i++)
		plan_add_file(files, n, size, g.gl_pathv[i]);
	globfree(&g);
	return (0);
}

/* Expand and check the text paths. */
static int
plan_check_files(struct plan *plan, char **err)
{
	struct plan_file	*files = NULL;
	size_t			 n = 0, size = 0, i, first;
	char			 field[64];
	int			 rc = 0;

	for (i = 0; i < plan->nfiles && rc == 0; i++) {
		snprintf(field, sizeof field, "plan.source.text.paths[%zu]", i);
		first = n;
		rc = plan_expand_path(plan->files[i].path, field, &files, &n,
		    &size, err);
		for (; rc == 0 && first < n; first++)
			rc = plan_stat_file(&files[first], field, err);
	}
	if (rc == -1) {
		for (i = 0; i < n; i++)
			free(files[i].path);
		free(files);
		return (-1);
	}
	for (i = 0; i < plan->nfiles; i++)
		free(plan->files[i].path);
	free(plan->files);
	plan->files = files;
	plan->nfiles = n;
	return (0);
}

/* Check a udf's library and symbol, without loading the library. */
static int
plan_check_udf(struct plan_op *op, size_t index, char **err)
{
	char	*perr = NULL;
	int	 rc;

	if ((rc = plugin_check(op->udf_library, op->udf_symbol,
	    &op->udf_deterministic, &perr)) == 0)
		return (0);
	xasprintf(err, "plan.ops[%zu].udf.%s: %s", index,
	    rc == PLUGIN_BAD_SYMBOL ? "symbol" : "library", perr);
	free(perr);
	return (-1);
}

int
plan_is_deterministic(const struct plan *plan)
{
	size_t	i;

	for (i = 0; i < plan->nops; i++) {
		if (plan->ops[i].type == PLAN_OP_PIPE ||
		    (plan->ops[i].type == PLAN_OP_UDF &&
		    !plan->ops[i].udf_deterministic) ||
		    (plan->ops[i].type == PLAN_OP_PYTHON &&
		    !plan->ops[i].py_deterministic))
			return (0);
	}
	return (1);
}

int
plan_names_resources(const struct plan *plan)
{
	size_t	i;

	if (plan->source == PLAN_SOURCE_TEXT)
		return (1);
	for (i = 0; i < plan->nops; i++) {
		if (plan->ops[i].type == PLAN_OP_UDF)
			return (1);
	}
	return (0);
}

/* Check the files and plugins a plan names. */
int
plan_check_resources(struct plan *plan, char **err)
{
	size_t	i;

	if (plan->source == PLAN_SOURCE_TEXT &&
	    plan_check_files(plan, err) == -1)
		return (-1);
	for (i = 0; i < plan->nops; i++) {
		if (plan->ops[i].type == PLAN_OP_UDF &&
		    plan_check_udf(&plan->ops[i], i, err) == -1)
			return (-1);
	}
	return (0);
}

/* The files as JSON, for task descriptors. */
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

/* Take the files emberd expanded in place of the plan's paths. */
int
plan_files_from_json(struct plan *plan, json_t *files, char **err)
{
	struct plan_file	*list;
	json_t			*f;
	size_t			 i, n;
	const char		*path;
	json_int_t		 size;

	if (plan->source != PLAN_SOURCE_TEXT || !json_is_array(files) ||
	    (n = json_array_size(files)) == 0)
		return (jread_fail(err, "files", "do not match the plan"));
	list = xcalloc(n, sizeof *list);
	json_array_foreach(files, i, f) {
		if (jread_string(f, "files", "path", JREAD_REQUIRED, &path,
		    err) == -1 ||
		    jread_int(f, "files", "size", JREAD_REQUIRED, &size,
		    err) == -1)
			goto fail;
		if (size < 0) {
			jread_fail(err, "files.size", "must be 0 or more");
			goto fail;
		}
		list[i].path = xstrdup(path);
		list[i].size = size;
	}
	for (i = 0; i < plan->nfiles; i++)
		free(plan->files[i].path);
	free(plan->files);
	plan->files = list;
	plan->nfiles = n;
	return (0);
fail:
	for (i = 0; i < n; i++)
		free(list[i].path);
	free(list);
	return (-1);
}

/* The slice of n items that a partition holds. */
void
plan_slice(int64_t n, int partitions, int partition, int64_t *begin,
    int64_t *end)
{
	*begin = (int64_t)((__int128)n * partition / partitions);
	*end = (int64_t)((__int128)n * (partition + 1) / partitions);
}
/* The first value and count of a range partition. */

/* The first value and count of a range partition. */
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

/* Add len bytes of s to the description, control characters as '?'. */
static void
plan_describe_add(char *buf, size_t *used, const char *s, size_t len)
{
	size_t	i;

	for (i = 0; i < len && *used < PLAN_DESCRIBE_MAX; i++) {
		buf[(*used)++] = (unsigned char)s[i] < 0x20 || s[i] == 0x7f ?
		    '?' : s[i];
	}
}

/* Add a formatted word to the description. */
static void __attribute__((format(printf, 3, 4)))
plan_describe_addf(char *buf, size_t *used, const char *fmt, ...)
{
	char	 word[64];
	va_list	 ap;
	int	 n;

	va_start(ap, fmt);
	n = vsnprintf(word, sizeof word, fmt, ap);
	va_end(ap);
	if (n > 0)
		plan_describe_add(buf, used, word, strlen(word));
}

/* A path, its file's name alone when it is long: .../words.txt. */
static void
plan_describe_path(char *buf, size_t *used, const char *path)
{
	const char	*name = strrchr(path, '/');

	if (strlen(path) <= 24 || name == NULL || name[1] == '\0') {
		plan_describe_add(buf, used, path, strlen(path));
		return;
	}
	plan_describe_add(buf, used, "...", 3);
	plan_describe_add(buf, used, name, strlen(name));
}

/* The source, as "range 0..100", "text /a/b (+2)", "parallelize 5". */
static void
plan_describe_source(const struct plan *plan, char *buf, size_t *used)
{
	switch (plan->source) {
	case PLAN_SOURCE_RANGE:
		plan_describe_addf(buf, used, "range %lld..%lld",
		    (long long)plan->range_start, (long long)plan->range_end);
		if (plan->range_step != 1)
			plan_describe_addf(buf, used, " step %lld",
			    (long long)plan->range_step);
		break;
	case PLAN_SOURCE_TEXT:
		plan_describe_addf(buf, used, "text ");
		if (plan->nfiles > 0)
			plan_describe_path(buf, used, plan->files[0].path);
		if (plan->nfiles > 1)
			plan_describe_addf(buf, used, " (+%zu)",
			    plan->nfiles - 1);
		break;
	case PLAN_SOURCE_PARALLELIZE:
		plan_describe_addf(buf, used, "parallelize %zu",
		    json_array_size(plan->records));
		break;
	case PLAN_SOURCE_CHECKPOINT:
		plan_describe_addf(buf, used, "checkpoint %.8s",
		    plan->checkpoint);
		break;
	}
}

/* One op, as "filter contains 7" or "pipe sort -u". */
static void
plan_describe_op(const struct plan_op *op, char *buf, size_t *used)
{
	static const char *const names[] = {
		[PLAN_OP_FILTER_CONTAINS] = "filter contains ",
		[PLAN_OP_FILTER_REGEX] = "filter regex ",
		[PLAN_OP_FILTER_BROADCAST] = "filter in_broadcast ",
		[PLAN_OP_MAP_UPPER] = "map upper",
		[PLAN_OP_MAP_LOWER] = "map lower",
		[PLAN_OP_MAP_TRIM] = "map trim",
		[PLAN_OP_MAP_FIELD] = "map field ",
		[PLAN_OP_MAP_JSON] = "map json ",
		[PLAN_OP_FLAT_MAP_SPLIT] = "flat_map split ",
		[PLAN_OP_SAMPLE] = "sample ",
		[PLAN_OP_LIMIT] = "limit ",
		[PLAN_OP_PIPE] = "pipe ",
		[PLAN_OP_UDF] = "udf ",
		[PLAN_OP_PYTHON] = "python ",
	};

	plan_describe_add(buf, used, names[op->type], strlen(names[op->type]));
	switch (op->type) {
	case PLAN_OP_FILTER_BROADCAST:
		plan_describe_addf(buf, used, "%lld", (long long)op->broadcast);
		break;
	case PLAN_OP_MAP_FIELD:
		plan_describe_addf(buf, used, "%lld", (long long)op->index);
		break;
	case PLAN_OP_SAMPLE:
		plan_describe_addf(buf, used, "%g", op->fraction);
		break;
	case PLAN_OP_LIMIT:
		plan_describe_addf(buf, used, "%lld", (long long)op->limit);
		break;
	case PLAN_OP_UDF:
		plan_describe_add(buf, used, op->udf_symbol,
		    strlen(op->udf_symbol));
		break;
	case PLAN_OP_PYTHON:
		plan_describe_addf(buf, used, "%s",
		    plan_python_kind_name(op->py_kind));
		break;
	case PLAN_OP_MAP_UPPER:
	case PLAN_OP_MAP_LOWER:
	case PLAN_OP_MAP_TRIM:
		break;
	default:
		plan_describe_add(buf, used, op->arg, op->arglen);
		break;
	}
}

char *
plan_describe(const struct plan *plan)
{
	char	buf[PLAN_DESCRIBE_MAX];
	size_t	used = 0, i;

	plan_describe_source(plan, buf, &used);
	for (i = 0; i < plan->nops; i++) {
		plan_describe_add(buf, &used, " | ", 3);
		plan_describe_op(&plan->ops[i], buf, &used);
	}
	return (utf8_clean(buf, used, PLAN_DESCRIBE_MAX));
}
