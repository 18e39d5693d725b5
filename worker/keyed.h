/*
 * Pairs and groups (docs/plans.md, "Keyed data and the shuffle") as they
 * travel in a record stream, a batch to emberd or a checkpoint's file
 * (docs/protocol.md): a pair is EMBER_PAIR, a key frame and a value frame
 * (NULL allowed); a group is EMBER_GROUP, a key frame, an int32 count and
 * that many value frames.  In a struct record (worker/ops.h) a pair's
 * value is its data, and a group's values are their frames, one after
 * another, as a shuffle file holds them.  And as save writes them: a
 * line of the key and the values, each after a tab.
 */
#ifndef EMBER_WORKER_KEYED_H
#define EMBER_WORKER_KEYED_H

#include <stddef.h>
#include <stdint.h>

struct record;

/* The bytes before a keyed record's key: its marker and key length. */
#define KEYED_HEAD	8

/* The size of a pair's or group's encoding. */
size_t	 keyed_size(const struct record *);
/* Encode the head (KEYED_HEAD bytes) and the word after the key (a
 * pair's value length or NULL, a group's count): the key follows the
 * head, the data follows the word. */
void	 keyed_head(unsigned char *, const struct record *);
void	 keyed_word(unsigned char *, const struct record *);
/* Encode a pair or group whole at p (keyed_size bytes). */
void	 keyed_put(unsigned char *, const struct record *);

/*
 * Decode one record, plain or keyed, from the avail bytes at p, no frame
 * longer than max: 1 with *r (pointing into p) and *used its bytes; 0 when
 * more is needed, *used how many at least; -1 for a corrupt encoding.
 */
int	 keyed_get(const char *p, size_t avail, size_t max, struct record *r,
	     size_t *used);

/* Walk a group's value frames (already checked): 1 with the next value,
 * 0 at the end. */
int	 keyed_value_next(const char **p, const char *end, const char **v,
	     size_t *vlen, int *vnull);
/* The number of values of a group. */
int32_t	 keyed_count(const struct record *);

/* The size of a keyed record as save writes it (without the newline), and
 * the line itself at p: the key, then a tab and each value (a null one
 * empty). */
size_t	 keyed_text_size(const struct record *);
void	 keyed_text_put(char *, const struct record *);

/* Write up to 64 bytes of a key or value into buf (KEYED_SHOWN bytes),
 * quotes, backslashes and bytes that are not printable ASCII escaped, and
 * "..." when there is more: for an error a user reads. */
#define KEYED_SHOWN	(4 * 64 + 8)
void	 keyed_show(const char *, size_t, char *buf, size_t size);

#endif
