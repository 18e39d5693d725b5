/*
 * Tests for daemon/request.c: a control frame's bytes to a request, and
 * the REQUEST_INVALID messages a client gets for anything else.
 */
#include <stdlib.h>
#include <string.h>

#include <jansson.h>

#include "request.h"
#include "suites.h"

/* Parse len bytes and expect the error want (a prefix of it). */
static void
request_refused(const char *data, size_t len, const char *want)
{
	json_t	*req;
	char	*err = NULL;

	req = request_parse(data, len, &err);
	ck_assert_ptr_null(req);
	ck_assert_ptr_nonnull(err);
	ck_assert_msg(strncmp(err, want, strlen(want)) == 0,
	    "got \"%s\", want \"%s\"", err, want);
	free(err);
}

START_TEST(test_request_ok)
{
	static const char	 text[] = "{\"op\":\"hello\",\"client\":\"a\\u0000b\"}";
	json_t			*req;
	char			*err = NULL;

	req = request_parse(text, strlen(text), &err);
	ck_assert_ptr_nonnull(req);
	ck_assert_ptr_null(err);
	ck_assert_str_eq(json_string_value(json_object_get(req, "op")),
	    "hello");
	/* A NUL in a string is kept, with its length. */
	ck_assert_uint_eq(json_string_length(json_object_get(req, "client")),
	    3);
	json_decref(req);
}
END_TEST

START_TEST(test_request_refused)
{
	/* Not JSON, with where. */
	request_refused("{\"op\":", 6, "not JSON: ");
	request_refused("", 0, "not JSON: ");
	/* The frame's length is the end: bytes past it are not read. */
	request_refused("{\"op\":\"status\"}", 10, "not JSON: ");
	/* A NUL byte outside a string. */
	request_refused("{\"op\":\"x\"}\0", 11, "not JSON: ");
	/* Duplicate keys. */
	request_refused("{\"op\":\"hello\",\"op\":\"status\"}", 28,
	    "not JSON: duplicate object key");
	/* Not an object with a string op. */
	request_refused("[1,2]", 5,
	    "a request is a JSON object with a string \"op\"");
	request_refused("{\"op\":1}", 8,
	    "a request is a JSON object with a string \"op\"");
	request_refused("{}", 2,
	    "a request is a JSON object with a string \"op\"");
	request_refused("\"op\"", 4, "not JSON: ");
}
END_TEST

Suite *
request_suite(void)
{
	Suite	*s = suite_create("request");
	TCase	*tc = tcase_create("parse");

	tcase_add_test(tc, test_request_ok);
	tcase_add_test(tc, test_request_refused);
	suite_add_tcase(s, tc);
	return (s);
}
