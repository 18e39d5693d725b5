/*
 * Tests for daemon/request.c: a control frame's bytes to a request, and
 * the REQUEST_INVALID messages a client gets for anything else; an
 * execute request's members read into a plain struct, and a new
 * operation's id.
 */
#include <stdlib.h>
#include <string.h>

#include <jansson.h>
#include <uuid/uuid.h>

#include "request.h"
#include "suites.h"

/* Parse len bytes and expect the error want (a prefix of it). */
static void
request_refused(const char *data, size_t len, const char *want)
{
	json_t	*req;
	char	*err = NULL;

	req = request_parse(data, len, 0, &err);
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

	req = request_parse(text, strlen(text), 0, &err);
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

/* Count the values and keys of text, up to max. */
static size_t
request_count(const char *text, size_t max)
{
	return (request_count_values(text, strlen(text), max));
}

/* Values and keys are counted by their separators, not inside strings,
 * and the count stops past max. */
START_TEST(test_request_count_values)
{
	ck_assert_uint_eq(request_count("1", 100), 1);
	ck_assert_uint_eq(request_count("{\"op\":\"x\"}", 100), 3);
	ck_assert_uint_eq(request_count("[1,2,3]", 100), 4);
	/* An empty container counts for its bracket too. */
	ck_assert_uint_eq(request_count("[[],{}]", 100), 5);
	/* Separators inside strings, escaped quotes and backslashes. */
	ck_assert_uint_eq(request_count("[\",:[{\",\"\\\",\"]", 100), 3);
	ck_assert_uint_eq(request_count("[\"\\\\\",1]", 100), 3);
	/* An unclosed string, or an escape at the very end. */
	ck_assert_uint_eq(request_count("[1,\",,,", 100), 3);
	ck_assert_uint_eq(request_count("[\"\\", 100), 2);
	/* Stopped past max. */
	ck_assert_uint_eq(request_count("[1,2,3,4,5,6,7,8,9]", 3), 4);
	ck_assert_uint_eq(request_count_values("[1,2]", 0, 100), 1);
}
END_TEST

/* A frame of more values and keys than the limit is refused before it is
 * parsed, naming the key; at the limit it is parsed. */
START_TEST(test_request_too_many_values)
{
	static const char	 text[] = "{\"op\":\"status\",\"a\":[1,2]}";
	json_t			*req;
	char			*err = NULL;

	req = request_parse(text, strlen(text), 7, &err);
	ck_assert_ptr_nonnull(req);
	json_decref(req);
	req = request_parse(text, strlen(text), 6, &err);
	ck_assert_ptr_null(req);
	ck_assert_str_eq(err, "the request holds more than "
	    "daemon.max_frame_values (6) values and keys");
	free(err);
}
END_TEST

/* Nesting past jansson's depth (2048) is refused as it is read, at once,
 * whatever the frame's length; the count refuses a longer run of
 * brackets before jansson sees it. */
START_TEST(test_request_too_deep)
{
	size_t	 n = 100000;
	char	*text = malloc(n + 7);
	char	*err = NULL;

	ck_assert_ptr_nonnull(text);
	memcpy(text, "{\"op\":", 6);
	memset(text + 6, '[', n);
	request_refused(text, 6 + 2049, "not JSON: maximum parsing depth");
	ck_assert_ptr_null(request_parse(text, 6 + n, 50000, &err));
	ck_assert_str_eq(err, "the request holds more than "
	    "daemon.max_frame_values (50000) values and keys");
	free(err);
	free(text);
}
END_TEST

/* Read execute request text; 0, or -1 with *class and *err. */
static int
request_execute(const char *text, int (*taken)(const char *, void *),
    struct execute_request *er, const char **class, char **err)
{
	json_t	*req;
	int	 rc;

	req = json_loads(text, 0, NULL);
	ck_assert_ptr_nonnull(req);
	*class = NULL;
	*err = NULL;
	rc = request_read_execute(req, taken, NULL, er, class, err);
	json_decref(req);
	return (rc);
}

/* Expect text refused with class and a message that starts with want. */
static void
execute_refused(const char *text, const char *class, const char *want)
{
	struct execute_request	 er;
	const char		*c;
	char			*err;

	ck_assert_int_eq(request_execute(text, NULL, &er, &c, &err), -1);
	ck_assert_str_eq(c, class);
	ck_assert_ptr_nonnull(err);
	ck_assert_msg(strncmp(err, want, strlen(want)) == 0,
	    "got \"%s\", want \"%s\"", err, want);
	free(err);
}

/* Every client-chosen id is taken. */
static int
every_id_taken(const char *id, void *arg)
{
	(void)id; (void)arg;
	return (1);
}

START_TEST(test_execute_read)
{
	struct execute_request	 er;
	const char		*c;
	char			*err;

	ck_assert_int_eq(request_execute("{\"op\":\"execute\",\"plan\":{},"
	    "\"action\":\"iterate\",\"options\":{\"prefetch\":3,"
	    "\"limit\":10,\"reattachable\":false}}", NULL, &er, &c, &err), 0);
	ck_assert_int_eq(er.action, ACTION_ITERATE);
	ck_assert_int_eq(er.prefetch, 3);
	ck_assert_int_eq(er.limit, 10);
	ck_assert_int_eq(er.reattachable, 0);
	ck_assert_uint_eq(strlen(er.id), 36);
	/* Defaults: prefetch -1 (as many as fit), reattachable, eager. */
	ck_assert_int_eq(request_execute("{\"op\":\"execute\",\"action\":"
	    "\"checkpoint\",\"operation\":"
	    "\"0b697aef-1111-4222-8333-444455556666\"}", NULL, &er, &c,
	    &err), 0);
	ck_assert_int_eq(er.action, ACTION_CHECKPOINT);
	ck_assert_int_eq(er.prefetch, -1);
	ck_assert_int_eq(er.reattachable, 1);
	ck_assert_int_eq(er.ckpt_eager, 1);
	ck_assert_int_eq(er.ckpt_local, 0);
	ck_assert_str_eq(er.id, "0b697aef-1111-4222-8333-444455556666");
	ck_assert_int_eq(request_execute("{\"op\":\"execute\",\"action\":"
	    "\"save\",\"options\":{\"path\":\"/tmp/x\",\"overwrite\":true}}",
	    NULL, &er, &c, &err), 0);
	ck_assert_int_eq(er.overwrite, 1);
	ck_assert_int_eq(request_execute("{\"op\":\"execute\",\"action\":"
	    "\"reduce\",\"options\":{\"fn\":\"max\"}}", NULL, &er, &c, &err),
	    0);
	ck_assert_int_eq(er.fn, REDUCE_MAX);
}
END_TEST

START_TEST(test_execute_refused)
{
	struct execute_request	 er;
	const char		*c;
	char			*err;

	execute_refused("{\"op\":\"execute\"}", "REQUEST_INVALID",
	    "execute: ");
	execute_refused("{\"op\":\"execute\",\"action\":\"count\","
	    "\"x\":1}", "REQUEST_INVALID", "execute: ");
	execute_refused("{\"op\":\"execute\",\"action\":\"count\","
	    "\"operation\":\"nope\"}", "REQUEST_INVALID",
	    "operation: \"nope\" is not a UUID");
	execute_refused("{\"op\":\"execute\",\"action\":\"sort\"}",
	    "ACTION_INVALID", "action: unknown action \"sort\"");
	execute_refused("{\"op\":\"execute\",\"action\":\"count\","
	    "\"options\":{\"prefetch\":1}}", "ACTION_INVALID",
	    "options.prefetch belongs to action iterate, not count");
	execute_refused("{\"op\":\"execute\",\"action\":\"iterate\","
	    "\"options\":{\"prefetch\":1025}}", "ACTION_INVALID",
	    "options.prefetch: must be from 0 to 1024");
	execute_refused("{\"op\":\"execute\",\"action\":\"collect\","
	    "\"options\":{\"limit\":-1}}", "ACTION_INVALID",
	    "options.limit: must not be negative");
	execute_refused("{\"op\":\"execute\",\"action\":\"reduce\","
	    "\"options\":{\"fn\":\"avg\"}}", "ACTION_INVALID", "options.fn: ");
	execute_refused("{\"op\":\"execute\",\"action\":\"save\","
	    "\"options\":{\"path\":\"rel\"}}", "ACTION_INVALID",
	    "options.path: \"rel\" is not an absolute path");
	/* An id in use is refused before the action is looked at. */
	ck_assert_int_eq(request_execute("{\"op\":\"execute\",\"action\":"
	    "\"sort\",\"operation\":\"0b697aef-1111-4222-8333-444455556666\"}",
	    every_id_taken, &er, &c, &err), -1);
	ck_assert_str_eq(c, "OPERATION_ALREADY_EXISTS");
	free(err);
}
END_TEST

/* A new operation's id is a random UUID, version 4, of the RFC 4122
 * variant, in lower case; two are not the same. */
START_TEST(test_request_new_id)
{
	char	a[37], b[37];
	uuid_t	u;
	size_t	i;

	request_new_id(a);
	request_new_id(b);
	ck_assert_uint_eq(strlen(a), 36);
	ck_assert_int_eq(uuid_parse(a, u), 0);
	ck_assert_int_eq(uuid_type(u), UUID_TYPE_DCE_RANDOM);
	ck_assert_int_eq(uuid_variant(u), UUID_VARIANT_DCE);
	for (i = 0; i < 36; i++)
		ck_assert_msg(a[i] == '-' || strchr("0123456789abcdef",
		    a[i]) != NULL, "id %s: not lower-case hex", a);
	ck_assert_str_ne(a, b);
}
END_TEST

Suite *
request_suite(void)
{
	Suite	*s = suite_create("request");
	TCase	*tc = tcase_create("parse");

	tcase_add_test(tc, test_request_ok);
	tcase_add_test(tc, test_request_refused);
	tcase_add_test(tc, test_request_count_values);
	tcase_add_test(tc, test_request_too_many_values);
	tcase_add_test(tc, test_request_too_deep);
	suite_add_tcase(s, tc);
	tc = tcase_create("execute");
	tcase_add_test(tc, test_execute_read);
	tcase_add_test(tc, test_execute_refused);
	tcase_add_test(tc, test_request_new_id);
	suite_add_tcase(s, tc);
	return (s);
}
