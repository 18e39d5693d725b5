/* Tests for daemon/joblog.c: lines split, cut and bounded. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include <event2/event.h>

#include "emberd.h"
#include "joblog.h"
#include "log.h"
#include "suites.h"
#include "unit.h"

/* What emberd logs of bytes that uid 7's processes wrote, then closed;
 * the clock stands still (check_task.c's), so the bucket never fills. */
static char *
joblog_logged(const char *bytes, size_t len)
{
	struct joblog	*jl;
	int		 wfd;

	ck_assert_ptr_nonnull(ember_base = event_base_new());
	unit_stderr_begin();
	log_open("t", LOG_LEVEL_DEBUG, LOG_FORMAT_RELAYED, 0);
	ck_assert_ptr_nonnull(jl = joblog_open(7, &wfd));
	ck_assert_int_eq(write(wfd, bytes, len), (ssize_t)len);
	close(wfd);
	ck_assert_int_eq(joblog_read(jl), -1);	/* all read, at its end */
	joblog_close(jl);
	event_base_free(ember_base);
	ember_base = NULL;
	return (unit_stderr_end());
}

/* The line logged for what uid 7 said. */
static char *
joblog_line(const char *level, const char *said)
{
	char	*s;

	ck_assert_int_ne(asprintf(&s, "t[%ld] %s: uid 7: %s\n",
	    (long)getpid(), level, said), -1);
	return (s);
}

START_TEST(test_lines)
{
	char	*got, *want, *a, *b, *c;

	/* The last line, without its newline, is logged at the end; a NUL
	 * shows as \000 and an ESC is escaped by the log. */
	got = joblog_logged("one\nt\0o\n\x1b[2Jthree", 17);
	a = joblog_line("info", "one");
	b = joblog_line("info", "t\\000o");
	c = joblog_line("info", "\\033[2Jthree");
	ck_assert_int_ne(asprintf(&want, "%s%s%s", a, b, c), -1);
	ck_assert_str_eq(got, want);
	free(got); free(want); free(a); free(b); free(c);
}
END_TEST

START_TEST(test_cut)
{
	char	 in[JOBLOG_LINE_MAX + 16], cut[JOBLOG_LINE_MAX + 8];
	char	*got, *want, *a, *b;

	memset(in, 'a', JOBLOG_LINE_MAX + 10);
	memcpy(in + JOBLOG_LINE_MAX + 10, "\nnext\n", 6);
	got = joblog_logged(in, sizeof in);
	memset(cut, 'a', JOBLOG_LINE_MAX);
	strcpy(cut + JOBLOG_LINE_MAX, " [cut]");
	a = joblog_line("info", cut);
	b = joblog_line("info", "next");
	ck_assert_int_ne(asprintf(&want, "%s%s", a, b), -1);
	ck_assert_str_eq(got, want);
	free(got); free(want); free(a); free(b);
}
END_TEST

START_TEST(test_rate)
{
	char	 in[(JOBLOG_BURST + 100) * 2], told[128];
	char	*got, *one, *last, *p;
	int	 i, n = 0;

	for (i = 0; i < JOBLOG_BURST + 100; i++)
		memcpy(in + 2 * i, "x\n", 2);
	got = joblog_logged(in, sizeof in);
	one = joblog_line("info", "x");
	for (p = got; (p = strstr(p, one)) != NULL; p += strlen(one))
		n++;
	ck_assert_int_eq(n, JOBLOG_BURST);
	snprintf(told, sizeof told, "100 lines of its processes' output "
	    "dropped (over %d a second)", JOBLOG_RATE);
	last = joblog_line("warn", told);
	ck_assert_str_eq(got + strlen(got) - strlen(last), last);
	free(got); free(one); free(last);
}
END_TEST

Suite *
joblog_suite(void)
{
	Suite	*s = suite_create("joblog");
	TCase	*tc;

	tc = tcase_create("lines");
	tcase_add_test(tc, test_lines);
	tcase_add_test(tc, test_cut);
	tcase_add_test(tc, test_rate);
	suite_add_tcase(s, tc);
	return (s);
}
