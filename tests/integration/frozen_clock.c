/*
 * A monotonic clock that never moves in ember-worker, preloaded by
 * test_corrupt_worker.py into emberd and, through workers.env, its
 * workers: every task they run then reports that it took no time at all,
 * whatever it took.  emberd's clocks, and the other clocks, are the
 * kernel's.
 */
#include <sys/syscall.h>

#include <errno.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

int	clock_gettime(clockid_t, struct timespec *);

int
clock_gettime(clockid_t clock, struct timespec *ts)
{
	if (clock == CLOCK_MONOTONIC &&
	    strncmp(program_invocation_short_name, "ember-worker", 12) == 0) {
		ts->tv_sec = 1000;
		ts->tv_nsec = 0;
		return (0);
	}
	return ((int)syscall(SYS_clock_gettime, clock, ts));
}
