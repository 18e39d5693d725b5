/*
 * ember UDF plugins: the ABI between ember-worker and a shared object that
 * provides partition functions.  docs/udf.md says how to write, build and
 * use one.
 *
 * A plugin is plain C: it includes this header alone, puts EMBER_UDF_PLUGIN
 * once in one of its source files, and defines any number of partition
 * functions of type ember_udf_fn, which a plan names by symbol:
 *
 *	#include <ember/udf.h>
 *
 *	EMBER_UDF_PLUGIN
 *
 *	int
 *	my_upper(struct ember_udf *ctx)
 *	{
 *		const char	*data;
 *		size_t		 len;
 *
 *		while (ember_udf_next(ctx, &data, &len) == 1) {
 *			...
 *			if (ember_udf_emit(ctx, out, len) == -1)
 *				break;
 *		}
 *		return (0);
 *	}
 *
 * Versioning: EMBER_UDF_ABI_VERSION changes only when something here
 * changes incompatibly (a signature, a meaning); a plugin built for another
 * version is refused when the plan is submitted.  Functions may be added
 * without a change of version: a plugin that uses one is refused by an
 * ember that lacks it.
 */
#ifndef EMBER_UDF_H
#define EMBER_UDF_H

#include <stddef.h>
#include <stdint.h>

#define EMBER_UDF_ABI_VERSION	1

#ifdef __cplusplus
extern "C" {
#endif

/* Give a symbol default visibility, for plugins built with
 * -fvisibility=hidden. */
#define EMBER_UDF_EXPORT	__attribute__((visibility("default")))

/*
 * Mark a shared object as an ember plugin, once in one source file: ember
 * reads this variable (without loading the plugin, when it checks a plan;
 * again when a worker loads it) to know which ABI the plugin was built for.
 */
#define EMBER_UDF_PLUGIN						\
	EMBER_UDF_LINKAGE EMBER_UDF_EXPORT __attribute__((used))	\
	    const int ember_udf_abi_version = EMBER_UDF_ABI_VERSION;

#ifdef __cplusplus
#define EMBER_UDF_LINKAGE	extern "C"
#else
#define EMBER_UDF_LINKAGE
#endif

extern EMBER_UDF_EXPORT const int ember_udf_abi_version;

/*
 * Mark partition function fn deterministic, once, at file scope: given the
 * same records, args and broadcasts, it emits the same records every time
 * it runs.  A plan whose udfs are all marked can have a partition computed
 * again, when a client reattaches to a stream at a position emberd no
 * longer buffers; an unmarked udf makes that position unavailable.  Added
 * without a change of ABI version: an older ember ignores the mark.
 */
#define EMBER_UDF_DETERMINISTIC(fn)					\
	EMBER_UDF_LINKAGE EMBER_UDF_EXPORT __attribute__((used))	\
	    const int ember_udf_deterministic_##fn = 1;

/* One run of a partition function: opaque, valid only during the call. */
struct ember_udf;

/*
 * A partition function (extern "C" in C++): called once for each partition
 * of each task, on the worker's only thread.  It pulls the partition's
 * records with ember_udf_next, pushes its own with ember_udf_emit, and
 * returns 0, or -1 after ember_udf_error to fail the task.
 */
typedef int	ember_udf_fn(struct ember_udf *ctx);

/*
 * Take the next input record: 1 with *data and *len (*data is NULL for a
 * null record), or 0 at the end of the input (and from then on).  The bytes
 * are not NUL-terminated and stay valid until the next call of
 * ember_udf_next or the function's return.
 */
int		 ember_udf_next(struct ember_udf *ctx, const char **data,
		     size_t *len);

/*
 * Pass a record on (data NULL: a null record); ember copies it before this
 * returns.  0, or -1 when the rest of the job wants no more records or
 * failed: return 0 then, soon (ember_udf_next answers 0 from then on).
 */
int		 ember_udf_emit(struct ember_udf *ctx, const char *data,
		     size_t len);

/* The plan's "args" as compact JSON text: "{}" when it has none. */
const char	*ember_udf_args(struct ember_udf *ctx);

/*
 * Read a member of the top-level args object: 1 with the value, 0 when the
 * key is absent (*value untouched), -1 when it has another type.  A string
 * is NUL-terminated and valid until the function returns; len may be NULL.
 */
int		 ember_udf_arg_string(struct ember_udf *ctx, const char *key,
		     const char **value, size_t *len);
int		 ember_udf_arg_int(struct ember_udf *ctx, const char *key,
		     int64_t *value);

/*
 * The bytes of broadcast id, or NULL when the worker does not hold it (the
 * udf op of the plan lists the broadcasts it reads).  They are read-only,
 * are not NUL-terminated, and stay valid until the function returns.
 */
const void	*ember_udf_broadcast(struct ember_udf *ctx, int64_t id,
		     size_t *len);

/* Set the task's error message (printf format); returns -1, to return. */
int		 ember_udf_error(struct ember_udf *ctx, const char *fmt, ...)
		     __attribute__((format(printf, 2, 3)));

/* The partition being computed, from 0 (to seed a random generator, say). */
int		 ember_udf_partition(struct ember_udf *ctx);

#ifdef __cplusplus
}
#endif

#endif
