/*
 * Settings shared by the unit test programs, for the sanitized build
 * (./configure --enable-sanitizers) above all.
 */
#include <check.h>
#include <stdio.h>
#include <stdlib.h>
#include <unistd.h>

#include "unit.h"

static FILE	*unit_stderr_file;
static int	 unit_stderr_saved = -1;

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

void
unit_stderr_begin(void)
{
	ck_assert_ptr_nonnull(unit_stderr_file = tmpfile());
	fflush(stderr);
	ck_assert_int_ne(unit_stderr_saved = dup(2), -1);
	ck_assert_int_eq(dup2(fileno(unit_stderr_file), 2), 2);
}

char *
unit_stderr_end(void)
{
	char	*out;
	long	 size;

	fflush(stderr);
	dup2(unit_stderr_saved, 2);
	close(unit_stderr_saved);
	unit_stderr_saved = -1;
	size = ftell(unit_stderr_file);
	ck_assert_ptr_nonnull(out = calloc(1, (size_t)size + 1));
	rewind(unit_stderr_file);
	ck_assert_uint_eq(fread(out, 1, (size_t)size, unit_stderr_file),
	    (size_t)size);
	fclose(unit_stderr_file);
	unit_stderr_file = NULL;
	return (out);
}
