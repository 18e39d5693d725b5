/*
 * Run every unit suite.  CK_VERBOSITY (silent, minimal, normal, verbose)
 * sets how much is printed; CK_FORK=no runs tests in this process, for
 * valgrind and gdb.
 */
#include <stdlib.h>

#include "suites.h"

/*
 * Under AddressSanitizer the tests run up to 25 times slower (the
 * count_by_value ones, which allocate a node per record): every TCase
 * gets this many times its timeout, unless CK_TIMEOUT_MULTIPLIER says.
 */
#define UNIT_ASAN_TIMEOUT_MULTIPLIER	"4"

const char	*__ubsan_default_options(void);

/* Make UBSan's reports fail the test that made them, not just print. */
const char *
__ubsan_default_options(void)
{
	return ("halt_on_error=1:print_stacktrace=1");
}

/* Scale Check's timeouts for a sanitized build; before any TCase exists. */
static void
unit_scale_timeouts(void)
{
#ifdef __SANITIZE_ADDRESS__
	setenv("CK_TIMEOUT_MULTIPLIER", UNIT_ASAN_TIMEOUT_MULTIPLIER, 0);
#endif
}

/* Run every suite. */
int
main(void)
{
	SRunner	*sr;
	int	 failed;

	unit_scale_timeouts();
	sr = srunner_create(conf_suite());
	srunner_add_suite(sr, frame_suite());
	srunner_add_suite(sr, jread_suite());
	srunner_add_suite(sr, log_suite());
	srunner_add_suite(sr, plan_suite());
	srunner_add_suite(sr, plugin_suite());
	srunner_add_suite(sr, held_suite());
	srunner_add_suite(sr, ops_suite());
	srunner_add_suite(sr, split_suite());
	srunner_add_suite(sr, wmsg_suite());

	srunner_run_all(sr, CK_ENV);
	failed = srunner_ntests_failed(sr);
	srunner_free(sr);
	return (failed == 0 ? EXIT_SUCCESS : EXIT_FAILURE);
}
