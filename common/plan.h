/*
 * A job's plan (ARCHITECTURE section 7), parsed and checked completely
 * before any task runs.  emberd parses a client's plan to validate it and
 * to count partitions; the worker parses the same JSON to run a task.
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
};

enum plan_op_type {
	PLAN_OP_FILTER_CONTAINS,
	PLAN_OP_MAP_UPPER,
	PLAN_OP_MAP_LOWER,
	PLAN_OP_MAP_TRIM,
	PLAN_OP_PIPE,
};

struct plan_op {
	enum plan_op_type	 type;
	char			*arg;		/* filter substring, pipe command */
	size_t			 arglen;
};

struct plan_file {
	char			*path;
	int64_t			 size;		/* bytes, fixed when the job starts */
};

struct plan {
	enum plan_source_type	 source;
	int64_t			 range_start, range_end, range_step;
	struct plan_file	*files;		/* text */
	size_t			 nfiles;
	json_t			*records;	/* parallelize: strings and nulls */
	int			 partitions;	/* 0 until plan_set_partitions */
	struct plan_op		*ops;
	size_t			 nops;
};

/*
 * Parse and check a plan; the error names the field ("plan.ops[1].map: ...").
 * Text files are not opened here: see plan_stat_files.
 */
int	 plan_parse(json_t *, struct plan **, char **err);
void	 plan_free(struct plan *);

/* Fix the partition count: the plan's own, else default_partitions (text:
 * one per file). */
void	 plan_set_partitions(struct plan *, int default_partitions);

/* Open each text file to check it is readable and record its size. */
int	 plan_stat_files(struct plan *, char **err);
/* The files and sizes as JSON ([{"path":..,"size":..}]), and back. */
json_t	*plan_files_to_json(const struct plan *);
int	 plan_files_from_json(struct plan *, json_t *, char **err);

/* The elements of a range partition: first value and how many. */
void	 plan_range_slice(const struct plan *, int partition, int64_t *first,
	     int64_t *count);
/* The [begin, end) slice of an index space of n items for a partition. */
void	 plan_slice(int64_t n, int partitions, int partition, int64_t *begin,
	     int64_t *end);

#endif
