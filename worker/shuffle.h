/*
 * The shuffle in a worker (docs/design.md, "The shuffle"): a map task of
 * a stage writes its records for the next wide op into its shuffle file,
 * OPID/s<stage>-m<partition>.data (common/shuffle_file.h), and a task of
 * the next stage reads its bucket of every map file of its inputs and
 * runs the wide op's reduce side, its records going on down the chain.
 *
 * Everything works through the operation's directory, opened under the
 * uid's shuffle directory (the descriptor emberd passed) with mkdirat and
 * openat O_NOFOLLOW: the worker never opens a shuffle path by name.
 */
#ifndef EMBER_WORKER_SHUFFLE_H
#define EMBER_WORKER_SHUFFLE_H

#include <stddef.h>
#include <stdint.h>

#include <jansson.h>

struct chain;
struct plan;
struct record;
struct shuffle_map;

/* Open (made if missing, 0700) the operation's directory name in the
 * uid's shuffle directory dirfd: a descriptor, or -1 with *err. */
int	 shuffle_dir_open(int dirfd, const char *name, char **err);

/*
 * A map task's writer: partition's file of stage in the operation's
 * directory opdir, of buckets buckets, for the wide op op (its JSON, as
 * the descriptor gives it), sorting in up to memory bytes.  NULL with
 * *err (the op does not parse, the file cannot be made).
 */
struct shuffle_map *shuffle_map_create(int opdir, int stage, int partition,
	     int buckets, json_t *op, size_t memory, char **err);
/* Write a record to its bucket: 0, or -1 with *err. */
int	 shuffle_map_add(struct shuffle_map *, const struct record *,
	     char **err);
/* Does the writer take pairs as pieces (shuffle_map_add_pieces)?  Those
 * of reduce_by_key's sum, count, min and max do. */
int	 shuffle_map_takes_pieces(const struct shuffle_map *);
/* Write the pairs of a block of lines split at sep (and at each '\n'),
 * every piece both key and value, as shuffle_map_add would one by one;
 * *records counts them.  0, or -1 with *err. */
int	 shuffle_map_add_pieces(struct shuffle_map *, const char *data,
	     size_t len, char sep, int64_t *records, char **err);
/* Write the file whole and name it; *bytes its size.  0, or -1 with *err. */
int	 shuffle_map_commit(struct shuffle_map *, int64_t *bytes,
	     char **err);
/* Free a writer; a file not committed leaves nothing behind. */
void	 shuffle_map_free(struct shuffle_map *);

/*
 * Run the reduce side of a shuffle source's wide op for partition into
 * the chain; a join holds a key's right values in up to memory bytes.
 * OP_OK, or OP_FAIL with *err allocated (a map file missing, short or
 * corrupt: "SHUFFLE_LOST stage K map M: why"; a key with more values than
 * may be held), or *err NULL when the chain failed.
 */
int	 shuffle_source_run(const struct plan *, int partition, int opdir,
	     size_t memory, struct chain *, int64_t *records_in, char **err);

#endif
