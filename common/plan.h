/*
 * A job's plan (ARCHITECTURE section 7, docs/plans.md), parsed and checked
 * completely before any task runs.  emberd parses a client's plan to
 * validate it and to count partitions; the worker parses the same JSON to
 * run a task, and keeps what it parsed (compiled regexes included) for the
 * operation's next tasks.
 */
#ifndef EMBER_PLAN_H
#define EMBER_PLAN_H

#include <stddef.h>
#include <stdint.h>

#include <jansson.h>

#define PLAN_MAX_PARTITIONS	1000000
#define PLAN_MAX_OPS		256

enum plan_source_type {
	PLAN_SOURCE_RANGE,
	PLAN_SOURCE_TEXT,
	PLAN_SOURCE_PARALLELIZE,
	PLAN_SOURCE_CHECKPOINT,
	PLAN_SOURCE_SHUFFLE,	/* a stage's input (plan_parse_stage only) */
};

enum plan_op_type {
	PLAN_OP_FILTER_CONTAINS,
	PLAN_OP_FILTER_REGEX,
	PLAN_OP_FILTER_BROADCAST,
	PLAN_OP_MAP_UPPER,
	PLAN_OP_MAP_LOWER,
	PLAN_OP_MAP_TRIM,
	PLAN_OP_MAP_FIELD,
	PLAN_OP_MAP_JSON,
	PLAN_OP_FLAT_MAP_SPLIT,
	PLAN_OP_SAMPLE,
	PLAN_OP_LIMIT,
	PLAN_OP_PIPE,
	PLAN_OP_UDF,
	PLAN_OP_PYTHON,
	PLAN_OP_KEY_BY,
	PLAN_OP_MAP_KEY,
	PLAN_OP_MAP_VALUE,
	/* The wide ops: each ends a stage (docs/plans.md, "Stages"). */
	PLAN_OP_REDUCE_BY_KEY,
	PLAN_OP_GROUP_BY_KEY,
	PLAN_OP_DISTINCT,
	PLAN_OP_SORT_BY,
	PLAN_OP_REPARTITION,
	PLAN_OP_JOIN,
	PLAN_OP_UNION,
};

/* What records an op takes or gives: plain records, (key, value) pairs,
 * or groups (a key and a list of values).  ANY: not known before the
 * task runs (a checkpoint source). */
enum plan_kind {
	PLAN_KIND_RECORD,
	PLAN_KIND_PAIR,
	PLAN_KIND_GROUP,
	PLAN_KIND_ANY,
};

/* reduce_by_key's functions. */
enum plan_kv_fn {
	PLAN_KV_SUM,
	PLAN_KV_MIN,
	PLAN_KV_MAX,
	PLAN_KV_COUNT,
	PLAN_KV_CONCAT,
};

/* What key_by takes as the key or the value of a record: the whole
 * record, a field (as map field picks it), or a regex capture group. */
struct plan_pick {
	int			 whole;
	char			*sep;
	size_t			 seplen;
	int64_t			 index;
	void			*regex;		/* a pcre2_code */
	int			 group;
};

struct plan;
struct plan_shuffle_input {
	int			 stage;
	int			 maps;
};

/* What a python op does with its function (docs/plans.md). */
enum plan_python_kind {
	PLAN_PYTHON_MAP,
	PLAN_PYTHON_FILTER,
	PLAN_PYTHON_FLAT_MAP,
	PLAN_PYTHON_MAP_PARTITIONS,
	PLAN_PYTHON_REDUCE,
	PLAN_PYTHON_FOLD,
};

struct plan_op {
	enum plan_op_type	 type;

	/*
	 * The string argument, NUL-terminated but measured by arglen (it may
	 * hold NULs): the filter's substring or pattern, the pipe's command,
	 * the separator of map field and flat_map split, the path of map
	 * json.
	 */
	char			*arg;
	size_t			 arglen;

	int64_t			 index;		/* map field; < 0 from the end */
	int64_t			 limit;		/* limit */
	double			 fraction;	/* sample */
	int64_t			 seed;		/* sample */
	int64_t			 broadcast;	/* filter in_broadcast */

	/* filter regex: the compiled pattern (a pcre2_code; plan.c alone
	 * includes pcre2.h). */
	void			*regex;

	/* udf: args is compact JSON text, "{}" when the plan has none. */
	char			*udf_library;
	char			*udf_symbol;
	char			*udf_args;
	int64_t			*udf_broadcasts; /* the broadcasts it reads
						    (udf and python) */
	size_t			 udf_nbroadcasts;
	int			 udf_deterministic; /* its plugin says so */

	/* python: the function as the client pickled it (base64 text,
	 * never unpickled by emberd), and fold's pickled zero value. */
	enum plan_python_kind	 py_kind;
	char			*py_fn;
	char			*py_zero;
	int			 py_deterministic; /* the client says so */

	/* key_by */
	struct plan_pick	 key, value;
	/* The wide ops.  out_partitions: the plan's own, 0 (the input's)
	 * until plan_set_partitions; reduce_by_key's concat separator is
	 * in arg. */
	enum plan_kv_fn		 kv_fn;
	int			 out_partitions;
	int			 descending, numeric;	/* sort_by */
	int			 left;			/* join how=left */
	struct plan		*other;			/* join, union */
	enum plan_kind		 in_kind, out_kind;
};

/* The name of a python op's kind, as the plan writes it. */
const char	*plan_python_kind_name(enum plan_python_kind);

struct plan_file {
	char			*path;
	int64_t			 size;		/* bytes, fixed when the job starts */
};

struct plan {
	enum plan_source_type	 source;
	int64_t			 range_start, range_end, range_step;
	/* text: the plan's paths (size -1) until plan_check_resources
	 * expands them to the files they name. */
	struct plan_file	*files;
	size_t			 nfiles;
	json_t			*records;	/* parallelize: strings and nulls,
						   NULL after plan_drop_records */
	size_t			 nrecords;	/* and how many */
	char			 checkpoint[37]; /* checkpoint: its id (a UUID) */
	char			*checkpoint_dir; /* and its directory, set by
						   emberd for the worker */
	int			 partitions;	/* 0 until plan_set_partitions */
	struct plan_op		*ops;
	size_t			 nops;
	enum plan_kind		 kind;		/* what the last op gives */

	/* A shuffle source: the wide op whose reduce side the stage runs,
	 * and the stages whose map files it reads (join: left, right;
	 * union: first, second). */
	struct plan_op		*shuffle_op;
	struct plan_shuffle_input *inputs;
	size_t			 ninputs;
};

/*
 * Parse and check a plan; the error names the field ("plan.ops[1].map: ...").
 * Regexes are compiled here.  Files and plugins are not looked at: see
 * plan_check_resources.
 */
int	 plan_parse(json_t *, struct plan **, char **err);
/* Parse a stage's plan, as the worker gets it: a plan that may also have
 * a shuffle source (docs/protocol.md, "Stages"). */
int	 plan_parse_stage(json_t *, struct plan **, char **err);
void	 plan_free(struct plan *);

/* Does the op end a stage? */
int	 plan_op_is_wide(const struct plan_op *);
/* The kind's name, for errors: "plain", "pair", "group". */
const char *plan_kind_name(enum plan_kind);

/* Call fn on the plan and each plan nested in it (join, union), parents
 * first: the order helper replies and stages use. */
void	 plan_walk(struct plan *, void (*fn)(struct plan *, void *), void *);
/* Free the records of the parallelize sources of the plan and its nested
 * plans, keeping their count: emberd keeps a plan for an operation's life,
 * and the workers read the records from the plan's text.  Their tree costs
 * twenty times their text or more ([""] is 3 bytes, its json_t 80). */
void	 plan_drop_records(struct plan *);

/* Fix the partition count: the plan's own, else default_partitions (text:
 * one per file); and each wide op's, the input's where it names none
 * (join: the larger side's; union: the sum), nested plans too. */
void	 plan_set_partitions(struct plan *, int default_partitions);
/* The partitions of what the plan gives: its last wide op's, or its own. */
int	 plan_final_partitions(const struct plan *);
/* Does the plan have a wide op, so that it runs in stages? */
int	 plan_is_wide(const struct plan *);

/*
 * Check what the plan names outside itself, as emberd sees it when the
 * job is submitted: expand the text paths' globs into the files they match
 * (sorted), open each to check it is a readable regular file and record
 * its size; check each udf's library and symbol.
 */
int	 plan_check_resources(struct plan *, char **err);
/* Whether the plan names anything outside itself (text files, udf
 * libraries) that plan_check_resources would look at. */
int	 plan_names_resources(const struct plan *);

/* Is s a UUID in its canonical text form (36 characters)? */
int	 plan_is_uuid(const char *s);

/* Whether the plan gives the same records every time it runs, so that a
 * partition can be computed again: not with a pipe, nor with a udf its
 * plugin does not mark deterministic (after plan_check_resources). */
int	 plan_is_deterministic(const struct plan *);

/* What the plan does in one line of at most PLAN_DESCRIBE_MAX bytes of
 * UTF-8, for status: "range 0..100 | filter contains 7 | pipe sort",
 * control characters (C0, DEL, C1) as '?'. */
#define PLAN_DESCRIBE_MAX	240
char	*plan_describe(const struct plan *);
/* The files and sizes as JSON ([{"path":..,"size":..}]), and back: the
 * worker takes emberd's expanded list in place of the plan's paths. */
json_t	*plan_files_to_json(const struct plan *);
int	 plan_files_from_json(struct plan *, json_t *, char **err);

/* The elements of a range partition: first value and how many. */
void	 plan_range_slice(const struct plan *, int partition, int64_t *first,
	     int64_t *count);
/* The [begin, end) slice of an index space of n items for a partition. */
void	 plan_slice(int64_t n, int partitions, int partition, int64_t *begin,
	     int64_t *end);

#endif
