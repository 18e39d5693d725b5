/*
 * An example ember plugin: a few partition functions that show the whole
 * UDF ABI (docs/udf.md).  It needs nothing but <ember/udf.h> and libc:
 *
 *	cc -shared -fPIC -I/usr/local/include -o udf_example.so udf_example.c
 *
 * and a plan names a function by its symbol:
 *
 *	{"udf": {"library": "/path/udf_example.so", "symbol": "udf_prefix",
 *	    "args": {"prefix": "> "}}}
 */
#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <ember/udf.h>

EMBER_UDF_PLUGIN

/* Exported even when built with -fvisibility=hidden. */
EMBER_UDF_EXPORT int	udf_wordlen(struct ember_udf *);
EMBER_UDF_EXPORT int	udf_prefix(struct ember_udf *);
EMBER_UDF_EXPORT int	udf_fail(struct ember_udf *);
EMBER_UDF_EXPORT int	udf_hog(struct ember_udf *);
EMBER_UDF_EXPORT int	udf_in_broadcast(struct ember_udf *);

/* The same records in, the same records out: these may be recomputed. */
EMBER_UDF_DETERMINISTIC(udf_wordlen)
EMBER_UDF_DETERMINISTIC(udf_prefix)

/* Emit the length of each record in bytes, as decimal text; null stays
 * null. */
int
udf_wordlen(struct ember_udf *ctx)
{
	const char	*data;
	size_t		 len;
	char		 buf[32];
	int		 n;

	while (ember_udf_next(ctx, &data, &len) == 1) {
		if (data == NULL) {
			if (ember_udf_emit(ctx, NULL, 0) == -1)
				break;
			continue;
		}
		n = snprintf(buf, sizeof buf, "%zu", len);
		if (ember_udf_emit(ctx, buf, (size_t)n) == -1)
			break;
	}
	return (0);
}

/* Emit args.prefix followed by each record; null stays null. */
int
udf_prefix(struct ember_udf *ctx)
{
	const char	*prefix, *data;
	size_t		 plen, len, size = 0;
	char		*buf = NULL, *nbuf;
	int		 rc = 0;

	switch (ember_udf_arg_string(ctx, "prefix", &prefix, &plen)) {
	case 0:
		return (ember_udf_error(ctx, "args.prefix: missing"));
	case -1:
		return (ember_udf_error(ctx, "args.prefix: expected a string"));
	}
	while (ember_udf_next(ctx, &data, &len) == 1) {
		if (data == NULL) {
			if (ember_udf_emit(ctx, NULL, 0) == -1)
				break;
			continue;
		}
		if (plen + len > size) {
			size = (plen + len) * 2;
			if ((nbuf = realloc(buf, size)) == NULL) {
				rc = ember_udf_error(ctx, "out of memory");
				break;
			}
			buf = nbuf;
		}
		memcpy(buf, prefix, plen);
		memcpy(buf + plen, data, len);
		if (ember_udf_emit(ctx, buf, plen + len) == -1)
			break;
	}
	free(buf);
	return (rc);
}

/* Emit the first record, then fail. */
int
udf_fail(struct ember_udf *ctx)
{
	const char	*data;
	size_t		 len;

	if (ember_udf_next(ctx, &data, &len) == 1)
		ember_udf_emit(ctx, data, len);
	return (ember_udf_error(ctx, "deliberate failure in partition %d",
	    ember_udf_partition(ctx)));
}

/* Allocate and touch args.mb MiB, then pass the records through: a
 * function that needs memory, for the workers' memory limit. */
int
udf_hog(struct ember_udf *ctx)
{
	const char	*data;
	size_t		 len, size;
	int64_t		 mb = 0;
	char		*p;
	int		 rc = 0;

	if (ember_udf_arg_int(ctx, "mb", &mb) != 1 || mb < 0 ||
	    mb > 1024 * 1024)
		return (ember_udf_error(ctx, "args.mb: expected a number of "
		    "MiB"));
	size = (size_t)mb * 1024 * 1024;
	if ((p = malloc(size == 0 ? 1 : size)) == NULL)
		return (ember_udf_error(ctx, "cannot allocate %" PRId64 " MiB",
		    mb));
	memset(p, 0xa5, size);

	while (ember_udf_next(ctx, &data, &len) == 1) {
		if (ember_udf_emit(ctx, data, len) == -1)
			break;
	}
	/* Read it back, so the memory cannot be optimized away. */
	if (size != 0 && p[size - 1] != (char)0xa5)
		rc = ember_udf_error(ctx, "memory changed under us");
	free(p);
	return (rc);
}

/*
 * The lines of a broadcast, sorted for bsearch.  Kept across tasks: the
 * worker keeps the plugin loaded, and a broadcast's bytes stay at one place
 * while the worker holds it.
 */
struct line {
	const char	*data;
	size_t		 len;
};

static struct {
	int64_t		 id;
	const void	*bytes;
	size_t		 size;
	struct line	*lines;
	size_t		 n;
} set = { -1, NULL, 0, NULL, 0 };

/* Order two lines as memcmp does, shorter first on a tie. */
static int
line_cmp(const void *a, const void *b)
{
	const struct line	*x = a, *y = b;
	size_t			 n = x->len < y->len ? x->len : y->len;
	int			 c;

	if ((c = memcmp(x->data, y->data, n)) != 0)
		return (c);
	return (x->len < y->len ? -1 : x->len > y->len);
}

/* Split a broadcast into its sorted lines, unless done already. */
static int
set_build(int64_t id, const char *bytes, size_t size)
{
	const char	*p, *end = bytes + size, *nl;
	size_t		 n = 0;

	if (set.id == id && set.bytes == bytes && set.size == size)
		return (0);
	free(set.lines);
	set.id = -1;
	set.n = 0;
	for (p = bytes; p < end; p = nl + 1) {
		if ((nl = memchr(p, '\n', (size_t)(end - p))) == NULL)
			nl = end;
		n++;
	}
	if ((set.lines = calloc(n == 0 ? 1 : n, sizeof *set.lines)) == NULL)
		return (-1);
	for (p = bytes; p < end; p = nl + 1) {
		if ((nl = memchr(p, '\n', (size_t)(end - p))) == NULL)
			nl = end;
		set.lines[set.n].data = p;
		set.lines[set.n].len = (size_t)(nl - p);
		set.n++;
	}
	qsort(set.lines, set.n, sizeof *set.lines, line_cmp);
	set.id = id;
	set.bytes = bytes;
	set.size = size;
	return (0);
}

/* Pass the records that are a line of broadcast args.broadcast. */
int
udf_in_broadcast(struct ember_udf *ctx)
{
	struct line	 key;
	const char	*bytes, *data;
	size_t		 size, len;
	int64_t		 id;

	if (ember_udf_arg_int(ctx, "broadcast", &id) != 1)
		return (ember_udf_error(ctx, "args.broadcast: expected a "
		    "broadcast id"));
	if ((bytes = ember_udf_broadcast(ctx, id, &size)) == NULL)
		return (ember_udf_error(ctx, "broadcast %" PRId64 " is not "
		    "here (is it in the op's \"broadcasts\"?)", id));
	if (set_build(id, bytes, size) == -1)
		return (ember_udf_error(ctx, "out of memory"));

	while (ember_udf_next(ctx, &data, &len) == 1) {
		if (data == NULL)
			continue;
		key.data = data;
		key.len = len;
		if (bsearch(&key, set.lines, set.n, sizeof *set.lines,
		    line_cmp) == NULL)
			continue;
		if (ember_udf_emit(ctx, data, len) == -1)
			break;
	}
	return (0);
}
