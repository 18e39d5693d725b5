/*
 * Tests for common/plan.c: parsing and refusing plans, slicing ranges and
 * index spaces into partitions, text files.
 */
#include <sys/stat.h>

#include <errno.h>
#include <limits.h>
#include <malloc.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "plan.h"
#include "suites.h"

/* Parse text as a plan and expect success. */
static struct plan *
plan_ok(const char *text)
{
	struct plan	*plan = NULL;
	json_error_t	 jerr;
	json_t		*j;
	char		*err = NULL;

	j = json_loads(text, JSON_DECODE_ANY | JSON_ALLOW_NUL, &jerr);
	ck_assert_msg(j != NULL, "%s: %s", text, jerr.text);
	ck_assert_msg(plan_parse(j, &plan, &err) == 0, "%s: %s", text, err);
	ck_assert_ptr_nonnull(plan);
	ck_assert_ptr_null(err);
	json_decref(j);
	return (plan);
}

/* Parse text as a plan and expect the error want. */
static void
plan_refused(const char *text, const char *want)
{
	struct plan	*plan = (struct plan *)1;
	json_error_t	 jerr;
	json_t		*j;
	char		*err = NULL;

	j = json_loads(text, JSON_DECODE_ANY, &jerr);
	ck_assert_msg(j != NULL, "%s: %s", text, jerr.text);
	ck_assert_msg(plan_parse(j, &plan, &err) == -1, "accepted: %s", text);
	ck_assert_ptr_null(plan);
	ck_assert_msg(err != NULL && strcmp(err, want) == 0,
	    "%s:\n  got  %s\n  want %s", text, err, want);
	free(err);
	json_decref(j);
}

START_TEST(test_plan_range)
{
	struct plan	*plan;

	plan = plan_ok("{\"source\": {\"range\": {\"start\": -5, \"end\": 100, "
	    "\"step\": 3}}, \"partitions\": 8}");
	ck_assert_int_eq(plan->source, PLAN_SOURCE_RANGE);
	ck_assert_int_eq(plan->range_start, -5);
	ck_assert_int_eq(plan->range_end, 100);
	ck_assert_int_eq(plan->range_step, 3);
	ck_assert_int_eq(plan->partitions, 8);
	ck_assert_uint_eq(plan->nops, 0);
	plan_set_partitions(plan, 2);
	ck_assert_int_eq(plan->partitions, 8);
	plan_free(plan);

	/* start defaults to 0 and step to 1; partitions to the default. */
	plan = plan_ok("{\"source\": {\"range\": {\"end\": 10}}, \"ops\": []}");
	ck_assert_int_eq(plan->range_start, 0);
	ck_assert_int_eq(plan->range_end, 10);
	ck_assert_int_eq(plan->range_step, 1);
	ck_assert_int_eq(plan->partitions, 0);
	plan_set_partitions(plan, 4);
	ck_assert_int_eq(plan->partitions, 4);
	plan_free(plan);

	plan = plan_ok("{\"source\": {\"range\": {\"start\": 10, \"end\": 0, "
	    "\"step\": -1}}, \"partitions\": 1000000}");
	ck_assert_int_eq(plan->range_step, -1);
	ck_assert_int_eq(plan->partitions, PLAN_MAX_PARTITIONS);
	plan_set_partitions(plan, 0);
	ck_assert_int_eq(plan->partitions, PLAN_MAX_PARTITIONS);
	plan_free(plan);

	plan = plan_ok("{\"source\": {\"range\": {\"end\": 10}}}");
	plan_set_partitions(plan, 0);
	ck_assert_int_eq(plan->partitions, 1);
	plan_free(plan);

	/* The largest ranges an int64 count can hold. */
	plan_free(plan_ok("{\"source\": {\"range\": {\"start\": "
	    "-9223372036854775808, \"end\": 9223372036854775807, "
	    "\"step\": 3}}}"));
	plan_free(plan_ok("{\"source\": {\"range\": {\"start\": 0, "
	    "\"end\": 9223372036854775807}}}"));
	plan_free(plan_ok("{\"source\": {\"range\": {\"start\": "
	    "9223372036854775807, \"end\": -9223372036854775808, "
	    "\"step\": -9223372036854775808}}}"));
}
END_TEST

START_TEST(test_plan_text)
{
	struct plan	*plan;

	plan = plan_ok("{\"source\": {\"text\": {\"paths\": [\"/a\", "
	    "\"/b/*.log\", \"/c\"]}}}");
	ck_assert_int_eq(plan->source, PLAN_SOURCE_TEXT);
	ck_assert_uint_eq(plan->nfiles, 3);
	ck_assert_str_eq(plan->files[0].path, "/a");
	ck_assert_str_eq(plan->files[1].path, "/b/*.log");
	ck_assert_str_eq(plan->files[2].path, "/c");
	ck_assert_int_eq(plan->files[0].size, -1);
	/* One partition per file by default. */
	plan_set_partitions(plan, 16);
	ck_assert_int_eq(plan->partitions, 3);
	plan_free(plan);
}
END_TEST

START_TEST(test_plan_parallelize)
{
	struct plan	*plan;

	plan = plan_ok("{\"source\": {\"parallelize\": {\"records\": [\"a\", "
	    "null, \"\", \"d\"]}}, \"partitions\": 2}");
	ck_assert_int_eq(plan->source, PLAN_SOURCE_PARALLELIZE);
	ck_assert_uint_eq(json_array_size(plan->records), 4);
	ck_assert(json_is_null(json_array_get(plan->records, 1)));
	ck_assert_str_eq(json_string_value(json_array_get(plan->records, 3)),
	    "d");
	plan_free(plan);

	plan = plan_ok("{\"source\": {\"parallelize\": {\"records\": []}}}");
	ck_assert_uint_eq(json_array_size(plan->records), 0);
	plan_free(plan);
}
END_TEST

START_TEST(test_plan_ops)
{
	struct plan	*plan;

	plan = plan_ok("{\"source\": {\"range\": {\"end\": 10}}, \"ops\": ["
	    "{\"filter\": {\"contains\": \"7\"}}, {\"map\": \"upper\"}, "
	    "{\"map\": \"lower\"}, {\"map\": \"trim\"}, "
	    "{\"pipe\": {\"command\": \"sort -r\"}}, "
	    "{\"filter\": {\"contains\": \"a\\u0000b\"}}]}");
	ck_assert_uint_eq(plan->nops, 6);
	ck_assert_int_eq(plan->ops[0].type, PLAN_OP_FILTER_CONTAINS);
	ck_assert_str_eq(plan->ops[0].arg, "7");
	ck_assert_uint_eq(plan->ops[0].arglen, 1);
	ck_assert_int_eq(plan->ops[1].type, PLAN_OP_MAP_UPPER);
	ck_assert_int_eq(plan->ops[2].type, PLAN_OP_MAP_LOWER);
	ck_assert_int_eq(plan->ops[3].type, PLAN_OP_MAP_TRIM);
	ck_assert_int_eq(plan->ops[4].type, PLAN_OP_PIPE);
	ck_assert_str_eq(plan->ops[4].arg, "sort -r");
	/* Arguments keep their length past a NUL. */
	ck_assert_uint_eq(plan->ops[5].arglen, 3);
	ck_assert_mem_eq(plan->ops[5].arg, "a\0b", 4);
	plan_free(plan);
}
END_TEST

START_TEST(test_plan_ops_new)
{
	struct plan	*plan;

	plan = plan_ok("{\"source\": {\"range\": {\"end\": 10}}, \"ops\": ["
	    "{\"filter\": {\"regex\": \"^a+[0-9]\"}}, "
	    "{\"filter\": {\"in_broadcast\": 7}}, "
	    "{\"map\": {\"field\": {\"sep\": \"::\", \"index\": -2}}}, "
	    "{\"map\": {\"json\": \"user.name\"}}, "
	    "{\"flat_map\": {\"split\": \" \"}}, "
	    "{\"sample\": {\"fraction\": 0.25, \"seed\": -42}}, "
	    "{\"sample\": {\"fraction\": 1}}, "
	    "{\"limit\": 0}, "
	    "{\"udf\": {\"library\": \"/lib/x.so\", \"symbol\": \"f\", "
	    "\"args\": {\"k\": [1, \"v\"]}}}, "
	    "{\"udf\": {\"library\": \"/lib/x.so\", \"symbol\": \"g\"}}]}");
	ck_assert_uint_eq(plan->nops, 10);
	ck_assert_int_eq(plan->ops[0].type, PLAN_OP_FILTER_REGEX);
	ck_assert_str_eq(plan->ops[0].arg, "^a+[0-9]");
	ck_assert_ptr_nonnull(plan->ops[0].regex);
	ck_assert_int_eq(plan->ops[1].type, PLAN_OP_FILTER_BROADCAST);
	ck_assert_int_eq(plan->ops[1].broadcast, 7);
	ck_assert_int_eq(plan->ops[2].type, PLAN_OP_MAP_FIELD);
	ck_assert_str_eq(plan->ops[2].arg, "::");
	ck_assert_uint_eq(plan->ops[2].arglen, 2);
	ck_assert_int_eq(plan->ops[2].index, -2);
	ck_assert_int_eq(plan->ops[3].type, PLAN_OP_MAP_JSON);
	ck_assert_str_eq(plan->ops[3].arg, "user.name");
	ck_assert_int_eq(plan->ops[4].type, PLAN_OP_FLAT_MAP_SPLIT);
	ck_assert_str_eq(plan->ops[4].arg, " ");
	ck_assert_int_eq(plan->ops[5].type, PLAN_OP_SAMPLE);
	ck_assert(plan->ops[5].fraction == 0.25);
	ck_assert_int_eq(plan->ops[5].seed, -42);
	/* An integer fraction is a number too; the seed defaults to 0. */
	ck_assert(plan->ops[6].fraction == 1.0);
	ck_assert_int_eq(plan->ops[6].seed, 0);
	ck_assert_int_eq(plan->ops[7].type, PLAN_OP_LIMIT);
	ck_assert_int_eq(plan->ops[7].limit, 0);
	ck_assert_int_eq(plan->ops[8].type, PLAN_OP_UDF);
	ck_assert_str_eq(plan->ops[8].udf_library, "/lib/x.so");
	ck_assert_str_eq(plan->ops[8].udf_symbol, "f");
	ck_assert_str_eq(plan->ops[8].udf_args, "{\"k\":[1,\"v\"]}");
	ck_assert_str_eq(plan->ops[9].udf_args, "{}");
	plan_free(plan);

	/* A regex may hold a NUL. */
	plan = plan_ok("{\"source\": {\"range\": {\"end\": 1}}, \"ops\": ["
	    "{\"filter\": {\"regex\": \"a\\u0000b\"}}]}");
	ck_assert_uint_eq(plan->ops[0].arglen, 3);
	ck_assert_ptr_nonnull(plan->ops[0].regex);
	plan_free(plan);
}
END_TEST

START_TEST(test_plan_refused)
{
	static const struct {
		const char	*plan;
		const char	*err;
	} bad[] = {
		/* The plan itself. */
		{ "[]", "plan: expected an object" },
		{ "\"range\"", "plan: expected an object" },
		{ "{}", "plan.source: missing" },
		{ "{\"source\": {\"range\": {\"end\": 1}}, \"action\": \"count\"}",
		  "plan.action: unknown field" },
		{ "{\"source\": [\"range\"]}", "plan.source: expected an object" },

		/* Sources. */
		{ "{\"source\": {}}",
		  "plan.source: expected exactly one of range, text, "
		  "parallelize, checkpoint" },
		{ "{\"source\": {\"range\": {\"end\": 1}, \"text\": "
		  "{\"paths\": [\"a\"]}}}",
		  "plan.source: expected exactly one of range, text, "
		  "parallelize, checkpoint" },
		{ "{\"source\": {\"hdfs\": {}}}",
		  "plan.source: unknown source \"hdfs\"" },
		{ "{\"source\": {\"text\": {\"paths\": [\"/a\", \"b/c\"]}}}",
		  "plan.source.text.paths[1]: \"b/c\" is not an absolute path "
		  "(emberd does not know the client's working directory)" },
		{ "{\"source\": {\"checkpoint\": \"1234\"}}",
		  "plan.source.checkpoint: \"1234\" is not a UUID" },
		{ "{\"source\": {\"checkpoint\": {\"id\": \"x\"}}}",
		  "plan.source.checkpoint: expected a checkpoint id (a string)" },
		{ "{\"source\": {\"checkpoint\": "
		  "\"0B697AEF-9A9D-44BF-A3DB-6F881122A3E3x\"}}",
		  "plan.source.checkpoint: \"0B697AEF-9A9D-44BF-A3DB-6F881122A3E3x\" "
		  "is not a UUID" },
		{ "{\"source\": {\"range\": 10}}",
		  "plan.source: range: expected an object" },
		{ "{\"source\": {\"text\": \"/a\"}}",
		  "plan.source: text: expected an object" },
		{ "{\"source\": {\"parallelize\": [\"a\"]}}",
		  "plan.source: parallelize: expected an object" },

		/* range */
		{ "{\"source\": {\"range\": {\"start\": 0}}}",
		  "plan.source.range.end: missing" },
		{ "{\"source\": {\"range\": {\"end\": \"10\"}}}",
		  "plan.source.range.end: expected an integer" },
		{ "{\"source\": {\"range\": {\"end\": 10.5}}}",
		  "plan.source.range.end: expected an integer" },
		{ "{\"source\": {\"range\": {\"start\": null, \"end\": 10}}}",
		  "plan.source.range.start: expected an integer" },
		{ "{\"source\": {\"range\": {\"end\": 10, \"step\": 0}}}",
		  "plan.source.range.step: must not be 0" },
		{ "{\"source\": {\"range\": {\"end\": 10, \"step\": true}}}",
		  "plan.source.range.step: expected an integer" },
		{ "{\"source\": {\"range\": {\"end\": 10, \"stop\": 5}}}",
		  "plan.source.range.stop: unknown field" },
		{ "{\"source\": {\"range\": {\"start\": -9223372036854775808, "
		  "\"end\": 9223372036854775807}}}",
		  "plan.source.range: more than 9223372036854775807 elements" },
		{ "{\"source\": {\"range\": {\"start\": 9223372036854775807, "
		  "\"end\": -9223372036854775808, \"step\": -1}}}",
		  "plan.source.range: more than 9223372036854775807 elements" },
		{ "{\"source\": {\"range\": {\"start\": -9223372036854775808, "
		  "\"end\": 9223372036854775807, \"step\": 2}}}",
		  "plan.source.range: more than 9223372036854775807 elements" },
		{ "{\"source\": {\"range\": {\"start\": -1, "
		  "\"end\": 9223372036854775807}}}",
		  "plan.source.range: more than 9223372036854775807 elements" },

		/* text */
		{ "{\"source\": {\"text\": {}}}",
		  "plan.source.text.paths: missing" },
		{ "{\"source\": {\"text\": {\"paths\": \"/a\"}}}",
		  "plan.source.text.paths: expected an array" },
		{ "{\"source\": {\"text\": {\"paths\": []}}}",
		  "plan.source.text.paths: needs at least one path" },
		{ "{\"source\": {\"text\": {\"paths\": [\"/a\", \"\"]}}}",
		  "plan.source.text.paths: item 1: expected a non-empty string" },
		{ "{\"source\": {\"text\": {\"paths\": [7]}}}",
		  "plan.source.text.paths: item 0: expected a non-empty string" },
		{ "{\"source\": {\"text\": {\"paths\": [\"/a\"], \"glob\": "
		  "true}}}",
		  "plan.source.text.glob: unknown field" },

		/* parallelize */
		{ "{\"source\": {\"parallelize\": {}}}",
		  "plan.source.parallelize.records: missing" },
		{ "{\"source\": {\"parallelize\": {\"records\": 5}}}",
		  "plan.source.parallelize.records: expected an array" },
		{ "{\"source\": {\"parallelize\": {\"records\": [\"a\", 5]}}}",
		  "plan.source.parallelize.records: item 1: expected a string "
		  "or null" },
		{ "{\"source\": {\"parallelize\": {\"records\": [[\"a\"]]}}}",
		  "plan.source.parallelize.records: item 0: expected a string "
		  "or null" },

		/* partitions */
		{ "{\"source\": {\"range\": {\"end\": 1}}, \"partitions\": 0}",
		  "plan.partitions: must be from 1 to 1000000" },
		{ "{\"source\": {\"range\": {\"end\": 1}}, \"partitions\": -3}",
		  "plan.partitions: must be from 1 to 1000000" },
		{ "{\"source\": {\"range\": {\"end\": 1}}, "
		  "\"partitions\": 1000001}",
		  "plan.partitions: must be from 1 to 1000000" },
		{ "{\"source\": {\"range\": {\"end\": 1}}, "
		  "\"partitions\": 4294967297}",
		  "plan.partitions: must be from 1 to 1000000" },
		{ "{\"source\": {\"range\": {\"end\": 1}}, \"partitions\": \"8\"}",
		  "plan.partitions: expected an integer" },
		{ "{\"source\": {\"range\": {\"end\": 1}}, \"partitions\": 2.0}",
		  "plan.partitions: expected an integer" },

		/* ops */
		{ "{\"source\": {\"range\": {\"end\": 1}}, \"ops\": {}}",
		  "plan.ops: expected an array" },
		{ "{\"source\": {\"range\": {\"end\": 1}}, \"ops\": [\"upper\"]}",
		  "plan.ops[0]: expected an object with one operation" },
		{ "{\"source\": {\"range\": {\"end\": 1}}, \"ops\": [{}]}",
		  "plan.ops[0]: expected an object with one operation" },
		{ "{\"source\": {\"range\": {\"end\": 1}}, \"ops\": [{\"map\": "
		  "\"upper\", \"limit\": 1}]}",
		  "plan.ops[0]: expected an object with one operation" },
		{ "{\"source\": {\"range\": {\"end\": 1}}, \"ops\": [{\"map\": "
		  "\"upper\"}, {\"explode\": {}}]}",
		  "plan.ops[1]: unknown operation \"explode\"" },
		{ "{\"source\": {\"range\": {\"end\": 1}}, \"ops\": [{\"map\": "
		  "\"shout\"}]}",
		  "plan.ops[0].map: unknown map \"shout\"" },
		{ "{\"source\": {\"range\": {\"end\": 1}}, \"ops\": [{\"map\": "
		  "7}]}",
		  "plan.ops[0].map: expected \"upper\", \"lower\", \"trim\", "
		  "\"key\", \"value\" or "
		  "an object" },
		{ "{\"source\": {\"range\": {\"end\": 1}}, \"ops\": [{\"filter\": "
		  "\"7\"}]}",
		  "plan.ops[0].filter: expected an object" },
		{ "{\"source\": {\"range\": {\"end\": 1}}, \"ops\": [{\"filter\": "
		  "{}}]}",
		  "plan.ops[0].filter: expected exactly one of contains, regex, "
		  "in_broadcast" },
		{ "{\"source\": {\"range\": {\"end\": 1}}, \"ops\": [{\"map\": "
		  "\"trim\"}, {\"map\": \"trim\"}, {\"filter\": {\"contains\": "
		  "7}}]}",
		  "plan.ops[2].filter.contains: expected a string" },
		{ "{\"source\": {\"range\": {\"end\": 1}}, \"ops\": [{\"filter\": "
		  "{\"contains\": \"7\", \"regex\": \"x\"}}]}",
		  "plan.ops[0].filter: expected exactly one of contains, regex, "
		  "in_broadcast" },
		{ "{\"source\": {\"range\": {\"end\": 1}}, \"ops\": [{\"pipe\": "
		  "{\"command\": \"\"}}]}",
		  "plan.ops[0].pipe: command: is empty" },
		{ "{\"source\": {\"range\": {\"end\": 1}}, \"ops\": [{\"pipe\": "
		  "{}}]}",
		  "plan.ops[0].pipe.command: missing" },
		{ "{\"source\": {\"range\": {\"end\": 1}}, \"ops\": [{\"pipe\": "
		  "\"ls\"}]}",
		  "plan.ops[0].pipe: expected an object" },
		{ "{\"source\": {\"range\": {\"end\": 1}}, \"ops\": [{\"filter\": "
		  "{\"like\": \"x\"}}]}",
		  "plan.ops[0].filter.like: unknown field" },

		/* regex: PCRE2's message and where. */
		{ "{\"source\": {\"range\": {\"end\": 1}}, \"ops\": [{\"map\": "
		  "\"trim\"}, {\"filter\": {\"regex\": \"a(b\"}}]}",
		  "plan.ops[1].filter.regex: missing closing parenthesis at "
		  "offset 3" },
		{ "{\"source\": {\"range\": {\"end\": 1}}, \"ops\": [{\"filter\": "
		  "{\"regex\": \"[z-a]\"}}]}",
		  "plan.ops[0].filter.regex: range out of order in character "
		  "class at offset 3" },
		{ "{\"source\": {\"range\": {\"end\": 1}}, \"ops\": [{\"filter\": "
		  "{\"regex\": [\"a\"]}}]}",
		  "plan.ops[0].filter.regex: expected a string" },

		/* in_broadcast */
		{ "{\"source\": {\"range\": {\"end\": 1}}, \"ops\": [{\"filter\": "
		  "{\"in_broadcast\": -1}}]}",
		  "plan.ops[0].filter.in_broadcast: must be 0 or more" },
		{ "{\"source\": {\"range\": {\"end\": 1}}, \"ops\": [{\"filter\": "
		  "{\"in_broadcast\": \"3\"}}]}",
		  "plan.ops[0].filter.in_broadcast: expected an integer" },

		/* map field and json */
		{ "{\"source\": {\"range\": {\"end\": 1}}, \"ops\": [{\"map\": "
		  "{}}]}",
		  "plan.ops[0].map: expected exactly one of field, json" },
		{ "{\"source\": {\"range\": {\"end\": 1}}, \"ops\": [{\"map\": "
		  "{\"column\": 1}}]}",
		  "plan.ops[0].map.column: unknown field" },
		{ "{\"source\": {\"range\": {\"end\": 1}}, \"ops\": [{\"map\": "
		  "{\"field\": {\"sep\": \"\", \"index\": 1}}}]}",
		  "plan.ops[0].map.field.sep: must not be empty" },
		{ "{\"source\": {\"range\": {\"end\": 1}}, \"ops\": [{\"map\": "
		  "{\"field\": {\"sep\": \",\"}}}]}",
		  "plan.ops[0].map.field.index: missing" },
		{ "{\"source\": {\"range\": {\"end\": 1}}, \"ops\": [{\"map\": "
		  "{\"field\": {\"sep\": \",\", \"index\": 1.5}}}]}",
		  "plan.ops[0].map.field.index: expected an integer" },
		{ "{\"source\": {\"range\": {\"end\": 1}}, \"ops\": [{\"map\": "
		  "{\"field\": {\"sep\": \",\", \"index\": 0, \"x\": 1}}}]}",
		  "plan.ops[0].map.field.x: unknown field" },
		{ "{\"source\": {\"range\": {\"end\": 1}}, \"ops\": [{\"map\": "
		  "{\"field\": \",\"}}]}",
		  "plan.ops[0].map.field: expected an object" },
		{ "{\"source\": {\"range\": {\"end\": 1}}, \"ops\": [{\"map\": "
		  "{\"json\": \"\"}}]}",
		  "plan.ops[0].map.json: must not be empty" },
		{ "{\"source\": {\"range\": {\"end\": 1}}, \"ops\": [{\"map\": "
		  "{\"json\": \"a..b\"}}]}",
		  "plan.ops[0].map.json: \"a..b\": a name between dots is empty" },
		{ "{\"source\": {\"range\": {\"end\": 1}}, \"ops\": [{\"map\": "
		  "{\"json\": \"a.\"}}]}",
		  "plan.ops[0].map.json: \"a.\": a name between dots is empty" },
		{ "{\"source\": {\"range\": {\"end\": 1}}, \"ops\": [{\"map\": "
		  "{\"json\": 3}}]}",
		  "plan.ops[0].map.json: expected a string" },

		/* flat_map */
		{ "{\"source\": {\"range\": {\"end\": 1}}, \"ops\": [{\"flat_map\": "
		  "{\"split\": \"\"}}]}",
		  "plan.ops[0].flat_map.split: must not be empty" },
		{ "{\"source\": {\"range\": {\"end\": 1}}, \"ops\": [{\"flat_map\": "
		  "\" \"}]}",
		  "plan.ops[0].flat_map: expected an object" },
		{ "{\"source\": {\"range\": {\"end\": 1}}, \"ops\": [{\"flat_map\": "
		  "{\"explode\": \" \"}}]}",
		  "plan.ops[0].flat_map.explode: unknown field" },

		/* sample */
		{ "{\"source\": {\"range\": {\"end\": 1}}, \"ops\": [{\"sample\": "
		  "{\"fraction\": 1.5}}]}",
		  "plan.ops[0].sample.fraction: must be from 0 to 1" },
		{ "{\"source\": {\"range\": {\"end\": 1}}, \"ops\": [{\"sample\": "
		  "{\"fraction\": -0.1}}]}",
		  "plan.ops[0].sample.fraction: must be from 0 to 1" },
		{ "{\"source\": {\"range\": {\"end\": 1}}, \"ops\": [{\"sample\": "
		  "{\"seed\": 1}}]}",
		  "plan.ops[0].sample.fraction: missing" },
		{ "{\"source\": {\"range\": {\"end\": 1}}, \"ops\": [{\"sample\": "
		  "{\"fraction\": \"half\"}}]}",
		  "plan.ops[0].sample.fraction: expected a number" },
		{ "{\"source\": {\"range\": {\"end\": 1}}, \"ops\": [{\"sample\": "
		  "{\"fraction\": 0.5, \"seed\": 0.5}}]}",
		  "plan.ops[0].sample.seed: expected an integer" },

		/* limit */
		{ "{\"source\": {\"range\": {\"end\": 1}}, \"ops\": [{\"limit\": "
		  "-1}]}",
		  "plan.ops[0].limit: must be 0 or more" },
		{ "{\"source\": {\"range\": {\"end\": 1}}, \"ops\": [{\"limit\": "
		  "\"5\"}]}",
		  "plan.ops[0].limit: expected an integer" },

		/* udf */
		{ "{\"source\": {\"range\": {\"end\": 1}}, \"ops\": [{\"udf\": "
		  "{\"symbol\": \"f\"}}]}",
		  "plan.ops[0].udf.library: missing" },
		{ "{\"source\": {\"range\": {\"end\": 1}}, \"ops\": [{\"udf\": "
		  "{\"library\": \"/x.so\"}}]}",
		  "plan.ops[0].udf.symbol: missing" },
		{ "{\"source\": {\"range\": {\"end\": 1}}, \"ops\": [{\"udf\": "
		  "{\"library\": \"/x.so\", \"symbol\": \"f\", \"args\": [1]}}]}",
		  "plan.ops[0].udf.args: expected an object" },
		{ "{\"source\": {\"range\": {\"end\": 1}}, \"ops\": [{\"udf\": "
		  "{\"library\": \"/x.so\", \"symbol\": \"f\", \"arg\": {}}}]}",
		  "plan.ops[0].udf.arg: unknown field" },
		{ "{\"source\": {\"range\": {\"end\": 1}}, \"ops\": [{\"udf\": "
		  "{\"library\": \"\", \"symbol\": \"f\"}}]}",
		  "plan.ops[0].udf: library: is empty" },
	};
	size_t	i;

	for (i = 0; i < sizeof bad / sizeof *bad; i++)
		plan_refused(bad[i].plan, bad[i].err);
}
END_TEST

START_TEST(test_plan_too_many_ops)
{
	json_t	*j, *ops;
	char	*text;
	int	 i;

	ops = json_array();
	for (i = 0; i < PLAN_MAX_OPS; i++)
		json_array_append_new(ops, json_pack("{s:s}", "map", "upper"));
	j = json_pack("{s:{s:{s:i}},s:O}", "source", "range", "end", 1, "ops",
	    ops);
	text = json_dumps(j, 0);
	plan_free(plan_ok(text));
	free(text);

	json_array_append_new(ops, json_pack("{s:s}", "map", "upper"));
	json_object_set(j, "ops", ops);
	text = json_dumps(j, 0);
	plan_refused(text, "plan.ops: more than 256 operations");
	free(text);
	json_decref(ops);
	json_decref(j);
}
END_TEST

START_TEST(test_plan_refused_frees)
{
	static const char *const bad[] = {
		"{\"source\": {\"range\": {\"end\": 1}}, \"ops\": [{\"map\": "
		"\"upper\"}, {\"pipe\": {\"command\": \"\"}}]}",
		"{\"source\": {\"text\": {\"paths\": [\"/a\", \"/b\", \"\"]}}}",
		"{\"source\": {\"range\": {\"end\": 1}}, \"ops\": [{\"filter\": "
		"{\"contains\": \"x\"}}], \"partitions\": 0}",
	};
	struct plan	*plan;
	json_t		*j[sizeof bad / sizeof *bad];
	char		*err;
	size_t		 before = 0, after, i;
	int		 n;

	/* A refused plan frees all it built: the daemon refuses plans
	 * from clients all day long. */
	for (i = 0; i < sizeof bad / sizeof *bad; i++)
		ck_assert_ptr_nonnull(j[i] = json_loads(bad[i], 0, NULL));
	/* Counted after a thousand rounds: the first ones fill the
	 * allocator's per-size caches, which mallinfo counts as in use. */
	for (n = 0; n < 11000; n++) {
		if (n == 1000)
			before = mallinfo2().uordblks;
		for (i = 0; i < sizeof bad / sizeof *bad; i++) {
			err = NULL;
			if (plan_parse(j[i], &plan, &err) != -1)
				ck_abort_msg("accepted: %s", bad[i]);
			free(err);
		}
	}
	after = mallinfo2().uordblks;
	ck_assert_msg(after < before + 4096, "%zu bytes more in use after "
	    "refusing 30000 plans", after - before);
	for (i = 0; i < sizeof bad / sizeof *bad; i++)
		json_decref(j[i]);
}
END_TEST

/*
 * One range case: the partitions must enumerate exactly what a naive loop
 * does, in order, each partition contiguous.  Inner loops test with plain
 * ifs: every ck_assert is a write to the test runner.
 */
static void
plan_check_range(int64_t start, int64_t end, int64_t step, int partitions)
{
	struct plan	 plan;
	__int128	 v, expect_n = 0;
	int64_t		 first, count, total = 0, least = INT64_MAX, most = 0;
	int		 p;

	memset(&plan, 0, sizeof plan);
	plan.source = PLAN_SOURCE_RANGE;
	plan.range_start = start;
	plan.range_end = end;
	plan.range_step = step;
	plan.partitions = partitions;

	v = start;
	for (p = 0; p < partitions; p++) {
		plan_range_slice(&plan, p, &first, &count);
		if (count < 0 || (count > 0 && first != v))
			ck_abort_msg("range(%lld, %lld, %lld) / %d: partition "
			    "%d is %lld elements from %lld", (long long)start,
			    (long long)end, (long long)step, partitions, p,
			    (long long)count, (long long)first);
		v += (__int128)count * step;
		total += count;
		if (count < least)
			least = count;
		if (count > most)
			most = count;
	}
	/* Every element, once: the next value is past the end. */
	ck_assert_msg(step > 0 ? v >= end : v <= end,
	    "range(%lld, %lld, %lld) / %d stops short", (long long)start,
	    (long long)end, (long long)step, partitions);
	for (v = start; step > 0 ? v < end : v > end; v += step)
		expect_n++;
	ck_assert_msg(total == expect_n, "range(%lld, %lld, %lld) / %d: "
	    "%lld elements, want %lld", (long long)start, (long long)end,
	    (long long)step, partitions, (long long)total,
	    (long long)expect_n);
	/* Balanced: partition sizes differ by one at most. */
	ck_assert_int_le(most - least, 1);
}

START_TEST(test_plan_range_slice_small)
{
	static const int64_t	bounds[] = { -23, -7, -1, 0, 1, 3, 10, 17, 64 };
	static const int64_t	steps[] = { 1, 2, 3, 5, 7, 64, 1000, -1, -2,
				    -3, -9, -1000 };
	static const int	parts[] = { 1, 2, 3, 4, 7, 13, 40, 100 };
	size_t			a, b, s, p;

	for (a = 0; a < sizeof bounds / sizeof *bounds; a++)
		for (b = 0; b < sizeof bounds / sizeof *bounds; b++)
			for (s = 0; s < sizeof steps / sizeof *steps; s++)
				for (p = 0; p < sizeof parts / sizeof *parts;
				    p++)
					plan_check_range(bounds[a], bounds[b],
					    steps[s], parts[p]);
}
END_TEST

START_TEST(test_plan_range_slice_extremes)
{
	/* Cases whose element count is small enough to enumerate. */
	plan_check_range(INT64_MIN, INT64_MAX, INT64_MAX, 1);
	plan_check_range(INT64_MIN, INT64_MAX, INT64_MAX, 2);
	plan_check_range(INT64_MIN, INT64_MAX, INT64_MAX, 5);
	plan_check_range(INT64_MAX, INT64_MIN, INT64_MIN, 1);
	plan_check_range(INT64_MAX, INT64_MIN, INT64_MIN, 3);
	plan_check_range(INT64_MAX, INT64_MIN, -INT64_MAX, 2);
	plan_check_range(INT64_MAX - 10, INT64_MAX, 1, 3);
	plan_check_range(INT64_MAX - 10, INT64_MAX, 3, 4);
	plan_check_range(INT64_MIN, INT64_MIN + 10, 1, 4);
	plan_check_range(INT64_MIN + 10, INT64_MIN, -1, 4);
	plan_check_range(INT64_MIN + 10, INT64_MIN, -4, 4);
	plan_check_range(INT64_MAX, INT64_MAX - 10, -3, 2);
	plan_check_range(0, 1000000, 1, 7);
	plan_check_range(-1000000, 1000000, 333, 1000);
	plan_check_range(5, 6, 1, PLAN_MAX_PARTITIONS);
}
END_TEST

START_TEST(test_plan_range_slice_large)
{
	struct plan	plan;
	int64_t		first, count, next, least = INT64_MAX, most = 0;
	__int128	total = 0;
	int		p;

	/* Too many elements to enumerate: check contiguity and the total. */
	memset(&plan, 0, sizeof plan);
	plan.source = PLAN_SOURCE_RANGE;
	plan.range_start = INT64_MIN;
	plan.range_end = INT64_MAX;
	plan.range_step = 3;
	plan.partitions = 1000;
	next = INT64_MIN;
	for (p = 0; p < plan.partitions; p++) {
		plan_range_slice(&plan, p, &first, &count);
		ck_assert_int_eq(first, next);
		next = (int64_t)(first + (__int128)count * 3);
		total += count;
		if (count < least)
			least = count;
		if (count > most)
			most = count;
	}
	/* (2^64 - 1) / 3 elements, and the next would be past the end. */
	ck_assert(total == (((__int128)1 << 64) - 1) / 3);
	ck_assert_int_eq(next, INT64_MAX);
	ck_assert_int_le(most - least, 1);

	/* The largest count there is, in one partition. */
	plan.range_start = 0;
	plan.range_step = 1;
	plan.partitions = 1;
	plan_range_slice(&plan, 0, &first, &count);
	ck_assert_int_eq(first, 0);
	ck_assert_int_eq(count, INT64_MAX);
}
END_TEST

START_TEST(test_plan_slice)
{
	static const int64_t	ns[] = { 0, 1, 2, 3, 10, 99, 1000,
				    INT64_MAX / 3, INT64_MAX };
	static const int	ps[] = { 1, 2, 3, 7, 64, 1000,
				    PLAN_MAX_PARTITIONS };
	int64_t			begin, end, prev;
	size_t			i, j;
	int			p;

	plan_slice(10, 3, 0, &begin, &end);
	ck_assert_int_eq(begin, 0);
	ck_assert_int_eq(end, 3);
	plan_slice(10, 3, 1, &begin, &end);
	ck_assert_int_eq(begin, 3);
	ck_assert_int_eq(end, 6);
	plan_slice(10, 3, 2, &begin, &end);
	ck_assert_int_eq(begin, 6);
	ck_assert_int_eq(end, 10);

	for (i = 0; i < sizeof ns / sizeof *ns; i++) {
		for (j = 0; j < sizeof ps / sizeof *ps; j++) {
			prev = 0;
			for (p = 0; p < ps[j]; p++) {
				plan_slice(ns[i], ps[j], p, &begin, &end);
				if (begin != prev || end < begin ||
				    end - begin - 1 > ns[i] / ps[j])
					ck_abort_msg("slice(%lld, %d, %d) is "
					    "[%lld, %lld) after %lld",
					    (long long)ns[i], ps[j], p,
					    (long long)begin, (long long)end,
					    (long long)prev);
				prev = end;
			}
			ck_assert_int_eq(prev, ns[i]);
		}
	}
}
END_TEST

#define PLAN_DIR_TEMPLATE "/tmp/ember-check-plan-XXXXXX"

static char	plan_dir[sizeof PLAN_DIR_TEMPLATE];

/* Make a directory with a few files in it. */
static void
plan_files_setup(void)
{
	char	path[sizeof plan_dir + 32];
	FILE	*f;

	memcpy(plan_dir, PLAN_DIR_TEMPLATE, sizeof plan_dir);
	ck_assert_ptr_nonnull(mkdtemp(plan_dir));
	snprintf(path, sizeof path, "%s/a.txt", plan_dir);
	ck_assert_ptr_nonnull(f = fopen(path, "w"));
	fputs("one\ntwo\n", f);
	fclose(f);
	snprintf(path, sizeof path, "%s/empty.txt", plan_dir);
	ck_assert_ptr_nonnull(f = fopen(path, "w"));
	fclose(f);
	snprintf(path, sizeof path, "%s/fifo", plan_dir);
	ck_assert_int_eq(mkfifo(path, 0600), 0);
	snprintf(path, sizeof path, "%s/dir", plan_dir);
	ck_assert_int_eq(mkdir(path, 0700), 0);
}

/* Remove them. */
static void
plan_files_teardown(void)
{
	static const char *const names[] = { "a.txt", "empty.txt", "fifo" };
	char	path[sizeof plan_dir + 32];
	size_t	i;

	for (i = 0; i < sizeof names / sizeof *names; i++) {
		snprintf(path, sizeof path, "%s/%s", plan_dir, names[i]);
		unlink(path);
	}
	snprintf(path, sizeof path, "%s/dir", plan_dir);
	rmdir(path);
	rmdir(plan_dir);
}

/* A text plan over the given names in plan_dir. */
static struct plan *
plan_text(const char *const *names, size_t n)
{
	struct plan	*plan;
	json_t		*j, *paths;
	char		*text, *path;
	size_t		 i;

	paths = json_array();
	for (i = 0; i < n; i++) {
		ck_assert_int_ne(asprintf(&path, "%s/%s", plan_dir, names[i]),
		    -1);
		json_array_append_new(paths, json_string(path));
		free(path);
	}
	j = json_pack("{s:{s:{s:o}}}", "source", "text", "paths", paths);
	text = json_dumps(j, 0);
	plan = plan_ok(text);
	free(text);
	json_decref(j);
	return (plan);
}

/* Expect plan_check_resources to fail on the file at index with why. */
static void
plan_expect_stat_error(const char *const *names, size_t n, size_t index,
    const char *why)
{
	struct plan	*plan;
	char		*err = NULL, *want;

	plan = plan_text(names, n);
	ck_assert_int_eq(plan_check_resources(plan, &err), -1);
	ck_assert_int_ne(asprintf(&want, "plan.source.text.paths[%zu]: %s/%s: "
	    "%s", index, plan_dir, names[index], why), -1);
	ck_assert_str_eq(err, want);
	free(want);
	free(err);
	plan_free(plan);
}

START_TEST(test_plan_check_resources)
{
	static const char *const good[] = { "a.txt", "empty.txt" };
	static const char *const missing[] = { "a.txt", "missing.txt" };
	static const char *const dir[] = { "dir" };
	static const char *const fifo[] = { "empty.txt", "a.txt", "fifo" };
	struct plan	*plan;
	char		*err = NULL;

	plan = plan_text(good, 2);
	ck_assert_int_eq(plan_check_resources(plan, &err), 0);
	ck_assert_ptr_null(err);
	ck_assert_int_eq(plan->files[0].size, 8);
	ck_assert_int_eq(plan->files[1].size, 0);
	plan_free(plan);

	plan_expect_stat_error(missing, 2, 1, strerror(ENOENT));
	plan_expect_stat_error(dir, 1, 0, "not a regular file");
	/* A FIFO is refused at once: opening it must not wait for a
	 * writer (emberd would hang). */
	plan_expect_stat_error(fifo, 3, 2, "not a regular file");
}
END_TEST

/* Expect plan_check_resources to refuse a text plan of one path. */
static void
plan_expect_glob_error(const char *name, const char *shown, const char *why)
{
	struct plan	*plan;
	char		*err = NULL, *want;

	plan = plan_text(&name, 1);
	ck_assert_int_eq(plan_check_resources(plan, &err), -1);
	ck_assert_int_ne(asprintf(&want, "plan.source.text.paths[0]: %s/%s: "
	    "%s", plan_dir, shown, why), -1);
	ck_assert_str_eq(err, want);
	free(want);
	free(err);
	plan_free(plan);
}

START_TEST(test_plan_globs)
{
	static const char *const names[] = { "a.txt", "*.txt", "a.t?t" };
	struct plan	*plan;
	char		*err = NULL, *path;

	/* Each glob expands to its matches, sorted, in the plan's order. */
	plan = plan_text(names, 3);
	ck_assert_int_eq(plan_check_resources(plan, &err), 0);
	ck_assert_uint_eq(plan->nfiles, 4);
	ck_assert_int_ne(asprintf(&path, "%s/a.txt", plan_dir), -1);
	ck_assert_str_eq(plan->files[0].path, path);
	ck_assert_str_eq(plan->files[1].path, path);
	ck_assert_str_eq(plan->files[3].path, path);
	free(path);
	ck_assert_int_ne(asprintf(&path, "%s/empty.txt", plan_dir), -1);
	ck_assert_str_eq(plan->files[2].path, path);
	free(path);
	ck_assert_int_eq(plan->files[0].size, 8);
	ck_assert_int_eq(plan->files[2].size, 0);
	/* One partition per file found. */
	plan_set_partitions(plan, 1);
	ck_assert_int_eq(plan->partitions, 4);
	plan_free(plan);

	plan_expect_glob_error("*.nope", "*.nope", "no file matches");
	/* A match that is not a regular file is refused by its name. */
	plan_expect_glob_error("fi?o", "fifo", "not a regular file");
	plan_expect_glob_error("d*", "dir", "not a regular file");
}
END_TEST

START_TEST(test_plan_udf_library)
{
	struct plan	*plan;
	char		*err = NULL, *text;

	ck_assert_int_ne(asprintf(&text, "{\"source\": {\"range\": {\"end\": "
	    "1}}, \"ops\": [{\"map\": \"upper\"}, {\"udf\": {\"library\": "
	    "\"%s/missing.so\", \"symbol\": \"f\"}}]}", plan_dir), -1);
	plan = plan_ok(text);
	free(text);
	ck_assert_int_eq(plan_check_resources(plan, &err), -1);
	ck_assert_int_ne(asprintf(&text, "plan.ops[1].udf.library: "
	    "%s/missing.so: %s", plan_dir, strerror(ENOENT)), -1);
	ck_assert_str_eq(err, text);
	free(text);
	free(err);
	plan_free(plan);
}
END_TEST

START_TEST(test_plan_files_json)
{
	static const char *const names[] = { "a.txt", "empty.txt" };
	struct plan	*plan, *again;
	json_t		*files, *bad;
	char		*err = NULL;
	size_t		 i;

	plan = plan_text(names, 2);
	ck_assert_int_eq(plan_check_resources(plan, &err), 0);
	files = plan_files_to_json(plan);
	ck_assert_uint_eq(json_array_size(files), 2);
	ck_assert_int_eq(json_integer_value(json_object_get(json_array_get(
	    files, 0), "size")), 8);

	/* The worker's side: the same plan, sizes from the descriptor. */
	again = plan_text(names, 2);
	ck_assert_int_eq(again->files[0].size, -1);
	ck_assert_int_eq(plan_files_from_json(again, files, &err), 0);
	for (i = 0; i < 2; i++) {
		ck_assert_str_eq(again->files[i].path, plan->files[i].path);
		ck_assert_int_eq(again->files[i].size, plan->files[i].size);
	}

	/* emberd's list replaces the plan's paths, whatever its length:
	 * globs expand to any number of files. */
	bad = json_pack("[{s:s,s:i},{s:s,s:i},{s:s,s:i}]", "path", "/x",
	    "size", 1, "path", "/y", "size", 0, "path", "/z", "size", 5);
	ck_assert_int_eq(plan_files_from_json(again, bad, &err), 0);
	ck_assert_uint_eq(again->nfiles, 3);
	ck_assert_str_eq(again->files[2].path, "/z");
	ck_assert_int_eq(again->files[2].size, 5);
	json_decref(bad);

	/* Refused: no file, not an array, a missing or mistyped field. */
	bad = json_array();
	ck_assert_int_eq(plan_files_from_json(again, bad, &err), -1);
	ck_assert_str_eq(err, "files: do not match the plan");
	free(err);
	json_decref(bad);
	bad = json_pack("[{s:s,s:i}]", "path", "/x", "size", -1);
	ck_assert_int_eq(plan_files_from_json(again, bad, &err), -1);
	ck_assert_str_eq(err, "files.size: must be 0 or more");
	free(err);
	json_decref(bad);
	ck_assert_int_eq(plan_files_from_json(again, json_object_get(files,
	    "nope"), &err), -1);
	ck_assert_str_eq(err, "files: do not match the plan");
	free(err);
	bad = json_pack("[{s:s,s:i},{s:s}]", "path", "/x", "size", 1, "path",
	    "/y");
	ck_assert_int_eq(plan_files_from_json(again, bad, &err), -1);
	ck_assert_str_eq(err, "files.size: missing");
	free(err);
	json_decref(bad);
	bad = json_pack("[{s:s,s:i},{s:i,s:i}]", "path", "/x", "size", 1,
	    "path", 2, "size", 3);
	ck_assert_int_eq(plan_files_from_json(again, bad, &err), -1);
	ck_assert_str_eq(err, "files.path: expected a string");
	free(err);
	json_decref(bad);

	json_decref(files);
	plan_free(again);
	plan_free(plan);
}
END_TEST

/* Describe text's plan and expect want. */
static void
plan_described(const char *text, const char *want)
{
	struct plan	*plan = plan_ok(text);
	char		*got = plan_describe(plan);

	ck_assert_msg(strcmp(got, want) == 0, "%s:\n  got  %s\n  want %s",
	    text, got, want);
	ck_assert_uint_le(strlen(got), PLAN_DESCRIBE_MAX);
	free(got);
	plan_free(plan);
}

START_TEST(test_plan_describe)
{
	static char	 text[4096];
	struct plan	*plan;
	char		*got;
	size_t		 i;

	plan_described("{\"source\": {\"range\": {\"start\": 0, \"end\": 9, "
	    "\"step\": 3}}, \"ops\": [{\"filter\": {\"contains\": \"a\\u0000b\"}},"
	    " {\"map\": \"upper\"}, {\"map\": {\"field\": {\"sep\": \",\", "
	    "\"index\": -1}}}, {\"limit\": 5}, {\"sample\": {\"fraction\": "
	    "0.5}}, {\"pipe\": {\"command\": \"sort\\n-u\"}}]}",
	    "range 0..9 step 3 | filter contains a?b | map upper | "
	    "map field -1 | limit 5 | sample 0.5 | pipe sort?-u");
	/* C1 controls too: CSI, OSC, ST; U+00A0 stays. */
	plan_described("{\"source\": {\"range\": {\"start\": 0, \"end\": 1}}, "
	    "\"ops\": [{\"pipe\": {\"command\": \"\\u009b2J\\u009d0;x\\u009c"
	    "\\u0080\\u00a0\\u00e9\"}}]}",
	    "range 0..1 | pipe ?2J?0;x??\u00a0\u00e9");
	/* Bidi overrides, isolates and marks, which reorder what root reads;
	 * their block's other characters (U+2026) stay. */
	plan_described("{\"source\": {\"range\": {\"start\": 0, \"end\": 1}}, "
	    "\"ops\": [{\"pipe\": {\"command\": \"a\\u202eb\\u202ac\\u2066d"
	    "\\u2069e\\u200ff\\u061cg\\u2026\"}}]}",
	    "range 0..1 | pipe a?b?c?d?e?f?g\u2026");
	plan_described("{\"source\": {\"text\": {\"paths\": [\"/a/b\", "
	    "\"/very/long/directory/name/words.txt\"]}}, \"ops\": [{\"flat_map\":"
	    " {\"split\": \" \"}}]}", "text /a/b (+1) | flat_map split  ");
	plan_described("{\"source\": {\"text\": {\"paths\": ["
	    "\"/very/long/directory/name/words.txt\"]}}}",
	    "text .../words.txt");
	plan_described("{\"source\": {\"parallelize\": {\"records\": [\"x\", "
	    "null]}}}", "parallelize 2");

	/* Cut within the bound, between characters. */
	strcpy(text, "{\"source\": {\"range\": {\"start\": 0, \"end\": 1}}, "
	    "\"ops\": [{\"filter\": {\"contains\": \"");
	for (i = 0; i < 300; i++)
		strcat(text, "\u00e9");
	strcat(text, "\"}}]}");
	plan = plan_ok(text);
	got = plan_describe(plan);
	ck_assert_uint_le(strlen(got), PLAN_DESCRIBE_MAX);
	ck_assert_uint_ge(strlen(got), PLAN_DESCRIBE_MAX - 2);
	ck_assert_int_eq(strncmp(got, "range 0..1 | filter contains \u00e9",
	    31), 0);
	ck_assert_int_eq((unsigned char)got[strlen(got) - 1], 0xa9);
	free(got);
	plan_free(plan);
}
END_TEST

#ifdef HAVE_PYTHON
#define PY_VERSION_FIELD "\"version\": \"" EMBER_PYTHON_VERSION "\""
#else
#define PY_VERSION_FIELD "\"version\": \"3.11\""
#endif
#define PY_PLAN(op) "{\"source\": {\"range\": {\"end\": 1}}, " \
	"\"ops\": [{\"python\": " op "}]}"

/* A python op: its kind, function and zero kept as text, its broadcasts
 * listed; the version must be the workers'. */
START_TEST(test_plan_python)
{
	static const struct {
		const char	*plan;
		const char	*err;
	} bad[] = {
		{ PY_PLAN("{" PY_VERSION_FIELD "}"), "plan.ops[0].python: "
		  "expected exactly one of map, filter, flat_map, "
		  "map_partitions, reduce, fold" },
		{ PY_PLAN("{\"map\": \"eA==\", \"filter\": \"eA==\", "
		  PY_VERSION_FIELD "}"), "plan.ops[0].python: expected "
		  "exactly one of map, filter, flat_map, map_partitions, "
		  "reduce, fold" },
		{ PY_PLAN("{\"map\": 3, " PY_VERSION_FIELD "}"),
		  "plan.ops[0].python.map: expected a string" },
		{ PY_PLAN("{\"map\": \"\", " PY_VERSION_FIELD "}"),
		  "plan.ops[0].python: map: is empty" },
		{ PY_PLAN("{\"map\": \"eA==\"}"),
		  "plan.ops[0].python.version: missing" },
		{ PY_PLAN("{\"fold\": \"eA==\", " PY_VERSION_FIELD "}"),
		  "plan.ops[0].python.zero: missing" },
		{ PY_PLAN("{\"map\": \"eA==\", \"zero\": \"eA==\", "
		  PY_VERSION_FIELD "}"), "plan.ops[0].python: zero: only for "
		  "fold" },
		{ PY_PLAN("{\"map\": \"eA==\", \"broadcasts\": [-1], "
		  PY_VERSION_FIELD "}"), "plan.ops[0].python: broadcasts[0]: "
		  "expected a broadcast id" },
		{ PY_PLAN("{\"map\": \"eA==\", \"fn\": 1, "
		  PY_VERSION_FIELD "}"), "plan.ops[0].python.fn: unknown "
		  "field" },
#ifdef HAVE_PYTHON
		{ PY_PLAN("{\"map\": \"eA==\", \"version\": \"2.7\"}"),
		  "plan.ops[0].python: version: the client runs Python 2.7, "
		  "ember's workers run Python " EMBER_PYTHON_VERSION ": a "
		  "function pickled by one does not load in the other" },
#else
		{ PY_PLAN("{\"map\": \"eA==\", " PY_VERSION_FIELD "}"),
		  "plan.ops[0].python: this ember was built without Python "
		  "(./configure --without-python)" },
#endif
	};
	size_t	i;

	for (i = 0; i < sizeof bad / sizeof *bad; i++)
		plan_refused(bad[i].plan, bad[i].err);
#ifdef HAVE_PYTHON
	{
		struct plan	*plan;

		plan = plan_ok("{\"source\": {\"range\": {\"end\": 1}}, "
		    "\"ops\": [{\"python\": {\"map\": \"bQ==\", "
		    PY_VERSION_FIELD "}}, {\"python\": {\"fold\": \"Zg==\", "
		    "\"zero\": \"eg==\", \"broadcasts\": [4, 2], "
		    PY_VERSION_FIELD "}}]}");
		ck_assert_int_eq(plan->ops[0].type, PLAN_OP_PYTHON);
		ck_assert_int_eq(plan->ops[0].py_kind, PLAN_PYTHON_MAP);
		ck_assert_str_eq(plan->ops[0].py_fn, "bQ==");
		ck_assert_ptr_null(plan->ops[0].py_zero);
		ck_assert_int_eq(plan->ops[1].py_kind, PLAN_PYTHON_FOLD);
		ck_assert_str_eq(plan->ops[1].py_zero, "eg==");
		ck_assert_uint_eq(plan->ops[1].udf_nbroadcasts, 2);
		ck_assert_int_eq(plan->ops[1].udf_broadcasts[1], 2);
		ck_assert_str_eq(plan_python_kind_name(PLAN_PYTHON_FOLD),
		    "fold");
		/* Not said deterministic: never computed again. */
		ck_assert(!plan_is_deterministic(plan));
		plan_free(plan);
		plan = plan_ok("{\"source\": {\"range\": {\"end\": 1}}, "
		    "\"ops\": [{\"python\": {\"map\": \"bQ==\", "
		    "\"deterministic\": true, " PY_VERSION_FIELD "}}]}");
		ck_assert(plan->ops[0].py_deterministic);
		ck_assert(plan_is_deterministic(plan));
		plan_free(plan);
		plan_described("{\"source\": {\"range\": {\"end\": 1}}, "
		    "\"ops\": [{\"map\": \"lower\"}, {\"python\": "
		    "{\"map_partitions\": \"bQ==\", " PY_VERSION_FIELD "}}]}",
		    "range 0..1 | map lower | python map_partitions");
	}
#endif
}
END_TEST

/* Keyed ops: parsed, their kinds followed, their partitions resolved. */
START_TEST(test_plan_keyed)
{
	struct plan	*plan;

	plan = plan_ok("{\"source\": {\"range\": {\"end\": 10}}, \"partitions\": "
	    "4, \"ops\": [{\"key_by\": {\"field\": {\"sep\": \",\", \"index\": "
	    "0}, \"value\": {\"regex\": \"v=(\\\\d+)\", \"group\": 1}}}, "
	    "{\"reduce_by_key\": {\"fn\": \"concat\", \"sep\": \"+\"}}, "
	    "{\"sort_by\": {\"descending\": true, \"partitions\": 3}}, "
	    "{\"map\": \"key\"}]}");
	ck_assert_int_eq(plan->ops[0].type, PLAN_OP_KEY_BY);
	ck_assert_ptr_nonnull(plan->ops[0].key.sep);
	ck_assert_ptr_nonnull(plan->ops[0].value.regex);
	ck_assert_int_eq(plan->ops[0].value.group, 1);
	ck_assert_int_eq(plan->ops[1].kv_fn, PLAN_KV_CONCAT);
	ck_assert_str_eq(plan->ops[1].arg, "+");
	ck_assert_int_eq(plan->ops[1].in_kind, PLAN_KIND_PAIR);
	ck_assert_int_eq(plan->ops[2].descending, 1);
	ck_assert_int_eq(plan->kind, PLAN_KIND_RECORD);
	ck_assert(plan_is_wide(plan));
	plan_set_partitions(plan, 2);
	ck_assert_int_eq(plan->ops[1].out_partitions, 4);
	ck_assert_int_eq(plan->ops[2].out_partitions, 3);
	ck_assert_int_eq(plan_final_partitions(plan), 3);
	plan_free(plan);

	/* join takes the larger side's partitions, union the sum. */
	plan = plan_ok("{\"source\": {\"range\": {\"end\": 10}}, \"partitions\": "
	    "2, \"ops\": [{\"key_by\": {}}, {\"join\": {\"how\": \"left\", "
	    "\"plan\": {\"source\": {\"parallelize\": {\"records\": [\"1\"]}}, "
	    "\"partitions\": 5, \"ops\": [{\"key_by\": {}}]}}}, "
	    "{\"map\": \"key\"}, {\"union\": {\"plan\": {\"source\": {\"range\": "
	    "{\"end\": 3}}, \"partitions\": 3}}}]}");
	ck_assert_int_eq(plan->ops[1].left, 1);
	ck_assert_int_eq(plan->ops[1].out_kind, PLAN_KIND_GROUP);
	plan_set_partitions(plan, 2);
	ck_assert_int_eq(plan->ops[1].out_partitions, 5);
	ck_assert_int_eq(plan->ops[3].out_partitions, 8);
	ck_assert(!plan_is_wide(plan->ops[1].other));
	plan_free(plan);

	/* A plain plan is not wide. */
	plan = plan_ok("{\"source\": {\"range\": {\"end\": 10}}}");
	ck_assert(!plan_is_wide(plan));
	plan_free(plan);
}
END_TEST

START_TEST(test_plan_keyed_refused)
{
	plan_refused("{\"source\": {\"range\": {\"end\": 1}}, \"ops\": "
	    "[{\"reduce_by_key\": {\"fn\": \"sum\"}}]}",
	    "plan: ops[0] takes no plain records (key_by makes pairs)");
	plan_refused("{\"source\": {\"range\": {\"end\": 1}}, \"ops\": "
	    "[{\"key_by\": {}}, {\"map\": \"upper\"}]}",
	    "plan: ops[1] takes no pair records (map key or value makes "
	    "records)");
	plan_refused("{\"source\": {\"range\": {\"end\": 1}}, \"ops\": "
	    "[{\"key_by\": {}}, {\"reduce_by_key\": {\"fn\": \"avg\"}}]}",
	    "plan.ops[1].reduce_by_key: fn: \"avg\" is not one of sum, min, "
	    "max, count, concat");
	plan_refused("{\"source\": {\"range\": {\"end\": 1}}, \"ops\": "
	    "[{\"repartition\": {}}]}",
	    "plan.ops[0].repartition: partitions: missing");
	plan_refused("{\"source\": {\"range\": {\"end\": 1}}, \"ops\": "
	    "[{\"key_by\": {\"regex\": \"a(b)\", \"group\": 2}}]}",
	    "plan.ops[0].key_by.regex: group 2: the pattern has 1");
	plan_refused("{\"source\": {\"range\": {\"end\": 1}}, \"ops\": "
	    "[{\"key_by\": {}}, {\"join\": {\"plan\": {\"source\": "
	    "{\"range\": {\"end\": 1}}, \"ops\": [{\"map\": 7}]}}}]}",
	    "plan.ops[1].join.plan.ops[0].map: expected \"upper\", \"lower\", "
	    "\"trim\", \"key\", \"value\" or an object");
	plan_refused("{\"source\": {\"range\": {\"end\": 1}}, \"ops\": "
	    "[{\"key_by\": {}}, {\"join\": {\"plan\": {\"source\": "
	    "{\"range\": {\"end\": 1}}}}}]}",
	    "plan: ops[1].join.plan: gives plain records, not pairs");
	/* A client cannot name a stage's shuffle source. */
	plan_refused("{\"source\": {\"shuffle\": {\"op\": {\"distinct\": {}}, "
	    "\"inputs\": [{\"stage\": 0, \"maps\": 1}]}}}",
	    "plan.source: unknown source \"shuffle\"");
}
END_TEST

/* Nesting is bounded, whatever the client sends. */
START_TEST(test_plan_nesting_bounded)
{
	struct plan	*plan;
	json_t		*j, *inner;
	char		*err = NULL;
	int		 i;

	j = json_pack("{s:{s:{s:I}}}", "source", "range", "end", 1);
	for (i = 0; i < 20; i++) {
		inner = j;
		j = json_pack("{s:{s:{s:I}},s:[{s:{s:o}}]}", "source", "range",
		    "end", 1, "ops", "union", "plan", inner);
	}
	ck_assert_int_eq(plan_parse(j, &plan, &err), -1);
	ck_assert_msg(strstr(err, "nested more than") != NULL, "%s", err);
	free(err);
	json_decref(j);
}
END_TEST

/* A stage's plan may read a shuffle. */
START_TEST(test_plan_stage_shuffle)
{
	struct plan	*plan;
	json_t		*j;
	char		*err = NULL;

	j = json_loads("{\"source\": {\"shuffle\": {\"op\": {\"join\": "
	    "{\"how\": \"left\", \"partitions\": 3}}, \"inputs\": [{\"stage\": "
	    "0, \"maps\": 2}, {\"stage\": 1, \"maps\": 4}]}}, \"partitions\": 3, "
	    "\"ops\": [{\"map\": \"key\"}]}", 0, NULL);
	ck_assert_msg(plan_parse_stage(j, &plan, &err) == 0, "%s", err);
	ck_assert_int_eq(plan->source, PLAN_SOURCE_SHUFFLE);
	ck_assert_int_eq(plan->shuffle_op->type, PLAN_OP_JOIN);
	ck_assert_int_eq(plan->shuffle_op->left, 1);
	ck_assert_int_eq((int)plan->ninputs, 2);
	ck_assert_int_eq(plan->inputs[1].maps, 4);
	ck_assert_int_eq(plan->kind, PLAN_KIND_RECORD);
	plan_free(plan);
	json_decref(j);
}
END_TEST

/* Build the plan suite. */
Suite *
plan_suite(void)
{
	Suite	*s = suite_create("plan");
	TCase	*tc;

	tc = tcase_create("valid");
	tcase_add_test(tc, test_plan_range);
	tcase_add_test(tc, test_plan_text);
	tcase_add_test(tc, test_plan_parallelize);
	tcase_add_test(tc, test_plan_ops);
	tcase_add_test(tc, test_plan_ops_new);
	tcase_add_test(tc, test_plan_describe);
	tcase_add_test(tc, test_plan_keyed);
	tcase_add_test(tc, test_plan_stage_shuffle);
	suite_add_tcase(s, tc);

	tc = tcase_create("refused");
	tcase_add_test(tc, test_plan_refused);
	tcase_add_test(tc, test_plan_too_many_ops);
	tcase_add_test(tc, test_plan_refused_frees);
	tcase_add_test(tc, test_plan_python);
	tcase_add_test(tc, test_plan_keyed_refused);
	tcase_add_test(tc, test_plan_nesting_bounded);
	suite_add_tcase(s, tc);

	tc = tcase_create("slices");
	tcase_set_timeout(tc, 30);
	tcase_add_test(tc, test_plan_range_slice_small);
	tcase_add_test(tc, test_plan_range_slice_extremes);
	tcase_add_test(tc, test_plan_range_slice_large);
	tcase_add_test(tc, test_plan_slice);
	suite_add_tcase(s, tc);

	tc = tcase_create("files");
	tcase_set_timeout(tc, 5);
	tcase_add_checked_fixture(tc, plan_files_setup, plan_files_teardown);
	tcase_add_test(tc, test_plan_check_resources);
	tcase_add_test(tc, test_plan_files_json);
	tcase_add_test(tc, test_plan_globs);
	tcase_add_test(tc, test_plan_udf_library);
	suite_add_tcase(s, tc);

	return (s);
}
