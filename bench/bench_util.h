/*
 * bench_util: the helpers the benchmark programs share.
 */

#ifndef BENCH_UTIL_H
#define BENCH_UTIL_H

#include <stdint.h>

struct ember;

uint64_t	 now_ns(void);
int		 cmp_double(const void *, const void *);
long		 parse_count(const char *, const char *, long);
struct ember	*connect_or_die(const char *);
int64_t		 status_counter(struct ember *, const char *);
double		 count_once(struct ember *, const char *, int64_t, int64_t);

#endif /* BENCH_UTIL_H */
