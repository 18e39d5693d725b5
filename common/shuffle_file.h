/*
 * Shuffle files (docs/protocol.md, "Shuffle files"): what a map task of a
 * stage writes for the next wide op, and its reduce tasks read.  One file
 * per map task, R buckets of entries (records, pairs or groups) in the
 * writer's order, then an index: per bucket its offset, length, entry
 * count and CRC-32, blocks of about 64 KiB each with its own CRC (the
 * sparse index a reader seeks with), and for ordered files a sample of
 * the keys.  The writer sorts each bucket by key when asked, combines
 * equal keys when given a combine function, and spills sorted runs to
 * nameless files past its memory; the reader checks every length and
 * every CRC, so a corrupt or truncated file is an error, never a crash.
 */
#ifndef EMBER_SHUFFLE_FILE_H
#define EMBER_SHUFFLE_FILE_H

#include <stddef.h>
#include <stdint.h>

/* An entry's kind: the values of enum plan_kind. */
#define SHUFFLE_KIND_RECORD	0	/* the record is the key (or null) */
#define SHUFFLE_KIND_PAIR	1	/* key and value (or null) */
#define SHUFFLE_KIND_GROUP	2	/* key and values, encoded as frames */

#define SHUFFLE_SAMPLE_MAX	256	/* keys sampled per bucket, at most */
#define SHUFFLE_SAMPLE_KEY_MAX	256	/* bytes of a sampled key, at most */

enum shuffle_order {
	SHUFFLE_ORDER_NONE,		/* arrival order in each bucket */
	SHUFFLE_ORDER_KEY,		/* by key bytes: memcmp, then length */
	SHUFFLE_ORDER_KEY_NUMERIC,	/* keys read as numbers, as reduce
					   reads them: int64, else double */
};

/*
 * An entry: borrowed bytes, valid until the next call on what gave it.
 * RECORD: key is the record (knull for a null record), no value.  PAIR:
 * the key (never null) and value (vnull for null).  GROUP: the key and,
 * in value/vlen, the values as frames (int32 length and bytes, -5 null).
 */
struct shuffle_entry {
	int		 kind;
	const char	*key;
	size_t		 klen;
	int		 knull;
	const char	*value;
	size_t		 vlen;
	int		 vnull;
};

/* A key of a sample or a boundary. */
struct shuffle_key {
	const char	*key;
	size_t		 len;
};

/*
 * Combine: fold b into a, two entries with equal keys (reduce_by_key's
 * map-side combine), a arriving before b.  Set *out to the result (its
 * bytes owned by the callback, valid until its next call; its key equal
 * to a's).  0, or -1 with *err (to free).
 */
typedef int (*shuffle_combine_fn)(void *arg, const struct shuffle_entry *a,
    const struct shuffle_entry *b, struct shuffle_entry *out, char **err);

struct shuffle_writer;
struct shuffle_reader;
struct shuffle_merge;

/*
 * A writer of NAME in dirfd (a name, not a path, not starting with '.'
 * as the writer's temporary names do) with buckets (1..1000000) buckets,
 * sorted by order (descending reverses it; equal keys keep their arrival
 * order), holding up to memory bytes (at least 64 KiB: the entries, their
 * sort array and combine's table; a sort's scratch array of 16 bytes per
 * entry comes on top while it runs) before it spills.  combine needs an
 * ordered file.  NULL with *err (to free) for bad arguments.
 */
struct shuffle_writer	*shuffle_writer_create(int dirfd, const char *name,
			     int buckets, enum shuffle_order, int descending,
			     size_t memory, shuffle_combine_fn, void *arg,
			     char **err);
/* Add an entry to a bucket (the bytes are copied).  0, or -1 with *err:
 * a key that is not a number in a numeric file (named), a combine error,
 * a spill's write error; after one, only shuffle_writer_free. */
int			 shuffle_writer_add(struct shuffle_writer *,
			     int bucket, const struct shuffle_entry *,
			     char **err);
/*
 * Sort and combine each bucket, merge the spilled runs, write the file as
 * .NAME.PID.tmp and rename it into NAME (no fsync: shuffle files never
 * outlive their operation).  *bytes: the file's size.  0, or -1 with
 * *err; either way only shuffle_writer_free may follow.
 */
int			 shuffle_writer_commit(struct shuffle_writer *,
			     int64_t *bytes, char **err);
/* Add without combining from now on, when nothing was added yet (else
 * a no-op): for a caller whose entries never share a key in a bucket, as
 * a map-side table's partials do, the combine table's lookups are waste. */
void			 shuffle_writer_unique_keys(
			     struct shuffle_writer *);
/* The runs spilled so far. */
int			 shuffle_writer_spills(const struct shuffle_writer *);
/* Free a writer; one not committed leaves nothing behind. */
void			 shuffle_writer_free(struct shuffle_writer *);

/*
 * A reader of one bucket of NAME in dirfd (openat O_RDONLY|O_NOFOLLOW):
 * the footer checked.  NULL with *err (to free), naming the file and why.
 */
struct shuffle_reader	*shuffle_reader_open(int dirfd, const char *name,
			     int bucket, char **err);
/* The same on an open descriptor, which the reader then owns (closed on
 * failure too); name is for errors. */
struct shuffle_reader	*shuffle_reader_open_fd(int fd, const char *name,
			     int bucket, char **err);
/* The file's bucket count, order and direction. */
int			 shuffle_reader_buckets(struct shuffle_reader *);
enum shuffle_order	 shuffle_reader_order(struct shuffle_reader *);
int			 shuffle_reader_descending(struct shuffle_reader *);
/* The bucket's entries, as the index gives it. */
int64_t			 shuffle_reader_count(struct shuffle_reader *);
/*
 * Ordered files: go to the first entry that does not sort before key
 * (the file's order and direction), from the start of the bucket.  0, or
 * -1 with *err (an unordered file, a read or CRC error).  Entries before
 * the block it lands in are not read, so their CRCs are not checked.
 */
int			 shuffle_reader_seek(struct shuffle_reader *,
			     const char *key, size_t klen, char **err);
/* The next entry: 1, 0 at the bucket's end (all its CRCs checked), or -1
 * with *err (a short, corrupt or unreadable file). */
int			 shuffle_reader_next(struct shuffle_reader *,
			     struct shuffle_entry *, char **err);
/* The bucket's sampled keys, in order, valid while the reader is; their
 * number (0 for an unordered file or an empty bucket). */
size_t			 shuffle_reader_sample(struct shuffle_reader *,
			     const struct shuffle_key **);
/* Free a reader and close its file. */
void			 shuffle_reader_free(struct shuffle_reader *);

/*
 * Compare two keys in order (a null key, klen ignored, is given as key
 * NULL: it sorts first): <0, 0, >0, descending reversing it.  A numeric
 * key that is not a number sorts after every number.
 */
int			 shuffle_key_compare(enum shuffle_order, int descending,
			     const char *a, size_t alen, const char *b,
			     size_t blen);
/* Read a key as a number, as reduce reads a record: 1 for an integer in
 * *i, 2 for a real in *d, 0 for neither. */
int			 shuffle_number_parse(const char *, size_t, int64_t *i,
			     double *d);

/*
 * A k-way merge of n readers (borrowed) ordered the same way; ties go to
 * the lower reader index, so the merge is stable across map tasks.  For
 * SHUFFLE_ORDER_NONE it gives each reader in turn, whole.
 */
struct shuffle_merge	*shuffle_merge_create(struct shuffle_reader **,
			     size_t n, enum shuffle_order, int descending);
/* The next entry and, in *from, its reader's index: 1, 0 at the end, or
 * -1 with *err (a reader's). */
int			 shuffle_merge_next(struct shuffle_merge *,
			     struct shuffle_entry *, size_t *from, char **err);
void			 shuffle_merge_free(struct shuffle_merge *);

/*
 * The partitions - 1 range boundaries of a sort, from the samples of n
 * readers (the same bucket of every map file), weighted by their buckets'
 * counts: partition p holds keys k with bounds[p-1] <= k < bounds[p] in
 * the order, the first and last open.  The same files give the same
 * boundaries in every reduce task.  *bounds (partitions - 1 keys, their
 * bytes copied) is freed with shuffle_boundaries_free.  0, or -1 with
 * *err.
 */
int			 shuffle_boundaries(struct shuffle_reader **, size_t n,
			     int partitions, enum shuffle_order, int descending,
			     struct shuffle_key **bounds, char **err);
void			 shuffle_boundaries_free(struct shuffle_key *,
			     int partitions);

#endif
