/* Tests for common/log.c: describing wait statuses. */
#include <sys/wait.h>

#include <signal.h>
#include <stdio.h>

#include "log.h"
#include "suites.h"

START_TEST(test_describe_wait)
{
	char	buf[128], want[64];

	log_describe_wait(SIGKILL, buf, sizeof buf);
	ck_assert_str_eq(buf, "killed by signal 9 (SIGKILL)");
	log_describe_wait(3 << 8, buf, sizeof buf);
	ck_assert_str_eq(buf, "exited with status 3");
	/* A real-time signal has no abbreviation: no "(SIG(null))". */
	log_describe_wait(SIGRTMIN + 1, buf, sizeof buf);
	snprintf(want, sizeof want, "killed by signal %d", SIGRTMIN + 1);
	ck_assert_str_eq(buf, want);
	/* Stopped: neither exited nor signalled. */
	log_describe_wait(0x137f, buf, sizeof buf);
	ck_assert_str_eq(buf, "ended with wait status 4991");
}
END_TEST

Suite *
log_suite(void)
{
	Suite	*s = suite_create("log");
	TCase	*tc;

	tc = tcase_create("wait");
	tcase_add_test(tc, test_describe_wait);
	suite_add_tcase(s, tc);
	return (s);
}
