/*
 * Tests for daemon/retry.c: positions, the retry buffer's batches (kept by
 * reference, replayed from any record), release, trim, rewind, and the
 * checks that tell a good position from a bad one.
 */
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <event2/buffer.h>

#include "frame.h"
#include "protocol.h"
#include "retry.h"
#include "suites.h"

/* Append records "p.i" for i in [first, first + n) as frames to buf; every
 * seventh is a null record. */
static size_t
rt_frames(struct evbuffer *buf, int64_t p, int64_t first, int64_t n)
{
	char	rec[64];
	size_t	before = evbuffer_get_length(buf);
	int64_t	i;

	for (i = first; i < first + n; i++) {
		if (i % 7 == 6) {
			evbuffer_add_int32(buf, EMBER_NULL);
			continue;
		}
		snprintf(rec, sizeof rec, "%lld.%lld", (long long)p,
		    (long long)i);
		evbuffer_add_frame(buf, rec, strlen(rec));
	}
	return (evbuffer_get_length(buf) - before);
}

/* Send a batch of n records of partition p, from record first. */
static void
rt_send(struct retry *r, struct evbuffer *out, int64_t p, int64_t first,
    int64_t n)
{
	struct evbuffer	*from = evbuffer_new();
	size_t		 bytes = rt_frames(from, p, first, n);

	retry_append(r, from, bytes, (int32_t)n, out);
	ck_assert_uint_eq(evbuffer_get_length(from), 0);
	evbuffer_free(from);
}

/* Assert that buf holds exactly the frames of records [first, first+n) of
 * partition p, and drain it. */
static void
rt_expect(struct evbuffer *buf, int64_t p, int64_t first, int64_t n)
{
	struct evbuffer	*want = evbuffer_new();
	size_t		 len = rt_frames(want, p, first, n);

	ck_assert_uint_eq(evbuffer_get_length(buf), len);
	ck_assert_int_eq(memcmp(evbuffer_pullup(buf, -1),
	    evbuffer_pullup(want, -1), len), 0);
	evbuffer_drain(buf, len);
	evbuffer_free(want);
}

static struct position
rt_pos(int64_t p, int64_t k)
{
	struct position	pos = { p, k };

	return (pos);
}

START_TEST(test_position_order)
{
	struct position	a = rt_pos(1, 5), b = rt_pos(1, 6), c = rt_pos(2, 0);

	ck_assert_int_lt(position_cmp(&a, &b), 0);
	ck_assert_int_lt(position_cmp(&b, &c), 0);
	ck_assert_int_gt(position_cmp(&c, &a), 0);
	ck_assert_int_eq(position_cmp(&a, &a), 0);
}
END_TEST

START_TEST(test_append_is_a_reference)
{
	struct retry		*r = retry_create(1);
	struct evbuffer		*from = evbuffer_new(), *out = evbuffer_new();
	struct evbuffer_iovec	 before, after;
	size_t			 bytes;

	/* One big chain: it must reach out as the same memory. */
	bytes = rt_frames(from, 0, 0, 20000);
	evbuffer_pullup(from, -1);
	ck_assert_int_eq(evbuffer_peek(from, -1, NULL, &before, 1), 1);
	retry_append(r, from, bytes, 20000, out);
	ck_assert_int_eq(evbuffer_peek(out, -1, NULL, &after, 1), 1);
	ck_assert_ptr_eq(before.iov_base, after.iov_base);
	ck_assert_uint_eq(retry_bytes(r), bytes);
	/* The client's output drains; the buffer keeps its bytes. */
	rt_expect(out, 0, 0, 20000);
	ck_assert_uint_eq(retry_bytes(r), bytes);
	ck_assert_int_eq(retry_sent(r)->offset, 20000);
	retry_free(r);
	evbuffer_free(from);
	evbuffer_free(out);
}
END_TEST

START_TEST(test_replay_mid_batch)
{
	struct retry	*r = retry_create(3);
	struct evbuffer	*out = evbuffer_new();
	struct position	 pos;

	rt_send(r, out, 0, 0, 10);
	rt_send(r, out, 0, 10, 10);
	retry_end_partition(r);
	rt_send(r, out, 1, 0, 5);
	evbuffer_drain(out, evbuffer_get_length(out));

	/* Mid-batch: from record 3 of partition 0, to its end. */
	pos = rt_pos(0, 3);
	ck_assert_int_eq(retry_replay(r, &pos, out), 1);
	ck_assert_int_eq(pos.partition, 0);
	ck_assert_int_eq(pos.offset, 20);
	rt_expect(out, 0, 3, 17);
	/* At a batch boundary. */
	pos = rt_pos(0, 10);
	ck_assert_int_eq(retry_replay(r, &pos, out), 1);
	rt_expect(out, 0, 10, 10);
	/* At the end of an ended partition: nothing, and it ended. */
	pos = rt_pos(0, 20);
	ck_assert_int_eq(retry_replay(r, &pos, out), 1);
	ck_assert_uint_eq(evbuffer_get_length(out), 0);
	/* The open partition: up to the sent position. */
	pos = rt_pos(1, 2);
	ck_assert_int_eq(retry_replay(r, &pos, out), 0);
	ck_assert_int_eq(pos.offset, 5);
	rt_expect(out, 1, 2, 3);
	pos = rt_pos(1, 5);
	ck_assert_int_eq(retry_replay(r, &pos, out), 0);
	ck_assert_uint_eq(evbuffer_get_length(out), 0);
	retry_free(r);
	evbuffer_free(out);
}
END_TEST

START_TEST(test_check_positions)
{
	struct retry	*r = retry_create(4);
	struct evbuffer	*out = evbuffer_new();
	struct position	 pos;
	char		 why[256];

	rt_send(r, out, 0, 0, 8);
	retry_end_partition(r);
	rt_send(r, out, 1, 0, 4);

#define CHECK(p, k, want) do {						\
	pos = rt_pos(p, k);						\
	ck_assert_int_eq(retry_check(r, &pos, why, sizeof why), want);	\
} while (0)
	CHECK(-1, 0, POSITION_NEGATIVE);
	CHECK(0, -3, POSITION_NEGATIVE);
	CHECK(5, 0, POSITION_PAST_PARTITIONS);
	CHECK(4, 1, POSITION_PAST_PARTITIONS);
	CHECK(0, 9, POSITION_PAST_END);
	ck_assert_ptr_nonnull(strstr(why, "has 8 records"));
	CHECK(1, 5, POSITION_NOT_SENT);
	CHECK(2, 0, POSITION_NOT_SENT);
	CHECK(4, 0, POSITION_NOT_SENT);
	CHECK(0, 0, POSITION_BUFFERED);
	CHECK(0, 8, POSITION_BUFFERED);
	CHECK(1, 4, POSITION_BUFFERED);
	ck_assert_int_eq(retry_partition_records(r, 0), 8);
	ck_assert_int_eq(retry_partition_records(r, 1), -1);

	/* Released up to (0, 5): before it is gone, at it is not. */
	pos = rt_pos(0, 5);
	ck_assert_int_eq(retry_release(r, &pos), 0);
	CHECK(0, 4, POSITION_RELEASED);
	CHECK(0, 5, POSITION_BUFFERED);
	/* Released to the end of partition 0: (0, 8) and (1, 0) are the
	 * same point, and both still replay. */
	pos = rt_pos(0, 8);
	ck_assert_int_eq(retry_release(r, &pos), 0);
	CHECK(0, 7, POSITION_RELEASED);
	CHECK(0, 8, POSITION_BUFFERED);
	CHECK(1, 0, POSITION_BUFFERED);
	pos = rt_pos(1, 1);
	ck_assert_int_eq(retry_release(r, &pos), 0);
	CHECK(0, 8, POSITION_RELEASED);
	CHECK(1, 0, POSITION_RELEASED);
	/* A release past what was sent is refused. */
	pos = rt_pos(1, 5);
	ck_assert_int_eq(retry_release(r, &pos), -1);
#undef CHECK
	retry_free(r);
	evbuffer_free(out);
}
END_TEST

START_TEST(test_release_frees_bytes)
{
	struct retry	*r = retry_create(2);
	struct evbuffer	*out = evbuffer_new(), *tmp = evbuffer_new();
	struct position	 pos;
	size_t		 all, head;

	rt_send(r, out, 0, 0, 10);
	rt_send(r, out, 0, 10, 10);
	all = retry_bytes(r);
	head = rt_frames(tmp, 0, 0, 13);

	/* Mid-batch: exactly the bytes of the first 13 records go. */
	pos = rt_pos(0, 13);
	ck_assert_int_eq(retry_release(r, &pos), 0);
	ck_assert_uint_eq(retry_bytes(r), all - head);
	ck_assert_int_eq(retry_start(r)->offset, 13);
	evbuffer_drain(out, evbuffer_get_length(out));
	pos = rt_pos(0, 13);
	ck_assert_int_eq(retry_replay(r, &pos, out), 0);
	rt_expect(out, 0, 13, 7);
	/* An older release changes nothing. */
	pos = rt_pos(0, 2);
	ck_assert_int_eq(retry_release(r, &pos), 0);
	ck_assert_int_eq(retry_start(r)->offset, 13);
	/* Everything. */
	pos = rt_pos(0, 20);
	ck_assert_int_eq(retry_release(r, &pos), 0);
	ck_assert_uint_eq(retry_bytes(r), 0);
	retry_free(r);
	evbuffer_free(out);
	evbuffer_free(tmp);
}
END_TEST

START_TEST(test_trim_keeps_the_newest)
{
	struct retry	*r = retry_create(3);
	struct evbuffer	*out = evbuffer_new();
	struct position	 pos;
	char		 why[256];
	size_t		 one, all;

	rt_send(r, out, 0, 0, 100);
	one = retry_bytes(r);
	retry_end_partition(r);
	rt_send(r, out, 1, 0, 100);
	rt_send(r, out, 1, 100, 100);
	all = retry_bytes(r);
	ck_assert_uint_eq(all, evbuffer_get_length(out));
	/* One byte too many: the oldest batch goes, whole. */
	retry_trim(r, all - 1);
	ck_assert_uint_eq(retry_bytes(r), all - one);
	ck_assert_int_eq(retry_start(r)->partition, 0);
	ck_assert_int_eq(retry_start(r)->offset, 100);
	pos = rt_pos(0, 99);
	ck_assert_int_eq(retry_check(r, &pos, why, sizeof why),
	    POSITION_RELEASED);
	pos = rt_pos(0, 100);
	ck_assert_int_eq(retry_check(r, &pos, why, sizeof why),
	    POSITION_BUFFERED);
	/* A limit of nothing empties it; the sent position stays. */
	retry_trim(r, 0);
	ck_assert_uint_eq(retry_bytes(r), 0);
	ck_assert_int_eq(retry_start(r)->partition, 1);
	ck_assert_int_eq(retry_start(r)->offset, 200);
	ck_assert_int_eq(retry_sent(r)->offset, 200);
	pos = rt_pos(1, 200);
	ck_assert_int_eq(retry_check(r, &pos, why, sizeof why),
	    POSITION_BUFFERED);
	retry_free(r);
	evbuffer_free(out);
}
END_TEST

START_TEST(test_rewind_restarts)
{
	struct retry	*r = retry_create(3);
	struct evbuffer	*out = evbuffer_new();
	struct position	 pos;
	char		 why[256];

	rt_send(r, out, 0, 0, 10);
	retry_end_partition(r);
	rt_send(r, out, 1, 0, 10);
	retry_trim(r, 0);
	pos = rt_pos(0, 4);
	ck_assert_int_eq(retry_check(r, &pos, why, sizeof why),
	    POSITION_RELEASED);
	/* Recomputed from (0, 4): sent again from there. */
	retry_rewind(r, &pos);
	ck_assert_int_eq(position_cmp(retry_sent(r), &pos), 0);
	ck_assert_int_eq(position_cmp(retry_start(r), &pos), 0);
	ck_assert_uint_eq(retry_bytes(r), 0);
	pos = rt_pos(1, 0);
	ck_assert_int_eq(retry_check(r, &pos, why, sizeof why),
	    POSITION_NOT_SENT);
	rt_send(r, out, 0, 4, 6);
	retry_end_partition(r);
	evbuffer_drain(out, evbuffer_get_length(out));
	ck_assert_int_eq(retry_partition_records(r, 0), 10);
	pos = rt_pos(0, 4);
	ck_assert_int_eq(retry_replay(r, &pos, out), 1);
	rt_expect(out, 0, 4, 6);
	retry_free(r);
	evbuffer_free(out);
}
END_TEST

START_TEST(test_empty_partitions)
{
	struct retry	*r = retry_create(3);
	struct evbuffer	*out = evbuffer_new();
	struct position	 pos;
	char		 why[256];

	retry_end_partition(r);
	retry_end_partition(r);
	rt_send(r, out, 2, 0, 3);
	pos = rt_pos(0, 0);
	ck_assert_int_eq(retry_check(r, &pos, why, sizeof why),
	    POSITION_BUFFERED);
	ck_assert_int_eq(retry_replay(r, &pos, out), 1);
	ck_assert_int_eq(pos.offset, 0);
	pos = rt_pos(1, 1);
	ck_assert_int_eq(retry_check(r, &pos, why, sizeof why),
	    POSITION_PAST_END);
	retry_end_partition(r);
	pos = rt_pos(3, 0);
	ck_assert_int_eq(retry_check(r, &pos, why, sizeof why),
	    POSITION_BUFFERED);
	retry_free(r);
	evbuffer_free(out);
}
END_TEST

Suite *
retry_suite(void)
{
	Suite	*s = suite_create("retry");
	TCase	*tc;

	tc = tcase_create("positions");
	tcase_add_test(tc, test_position_order);
	tcase_add_test(tc, test_check_positions);
	tcase_add_test(tc, test_empty_partitions);
	suite_add_tcase(s, tc);

	tc = tcase_create("buffer");
	tcase_add_test(tc, test_append_is_a_reference);
	tcase_add_test(tc, test_replay_mid_batch);
	tcase_add_test(tc, test_release_frees_bytes);
	tcase_add_test(tc, test_trim_keeps_the_newest);
	tcase_add_test(tc, test_rewind_restarts);
	suite_add_tcase(s, tc);
	return (s);
}
