/*
 * Fuzzing target: a broadcast's set index (common/bindex.c), as a worker
 * maps and reads it.  The index is the user's own data (a helper of the
 * user built it before emberd sealed it), so it may hold any bytes:
 * whatever they are, the header check refuses it or every lookup
 * answers 1, 0 or -1 (a slot past the bytes), never reading outside the
 * index or the bytes and never looping.
 *
 * The first byte picks the mode, the next two (little-endian) the length
 * of the broadcast's bytes that follow.  Mode bit 0 clear: the rest is
 * the index.  Set: the index is built from the bytes, then the rest, in
 * 5-byte patches (a position in the index, 4 bytes, and a byte XORed in
 * there), changes it; with bit 1 set the header's checksum is stamped
 * again after, so that the checks past it are reached.  Unpatched, every
 * line of the bytes must be found.
 */
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "bindex.h"
#include "fuzz.h"

/* Look every line up, each cut short by a byte, and a few others. */
static void
lookup_all(const struct bindex *b, const uint8_t *bytes, size_t len,
    int must_find)
{
	const uint8_t	*p = bytes, *end = bytes + len, *nl;
	size_t		 l;
	int		 rc;

	while (p < end) {
		nl = memchr(p, '\n', (size_t)(end - p));
		l = (size_t)((nl != NULL ? nl : end) - p);
		rc = bindex_contains(b, (const char *)p, l);
		if (rc < -1 || rc > 1 || (must_find && rc != 1))
			abort();
		if (l > 0 && (rc = bindex_contains(b, (const char *)p,
		    l - 1)) < -1)
			abort();
		p = nl != NULL ? nl + 1 : end;
	}
	if (bindex_contains(b, "", 0) < -1 ||
	    bindex_contains(b, "0123456789abcdef0123", 20) < -1)
		abort();
}

/* Build the index of the bytes into an aligned buffer; its size. */
static void *
build(const uint8_t *bytes, size_t len, size_t *size)
{
	struct bindex_stats	 st;
	size_t			 lines;
	void			*ix;

	*size = bindex_size(bytes, len, &lines);
	if (*size == 0 || (ix = calloc(1, *size)) == NULL)
		abort();
	bindex_build(bytes, len, lines, ix, *size, &st);
	return (ix);
}

int
LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
	struct bindex	*b;
	const uint8_t	*bytes, *rest;
	size_t		 len, nrest, isize, i;
	uint32_t	 pos;
	uint8_t		 mode;
	void		*ix;
	char		*err;

	if (size < 3)
		return (0);
	mode = data[0];
	len = (size_t)data[1] | (size_t)data[2] << 8;
	if (len > size - 3)
		len = size - 3;
	bytes = data + 3;
	rest = bytes + len;
	nrest = size - 3 - len;
	if ((mode & 1) == 0) {
		isize = nrest;
		/* Aligned as a mapping is, and sized to the byte. */
		if ((ix = malloc(isize > 0 ? isize : 1)) == NULL)
			abort();
		memcpy(ix, rest, isize);
	} else {
		ix = build(bytes, len, &isize);
		for (i = 0; i + 5 <= nrest; i += 5) {
			memcpy(&pos, rest + i, 4);
			((uint8_t *)ix)[pos % isize] ^= rest[i + 4];
		}
		if (mode & 2)
			bindex_stamp(ix);
	}
	if ((b = bindex_open(ix, isize, bytes, len, &err)) == NULL) {
		if (err == NULL || *err == '\0')
			abort();
		free(err);
	} else {
		lookup_all(b, bytes, len, (mode & 1) && nrest < 5);
		bindex_close(b);
	}
	free(ix);
	return (0);
}
