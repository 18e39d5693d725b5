/*
 * Tests for daemon/parser.c, the threads that parse big control frames
 * off the loop: results back on the loop to their owner, errors as
 * messages, a uid's share, the uids served in turn, jobs cancelled when
 * queued or running (their owner never called, their uid's room given
 * back), trees dropped, and a stop with work under way.
 */
#include <stdlib.h>
#include <string.h>

#include <event2/buffer.h>
#include <event2/event.h>

#include "emberd.h"
#include "parser.h"
#include "suites.h"

#define JOBS	16

struct done {
	int	 order;		/* delivered so many-th, from 1 */
	json_t	*req;
	char	*err;
};

static struct done	done[JOBS];
static int		ndone;
static int		rooms[4];	/* room_cb calls, by uid */

static void
room_cb(uid_t uid)
{
	ck_assert_uint_lt(uid, 4);
	rooms[uid]++;
}

static void
done_cb(json_t *req, char *err, void *arg)
{
	struct done	*d = arg;

	ck_assert_int_eq(d->order, 0);
	d->order = ++ndone;
	d->req = req;
	d->err = err;
}

static void
parser_setup(void)
{
	ck_assert_ptr_nonnull(ember_base = event_base_new());
	memset(done, 0, sizeof done);
	memset(rooms, 0, sizeof rooms);
	ndone = 0;
	parser_init(room_cb);
}

static void
parser_teardown(void)
{
	int	i;

	parser_shutdown();
	for (i = 0; i < JOBS; i++) {
		json_decref(done[i].req);
		free(done[i].err);
	}
	event_base_free(ember_base);
	ember_base = NULL;
}

/* A frame of text. */
static struct evbuffer *
frame_of(const char *text)
{
	struct evbuffer	*b = evbuffer_new();

	evbuffer_add(b, text, strlen(text));
	return (b);
}

/* A frame of a status request with n records of 16 bytes. */
static struct evbuffer *
frame_big(size_t n)
{
	struct evbuffer	*b = evbuffer_new();
	size_t		 i;

	evbuffer_add_printf(b, "{\"op\":\"status\",\"pad\":[");
	for (i = 0; i < n; i++)
		evbuffer_add_printf(b, "%s\"abcdefghijklmnop\"", i ? "," : "");
	evbuffer_add_printf(b, "]}");
	return (b);
}

/* Run the loop until n results came, or 10 s passed. */
static void
loop_until(int n)
{
	int	i;

	for (i = 0; i < 1000 && ndone < n; i++) {
		struct timeval	tv = { 0, 10000 };

		event_base_loopexit(ember_base, &tv);
		event_base_dispatch(ember_base);
	}
	ck_assert_int_ge(ndone, n);
}

/* A frame comes back parsed; a bad one, or one of too many values, as
 * its message. */
START_TEST(test_parser_results)
{
	parser_parse(1, frame_of("{\"op\":\"status\"}"), 0, done_cb, &done[0]);
	parser_parse(1, frame_of("{\"op\":"), 0, done_cb, &done[1]);
	parser_parse(2, frame_of("{\"op\":\"x\",\"a\":[1,2,3]}"), 4, done_cb,
	    &done[2]);
	loop_until(3);
	ck_assert_str_eq(json_string_value(json_object_get(done[0].req, "op")),
	    "status");
	ck_assert_ptr_null(done[0].err);
	ck_assert_ptr_null(done[1].req);
	ck_assert_msg(strncmp(done[1].err, "not JSON: ", 10) == 0, "%s",
	    done[1].err);
	ck_assert_ptr_null(done[2].req);
	ck_assert_str_eq(done[2].err, "the request holds more than "
	    "daemon.max_frame_values (4) values and keys");
	ck_assert_int_eq(rooms[1], 2);
	ck_assert_int_eq(rooms[2], 1);
	/* A tree given back is dropped by a thread. */
	parser_drop(done[0].req);
	done[0].req = NULL;
	while (parser_backlog() > 0)
		;
}
END_TEST

/* A uid's share is PARSER_PER_UID frames until they are delivered;
 * another uid's is its own. */
START_TEST(test_parser_full)
{
	int	i;

	for (i = 0; i < PARSER_PER_UID; i++) {
		ck_assert(!parser_full(1));
		parser_parse(1, frame_big(1000), 0, done_cb, &done[i]);
	}
	ck_assert(parser_full(1));
	ck_assert(!parser_full(2));
	loop_until(PARSER_PER_UID);
	ck_assert(!parser_full(1));
	ck_assert_int_eq(rooms[1], PARSER_PER_UID);
}
END_TEST

/* The uids are served in turn: uid 2's one frame, queued behind eight of
 * uid 1's, is taken before most of them. */
START_TEST(test_parser_turns)
{
	int	i;

	/* Two slow frames hold the threads while the rest queue. */
	parser_parse(1, frame_big(200000), 0, done_cb, &done[0]);
	parser_parse(1, frame_big(200000), 0, done_cb, &done[1]);
	for (i = 2; i < 10; i++)
		parser_parse(1, frame_of("{\"op\":\"a\"}"), 0, done_cb,
		    &done[i]);
	parser_parse(2, frame_of("{\"op\":\"b\"}"), 0, done_cb, &done[10]);
	loop_until(11);
	/* Taken third at the latest (after one of uid 1's); first in first
	 * out would have taken it last. */
	for (i = 2; i < 10; i++) {
		if (done[i].order < done[10].order)
			ck_assert_msg(i < 4, "uid 1's frame %d before uid 2's",
			    i);
	}
}
END_TEST

/* A uid's frames are parsed one at a time: behind uid 1's slow frame,
 * its second waits, and uid 2's frame, queued last, takes the other
 * thread and is delivered first. */
START_TEST(test_parser_one_at_a_time)
{
	parser_parse(1, frame_big(200000), 0, done_cb, &done[0]);
	parser_parse(1, frame_big(200000), 0, done_cb, &done[1]);
	parser_parse(2, frame_big(100), 0, done_cb, &done[2]);
	loop_until(3);
	ck_assert_int_eq(done[2].order, 1);
}
END_TEST

/* Cancelled, queued or running: the owner is never called, the tree is
 * dropped, and the uid's room comes back. */
START_TEST(test_parser_cancel)
{
	struct parser_job	*jobs[6];
	int			 i;

	for (i = 0; i < 6; i++)
		jobs[i] = parser_parse(3, frame_big(50000), 0, done_cb,
		    &done[i]);
	for (i = 0; i < 6; i++)
		parser_cancel(jobs[i]);
	for (i = 0; i < 1000 && rooms[3] < 6; i++) {
		struct timeval	tv = { 0, 10000 };

		event_base_loopexit(ember_base, &tv);
		event_base_dispatch(ember_base);
	}
	ck_assert_int_eq(rooms[3], 6);
	ck_assert_int_eq(ndone, 0);
	ck_assert(!parser_full(3));
}
END_TEST

/* Stopped with frames queued and under way, their owners gone. */
START_TEST(test_parser_stop_busy)
{
	int	i;

	for (i = 0; i < 4; i++)
		parser_cancel(parser_parse(1, frame_big(100000), 0, done_cb,
		    &done[i]));
	/* The teardown stops it now; nothing may leak (ASan). */
}
END_TEST

Suite *
parser_suite(void)
{
	Suite	*s = suite_create("parser");
	TCase	*tc = tcase_create("parse");

	tcase_add_checked_fixture(tc, parser_setup, parser_teardown);
	tcase_set_timeout(tc, 30);
	tcase_add_test(tc, test_parser_results);
	tcase_add_test(tc, test_parser_full);
	tcase_add_test(tc, test_parser_turns);
	tcase_add_test(tc, test_parser_one_at_a_time);
	tcase_add_test(tc, test_parser_cancel);
	tcase_add_test(tc, test_parser_stop_busy);
	suite_add_tcase(s, tc);
	return (s);
}
