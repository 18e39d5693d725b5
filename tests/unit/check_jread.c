/* Tests for common/jread.c: typed getters and the paths in their errors. */
#include <stdlib.h>
#include <string.h>

#include "jread.h"
#include "suites.h"

static json_t	*obj;

/* Parse the object every test reads. */
static void
jread_setup(void)
{
	json_error_t	jerr;

	obj = json_loads("{\"s\": \"text\", \"empty\": \"\", \"i\": -42, "
	    "\"big\": 9223372036854775807, \"r\": 1.5, \"t\": true, "
	    "\"f\": false, \"n\": null, \"o\": {\"k\": 1}, \"a\": [1, 2]}",
	    0, &jerr);
	ck_assert_msg(obj != NULL, "%s", jerr.text);
}

/* Free it. */
static void
jread_teardown(void)
{
	json_decref(obj);
}

/* Check that err is want, then free it. */
static void
jread_expect(char *err, const char *want)
{
	ck_assert_ptr_nonnull(err);
	ck_assert_str_eq(err, want);
	free(err);
}

START_TEST(test_jread_string)
{
	const char	*s = "untouched";
	char		*err = NULL;

	ck_assert_int_eq(jread_string(obj, "req", "s", JREAD_REQUIRED, &s,
	    &err), 0);
	ck_assert_str_eq(s, "text");
	ck_assert_int_eq(jread_string(obj, "req", "empty", JREAD_REQUIRED, &s,
	    &err), 0);
	ck_assert_str_eq(s, "");

	s = "untouched";
	ck_assert_int_eq(jread_string(obj, "req", "absent", JREAD_OPTIONAL, &s,
	    &err), 0);
	ck_assert_str_eq(s, "untouched");
	ck_assert_ptr_null(err);

	ck_assert_int_eq(jread_string(obj, "req", "absent", JREAD_REQUIRED, &s,
	    &err), -1);
	jread_expect(err, "req.absent: missing");
	ck_assert_int_eq(jread_string(obj, "req", "i", JREAD_OPTIONAL, &s,
	    &err), -1);
	jread_expect(err, "req.i: expected a string");
	ck_assert_int_eq(jread_string(obj, "a.b[3]", "n", JREAD_REQUIRED, &s,
	    &err), -1);
	jread_expect(err, "a.b[3].n: expected a string");
	ck_assert_str_eq(s, "untouched");
}
END_TEST

START_TEST(test_jread_int)
{
	json_int_t	 n = 7;
	char		*err = NULL;

	ck_assert_int_eq(jread_int(obj, "x", "i", JREAD_REQUIRED, &n, &err), 0);
	ck_assert_int_eq(n, -42);
	ck_assert_int_eq(jread_int(obj, "x", "big", JREAD_REQUIRED, &n, &err),
	    0);
	ck_assert_int_eq(n, INT64_MAX);

	n = 7;
	ck_assert_int_eq(jread_int(obj, "x", "absent", JREAD_OPTIONAL, &n,
	    &err), 0);
	ck_assert_int_eq(n, 7);
	ck_assert_ptr_null(err);

	ck_assert_int_eq(jread_int(obj, "x", "absent", JREAD_REQUIRED, &n,
	    &err), -1);
	jread_expect(err, "x.absent: missing");
	ck_assert_int_eq(jread_int(obj, "x", "r", JREAD_REQUIRED, &n, &err),
	    -1);
	jread_expect(err, "x.r: expected an integer");
	ck_assert_int_eq(jread_int(obj, "x", "s", JREAD_OPTIONAL, &n, &err),
	    -1);
	jread_expect(err, "x.s: expected an integer");
	ck_assert_int_eq(jread_int(obj, "x", "t", JREAD_OPTIONAL, &n, &err),
	    -1);
	jread_expect(err, "x.t: expected an integer");
	ck_assert_int_eq(n, 7);
}
END_TEST

START_TEST(test_jread_bool)
{
	int	 b = 5;
	char	*err = NULL;

	ck_assert_int_eq(jread_bool(obj, "o", "t", JREAD_REQUIRED, &b, &err),
	    0);
	ck_assert_int_eq(b, 1);
	ck_assert_int_eq(jread_bool(obj, "o", "f", JREAD_REQUIRED, &b, &err),
	    0);
	ck_assert_int_eq(b, 0);

	b = 5;
	ck_assert_int_eq(jread_bool(obj, "o", "absent", JREAD_OPTIONAL, &b,
	    &err), 0);
	ck_assert_int_eq(b, 5);
	ck_assert_ptr_null(err);

	ck_assert_int_eq(jread_bool(obj, "o", "absent", JREAD_REQUIRED, &b,
	    &err), -1);
	jread_expect(err, "o.absent: missing");
	ck_assert_int_eq(jread_bool(obj, "o", "i", JREAD_OPTIONAL, &b, &err),
	    -1);
	jread_expect(err, "o.i: expected true or false");
	ck_assert_int_eq(jread_bool(obj, "o", "n", JREAD_OPTIONAL, &b, &err),
	    -1);
	jread_expect(err, "o.n: expected true or false");
	ck_assert_int_eq(b, 5);
}
END_TEST

START_TEST(test_jread_object)
{
	json_t	*o = NULL;
	char	*err = NULL;

	ck_assert_int_eq(jread_object(obj, "p", "o", JREAD_REQUIRED, &o, &err),
	    0);
	ck_assert_ptr_eq(o, json_object_get(obj, "o"));

	o = NULL;
	ck_assert_int_eq(jread_object(obj, "p", "absent", JREAD_OPTIONAL, &o,
	    &err), 0);
	ck_assert_ptr_null(o);
	ck_assert_ptr_null(err);

	ck_assert_int_eq(jread_object(obj, "p", "absent", JREAD_REQUIRED, &o,
	    &err), -1);
	jread_expect(err, "p.absent: missing");
	ck_assert_int_eq(jread_object(obj, "p", "a", JREAD_OPTIONAL, &o, &err),
	    -1);
	jread_expect(err, "p.a: expected an object");
	ck_assert_int_eq(jread_object(obj, "p", "n", JREAD_OPTIONAL, &o, &err),
	    -1);
	jread_expect(err, "p.n: expected an object");
	ck_assert_ptr_null(o);
}
END_TEST

START_TEST(test_jread_array)
{
	json_t	*a = NULL;
	char	*err = NULL;

	ck_assert_int_eq(jread_array(obj, "p", "a", JREAD_REQUIRED, &a, &err),
	    0);
	ck_assert_ptr_eq(a, json_object_get(obj, "a"));

	a = NULL;
	ck_assert_int_eq(jread_array(obj, "p", "absent", JREAD_OPTIONAL, &a,
	    &err), 0);
	ck_assert_ptr_null(a);
	ck_assert_ptr_null(err);

	ck_assert_int_eq(jread_array(obj, "p", "absent", JREAD_REQUIRED, &a,
	    &err), -1);
	jread_expect(err, "p.absent: missing");
	ck_assert_int_eq(jread_array(obj, "p", "o", JREAD_OPTIONAL, &a, &err),
	    -1);
	jread_expect(err, "p.o: expected an array");
	ck_assert_int_eq(jread_array(obj, "p", "s", JREAD_OPTIONAL, &a, &err),
	    -1);
	jread_expect(err, "p.s: expected an array");
	ck_assert_ptr_null(a);
}
END_TEST

START_TEST(test_jread_top_level)
{
	const char	*s;
	char		*err = NULL;

	/* With no path, the key alone names the field. */
	ck_assert_int_eq(jread_string(obj, "", "absent", JREAD_REQUIRED, &s,
	    &err), -1);
	jread_expect(err, "absent: missing");
	ck_assert_int_eq(jread_string(obj, NULL, "i", JREAD_REQUIRED, &s,
	    &err), -1);
	jread_expect(err, "i: expected a string");

	/* A value that is not an object has no fields. */
	ck_assert_int_eq(jread_string(json_object_get(obj, "a"), "p", "s",
	    JREAD_REQUIRED, &s, &err), -1);
	jread_expect(err, "p.s: missing");
}
END_TEST

START_TEST(test_jread_only)
{
	static const char *const all[] = { "s", "empty", "i", "big", "r", "t",
	    "f", "n", "o", "a", NULL };
	static const char *const some[] = { "s", "empty", "i", "big", "r",
	    "t", "f", "n", "a", NULL };
	static const char *const none[] = { NULL };
	char	*err = NULL;
	json_t	*empty;

	ck_assert_int_eq(jread_only(obj, "msg", all, &err), 0);
	ck_assert_ptr_null(err);
	ck_assert_int_eq(jread_only(obj, "msg", some, &err), -1);
	jread_expect(err, "msg.o: unknown field");
	ck_assert_int_eq(jread_only(json_object_get(obj, "o"), "msg.o", none,
	    &err), -1);
	jread_expect(err, "msg.o.k: unknown field");
	ck_assert_int_eq(jread_only(obj, "", some, &err), -1);
	jread_expect(err, "o: unknown field");

	ck_assert_ptr_nonnull(empty = json_object());
	ck_assert_int_eq(jread_only(empty, "msg", none, &err), 0);
	json_decref(empty);
}
END_TEST

START_TEST(test_jread_path)
{
	char	*p, *err = NULL;

	p = jread_path("plan.ops[2]", "filter");
	ck_assert_str_eq(p, "plan.ops[2].filter");
	free(p);
	p = jread_path("", "op");
	ck_assert_str_eq(p, "op");
	free(p);
	p = jread_path(NULL, "op");
	ck_assert_str_eq(p, "op");
	free(p);

	ck_assert_int_eq(jread_fail(&err, "plan.partitions", "must be from %d "
	    "to %d", 1, 8), -1);
	jread_expect(err, "plan.partitions: must be from 1 to 8");
	ck_assert_int_eq(jread_fail(&err, "", "bad %s", "thing"), -1);
	jread_expect(err, "bad thing");
	ck_assert_int_eq(jread_fail(&err, NULL, "bad"), -1);
	jread_expect(err, "bad");
}
END_TEST

/* Build the jread suite. */
Suite *
jread_suite(void)
{
	Suite	*s = suite_create("jread");
	TCase	*tc;

	tc = tcase_create("getters");
	tcase_add_checked_fixture(tc, jread_setup, jread_teardown);
	tcase_add_test(tc, test_jread_string);
	tcase_add_test(tc, test_jread_int);
	tcase_add_test(tc, test_jread_bool);
	tcase_add_test(tc, test_jread_object);
	tcase_add_test(tc, test_jread_array);
	tcase_add_test(tc, test_jread_top_level);
	suite_add_tcase(s, tc);

	tc = tcase_create("only");
	tcase_add_checked_fixture(tc, jread_setup, jread_teardown);
	tcase_add_test(tc, test_jread_only);
	suite_add_tcase(s, tc);

	tc = tcase_create("paths");
	tcase_add_test(tc, test_jread_path);
	suite_add_tcase(s, tc);

	return (s);
}
