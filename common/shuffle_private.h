/*
 * Between shuffle_file.c (the format, the reader, the merge) and
 * shuffle_writer.c: the layout's sizes, an entry's encoding, key order and
 * a buffered reader of a byte range of a file.
 */
#ifndef EMBER_SHUFFLE_PRIVATE_H
#define EMBER_SHUFFLE_PRIVATE_H

#include <stddef.h>
#include <stdint.h>
#include <sys/types.h>

#include "shuffle_file.h"

#define SF_MAGIC		"EMBSHUF1"
#define SF_MAGIC_SIZE		8
#define SF_TRAILER_SIZE		28	/* buckets, flags, table, crc, magic */
#define SF_ROW_SIZE		44	/* a bucket's row of the table */
#define SF_BLOCK_SIZE		65536	/* a block ends past this many bytes */
#define SF_BLOCK_ENTRY_SIZE	12	/* int64 offset, uint32 crc */
#define SF_MAX_BUCKETS		1000000
#define SF_NULL			(-5)
#define SF_TAG_RECORD		1
#define SF_TAG_PAIR		2
#define SF_TAG_GROUP		3
#define SF_FLAG_ORDERED		0x1
#define SF_FLAG_NUMERIC		0x2
#define SF_FLAG_DESCENDING	0x4
#define SF_IO_SIZE		(1 << 20)	/* a read or write, at most */
#define SF_IO_MIN		(64 << 10)
#define SF_MERGE_BUFFERS	(64 << 20)	/* a merge's readers' buffers */

/* A key read as a number: type 0 not a number, 1 int64, 2 double. */
struct sf_num {
	int	 type;
	int64_t	 i;
	double	 d;
};

/* The bytes of e encoded (tag, key frame, value frame). */
size_t	sf_encode_size(const struct shuffle_entry *);
/* Encode e at p; returns the bytes written. */
size_t	sf_encode(unsigned char *, const struct shuffle_entry *);
/*
 * Decode the entry at p, of which avail bytes are there: 1 with *size and
 * e (pointing into p), 0 if more is needed (*size: at least how many), -1
 * with *why for bytes that are no entry.
 */
int	sf_decode(const unsigned char *, size_t avail,
	    struct shuffle_entry *, size_t *size, const char **why);
/* Read e's key as a number for order (only when numeric); 0 or -1. */
int	sf_num_read(enum shuffle_order, const struct shuffle_entry *,
	    struct sf_num *);
/* Compare two entries' keys in order (n: their numbers). */
int	sf_entry_compare(enum shuffle_order, int descending,
	    const struct shuffle_entry *, const struct sf_num *,
	    const struct shuffle_entry *, const struct sf_num *);
#define SF_SHOWN_SIZE		72	/* a key shown in an error */
/* Show a key in an error: its first 64 bytes, quoted, each byte that is
 * not printable ASCII as '?', "..." if cut; "null" for a null key. */
void	sf_key_show(char *, size_t, const struct shuffle_entry *);
/* Compare two keys' bytes, a NULL key first. */
int	sf_bytes_compare(const char *, size_t, const char *, size_t);
/* Compare two numbers. */
int	sf_num_compare(const struct sf_num *, const struct sf_num *);

/* A buffered reader of the bytes [pos, end) of fd (pread). */
struct sf_in {
	int		 fd;
	int64_t		 pos;		/* file offset of the next read */
	int64_t		 end;
	unsigned char	*buf;
	size_t		 size, head, tail;
	int64_t		 bufoff;	/* file offset of buf[0] */
	size_t		 chunk;		/* bytes per read */
	int		 crc_on;
	unsigned long	 crc;
	int64_t		 crc_done;	/* file offset the crc has reached */
};

/* Start reading [start, end) of fd in reads of chunk bytes. */
void	sf_in_init(struct sf_in *, int fd, int64_t start, int64_t end,
	    size_t chunk);
void	sf_in_free(struct sf_in *);
/* The file offset of the next unread byte. */
int64_t	sf_in_offset(const struct sf_in *);
/* The next entry: 1 (and its size), 0 at the end, -1 with *why. */
int	sf_in_next(struct sf_in *, struct shuffle_entry *, size_t *size,
	    const char **why);
/* Read in pieces of chunk bytes from now on (the buffer shrinks to that
 * at its next refill). */
void	sf_in_resize(struct sf_in *, size_t chunk);
/* Fold the bytes read up to the file offset upto into in->crc. */
void	sf_in_crc(struct sf_in *, int64_t upto);

#endif
