/*
 * A broadcast's set index: the set of its lines as an open-addressed
 * table of offsets into the broadcast's bytes, built once when the
 * broadcast is put (by a helper, as the user: worker/helper.c) and mapped
 * read-only by every worker that filters with it (worker/held.c), or
 * built by a worker into its own memory for a broadcast that has none.
 *
 * The file: a header of BINDEX_HEADER bytes, then nslots slots of 8 bytes,
 * in the machine's byte order (the file never leaves the machine that made
 * it).  A slot is 0 when empty, else the line's offset plus one in its
 * high 40 bits and 24 bits of the line's hash in the low bits.  A line's
 * length is not stored: the line at an offset ends at the next newline.
 *
 * The index is the user's own data: the user could have changed it before
 * emberd sealed it.  A reader checks the header (its own checksum, the
 * sizes against the file's and the bytes'), bounds every lookup's probes
 * by the longest probe the build made, and refuses a slot that points past
 * the bytes; so a corrupt index gives an error or, for a change that keeps
 * the header and every offset in bounds, wrong answers about the user's
 * own lines, never a crash or a loop.
 */
#ifndef EMBER_BINDEX_H
#define EMBER_BINDEX_H

#include <stddef.h>
#include <stdint.h>

#define BINDEX_HEADER	64

struct bindex;

/* What a build found. */
struct bindex_stats {
	size_t	lines;		/* lines of the bytes */
	size_t	distinct;	/* distinct lines */
	size_t	max_probe;	/* the longest probe past a line's slot */
};

/*
 * The bytes of the index of len bytes (lines end at '\n'; a last line
 * without one counts), and their number of lines in *lines; 0 if the
 * bytes are too many to index (offsets have 40 bits).
 */
size_t		 bindex_size(const void *bytes, size_t len, size_t *lines);

/*
 * Build the index of bytes into out, whose size is what bindex_size
 * answered for them (lines as it counted) and whose bytes are all zero.
 */
void		 bindex_build(const void *bytes, size_t len, size_t lines,
		     void *out, size_t size, struct bindex_stats *);

/* Stamp the header's checksum after a change to it (for tests). */
void		 bindex_stamp(void *index);

/*
 * A view of an index of size bytes over the len bytes it indexes, both
 * mapped by the caller for as long as the view lives; the header is
 * checked first.  NULL with *err allocated (what is wrong) if it does not
 * hold.
 */
struct bindex	*bindex_open(const void *index, size_t size,
		     const void *bytes, size_t len, char **err);
void		 bindex_close(struct bindex *);

/*
 * Is data one of the lines?  1 or 0; -1 if a slot the lookup met points
 * past the bytes (a corrupt index).  A record holding a newline is none.
 */
int		 bindex_contains(const struct bindex *, const char *data,
		     size_t len);

/* The number of distinct lines. */
size_t		 bindex_count(const struct bindex *);

#endif
