/*
 * A plugin whose function is slow but deterministic, for test_retry.py:
 * it passes every record through, sleeping "ms" milliseconds before each,
 * so that a test can kill its worker mid-partition, and pads each to
 * "pad" bytes with dots, so that records reach the client before the
 * partition ends (a worker sends its output in batches of 64 KiB).
 * With "partition", only that partition sleeps: the others are tiny.
 * Marked deterministic, so emberd may run a lost task of it again.
 *
 *	{"udf": {"library": ".../slow_udf.so", "symbol": "udf_slow",
 *	    "args": {"ms": 100, "pad": 40000, "partition": 7}}}
 */
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include <ember/udf.h>

EMBER_UDF_PLUGIN

EMBER_UDF_EXPORT int	udf_slow(struct ember_udf *);
EMBER_UDF_DETERMINISTIC(udf_slow)

int
udf_slow(struct ember_udf *ctx)
{
	struct timespec	 ts;
	const char	*data;
	char		*buf;
	size_t		 len;
	int64_t		 ms = 0, pad = 0, partition = -1;
	int		 rc = 0;

	if (ember_udf_arg_int(ctx, "ms", &ms) == -1 || ms < 0 || ms > 10000)
		return (ember_udf_error(ctx, "args.ms: 0 to 10000"));
	if (ember_udf_arg_int(ctx, "pad", &pad) == -1 || pad < 0 ||
	    pad > 1000000)
		return (ember_udf_error(ctx, "args.pad: 0 to 1000000"));
	if (ember_udf_arg_int(ctx, "partition", &partition) == -1)
		return (ember_udf_error(ctx, "args.partition: a number"));
	if (partition >= 0 && partition != ember_udf_partition(ctx))
		ms = 0;
	if ((buf = malloc((size_t)pad + 1)) == NULL)
		return (ember_udf_error(ctx, "out of memory"));
	ts.tv_sec = (time_t)(ms / 1000);
	ts.tv_nsec = (long)(ms % 1000) * 1000000L;
	while (rc == 0 && ember_udf_next(ctx, &data, &len) == 1) {
		nanosleep(&ts, NULL);
		if (len < (size_t)pad) {
			memcpy(buf, data, len);
			memset(buf + len, '.', (size_t)pad - len);
			rc = ember_udf_emit(ctx, buf, (size_t)pad);
		} else
			rc = ember_udf_emit(ctx, data, len);
	}
	free(buf);
	return (rc == -1 ? -1 : 0);
}
