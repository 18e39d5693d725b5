#include <sys/stat.h>

#include <errno.h>
#include <fcntl.h>
#include <glob.h>
#include <limits.h>
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
	free(op->key.sep);
	pcre2_code_free(op->key.regex);
	free(op->value.sep);
	pcre2_code_free(op->value.regex);
	plan_free(op->other);
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
	if (plan->shuffle_op != NULL) {
		plan_op_clear(plan->shuffle_op);
		free(plan->shuffle_op);
	}
	free(plan->inputs);
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
	plan->nrecords = json_array_size(records);
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

/* Compile a pattern of len bytes into *code; the error is PCRE2's, with
 * where. */
static int
plan_compile_regex(const char *pattern, size_t len, const char *path,
    void **code, char **err)
{
	PCRE2_UCHAR	 message[256];
	PCRE2_SIZE	 offset;
	uint32_t	 options = 0;
	int		 error;

#ifdef PCRE2_MATCH_INVALID_UTF
	/* A pattern that turns UTF-8 on must not fail on a record that is
	 * not UTF-8: such a record simply does not match. */
	options |= PCRE2_MATCH_INVALID_UTF;
#endif
	*code = pcre2_compile((PCRE2_SPTR)pattern, len, options, &error,
	    &offset, NULL);
	if (*code != NULL)
		return (0);
	if (pcre2_get_error_message(error, message, sizeof message) < 0)
		snprintf((char *)message, sizeof message, "error %d", error);
	return (jread_fail(err, path, "%s at offset %zu", (char *)message,
	    (size_t)offset));
}

/* Compile a regex filter's pattern. */
static int
plan_op_regex(struct plan_op *op, const char *path, char **err)
{
	return (plan_compile_regex(op->arg, op->arglen, path, &op->regex,
	    err));
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
		else if (strcmp(kind, "key") == 0)
			op->type = PLAN_OP_MAP_KEY;
		else if (strcmp(kind, "value") == 0)
			op->type = PLAN_OP_MAP_VALUE;
		else
			return (jread_fail(err, path, "unknown map \"%s\"",
			    kind));
		return (0);
	}
	if (!json_is_object(arg))
		return (jread_fail(err, path, "expected \"upper\", \"lower\", "
		    "\"trim\", \"key\", \"value\" or an object"));
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

/*
 * Keyed data and the shuffle (docs/plans.md, "Keyed data").  Nested
 * plans (join, union) are parsed with their own path prefix; a client's
 * nesting is bounded so that its depth cannot exhaust a stack.
 */
#define PLAN_MAX_DEPTH	8

static int	plan_parse_op_at(struct plan_op *, json_t *, const char *,
		    int depth, int stage, char **err);
static int	plan_parse_in(json_t *, struct plan **, int depth, int stage,
		    char **err);

/* Compile a key_by pick's pattern, which must have its group. */
static int
plan_pick_regex(struct plan_pick *k, json_t *v, const char *path, char **err)
{
	uint32_t	groups;

	if (plan_compile_regex(json_string_value(v), json_string_length(v),
	    path, &k->regex, err) == -1)
		return (-1);
	if (pcre2_pattern_info(k->regex, PCRE2_INFO_CAPTURECOUNT,
	    &groups) != 0 || (uint32_t)k->group > groups)
		return (jread_fail(err, path, "group %d: the pattern has %u",
		    k->group, (unsigned)groups));
	return (0);
}

/* A key_by pick: {"field": {"sep": s, "index": i}} or {"regex": p,
 * "group": g}; for the value also "record". */
static int
plan_parse_pick(struct plan_pick *k, json_t *v, const char *path, char **err)
{
	static const char *const keys[] = { "field", "regex", "group", NULL };
	static const char *const field_keys[] = { "sep", "index", NULL };
	json_t		*field, *re;
	json_int_t	 group = 0, index = 0;
	const char	*sep;
	char		*p;
	int		 rc = -1;

	if (json_is_string(v) && strcmp(json_string_value(v), "record") == 0) {
		k->whole = 1;
		return (0);
	}
	if (plan_op_object(v, path, keys, err) == -1)
		return (-1);
	field = json_object_get(v, "field");
	re = json_object_get(v, "regex");
	if ((field == NULL) == (re == NULL))
		return (jread_fail(err, path, "expected one of field, regex"));
	if (field != NULL) {
		if (json_object_get(v, "group") != NULL)
			return (jread_fail(err, path, "group: only with "
			    "regex"));
		p = jread_path(path, "field");
		if (plan_op_object(field, p, field_keys, err) == 0 &&
		    jread_string(field, p, "sep", JREAD_REQUIRED, &sep,
		    err) == 0 &&
		    jread_int(field, p, "index", JREAD_REQUIRED, &index,
		    err) == 0) {
			if (json_string_length(json_object_get(field,
			    "sep")) == 0)
				jread_fail(err, p, "sep: must not be empty");
			else {
				k->seplen = json_string_length(
				    json_object_get(field, "sep"));
				k->sep = xmalloc(k->seplen + 1);
				memcpy(k->sep, sep, k->seplen + 1);
				k->index = index;
				rc = 0;
			}
		}
		free(p);
		return (rc);
	}
	if (!json_is_string(re))
		return (jread_fail(err, path, "regex: expected a string"));
	if (jread_int(v, path, "group", JREAD_OPTIONAL, &group, err) == -1)
		return (-1);
	if (group < 0 || group > 255)
		return (jread_fail(err, path, "group: must be from 0 to 255"));
	k->group = (int)group;
	p = jread_path(path, "regex");
	rc = plan_pick_regex(k, re, p, err);
	free(p);
	return (rc);
}

/* {"key_by": {"field": .. | "regex": .., "group": g, "value": pick}} */
static int
plan_parse_key_by(struct plan_op *op, json_t *arg, const char *path,
    char **err)
{
	static const char *const keys[] = { "field", "regex", "group",
	    "value", NULL };
	json_t	*key, *value;
	char	*p;
	int	 rc;

	op->type = PLAN_OP_KEY_BY;
	if (plan_op_object(arg, path, keys, err) == -1)
		return (-1);
	value = json_object_get(arg, "value");
	if (value == NULL)
		op->value.whole = 1;
	else {
		p = jread_path(path, "value");
		rc = plan_parse_pick(&op->value, value, p, err);
		free(p);
		if (rc == -1)
			return (-1);
	}
	if (json_object_get(arg, "field") == NULL &&
	    json_object_get(arg, "regex") == NULL) {
		if (json_object_get(arg, "group") != NULL)
			return (jread_fail(err, path, "group: only with "
			    "regex"));
		op->key.whole = 1;
		return (0);
	}
	key = json_deep_copy(arg);
	json_object_del(key, "value");
	rc = plan_parse_pick(&op->key, key, path, err);
	json_decref(key);
	return (rc);
}

/* The output partitions of a wide op: optional, 1 to the most. */
static int
plan_parse_out_partitions(struct plan_op *op, json_t *arg, const char *path,
    char **err)
{
	json_int_t	 n = 0;
	char		*p;
	int		 rc = 0;

	if (jread_int(arg, path, "partitions", JREAD_OPTIONAL, &n, err) == -1)
		return (-1);
	if (json_object_get(arg, "partitions") != NULL &&
	    (n < 1 || n > PLAN_MAX_PARTITIONS)) {
		p = jread_path(path, "partitions");
		rc = jread_fail(err, p, "must be from 1 to %d",
		    PLAN_MAX_PARTITIONS);
		free(p);
	}
	op->out_partitions = (int)n;
	return (rc);
}

/* {"reduce_by_key": {"fn": f, "sep": s, "partitions": n}} */
static int
plan_parse_reduce_by_key(struct plan_op *op, json_t *arg, const char *path,
    char **err)
{
	static const char *const keys[] = { "fn", "sep", "partitions", NULL };
	static const char *const fns[] = { "sum", "min", "max", "count",
	    "concat", NULL };
	const char	*fn;
	size_t		 i;

	op->type = PLAN_OP_REDUCE_BY_KEY;
	if (plan_op_object(arg, path, keys, err) == -1 ||
	    plan_parse_out_partitions(op, arg, path, err) == -1 ||
	    jread_string(arg, path, "fn", JREAD_REQUIRED, &fn, err) == -1)
		return (-1);
	for (i = 0; fns[i] != NULL; i++) {
		if (strcmp(fn, fns[i]) == 0)
			break;
	}
	if (fns[i] == NULL)
		return (jread_fail(err, path, "fn: \"%s\" is not one of sum, "
		    "min, max, count, concat", fn));
	op->kv_fn = (enum plan_kv_fn)i;
	if (json_object_get(arg, "sep") != NULL) {
		if (op->kv_fn != PLAN_KV_CONCAT)
			return (jread_fail(err, path, "sep: only for concat"));
		return (plan_op_arg(op, arg, path, "sep", 0, err));
	}
	op->arg = xstrdup("");
	return (0);
}

/* {"sort_by": {"descending": b, "numeric": b, "partitions": n}} */
static int
plan_parse_sort_by(struct plan_op *op, json_t *arg, const char *path,
    char **err)
{
	static const char *const keys[] = { "descending", "numeric",
	    "partitions", NULL };

	op->type = PLAN_OP_SORT_BY;
	if (plan_op_object(arg, path, keys, err) == -1 ||
	    plan_parse_out_partitions(op, arg, path, err) == -1 ||
	    jread_bool(arg, path, "descending", JREAD_OPTIONAL,
	    &op->descending, err) == -1 ||
	    jread_bool(arg, path, "numeric", JREAD_OPTIONAL, &op->numeric,
	    err) == -1)
		return (-1);
	return (0);
}

/* {"join": {"plan": P, "how": "inner"|"left", "partitions": n}} and
 * {"union": {"plan": P}}: the other plan, parsed under its own path. */
static int
plan_parse_other(struct plan_op *op, json_t *arg, const char *path,
    int depth, int stage, char **err)
{
	static const char *const join_keys[] = { "plan", "how", "partitions",
	    NULL };
	static const char *const union_keys[] = { "plan", NULL };
	const char	*how = "inner";
	json_t		*other;
	char		*p;
	int		 rc;

	if (plan_op_object(arg, path, op->type == PLAN_OP_JOIN ? join_keys :
	    union_keys, err) == -1)
		return (-1);
	if (op->type == PLAN_OP_JOIN) {
		if (plan_parse_out_partitions(op, arg, path, err) == -1 ||
		    jread_string(arg, path, "how", JREAD_OPTIONAL, &how,
		    err) == -1)
			return (-1);
		if (strcmp(how, "left") == 0)
			op->left = 1;
		else if (strcmp(how, "inner") != 0)
			return (jread_fail(err, path, "how: \"%s\" is not "
			    "inner or left", how));
	}
	if (stage)		/* a stage's shuffle op has no plan of its own */
		return (0);
	if (depth >= PLAN_MAX_DEPTH)
		return (jread_fail(err, path, "plans nested more than %d deep",
		    PLAN_MAX_DEPTH));
	if ((other = json_object_get(arg, "plan")) == NULL)
		return (jread_fail(err, path, "plan: missing"));
	if ((rc = plan_parse_in(other, &op->other, depth + 1, 0, err)) == 0)
		return (0);
	/* Its errors name its fields from "plan": put them under ours. */
	p = *err;
	xasprintf(err, "%s.plan%s", path, strncmp(p, "plan", 4) == 0 ?
	    p + 4 : p);
	free(p);
	return (-1);
}

/* A wide op, or key_by: -1 with *err, 0 when parsed, 1 when name is
 * none of them. */
static int
plan_parse_keyed(struct plan_op *op, const char *name, json_t *arg,
    const char *path, int depth, int stage, char **err)
{
	static const char *const part_keys[] = { "partitions", NULL };

	if (strcmp(name, "key_by") == 0)
		return (plan_parse_key_by(op, arg, path, err));
	if (strcmp(name, "reduce_by_key") == 0)
		return (plan_parse_reduce_by_key(op, arg, path, err));
	if (strcmp(name, "sort_by") == 0)
		return (plan_parse_sort_by(op, arg, path, err));
	if (strcmp(name, "join") == 0 || strcmp(name, "union") == 0) {
		op->type = strcmp(name, "join") == 0 ? PLAN_OP_JOIN :
		    PLAN_OP_UNION;
		return (plan_parse_other(op, arg, path, depth, stage, err));
	}
	if (strcmp(name, "group_by_key") == 0)
		op->type = PLAN_OP_GROUP_BY_KEY;
	else if (strcmp(name, "distinct") == 0)
		op->type = PLAN_OP_DISTINCT;
	else if (strcmp(name, "repartition") == 0)
		op->type = PLAN_OP_REPARTITION;
	else
		return (1);
	if (plan_op_object(arg, path, part_keys, err) == -1 ||
	    plan_parse_out_partitions(op, arg, path, err) == -1)
		return (-1);
	if (op->type == PLAN_OP_REPARTITION && op->out_partitions == 0)
		return (jread_fail(err, path, "partitions: missing"));
	return (0);
}

int
plan_op_is_wide(const struct plan_op *op)
{
	return (op->type >= PLAN_OP_REDUCE_BY_KEY);
}

const char *
plan_kind_name(enum plan_kind kind)
{
	static const char *const names[] = { "plain", "pair", "group",
	    "any" };

	return (names[kind]);
}

/* Does an op take this kind of record? */
static int
plan_op_takes(const struct plan_op *op, enum plan_kind in)
{
	if (in == PLAN_KIND_ANY)
		return (1);
	switch (op->type) {
	case PLAN_OP_SAMPLE:
	case PLAN_OP_LIMIT:
	case PLAN_OP_PYTHON:
		return (1);
	case PLAN_OP_MAP_KEY:
		return (in != PLAN_KIND_RECORD);
	case PLAN_OP_MAP_VALUE:
	case PLAN_OP_REDUCE_BY_KEY:
	case PLAN_OP_GROUP_BY_KEY:
	case PLAN_OP_JOIN:
		return (in == PLAN_KIND_PAIR);
	case PLAN_OP_SORT_BY:
	case PLAN_OP_DISTINCT:
	case PLAN_OP_REPARTITION:
	case PLAN_OP_UNION:
		return (in != PLAN_KIND_GROUP);
	default:
		return (in == PLAN_KIND_RECORD);
	}
}

/* What an op gives, for records of kind in. */
static enum plan_kind
plan_op_gives(const struct plan_op *op, enum plan_kind in)
{
	switch (op->type) {
	case PLAN_OP_KEY_BY:
	case PLAN_OP_REDUCE_BY_KEY:
		return (PLAN_KIND_PAIR);
	case PLAN_OP_GROUP_BY_KEY:
	case PLAN_OP_JOIN:
		return (PLAN_KIND_GROUP);
	case PLAN_OP_MAP_KEY:
	case PLAN_OP_MAP_VALUE:
		return (PLAN_KIND_RECORD);
	case PLAN_OP_PYTHON:
		/* A function gives whatever it returns: a 2-tuple is a
		 * pair. */
		return (op->py_kind == PLAN_PYTHON_FILTER ? in : PLAN_KIND_ANY);
	default:
		return (in);
	}
}

/* Follow the kinds of records through the plan's ops: each op must take
 * what the one before it gives (union: both sides the same kind). */
static int
plan_check_kinds(struct plan *plan, const char *path, char **err)
{
	enum plan_kind	 kind;
	size_t		 i;

	if (plan->source == PLAN_SOURCE_CHECKPOINT)
		kind = PLAN_KIND_ANY;
	else if (plan->source == PLAN_SOURCE_SHUFFLE)
		kind = plan_op_gives(plan->shuffle_op,
		    plan->shuffle_op->in_kind);
	else
		kind = PLAN_KIND_RECORD;
	for (i = 0; i < plan->nops; i++) {
		struct plan_op	*op = &plan->ops[i];

		op->in_kind = kind;
		if (!plan_op_takes(op, kind))
			return (jread_fail(err, path, "ops[%zu] takes no %s "
			    "records%s", i, plan_kind_name(kind),
			    kind == PLAN_KIND_RECORD ? " (key_by makes pairs)" :
			    " (map key or value makes records)"));
		if (op->other != NULL && op->type == PLAN_OP_JOIN &&
		    op->other->kind != PLAN_KIND_PAIR &&
		    op->other->kind != PLAN_KIND_ANY)
			return (jread_fail(err, path, "ops[%zu].join.plan: "
			    "gives %s records, not pairs", i,
			    plan_kind_name(op->other->kind)));
		if (op->other != NULL && op->type == PLAN_OP_UNION &&
		    op->other->kind != kind && kind != PLAN_KIND_ANY &&
		    op->other->kind != PLAN_KIND_ANY)
			return (jread_fail(err, path, "ops[%zu].union.plan: "
			    "gives %s records, this plan %s", i,
			    plan_kind_name(op->other->kind),
			    plan_kind_name(kind)));
		kind = op->out_kind = plan_op_gives(op, kind);
	}
	plan->kind = kind;
	return (0);
}

/* {"shuffle": {"op": {..}, "inputs": [{"stage": s, "maps": m}, ..]}}: a
 * stage's input, from emberd. */
static int
plan_parse_shuffle(struct plan *plan, json_t *v, char **err)
{
	static const char *const keys[] = { "op", "inputs", NULL };
	static const char *const input_keys[] = { "stage", "maps", NULL };
	json_t		*o, *inputs, *in;
	json_int_t	 stage, maps;
	size_t		 i;

	plan->source = PLAN_SOURCE_SHUFFLE;
	if (plan_op_object(v, "plan.source.shuffle", keys, err) == -1 ||
	    jread_object(v, "plan.source.shuffle", "op", JREAD_REQUIRED, &o,
	    err) == -1 ||
	    jread_array(v, "plan.source.shuffle", "inputs", JREAD_REQUIRED,
	    &inputs, err) == -1)
		return (-1);
	plan->shuffle_op = xcalloc(1, sizeof *plan->shuffle_op);
	if (plan_parse_op_at(plan->shuffle_op, o, "plan.source.shuffle.op",
	    0, 1, err) == -1)
		return (-1);
	if (!plan_op_is_wide(plan->shuffle_op))
		return (jread_fail(err, "plan.source.shuffle.op", "not a "
		    "wide operation"));
	if (json_array_size(inputs) !=
	    (plan->shuffle_op->type == PLAN_OP_JOIN ||
	    plan->shuffle_op->type == PLAN_OP_UNION ? 2u : 1u))
		return (jread_fail(err, "plan.source.shuffle.inputs", "wrong "
		    "number of inputs"));
	plan->inputs = xcalloc(json_array_size(inputs), sizeof *plan->inputs);
	json_array_foreach(inputs, i, in) {
		if (plan_op_object(in, "plan.source.shuffle.inputs",
		    input_keys, err) == -1 ||
		    jread_int(in, "plan.source.shuffle.inputs", "stage",
		    JREAD_REQUIRED, &stage, err) == -1 ||
		    jread_int(in, "plan.source.shuffle.inputs", "maps",
		    JREAD_REQUIRED, &maps, err) == -1)
			return (-1);
		if (stage < 0 || stage > 4096 || maps < 1 ||
		    maps > PLAN_MAX_PARTITIONS)
			return (jread_fail(err, "plan.source.shuffle.inputs",
			    "stage or maps out of range"));
		plan->inputs[i].stage = (int)stage;
		plan->inputs[i].maps = (int)maps;
		plan->ninputs++;
	}
	/* The op's input kind: a union or sort may take records or pairs,
	 * which the stage's map side knew; here its output is what the
	 * next ops see. */
	plan->shuffle_op->in_kind = plan->shuffle_op->type ==
	    PLAN_OP_SORT_BY || plan->shuffle_op->type == PLAN_OP_DISTINCT ||
	    plan->shuffle_op->type == PLAN_OP_REPARTITION ||
	    plan->shuffle_op->type == PLAN_OP_UNION ? PLAN_KIND_ANY :
	    PLAN_KIND_PAIR;
	return (0);
}

/* Parse one op at path: an object with one key, the op's name.  stage:
 * a stage's shuffle op, whose join or union has no plan of its own. */
static int
plan_parse_op_at(struct plan_op *op, json_t *o, const char *path, int depth,
    int stage, char **err)
{
	static const char *const flat_map_keys[] = { "split", NULL };
	char		 sub[160];
	const char	*name;
	json_t		*arg;
	int		 rc = -1;

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
		else if ((rc = plan_parse_keyed(op, name, arg, sub, depth,
		    stage, err)) == 1)
			rc = jread_fail(err, path, "unknown operation \"%s\"",
			    name);
	}
	return (rc);
}

/* Parse and check a plan, depth plans deep; stage: it may have a shuffle
 * source. */
static int
plan_parse_in(json_t *j, struct plan **out, int depth, int stage, char **err)
{
	struct plan	*plan;
	json_t		*source, *ops = NULL, *o;
	json_int_t	 partitions = 0;
	char		 path[64];
	size_t		 i;

	*out = NULL;
	if (!json_is_object(j))
		return (jread_fail(err, "plan", "expected an object"));
	plan = xcalloc(1, sizeof *plan);
	if (jread_only(j, "plan", plan_keys, err) == -1 ||
	    jread_object(j, "plan", "source", JREAD_REQUIRED, &source,
	    err) == -1)
		goto fail;
	if (stage && json_object_size(source) == 1 &&
	    json_object_get(source, "shuffle") != NULL) {
		if (plan_parse_shuffle(plan, json_object_get(source,
		    "shuffle"), err) == -1)
			goto fail;
	} else if (plan_parse_source(plan, source, err) == -1)
		goto fail;
	if (jread_int(j, "plan", "partitions", JREAD_OPTIONAL, &partitions,
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
			snprintf(path, sizeof path, "plan.ops[%zu]", i);
			if (plan_parse_op_at(&plan->ops[i], o, path, depth,
			    0, err) == -1)
				goto fail;
		}
	}
	if (plan_check_kinds(plan, "plan", err) == -1)
		goto fail;
	*out = plan;
	return (0);
fail:
	plan_free(plan);
	return (-1);
}

int
plan_parse(json_t *j, struct plan **out, char **err)
{
	return (plan_parse_in(j, out, 0, 0, err));
}

int
plan_parse_stage(json_t *j, struct plan **out, char **err)
{
	return (plan_parse_in(j, out, 0, 1, err));
}

void
plan_walk(struct plan *plan, void (*fn)(struct plan *, void *), void *arg)
{
	size_t	i;

	fn(plan, arg);
	for (i = 0; i < plan->nops; i++) {
		if (plan->ops[i].other != NULL)
			plan_walk(plan->ops[i].other, fn, arg);
	}
}

/* Drop one plan's records (plan_walk). */
static void
plan_drop_records_cb(struct plan *plan, void *arg)
{
	(void)arg;
	json_decref(plan->records);
	plan->records = NULL;
}

void
plan_drop_records(struct plan *plan)
{
	plan_walk(plan, plan_drop_records_cb, NULL);
}

/* Fix the partition count, and each wide op's from its input's. */
void
plan_set_partitions(struct plan *plan, int default_partitions)
{
	struct plan_op	*op;
	int64_t		 n;
	size_t		 i;

	if (plan->partitions > 0)
		;
	else if (plan->source == PLAN_SOURCE_TEXT)
		plan->partitions = plan->nfiles > PLAN_MAX_PARTITIONS ?
		    PLAN_MAX_PARTITIONS : (int)plan->nfiles;
	else
		plan->partitions = default_partitions > 0 ?
		    default_partitions : 1;
	n = plan->partitions;
	for (i = 0; i < plan->nops; i++) {
		op = &plan->ops[i];
		if (op->other != NULL)
			plan_set_partitions(op->other, default_partitions);
		if (!plan_op_is_wide(op))
			continue;
		if (op->type == PLAN_OP_UNION) {
			n += plan_final_partitions(op->other);
			if (n > PLAN_MAX_PARTITIONS)
				n = PLAN_MAX_PARTITIONS;
			op->out_partitions = (int)n;
		} else if (op->out_partitions == 0) {
			if (op->type == PLAN_OP_JOIN &&
			    plan_final_partitions(op->other) > n)
				n = plan_final_partitions(op->other);
			op->out_partitions = (int)n;
		}
		n = op->out_partitions;
	}
}

int
plan_final_partitions(const struct plan *plan)
{
	size_t	i = plan->nops;

	while (i-- > 0) {
		if (plan_op_is_wide(&plan->ops[i]))
			return (plan->ops[i].out_partitions);
	}
	return (plan->partitions);
}

int
plan_is_wide(const struct plan *plan)
{
	size_t	i;

	for (i = 0; i < plan->nops; i++) {
		if (plan_op_is_wide(&plan->ops[i]))
			return (1);
	}
	return (0);
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
	glob_t	 g;
	size_t	 i;
	char	*clean;
	int	 rc;

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
	for (i = 0; i < g.gl_pathc; i++) {
		/* A file's name travels in JSON, which holds UTF-8 alone. */
		if (!utf8_valid(g.gl_pathv[i], strlen(g.gl_pathv[i]))) {
			clean = utf8_clean(g.gl_pathv[i],
			    strlen(g.gl_pathv[i]), PATH_MAX);
			globfree(&g);
			rc = jread_fail(err, field, "%s: a file name that is "
			    "not UTF-8 (%s)", pattern, clean);
			free(clean);
			return (rc);
		}
		plan_add_file(files, n, size, g.gl_pathv[i]);
	}
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
		    !plan->ops[i].py_deterministic) ||
		    (plan->ops[i].other != NULL &&
		    !plan_is_deterministic(plan->ops[i].other)))
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
		if (plan->ops[i].type == PLAN_OP_UDF ||
		    (plan->ops[i].other != NULL &&
		    plan_names_resources(plan->ops[i].other)))
			return (1);
	}
	return (0);
}

/* Check the files and plugins a plan names. */
int
plan_check_resources(struct plan *plan, char **err)
{
	size_t	i;
	char	*e;

	if (plan->source == PLAN_SOURCE_TEXT &&
	    plan_check_files(plan, err) == -1)
		return (-1);
	for (i = 0; i < plan->nops; i++) {
		if (plan->ops[i].type == PLAN_OP_UDF &&
		    plan_check_udf(&plan->ops[i], i, err) == -1)
			return (-1);
		if (plan->ops[i].other == NULL ||
		    plan_check_resources(plan->ops[i].other, err) == 0)
			continue;
		/* Name the nested plan's field from ours. */
		e = *err;
		xasprintf(err, "plan.ops[%zu].%s.plan%s", i,
		    plan->ops[i].type == PLAN_OP_JOIN ? "join" : "union",
		    strncmp(e, "plan", 4) == 0 ? e + 4 : e);
		free(e);
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

/*
 * The length of a bidi control at u (len bytes), or 0: the marks U+061C,
 * U+200E and U+200F, the embeddings and overrides U+202A to U+202E, the
 * isolates U+2066 to U+2069.  Shown, they reorder the text around them.
 */
static size_t
plan_describe_bidi(const unsigned char *u, size_t len)
{
	if (len >= 2 && u[0] == 0xd8 && u[1] == 0x9c)
		return (2);
	if (len < 3 || u[0] != 0xe2)
		return (0);
	if (u[1] == 0x80 && (u[2] == 0x8e || u[2] == 0x8f ||
	    (u[2] >= 0xaa && u[2] <= 0xae)))
		return (3);
	if (u[1] == 0x81 && u[2] >= 0xa6 && u[2] <= 0xa9)
		return (3);
	return (0);
}

/*
 * Add len bytes of s (UTF-8) to the description, control characters as
 * '?': C0 and DEL, and C1 (U+0080 to U+009F, 0xc2 0x80 to 0xc2 0x9f),
 * which a terminal in UTF-8 takes as controls too (CSI, OSC), and the
 * bidi controls: the description reaches root's terminal through ember
 * status, and the status page.
 */
static void
plan_describe_add(char *buf, size_t *used, const char *s, size_t len)
{
	const unsigned char	*u = (const unsigned char *)s;
	size_t			 i, n;

	for (i = 0; i < len && *used < PLAN_DESCRIBE_MAX; i++) {
		if (u[i] == 0xc2 && i + 1 < len && u[i + 1] < 0xa0 &&
		    u[i + 1] >= 0x80) {
			buf[(*used)++] = '?';
			i++;
		} else if ((n = plan_describe_bidi(u + i, len - i)) > 0) {
			buf[(*used)++] = '?';
			i += n - 1;
		} else if (u[i] < 0x20 || u[i] == 0x7f)
			buf[(*used)++] = '?';
		else
			buf[(*used)++] = s[i];
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
		    plan->nrecords);
		break;
	case PLAN_SOURCE_CHECKPOINT:
		plan_describe_addf(buf, used, "checkpoint %.8s",
		    plan->checkpoint);
		break;
	case PLAN_SOURCE_SHUFFLE:
		plan_describe_addf(buf, used, "shuffle");
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
		[PLAN_OP_KEY_BY] = "key_by",
		[PLAN_OP_MAP_KEY] = "map key",
		[PLAN_OP_MAP_VALUE] = "map value",
		[PLAN_OP_REDUCE_BY_KEY] = "reduce_by_key ",
		[PLAN_OP_GROUP_BY_KEY] = "group_by_key",
		[PLAN_OP_DISTINCT] = "distinct",
		[PLAN_OP_SORT_BY] = "sort_by",
		[PLAN_OP_REPARTITION] = "repartition ",
		[PLAN_OP_JOIN] = "join",
		[PLAN_OP_UNION] = "union",
	};
	static const char *const fns[] = { "sum", "min", "max", "count",
	    "concat" };

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
	case PLAN_OP_REDUCE_BY_KEY:
		plan_describe_addf(buf, used, "%s", fns[op->kv_fn]);
		break;
	case PLAN_OP_REPARTITION:
		plan_describe_addf(buf, used, "%d", op->out_partitions);
		break;
	case PLAN_OP_SORT_BY:
		if (op->descending)
			plan_describe_addf(buf, used, " desc");
		break;
	case PLAN_OP_MAP_UPPER:
	case PLAN_OP_MAP_LOWER:
	case PLAN_OP_MAP_TRIM:
	case PLAN_OP_KEY_BY:
	case PLAN_OP_MAP_KEY:
	case PLAN_OP_MAP_VALUE:
	case PLAN_OP_GROUP_BY_KEY:
	case PLAN_OP_DISTINCT:
	case PLAN_OP_JOIN:
	case PLAN_OP_UNION:
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
