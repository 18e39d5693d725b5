/*
 * Tests for common/ring.c: a queue, first in first out, that grows.
 */
#include <stdint.h>
#include <stdlib.h>

#include "ring.h"
#include "suites.h"

struct pair {
	int		a;
	uint64_t	b;
};

START_TEST(test_ring_empty)
{
	struct ring	r;

	ring_init(&r, sizeof(int));
	ck_assert_ptr_null(ring_first(&r));
	*(int *)ring_push(&r) = 7;
	ck_assert_int_eq(*(int *)ring_first(&r), 7);
	ring_pop(&r);
	ck_assert_ptr_null(ring_first(&r));
	ck_assert_uint_eq(r.n, 0);
	ring_free(&r);
	ck_assert_ptr_null(ring_first(&r));
}
END_TEST

/* Pushed and popped out of step, so that the ring grows while its items
 * wrap round its end: every item comes out once, in order. */
START_TEST(test_ring_order_across_growth)
{
	struct ring	 r;
	struct pair	*p;
	int		 in = 0, out = 0, round;

	ring_init(&r, sizeof *p);
	for (round = 0; round < 200; round++) {
		int	push = 3 + round % 5, pop = 2 + round % 4;

		while (push-- > 0) {
			p = ring_push(&r);
			p->a = in;
			p->b = (uint64_t)in++ * 1000003;
		}
		while (pop-- > 0 && (p = ring_first(&r)) != NULL) {
			ck_assert_int_eq(p->a, out);
			ck_assert_uint_eq(p->b, (uint64_t)out++ * 1000003);
			ring_pop(&r);
		}
	}
	ck_assert_uint_eq(r.n, (size_t)(in - out));
	ck_assert_uint_ge(r.size, r.n);
	while ((p = ring_first(&r)) != NULL) {
		ck_assert_int_eq(p->a, out++);
		ring_pop(&r);
	}
	ck_assert_int_eq(in, out);
	ring_free(&r);
}
END_TEST

Suite *
ring_suite(void)
{
	Suite	*s = suite_create("ring");
	TCase	*tc = tcase_create("ring");

	tcase_add_test(tc, test_ring_empty);
	tcase_add_test(tc, test_ring_order_across_growth);
	suite_add_tcase(s, tc);
	return (s);
}
