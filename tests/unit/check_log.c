/* Tests for common/log.c: describing wait statuses, escaping text lines. */
#include <sys/wait.h>

#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <unistd.h>

#include "log.h"
#include "suites.h"
#include "unit.h"

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

/* What one log_info(fmt, s) writes, as a relayed line (to free). */
static char *
log_line(const char *s)
{
	unit_stderr_begin();
	log_open("t", LOG_LEVEL_DEBUG, LOG_FORMAT_RELAYED, 0);
	log_info("%s", s);
	return (unit_stderr_end());
}

START_TEST(test_text_escaped)
{
	char	*got, want[256];

	/* A newline, ESC, a C1 control (U+0085), a byte that is no UTF-8,
	 * a tab and DEL are escaped; UTF-8 and backslashes stay. */
	got = log_line("a\nb\x1b[2J \xc2\x85 \xff\t\x7f \xc3\xa9 \\033");
	snprintf(want, sizeof want, "t[%ld] info: a\\nb\\033[2J "
	    "\\302\\205 \\377\\t\\177 \xc3\xa9 \\033\n", (long)getpid());
	ck_assert_str_eq(got, want);
	free(got);
	/* A character cut at the end of the message is bytes, escaped. */
	got = log_line("x\xe2\x82");
	snprintf(want, sizeof want, "t[%ld] info: x\\342\\202\n",
	    (long)getpid());
	ck_assert_str_eq(got, want);
	free(got);
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
	tc = tcase_create("escape");
	tcase_add_test(tc, test_text_escaped);
	suite_add_tcase(s, tc);
	return (s);
}
