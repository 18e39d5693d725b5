/*
 * Tests for daemon/status_view.c: a viewer is shown only what a rule lets
 * it see, and a field no rule names, a uid included, is shown to nobody.
 */
#include <stdlib.h>
#include <string.h>

#include <jansson.h>

#include "status_view.h"
#include "suites.h"

/* The status of two users, 1001 and 1002, a session and an operation
 * each, and a worker running 1001's task. */
static const char full_text[] =
    "{\"server\":\"emberd\",\"pid\":7,"
    "\"workers\":[{\"pid\":10,\"state\":\"busy\",\"broadcasts\":[1],"
    "\"task\":{\"operation\":\"op-a\",\"partition\":3,\"age_ms\":5}}],"
    "\"pools\":[{\"client\":1001,\"uid\":1001,\"idle\":0,"
    "\"retired\":{\"failed\":1}}],"
    "\"sessions\":[{\"id\":\"s-a\",\"uid\":1001,\"connections\":1},"
    "{\"id\":\"s-b\",\"uid\":1002,\"connections\":1}],"
    "\"operations\":[{\"id\":\"op-a\",\"session\":\"s-a\",\"what\":\"a\"},"
    "{\"id\":\"op-b\",\"session\":\"s-b\",\"what\":\"b\"}],"
    "\"broadcasts\":[{\"id\":1,\"session\":\"s-a\",\"size\":3}],"
    "\"checkpoints\":[{\"id\":\"c-a\",\"uid\":1001}],"
    "\"limits\":{\"users\":[{\"uid\":1001,\"limits\":{\"x\":1}},"
    "{\"uid\":1002,\"limits\":{\"x\":2}}],\"total\":{\"x\":3}},"
    "\"counters\":{\"tasks\":9},"
    "\"failures\":[{\"uid\":1001,\"operation\":\"op-a\",\"message\":\"m\"}]}";

/* A viewer of one uid, *(uid_t *)arg. */
static int
view_allows(uid_t uid, void *arg)
{
	return (uid == *(uid_t *)arg);
}

/* The view of full_text (with extra, a JSON object merged into its
 * first worker, if not NULL) for uid. */
static json_t *
view_for(uid_t *uid, const char *extra, size_t *hidden)
{
	struct status_viewer	 viewer = { view_allows, uid };
	json_t			*full, *w, *more, *view;

	full = json_loads(full_text, 0, NULL);
	ck_assert_ptr_nonnull(full);
	if (extra != NULL) {
		w = json_array_get(json_object_get(full, "workers"), 0);
		more = json_loads(extra, 0, NULL);
		ck_assert_ptr_nonnull(more);
		ck_assert_int_eq(json_object_update(w, more), 0);
		json_decref(more);
	}
	view = status_view(full, &status_view_web, &viewer, hidden);
	json_decref(full);
	return (view);
}

/* The string under key of element i of array name in view. */
static const char *
view_string(json_t *view, const char *name, size_t i, const char *key)
{
	return (json_string_value(json_object_get(json_array_get(
	    json_object_get(view, name), i), key)));
}

START_TEST(test_view_own_records)
{
	uid_t	 uid = 1002;
	size_t	 hidden;
	json_t	*view, *w;

	view = view_for(&uid, NULL, &hidden);
	/* emberd's own: shown to every viewer. */
	ck_assert_str_eq(json_string_value(json_object_get(view, "server")),
	    "emberd");
	ck_assert_int_eq(json_array_size(json_object_get(view, "pools")), 1);
	ck_assert_int_eq(json_integer_value(json_object_get(json_object_get(
	    view, "counters"), "tasks")), 9);
	/* 1002's own, and nothing of 1001's. */
	ck_assert_int_eq(json_array_size(json_object_get(view, "sessions")),
	    1);
	ck_assert_str_eq(view_string(view, "sessions", 0, "id"), "s-b");
	ck_assert_int_eq(json_array_size(json_object_get(view, "operations")),
	    1);
	ck_assert_str_eq(view_string(view, "operations", 0, "id"), "op-b");
	ck_assert_uint_eq(hidden, 1);
	ck_assert_int_eq(json_array_size(json_object_get(view, "broadcasts")),
	    0);
	ck_assert_int_eq(json_array_size(json_object_get(view,
	    "checkpoints")), 0);
	ck_assert_int_eq(json_array_size(json_object_get(view, "failures")),
	    0);
	ck_assert_int_eq(json_array_size(json_object_get(json_object_get(
	    view, "limits"), "users")), 1);
	/* The worker is shown, but not whose operation it runs. */
	w = json_array_get(json_object_get(view, "workers"), 0);
	ck_assert_int_eq(json_integer_value(json_object_get(w, "pid")), 10);
	ck_assert_ptr_null(json_object_get(json_object_get(w, "task"),
	    "operation"));
	ck_assert_int_eq(json_integer_value(json_object_get(json_object_get(
	    w, "task"), "partition")), 3);
	json_decref(view);

	uid = 1001;
	view = view_for(&uid, NULL, &hidden);
	ck_assert_str_eq(view_string(view, "operations", 0, "id"), "op-a");
	ck_assert_str_eq(json_string_value(json_object_get(json_object_get(
	    json_array_get(json_object_get(view, "workers"), 0), "task"),
	    "operation")), "op-a");
	ck_assert_int_eq(json_array_size(json_object_get(view, "broadcasts")),
	    1);
	ck_assert_int_eq(json_array_size(json_object_get(view, "failures")),
	    1);
	json_decref(view);
}
END_TEST

START_TEST(test_view_new_field_hidden)
{
	uid_t	 uid = 1002;
	json_t	*view, *w, *o;

	/* A field added to the status, carrying 1001's uid and more: no rule
	 * names it, so no viewer is shown it, 1001 included. */
	view = view_for(&uid, "{\"last_client_uid\":1001,"
	    "\"task\":{\"operation\":\"op-a\",\"client_uid\":1001},"
	    "\"held_by\":{\"uid\":1001}}", NULL);
	w = json_array_get(json_object_get(view, "workers"), 0);
	ck_assert_ptr_null(json_object_get(w, "last_client_uid"));
	ck_assert_ptr_null(json_object_get(w, "held_by"));
	ck_assert_ptr_null(json_object_get(json_object_get(w, "task"),
	    "client_uid"));
	json_decref(view);
	uid = 1001;
	view = view_for(&uid, "{\"last_client_uid\":1001}", NULL);
	w = json_array_get(json_object_get(view, "workers"), 0);
	ck_assert_ptr_null(json_object_get(w, "last_client_uid"));
	json_decref(view);

	/* A value where a rule expects one is not let through as a tree. */
	uid = 1002;
	view = view_for(&uid, "{\"state\":{\"uid\":1001}}", NULL);
	w = json_array_get(json_object_get(view, "workers"), 0);
	ck_assert_ptr_null(json_object_get(w, "state"));
	json_decref(view);

	/* A record whose owner cannot be read is nobody's to see. */
	{
		struct status_viewer	 viewer = { view_allows, &uid };
		json_t			*full;

		full = json_loads("{\"sessions\":[{\"id\":\"s\"},"
		    "{\"id\":\"t\",\"uid\":\"1002\"}]}", 0, NULL);
		o = status_view(full, &status_view_web, &viewer, NULL);
		ck_assert_int_eq(json_array_size(json_object_get(o,
		    "sessions")), 0);
		json_decref(o);
		json_decref(full);
	}
}
END_TEST

Suite *
status_view_suite(void)
{
	Suite	*s = suite_create("status_view");
	TCase	*tc = tcase_create("rules");

	tcase_add_test(tc, test_view_own_records);
	tcase_add_test(tc, test_view_new_field_hidden);
	suite_add_tcase(s, tc);
	return (s);
}
