/*
 * Settings shared by the unit test programs, for the sanitized build
 * (./configure --enable-sanitizers) above all.
 */
#include <stdlib.h>

#include "unit.h"

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

void
unit_init(void)
{
#ifdef __SANITIZE_ADDRESS__
	setenv("CK_TIMEOUT_MULTIPLIER", UNIT_ASAN_TIMEOUT_MULTIPLIER, 0);
#endif
}
