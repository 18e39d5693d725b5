/*
 * Run the suites of emberd's modules, linked from libdaemon.a.  This file
 * stands in for daemon/emberd.c: it holds the process-wide state the
 * modules under test use, and the tests set it up.  CK_VERBOSITY and
 * CK_FORK work as in check_common.
 */
#include <stdlib.h>

#include "emberd.h"
#include "suites.h"
#include "unit.h"

struct event_base	*ember_base;	/* each channel test makes its own */
struct ember_counters	 ember_counters;
struct conf		 ember_conf;	/* zeros, but what a test sets */

/* Run every suite. */
int
main(void)
{
	SRunner	*sr;
	int	 failed;

	unit_init();
	sr = srunner_create(result_suite());
	srunner_add_suite(sr, channel_suite());
	srunner_add_suite(sr, task_suite());
	srunner_add_suite(sr, retry_suite());
	srunner_add_suite(sr, request_suite());
	srunner_add_suite(sr, parser_suite());
	srunner_add_suite(sr, joblog_suite());
	srunner_add_suite(sr, cgroup_suite());
	srunner_add_suite(sr, status_view_suite());

	srunner_run_all(sr, CK_ENV);
	failed = srunner_ntests_failed(sr);
	srunner_free(sr);
	return (failed == 0 ? EXIT_SUCCESS : EXIT_FAILURE);
}
