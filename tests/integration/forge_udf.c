/*
 * A plugin that plays a corrupt worker, for test_corrupt_worker.py.  In
 * partition "partition", its function writes messages of the worker
 * protocol (common/protocol.h) straight onto the worker's socket to emberd,
 * with the values a test names, and ends the worker before it sends
 * anything of its own: emberd gets what no real worker would send.  In the
 * other partitions it passes the records through.
 *
 *	{"udf": {"library": ".../forge_udf.so", "symbol": "udf_forge",
 *	    "args": {"partition": 1, "message": "metrics", "metric": 1,
 *	    "value": -5}}}
 *
 * "metrics": a task that ends with metric number "metric" set to "value";
 * "counts": count_by_value's partial counts, the record "a" counted
 * "value" times;
 * "batch": a record batch whose header says "records" records in "value"
 * bytes, the bytes being one frame header that claims "frame" bytes (when
 * "value" leaves room for it) and zeros;
 * "done": a TASKS_DONE of "value" task ends (1 to 4), naming partitions
 * "first", "first" + 1..., each counting "count" records out.
 *
 * A worker that exits fails the tasks emberd has queued on it, so only
 * the operation's last partition forges a message; the worker's pid goes
 * to its stderr, emberd's log, so that a test can wait for emberd to see
 * it gone.
 */
#include <sys/socket.h>
#include <sys/uio.h>

#include <stdint.h>
#include <stdio.h>
#include <string.h>
#include <unistd.h>

#include <ember/udf.h>

#include "protocol.h"

EMBER_UDF_PLUGIN

EMBER_UDF_EXPORT int	udf_forge(struct ember_udf *);

static size_t
put32(unsigned char *p, int32_t v)
{
	uint32_t	u = (uint32_t)v;

	p[0] = u >> 24;
	p[1] = u >> 16;
	p[2] = u >> 8;
	p[3] = u;
	return (4);
}

static size_t
put64(unsigned char *p, int64_t v)
{
	put32(p, (int32_t)((uint64_t)v >> 32));
	put32(p + 4, (int32_t)(uint64_t)v);
	return (8);
}

/* The worker's socket to emberd: its one AF_UNIX stream socket. */
static int
forge_channel(void)
{
	int		fd, type, domain;
	socklen_t	len;

	for (fd = 3; fd < 1024; fd++) {
		len = sizeof type;
		if (getsockopt(fd, SOL_SOCKET, SO_TYPE, &type, &len) == -1)
			continue;
		len = sizeof domain;
		if (getsockopt(fd, SOL_SOCKET, SO_DOMAIN, &domain, &len) == -1)
			continue;
		if (type == SOCK_STREAM && domain == AF_UNIX)
			return (fd);
	}
	return (-1);
}

/* The end of a task: its metrics, metric set to value, and END_OF_STREAM. */
static size_t
forge_end(unsigned char *p, int64_t metric, int64_t value)
{
	size_t	n = 0;
	int	i;

	n += put32(p + n, EMBER_TIMING_DATA);
	n += put32(p + n, EMBER_METRIC_COUNT);
	for (i = 0; i < EMBER_METRIC_COUNT; i++)
		n += put64(p + n, i == metric ? value : 0);
	n += put32(p + n, EMBER_END_OF_STREAM);
	return (n);
}

/* A record batch of one count_by_value pair: "a", counted value times. */
static size_t
forge_counts(unsigned char *p, int64_t value)
{
	size_t	n = 0;

	n += put32(p + n, EMBER_RECORD_BATCH);
	n += put32(p + n, 2);
	n += put32(p + n, 4 + 1 + 4 + 8);
	n += put32(p + n, 1);
	p[n++] = 'a';
	n += put32(p + n, 8);
	n += put64(p + n, value);
	n += put32(p + n, EMBER_END_OF_DATA_SECTION);
	return (n);
}

/* A record batch that lies: records frames in length bytes, the first
 * frame's header claiming frame bytes. */
static size_t
forge_batch(unsigned char *p, int32_t records, int32_t length, int32_t frame)
{
	size_t	n = 0;
	int32_t	i;

	n += put32(p + n, EMBER_RECORD_BATCH);
	n += put32(p + n, records);
	n += put32(p + n, length);
	for (i = 0; i < length; i++)
		p[n + i] = 0;
	if (length >= 4)
		put32(p + n, frame);
	return (n + (size_t)length);
}

/* A TASKS_DONE of n ends, the first for partition first, each with
 * records out count. */
static size_t
forge_done(unsigned char *p, int32_t n, int32_t first, int64_t count)
{
	size_t	len = 0;
	int32_t	i, j;

	len += put32(p + len, EMBER_TASKS_DONE);
	len += put32(p + len, n);
	len += put32(p + len, EMBER_METRIC_COUNT);
	for (i = 0; i < n; i++) {
		len += put32(p + len, first + i);
		for (j = 0; j < EMBER_METRIC_COUNT; j++)
			len += put64(p + len, j == EMBER_METRIC_RECORDS_OUT ?
			    count : 0);
	}
	return (len);
}

/* Emit every record as it is. */
static int
forge_pass(struct ember_udf *ctx)
{
	const char	*data;
	size_t		 len;

	while (ember_udf_next(ctx, &data, &len) == 1) {
		if (ember_udf_emit(ctx, data, len) == -1)
			break;
	}
	return (0);
}

int
udf_forge(struct ember_udf *ctx)
{
	unsigned char	 msg[256];
	const char	*what;
	size_t		 len, n = 0;
	int64_t		 partition, metric = -1, value, records, frame, first;
	int		 fd;

	if (ember_udf_arg_int(ctx, "partition", &partition) != 1)
		return (ember_udf_error(ctx, "args.partition is required"));
	if (partition != ember_udf_partition(ctx))
		return (forge_pass(ctx));
	if (ember_udf_arg_string(ctx, "message", &what, &len) != 1 ||
	    ember_udf_arg_int(ctx, "value", &value) != 1)
		return (ember_udf_error(ctx, "args.message and args.value "
		    "are required"));
	if ((fd = forge_channel()) == -1)
		return (ember_udf_error(ctx, "no socket to emberd"));
	if (len == 7 && memcmp(what, "metrics", 7) == 0) {
		if (ember_udf_arg_int(ctx, "metric", &metric) != 1)
			return (ember_udf_error(ctx, "args.metric is required"));
		n = forge_end(msg, metric, value);
	} else if (len == 6 && memcmp(what, "counts", 6) == 0) {
		n = forge_counts(msg, value);
		n += forge_end(msg + n, -1, 0);
	} else if (len == 5 && memcmp(what, "batch", 5) == 0) {
		if (ember_udf_arg_int(ctx, "records", &records) != 1 ||
		    ember_udf_arg_int(ctx, "frame", &frame) != 1 ||
		    value < 0 || value > 64)
			return (ember_udf_error(ctx, "args.records and "
			    "args.frame are required, args.value 0 to 64"));
		n = forge_batch(msg, (int32_t)records, (int32_t)value,
		    (int32_t)frame);
	} else if (len == 4 && memcmp(what, "done", 4) == 0) {
		if (ember_udf_arg_int(ctx, "first", &first) != 1 ||
		    ember_udf_arg_int(ctx, "count", &records) != 1 ||
		    value < 1 || value > 4)
			return (ember_udf_error(ctx, "args.first and "
			    "args.count are required, args.value 1 to 4"));
		n = forge_done(msg, (int32_t)value, (int32_t)first, records);
	} else
		return (ember_udf_error(ctx, "unknown args.message"));
	/* The worker's stderr is emberd's log: the test finds the pid. */
	fprintf(stderr, "forge_udf: worker %ld forged %.*s\n", (long)getpid(),
	    (int)len, what);
	fflush(stderr);
	if (write(fd, msg, n) != (ssize_t)n)
		return (ember_udf_error(ctx, "short write to emberd"));
	_exit(0);
}
