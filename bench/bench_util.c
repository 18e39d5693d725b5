/*
 * bench_util: the helpers the benchmark programs share - the clock, sorting
 * and option parsing, and the few emberd requests every benchmark makes.
 */

#include <sys/types.h>

#include <err.h>
#include <errno.h>
#include <inttypes.h>
#include <limits.h>
#include <stdint.h>
#include <stdlib.h>
#include <time.h>

#include <jansson.h>

#include "ember.h"
#include "bench_util.h"

/* Return the monotonic clock in nanoseconds. */
uint64_t
now_ns(void)
{
	struct timespec	ts;

	clock_gettime(CLOCK_MONOTONIC, &ts);
	return ((uint64_t)ts.tv_sec * 1000000000 + (uint64_t)ts.tv_nsec);
}

/* Compare two doubles for qsort. */
int
cmp_double(const void *a, const void *b)
{
	double	x = *(const double *)a, y = *(const double *)b;

	return ((x > y) - (x < y));
}

/* Parse an integer option of at least min or exit. */
long
parse_count(const char *s, const char *what, long min)
{
	char	*end;
	long	 v;

	errno = 0;
	v = strtol(s, &end, 10);
	if (errno != 0 || *end != '\0' || v < min || v > INT_MAX)
		errx(2, "%s: bad number: %s", what, s);
	return (v);
}

/* Connect to emberd or exit. */
struct ember *
connect_or_die(const char *path)
{
	struct ember	*e;
	char		*msg;

	if ((e = ember_connect(path, &msg)) == NULL)
		errx(1, "%s", msg);
	return (e);
}

/* Read a counter from emberd's status reply. */
int64_t
status_counter(struct ember *e, const char *name)
{
	json_t		*j, *v;
	json_error_t	 jerr;
	char		*text;
	int64_t		 n;

	if ((text = ember_status(e)) == NULL)
		errx(1, "status: %s: %s", ember_error_class(e), ember_error(e));
	if ((j = json_loads(text, 0, &jerr)) == NULL)
		errx(1, "status: %s", jerr.text);
	v = json_object_get(json_object_get(j, "counters"), name);
	if (!json_is_integer(v))
		errx(1, "status: no counter %s", name);
	n = json_integer_value(v);
	json_decref(j);
	free(text);
	return (n);
}

/* Run one count and check its reply; seconds it took. */
double
count_once(struct ember *e, const char *plan, int64_t partitions,
    int64_t expect)
{
	json_t		*j;
	json_error_t	 jerr;
	char		*reply;
	uint64_t	 t0, t1;
	int64_t		 n, p;

	t0 = now_ns();
	if (ember_execute(e, plan, "count", NULL, &reply) == -1)
		errx(1, "count: %s: %s", ember_error_class(e), ember_error(e));
	t1 = now_ns();

	if ((j = json_loads(reply, 0, &jerr)) == NULL)
		errx(1, "count reply: %s", jerr.text);
	n = json_integer_value(json_object_get(j, "count"));
	p = json_integer_value(json_object_get(j, "partitions"));
	if (n != expect || p != partitions)
		errx(1, "count: expected %" PRId64 " records in %" PRId64
		    " partitions, got %s", expect, partitions, reply);
	json_decref(j);
	free(reply);
	return ((double)(t1 - t0) / 1e9);
}
