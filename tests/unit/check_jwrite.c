/*
 * Tests for common/jwrite.c: every value is written byte for byte as
 * json_dumps(JSON_COMPACT | JSON_ENCODE_ANY) writes it, and reads back
 * equal; a reply is the object {"ok":...} updated with its fields.
 */
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include <event2/buffer.h>
#include <jansson.h>

#include "jwrite.h"
#include "suites.h"

/* Append to an evbuffer. */
static int
add_cb(const char *s, size_t len, void *arg)
{
	return (evbuffer_add(arg, s, len));
}

/* Fail once the budget of calls is spent. */
static int
fail_cb(const char *s, size_t len, void *arg)
{
	int	*left = arg;

	(void)s;
	(void)len;
	return (--*left < 0 ? -1 : 0);
}

/* Check that jwrite_value writes v as json_dumps does, that jwrite_dumps
 * returns it, that the text reads back equal to v, and that a callback
 * failing at any call fails it; takes v. */
static void
jwrite_same(json_t *v)
{
	struct evbuffer	*out = evbuffer_new();
	char		*want, *got;
	size_t		 len;
	json_t		*back;
	int		 calls, left;

	ck_assert_ptr_nonnull(v);
	want = json_dumps(v, JSON_COMPACT | JSON_ENCODE_ANY);
	ck_assert_ptr_nonnull(want);
	ck_assert_int_eq(jwrite_value(v, add_cb, out), 0);
	len = evbuffer_get_length(out);
	if (len != strlen(want) || memcmp(evbuffer_pullup(out, -1), want,
	    len) != 0)
		ck_abort_msg("wrote %.*s, json_dumps %s", (int)len,
		    (char *)evbuffer_pullup(out, -1), want);
	back = json_loadb((char *)evbuffer_pullup(out, -1), len,
	    JSON_DECODE_ANY | JSON_ALLOW_NUL, NULL);
	ck_assert_ptr_nonnull(back);
	ck_assert(json_equal(back, v));
	json_decref(back);
	got = jwrite_dumps(v);
	ck_assert_str_eq(got, want);
	free(got);
	/* Count the calls, then fail each in turn. */
	left = 1 << 30;
	ck_assert_int_eq(jwrite_value(v, fail_cb, &left), 0);
	calls = (1 << 30) - left;
	for (left = 0; left < calls; left++) {
		int	budget = left;

		ck_assert_int_eq(jwrite_value(v, fail_cb, &budget), -1);
	}
	free(want);
	json_decref(v);
	evbuffer_free(out);
}

START_TEST(test_jwrite_scalars)
{
	jwrite_same(json_true());
	jwrite_same(json_false());
	jwrite_same(json_null());
	jwrite_same(json_integer(0));
	jwrite_same(json_integer(7));
	jwrite_same(json_integer(-42));
	jwrite_same(json_integer(INT64_MAX));
	jwrite_same(json_integer(INT64_MIN));
	jwrite_same(json_integer(1000000));
	jwrite_same(json_real(0.5));
	jwrite_same(json_real(-1e300));
	jwrite_same(json_real(3.0));
}
END_TEST

START_TEST(test_jwrite_strings)
{
	char	all[128];
	int	i;

	jwrite_same(json_string(""));
	jwrite_same(json_string("0b697aef-9a9d-44bf-a3db-6f881122a3e3"));
	jwrite_same(json_string("quote \" backslash \\ slash /"));
	jwrite_same(json_string("\b\f\n\r\t\x01\x1f\x7f"));
	jwrite_same(json_string("caf\xc3\xa9 \xe2\x82\xac \xf0\x9f\x98\x80"));
	jwrite_same(json_string("\xe2\x80\xa8 line separator, kept"));
	jwrite_same(json_stringn("a\0b", 3));
	/* Every ASCII character, control characters included. */
	for (i = 1; i < 128; i++)
		all[i - 1] = (char)i;
	all[127] = '\0';
	jwrite_same(json_string(all));
}
END_TEST

START_TEST(test_jwrite_nested)
{
	jwrite_same(json_object());
	jwrite_same(json_array());
	jwrite_same(json_pack("{s:s,s:i,s:I}", "operation", "op-1",
	    "partitions", 1, "count", (json_int_t)123456789012LL));
	jwrite_same(json_pack("[i,s,b,n,[],{},[[i]]]", 1, "x", 1, 1));
	jwrite_same(json_pack("{s:{s:{s:[s,s]}},s:{}}", "a\"\n", "b", "c",
	    "d\x01", "e", "f"));
	jwrite_same(json_pack("{s:{s:I,s:I},s:I}", "counts", "1",
	    (json_int_t)2, "", (json_int_t)3, "nulls", (json_int_t)0));
	jwrite_same(json_pack("{s:f,s:I}", "value", 2.5, "count",
	    (json_int_t)4));
}
END_TEST

/* Check a reply against json_dumps of {"ok":ok} updated with fields;
 * takes fields. */
static void
jwrite_reply_same(int ok, json_t *fields)
{
	struct evbuffer	*out = evbuffer_new();
	json_t		*reply = json_pack("{s:b}", "ok", ok);
	char		*want, *text;
	size_t		 len;

	if (fields != NULL)
		json_object_update(reply, fields);
	want = json_dumps(reply, JSON_COMPACT);
	ck_assert_int_eq(jwrite_reply(ok, fields, add_cb, out), 0);
	len = evbuffer_get_length(out);
	if (len != strlen(want) || memcmp(evbuffer_pullup(out, -1), want,
	    len) != 0)
		ck_abort_msg("wrote %.*s, json_dumps %s", (int)len,
		    (char *)evbuffer_pullup(out, -1), want);
	text = jwrite_reply_dumps(ok, fields);
	ck_assert_str_eq(text, want);
	free(text);
	free(want);
	json_decref(reply);
	if (fields != NULL)
		json_decref(fields);
	evbuffer_free(out);
}

START_TEST(test_jwrite_reply)
{
	jwrite_reply_same(1, NULL);
	jwrite_reply_same(0, NULL);
	jwrite_reply_same(1, json_object());
	jwrite_reply_same(1, json_pack("{s:s,s:i,s:I}", "operation",
	    "5f0c1e2a-0000-4000-8000-000000000001", "partitions", 1, "count",
	    (json_int_t)1));
	jwrite_reply_same(0, json_pack("{s:{s:s,s:s}}", "error", "class",
	    "PLAN_INVALID", "message", "plan.ops[0]: \"x\" is not an op\n"));
	jwrite_reply_same(0, json_pack("{s:i,s:{s:s,s:s}}", "version", 1,
	    "error", "class", "VERSION", "message", "m"));
}
END_TEST

Suite *
jwrite_suite(void)
{
	Suite	*s = suite_create("jwrite");
	TCase	*tc = tcase_create("json_dumps's bytes");

	tcase_add_test(tc, test_jwrite_scalars);
	tcase_add_test(tc, test_jwrite_strings);
	tcase_add_test(tc, test_jwrite_nested);
	tcase_add_test(tc, test_jwrite_reply);
	suite_add_tcase(s, tc);
	return (s);
}
