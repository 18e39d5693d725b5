/*
 * Run every unit suite.  CK_VERBOSITY (silent, minimal, normal, verbose)
 * sets how much is printed; CK_FORK=no runs tests in this process, for
 * valgrind and gdb.
 */
#include <stdlib.h>

#include "suites.h"
#include "unit.h"

/* Run every suite. */
int
main(void)
{
	SRunner	*sr;
	int	 failed;

	unit_init();
	sr = srunner_create(conf_suite());
	srunner_add_suite(sr, frame_suite());
	srunner_add_suite(sr, jread_suite());
	srunner_add_suite(sr, log_suite());
	srunner_add_suite(sr, plan_suite());
	srunner_add_suite(sr, plugin_suite());
	srunner_add_suite(sr, bindex_suite());
	srunner_add_suite(sr, held_suite());
	srunner_add_suite(sr, helper_suite());
	srunner_add_suite(sr, ckpt_suite());
	srunner_add_suite(sr, ops_suite());
	srunner_add_suite(sr, keyed_suite());
	srunner_add_suite(sr, wshuffle_suite());
	srunner_add_suite(sr, savecommit_suite());
	srunner_add_suite(sr, shuffle_suite());
	srunner_add_suite(sr, split_suite());
	srunner_add_suite(sr, wmsg_suite());
	srunner_add_suite(sr, jwrite_suite());
	srunner_add_suite(sr, ring_suite());

	srunner_run_all(sr, CK_ENV);
	failed = srunner_ntests_failed(sr);
	srunner_free(sr);
	return (failed == 0 ? EXIT_SUCCESS : EXIT_FAILURE);
}
