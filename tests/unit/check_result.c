/*
 * Tests for daemon/result.c: count_by_value's merge of partial counts and
 * reduce's fold of partial sums, minimums and maximums, from batches of
 * record frames as a worker sends them, and the refusal of what no worker
 * could have sent.
 */
#include <inttypes.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <jansson.h>

#include "frame.h"
#include "protocol.h"
#include "result.h"
#include "suites.h"

/* A batch of record frames, as a worker's EMBER_RECORD_BATCH carries. */
struct batch {
	unsigned char	data[64 * 1024];
	size_t		len;
};

/* Append one frame of len bytes (data NULL: a null record). */
static void
batch_frame(struct batch *b, const void *data, size_t len)
{
	ck_assert_uint_le(b->len + 4 + len, sizeof b->data);
	be32_put(b->data + b->len, data == NULL ? EMBER_NULL : (int32_t)len);
	b->len += 4;
	if (data != NULL && len > 0)
		memcpy(b->data + b->len, data, len);
	if (data != NULL)
		b->len += len;
}

static void
batch_string(struct batch *b, const char *s)
{
	batch_frame(b, s, strlen(s));
}

/* Append a count: an 8-byte frame. */
static void
batch_count(struct batch *b, int64_t n)
{
	unsigned char	c[8];

	be64_put(c, n);
	batch_frame(b, c, sizeof c);
}

/* Append one (record, count) pair of count_by_value. */
static void
batch_pair(struct batch *b, const char *record, int64_t n)
{
	if (record == NULL)
		batch_frame(b, NULL, 0);
	else
		batch_string(b, record);
	batch_count(b, n);
}

/* Absorb b; on error the message is checked to be the worker's fault. */
static int
absorb(struct result *r, const struct batch *b)
{
	char	*err = NULL;
	int	 rc;

	rc = result_absorb(r, b->data, b->len, &err);
	if (rc == -1) {
		ck_assert_ptr_nonnull(err);
		ck_assert_msg(strstr(err, "from worker") != NULL,
		    "error \"%s\" does not blame the worker", err);
		free(err);
	} else
		ck_assert_ptr_null(err);
	return (rc);
}

/* Absorb one batch holding a single pair. */
static int
absorb_pair(struct result *r, const char *record, int64_t n)
{
	struct batch	b = { .len = 0 };

	batch_pair(&b, record, n);
	return (absorb(r, &b));
}

/* Absorb one partial reduce, JSON text. */
static int
absorb_partial(struct result *r, const char *json)
{
	struct batch	b = { .len = 0 };

	batch_string(&b, json);
	return (absorb(r, &b));
}

/* The count of key in count_by_value's reply, or -1 if it is not there. */
static json_int_t
reply_count(json_t *reply, const char *key)
{
	json_t	*v = json_object_get(json_object_get(reply, "counts"), key);

	if (v == NULL)
		return (-1);
	ck_assert(json_is_integer(v));
	return (json_integer_value(v));
}

static json_int_t
reply_int(json_t *reply, const char *key)
{
	json_t	*v = json_object_get(reply, key);

	ck_assert_msg(json_is_integer(v), "reply field %s is not an integer",
	    key);
	return (json_integer_value(v));
}

START_TEST(test_reduce_fn_names)
{
	enum reduce_fn	fn;

	ck_assert_int_eq(reduce_fn_from_string("sum", &fn), 0);
	ck_assert_int_eq(fn, REDUCE_SUM);
	ck_assert_int_eq(reduce_fn_from_string("min", &fn), 0);
	ck_assert_int_eq(fn, REDUCE_MIN);
	ck_assert_int_eq(reduce_fn_from_string("max", &fn), 0);
	ck_assert_int_eq(fn, REDUCE_MAX);
	ck_assert_int_eq(reduce_fn_from_string("avg", &fn), -1);
	ck_assert_int_eq(reduce_fn_from_string("", &fn), -1);
	ck_assert_int_eq(reduce_fn_from_string("SUM", &fn), -1);
}
END_TEST

START_TEST(test_counts_merge)
{
	struct result	*r = result_create(RESULT_COUNT_BY_VALUE, REDUCE_SUM);
	struct batch	 b = { .len = 0 };
	json_t		*reply;

	batch_pair(&b, "a", 2);
	batch_pair(&b, "b", 1);
	batch_pair(&b, NULL, 3);
	ck_assert_int_eq(absorb(r, &b), 0);
	b.len = 0;
	batch_pair(&b, "a", 5);
	batch_pair(&b, NULL, 1);
	batch_pair(&b, "", 6);
	ck_assert_int_eq(absorb(r, &b), 0);

	reply = result_reply(r);
	ck_assert_int_eq(json_object_size(json_object_get(reply, "counts")), 3);
	ck_assert_int_eq(reply_count(reply, "a"), 7);
	ck_assert_int_eq(reply_count(reply, "b"), 1);
	ck_assert_int_eq(reply_count(reply, ""), 6);	/* not a null */
	ck_assert_int_eq(reply_int(reply, "nulls"), 4);
	json_decref(reply);
	result_free(r);
}
END_TEST

START_TEST(test_counts_empty)
{
	struct result	*r = result_create(RESULT_COUNT_BY_VALUE, REDUCE_SUM);
	json_t		*reply;

	ck_assert_int_eq(result_absorb(r, NULL, 0, NULL), 0);
	reply = result_reply(r);
	ck_assert_int_eq(json_object_size(json_object_get(reply, "counts")), 0);
	ck_assert_int_eq(reply_int(reply, "nulls"), 0);
	json_decref(reply);
	result_free(r);
}
END_TEST

/* A batch may end between a record and its count: the record is kept,
 * copied, until the count comes in the next batch. */
START_TEST(test_counts_pair_split)
{
	struct result	*r = result_create(RESULT_COUNT_BY_VALUE, REDUCE_SUM);
	struct batch	 b = { .len = 0 };
	json_t		*reply;

	batch_pair(&b, "x", 1);
	batch_string(&b, "split");
	ck_assert_int_eq(absorb(r, &b), 0);
	memset(b.data, 'z', b.len);	/* the worker's buffer is reused */
	b.len = 0;
	batch_count(&b, 4);
	batch_frame(&b, NULL, 0);
	ck_assert_int_eq(absorb(r, &b), 0);
	b.len = 0;
	batch_count(&b, 2);
	ck_assert_int_eq(absorb(r, &b), 0);

	reply = result_reply(r);
	ck_assert_int_eq(reply_count(reply, "x"), 1);
	ck_assert_int_eq(reply_count(reply, "split"), 4);
	ck_assert_int_eq(reply_int(reply, "nulls"), 2);
	json_decref(reply);
	result_free(r);
}
END_TEST

/* Records that are not UTF-8 get U+FFFD for each bad byte in the reply's
 * keys, and those that become equal share one count. */
START_TEST(test_counts_not_utf8)
{
	struct result	*r = result_create(RESULT_COUNT_BY_VALUE, REDUCE_SUM);
	struct batch	 b = { .len = 0 };
	json_t		*reply;

	batch_pair(&b, "k\xff", 1);
	batch_pair(&b, "k\xfe", 2);
	batch_pair(&b, "k\xc3\xa9", 4);		/* é: valid */
	batch_pair(&b, "k\xed\xa0\x80", 8);	/* a surrogate: not */
	ck_assert_int_eq(absorb(r, &b), 0);

	reply = result_reply(r);
	ck_assert_int_eq(json_object_size(json_object_get(reply, "counts")), 3);
	ck_assert_int_eq(reply_count(reply, "k\xef\xbf\xbd"), 3);
	ck_assert_int_eq(reply_count(reply, "k\xc3\xa9"), 4);
	ck_assert_int_eq(reply_count(reply,
	    "k\xef\xbf\xbd\xef\xbf\xbd\xef\xbf\xbd"), 8);
	json_decref(reply);
	result_free(r);
}
END_TEST

/*
 * Records with a NUL byte are not keys of "counts" (a JSON parser may
 * refuse such a key): they come as [record, count] pairs in "pairs",
 * sorted by their bytes, and the reply dumps to text jansson loads back.
 */
START_TEST(test_counts_nul_pairs)
{
	struct result	*r = result_create(RESULT_COUNT_BY_VALUE, REDUCE_SUM);
	struct batch	 b = { .len = 0 };
	json_t		*reply, *pairs, *again;
	json_error_t	 jerr;
	char		*text;

	batch_frame(&b, "b\0", 2);
	batch_count(&b, 1);
	batch_frame(&b, "a\0b", 3);
	batch_count(&b, 2);
	batch_frame(&b, "a\0b", 3);
	batch_count(&b, 3);
	batch_frame(&b, "\0", 1);
	batch_count(&b, 4);
	batch_pair(&b, "ab", 7);
	batch_pair(&b, NULL, 9);
	ck_assert_int_eq(absorb(r, &b), 0);

	reply = result_reply(r);
	ck_assert_int_eq(json_object_size(json_object_get(reply, "counts")), 1);
	ck_assert_int_eq(reply_count(reply, "ab"), 7);
	ck_assert_int_eq(json_integer_value(json_object_get(reply, "nulls")), 9);
	pairs = json_object_get(reply, "pairs");
	ck_assert_int_eq(json_array_size(pairs), 3);
	ck_assert_int_eq(json_string_length(json_array_get(json_array_get(pairs,
	    0), 0)), 1);
	ck_assert_int_eq(json_integer_value(json_array_get(json_array_get(pairs,
	    0), 1)), 4);
	ck_assert_int_eq(memcmp(json_string_value(json_array_get(
	    json_array_get(pairs, 1), 0)), "a\0b", 3), 0);
	ck_assert_int_eq(json_integer_value(json_array_get(json_array_get(pairs,
	    1), 1)), 5);
	ck_assert_int_eq(memcmp(json_string_value(json_array_get(
	    json_array_get(pairs, 2), 0)), "b\0", 2), 0);

	ck_assert_ptr_nonnull(text = json_dumps(reply, JSON_COMPACT));
	again = json_loads(text, JSON_ALLOW_NUL, &jerr);
	ck_assert_msg(again != NULL, "%s: %s", text, jerr.text);
	ck_assert(json_equal(again, reply));
	json_decref(again);
	free(text);
	json_decref(reply);
	result_free(r);
}
END_TEST

/* Without a record holding a NUL there is no "pairs". */
START_TEST(test_counts_no_pairs)
{
	struct result	*r = result_create(RESULT_COUNT_BY_VALUE, REDUCE_SUM);
	struct batch	 b = { .len = 0 };
	json_t		*reply;

	batch_pair(&b, "a", 1);
	ck_assert_int_eq(absorb(r, &b), 0);
	reply = result_reply(r);
	ck_assert_ptr_null(json_object_get(reply, "pairs"));
	json_decref(reply);
	result_free(r);
}
END_TEST

/* Past the table's first size: every record keeps its own count. */
START_TEST(test_counts_many)
{
	struct result	*r = result_create(RESULT_COUNT_BY_VALUE, REDUCE_SUM);
	struct batch	 b = { .len = 0 };
	json_t		*reply;
	char		 key[32];
	size_t		 size0;
	int		 i, round;

	size0 = result_size(r);
	for (round = 0; round < 2; round++) {
		for (i = 0; i < 5000; i++) {
			snprintf(key, sizeof key, "record %d", i);
			if (b.len + 64 > sizeof b.data) {
				ck_assert_int_eq(absorb(r, &b), 0);
				b.len = 0;
			}
			batch_pair(&b, key, i + 1);
		}
	}
	ck_assert_int_eq(absorb(r, &b), 0);
	ck_assert_uint_gt(result_size(r), size0 + 5000 * sizeof "record 0");

	reply = result_reply(r);
	ck_assert_int_eq(json_object_size(json_object_get(reply, "counts")),
	    5000);
	for (i = 0; i < 5000; i++) {
		snprintf(key, sizeof key, "record %d", i);
		ck_assert_int_eq(reply_count(reply, key), 2 * (i + 1));
	}
	json_decref(reply);
	result_free(r);
}
END_TEST

START_TEST(test_counts_malformed)
{
	struct result	*r;
	struct batch	 b;
	unsigned char	 four[4];

	/* A header cut short. */
	r = result_create(RESULT_COUNT_BY_VALUE, REDUCE_SUM);
	b.len = 0;
	batch_pair(&b, "a", 1);
	b.len -= 9;
	ck_assert_int_eq(absorb(r, &b), -1);
	result_free(r);

	/* A length past the batch's end. */
	r = result_create(RESULT_COUNT_BY_VALUE, REDUCE_SUM);
	b.len = 0;
	batch_string(&b, "abcdef");
	b.len -= 2;
	ck_assert_int_eq(absorb(r, &b), -1);
	result_free(r);

	/* A special length other than NULL. */
	r = result_create(RESULT_COUNT_BY_VALUE, REDUCE_SUM);
	b.len = 0;
	be32_put(b.data, EMBER_END_OF_DATA_SECTION);
	b.len = 4;
	ck_assert_int_eq(absorb(r, &b), -1);
	result_free(r);

	/* A count that is not 8 bytes, or a null where a count goes. */
	r = result_create(RESULT_COUNT_BY_VALUE, REDUCE_SUM);
	b.len = 0;
	batch_string(&b, "a");
	memset(four, 0, sizeof four);
	batch_frame(&b, four, sizeof four);
	ck_assert_int_eq(absorb(r, &b), -1);
	result_free(r);
	r = result_create(RESULT_COUNT_BY_VALUE, REDUCE_SUM);
	b.len = 0;
	batch_string(&b, "a");
	batch_frame(&b, NULL, 0);
	ck_assert_int_eq(absorb(r, &b), -1);
	result_free(r);
}
END_TEST

/*
 * Counts no worker could have sent: one below zero, or ones that add up
 * past what an int64 holds (the records of one job cannot), for one
 * record, for nulls, or for records the reply's UTF-8 repair would merge.
 */
START_TEST(test_counts_refused)
{
	struct result	*r;
	json_t		*reply;

	r = result_create(RESULT_COUNT_BY_VALUE, REDUCE_SUM);
	ck_assert_int_eq(absorb_pair(r, "a", INT64_MAX), 0);
	ck_assert_int_eq(absorb_pair(r, "a", 1), -1);
	result_free(r);

	r = result_create(RESULT_COUNT_BY_VALUE, REDUCE_SUM);
	ck_assert_int_eq(absorb_pair(r, NULL, INT64_MAX - 1), 0);
	ck_assert_int_eq(absorb_pair(r, NULL, 2), -1);
	result_free(r);

	r = result_create(RESULT_COUNT_BY_VALUE, REDUCE_SUM);
	ck_assert_int_eq(absorb_pair(r, "k\xff", INT64_MAX / 2 + 1), 0);
	ck_assert_int_eq(absorb_pair(r, "k\xfe", INT64_MAX / 2 + 1), -1);
	result_free(r);

	r = result_create(RESULT_COUNT_BY_VALUE, REDUCE_SUM);
	ck_assert_int_eq(absorb_pair(r, "a", 3), 0);
	ck_assert_int_eq(absorb_pair(r, "a", -1), -1);
	result_free(r);
	r = result_create(RESULT_COUNT_BY_VALUE, REDUCE_SUM);
	ck_assert_int_eq(absorb_pair(r, NULL, INT64_MIN), -1);
	result_free(r);

	/* Up to the limit, every count is taken. */
	r = result_create(RESULT_COUNT_BY_VALUE, REDUCE_SUM);
	ck_assert_int_eq(absorb_pair(r, "a", INT64_MAX - 2), 0);
	ck_assert_int_eq(absorb_pair(r, "b", 1), 0);
	ck_assert_int_eq(absorb_pair(r, NULL, 1), 0);
	ck_assert_int_eq(absorb_pair(r, "c", 0), 0);
	reply = result_reply(r);
	ck_assert_int_eq(reply_count(reply, "a"), INT64_MAX - 2);
	ck_assert_int_eq(reply_int(reply, "nulls"), 1);
	json_decref(reply);
	result_free(r);
}
END_TEST

START_TEST(test_reduce_sum)
{
	struct result	*r = result_create(RESULT_REDUCE, REDUCE_SUM);
	struct batch	 b = { .len = 0 };
	json_t		*reply;

	batch_string(&b, "{\"count\": 2, \"int\": 5}");
	batch_string(&b, "{\"count\": 3, \"int\": -7}");
	ck_assert_int_eq(absorb(r, &b), 0);
	ck_assert_int_eq(absorb_partial(r, "{\"count\": 0}"), 0);
	ck_assert_int_eq(absorb_partial(r, "{\"count\": 1, \"int\": 40}"), 0);
	reply = result_reply(r);
	ck_assert_int_eq(reply_int(reply, "value"), 38);
	ck_assert_int_eq(reply_int(reply, "count"), 6);
	json_decref(reply);
	result_free(r);
}
END_TEST

START_TEST(test_reduce_min_max)
{
	static const char *const partials[] = {
		"{\"count\": 1, \"int\": 3}", "{\"count\": 0}",
		"{\"count\": 2, \"int\": -9}", "{\"count\": 4, \"int\": 12}",
	};
	struct result	*min = result_create(RESULT_REDUCE, REDUCE_MIN);
	struct result	*max = result_create(RESULT_REDUCE, REDUCE_MAX);
	json_t		*reply;
	size_t		 i;

	for (i = 0; i < sizeof partials / sizeof partials[0]; i++) {
		ck_assert_int_eq(absorb_partial(min, partials[i]), 0);
		ck_assert_int_eq(absorb_partial(max, partials[i]), 0);
	}
	reply = result_reply(min);
	ck_assert_int_eq(reply_int(reply, "value"), -9);
	ck_assert_int_eq(reply_int(reply, "count"), 7);
	json_decref(reply);
	reply = result_reply(max);
	ck_assert_int_eq(reply_int(reply, "value"), 12);
	json_decref(reply);
	result_free(min);
	result_free(max);
}
END_TEST

/* An integer sum that overflows goes on as a double. */
START_TEST(test_reduce_sum_overflows_to_real)
{
	struct result	*r = result_create(RESULT_REDUCE, REDUCE_SUM);
	json_t		*reply, *v;

	ck_assert_int_eq(absorb_partial(r,
	    "{\"count\": 1, \"int\": 9223372036854775807}"), 0);
	ck_assert_int_eq(absorb_partial(r, "{\"count\": 1, \"int\": 1}"), 0);
	ck_assert_int_eq(absorb_partial(r, "{\"count\": 1, \"int\": 1}"), 0);
	reply = result_reply(r);
	v = json_object_get(reply, "value");
	ck_assert(json_is_real(v));
	ck_assert_double_eq_tol(json_real_value(v), 9223372036854775809.0,
	    1e4);
	ck_assert_int_eq(reply_int(reply, "count"), 3);
	json_decref(reply);
	result_free(r);
}
END_TEST

/* From the first real on, the fold is a double's; ints join it. */
START_TEST(test_reduce_reals)
{
	struct result	*sum = result_create(RESULT_REDUCE, REDUCE_SUM);
	struct result	*max = result_create(RESULT_REDUCE, REDUCE_MAX);
	json_t		*reply, *v;

	ck_assert_int_eq(absorb_partial(sum, "{\"count\": 1, \"int\": 2}"), 0);
	ck_assert_int_eq(absorb_partial(sum, "{\"count\": 1, \"real\": 0.5}"),
	    0);
	ck_assert_int_eq(absorb_partial(sum, "{\"count\": 1, \"int\": 3}"), 0);
	reply = result_reply(sum);
	v = json_object_get(reply, "value");
	ck_assert(json_is_real(v));
	ck_assert_double_eq(json_real_value(v), 5.5);
	json_decref(reply);

	ck_assert_int_eq(absorb_partial(max, "{\"count\": 1, \"real\": -1.5}"),
	    0);
	ck_assert_int_eq(absorb_partial(max, "{\"count\": 1, \"int\": -2}"), 0);
	reply = result_reply(max);
	ck_assert_double_eq(json_real_value(json_object_get(reply, "value")),
	    -1.5);
	json_decref(reply);
	result_free(sum);
	result_free(max);
}
END_TEST

/* No value at all, or one that is not finite, is null in the reply. */
START_TEST(test_reduce_null_value)
{
	struct result	*r = result_create(RESULT_REDUCE, REDUCE_SUM);
	json_t		*reply;

	reply = result_reply(r);
	ck_assert(json_is_null(json_object_get(reply, "value")));
	ck_assert_int_eq(reply_int(reply, "count"), 0);
	json_decref(reply);
	ck_assert_int_eq(absorb_partial(r, "{\"count\": 1, \"real\": 1e308}"),
	    0);
	ck_assert_int_eq(absorb_partial(r, "{\"count\": 1, \"real\": 1e308}"),
	    0);
	reply = result_reply(r);
	ck_assert(json_is_null(json_object_get(reply, "value")));
	ck_assert_int_eq(reply_int(reply, "count"), 2);
	json_decref(reply);
	result_free(r);
}
END_TEST

/* A record count below zero, or counts past an int64, are refused. */
START_TEST(test_reduce_count_refused)
{
	struct result	*r;
	char		 json[96];

	r = result_create(RESULT_REDUCE, REDUCE_SUM);
	snprintf(json, sizeof json, "{\"count\": %" PRId64 ", \"int\": 1}",
	    INT64_MAX);
	ck_assert_int_eq(absorb_partial(r, json), 0);
	ck_assert_int_eq(absorb_partial(r, "{\"count\": 1, \"int\": 1}"), -1);
	result_free(r);

	r = result_create(RESULT_REDUCE, REDUCE_MAX);
	ck_assert_int_eq(absorb_partial(r, "{\"count\": 1, \"int\": 1}"), 0);
	ck_assert_int_eq(absorb_partial(r, "{\"count\": -1, \"int\": 1}"),
	    -1);
	result_free(r);
}
END_TEST

START_TEST(test_reduce_malformed)
{
	static const char *const bad[] = {
		"not json", "[1, 2]", "{\"int\": 1}", "{\"count\": \"1\"}",
		"{\"count\": 1, \"real\": \"1.5\"}",
		"{\"count\": 1, \"int\": \"2\"}",
	};
	struct result	*r;
	struct batch	 b;
	size_t		 i;

	for (i = 0; i < sizeof bad / sizeof bad[0]; i++) {
		r = result_create(RESULT_REDUCE, REDUCE_SUM);
		ck_assert_msg(absorb_partial(r, bad[i]) == -1, "took %s",
		    bad[i]);
		result_free(r);
	}
	r = result_create(RESULT_REDUCE, REDUCE_SUM);
	b.len = 0;
	batch_frame(&b, NULL, 0);
	ck_assert_int_eq(absorb(r, &b), -1);
	result_free(r);
}
END_TEST

Suite *
result_suite(void)
{
	Suite	*s = suite_create("result");
	TCase	*tc;

	tc = tcase_create("count_by_value");
	tcase_add_test(tc, test_counts_merge);
	tcase_add_test(tc, test_counts_empty);
	tcase_add_test(tc, test_counts_pair_split);
	tcase_add_test(tc, test_counts_nul_pairs);
	tcase_add_test(tc, test_counts_no_pairs);
	tcase_add_test(tc, test_counts_not_utf8);
	tcase_add_test(tc, test_counts_many);
	tcase_add_test(tc, test_counts_malformed);
	tcase_add_test(tc, test_counts_refused);
	suite_add_tcase(s, tc);

	tc = tcase_create("reduce");
	tcase_add_test(tc, test_reduce_fn_names);
	tcase_add_test(tc, test_reduce_sum);
	tcase_add_test(tc, test_reduce_min_max);
	tcase_add_test(tc, test_reduce_sum_overflows_to_real);
	tcase_add_test(tc, test_reduce_reals);
	tcase_add_test(tc, test_reduce_null_value);
	tcase_add_test(tc, test_reduce_count_refused);
	tcase_add_test(tc, test_reduce_malformed);
	suite_add_tcase(s, tc);

	return (s);
}
