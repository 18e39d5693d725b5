/*
 * Fuzzing target: the reader of a shuffle file (common/shuffle_file.c),
 * as a reduce task runs it on what a map task wrote.  Map tasks run the
 * user's code, which may leave any bytes in the user's shuffle directory:
 * the footer is checked, the bucket read to its end, a seek tried on an
 * ordered file, and the samples turned into boundaries.  Whatever the
 * bytes, the reader answers with entries or an error, never a crash, a
 * read out of bounds or an allocation past the file's size.
 *
 * The first byte picks the bucket (its low two bits) and a second bucket
 * that a merge takes with the first (the next two); the rest is the
 * file.
 */
#include <sys/mman.h>

#include <stdint.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "frame.h"
#include "fuzz.h"
#include "shuffle_file.h"

/* Is an entry what the header promises? */
static void
entry_check(const struct shuffle_entry *e)
{
	const unsigned char	*p = (const unsigned char *)e->value;
	size_t			 left = e->vlen;
	int32_t			 n;

	if (e->knull != (e->key == NULL))
		abort();
	if (e->kind != SHUFFLE_KIND_GROUP)
		return;
	while (left > 0) {	/* a group's values: whole frames */
		if (left < 4)
			abort();
		n = be32_get(p);
		p += 4;
		left -= 4;
		if (n == -5)
			continue;
		if (n < 0 || (size_t)n > left)
			abort();
		p += n;
		left -= (size_t)n;
	}
}

/* Read the bucket to its end. */
static void
read_all(struct shuffle_reader *r)
{
	struct shuffle_entry	 e;
	char			*err = NULL;
	int			 rc;

	while ((rc = shuffle_reader_next(r, &e, &err)) == 1)
		entry_check(&e);
	if (rc == -1 && err == NULL)
		abort();
	free(err);
}

/* Open a reader of bucket on a memfd copy of the bytes. */
static struct shuffle_reader *
open_bytes(const uint8_t *data, size_t size, int bucket)
{
	struct shuffle_reader	*r;
	char			*err = NULL;
	int			 fd;

	if ((fd = memfd_create("fuzz_shuffle", MFD_CLOEXEC)) == -1)
		abort();
	if (size > 0 && write(fd, data, size) != (ssize_t)size)
		abort();
	if ((r = shuffle_reader_open_fd(fd, "fuzz", bucket, &err)) == NULL) {
		if (err == NULL)
			abort();
		free(err);
	}
	return (r);
}

/* Merge two buckets of the file to their end. */
static void
merge_two(const uint8_t *data, size_t size, int a, int b)
{
	struct shuffle_reader	*r[2];
	struct shuffle_merge	*m;
	struct shuffle_entry	 e;
	char			*err = NULL;
	size_t			 from;
	int			 rc;

	r[0] = open_bytes(data, size, a);
	r[1] = open_bytes(data, size, b);
	if (r[0] != NULL && r[1] != NULL) {
		m = shuffle_merge_create(r, 2, shuffle_reader_order(r[0]),
		    shuffle_reader_descending(r[0]));
		while ((rc = shuffle_merge_next(m, &e, &from, &err)) == 1) {
			entry_check(&e);
			if (from > 1)
				abort();
		}
		if (rc == -1 && err == NULL)
			abort();
		free(err);
		shuffle_merge_free(m);
	}
	shuffle_reader_free(r[0]);
	shuffle_reader_free(r[1]);
}

int
LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
	struct shuffle_reader	*r;
	struct shuffle_key	*b;
	const struct shuffle_key *s;
	enum shuffle_order	 order;
	char			*err = NULL;
	size_t			 n;

	if (size < 1)
		return (0);
	merge_two(data + 1, size - 1, data[0] % 4, (data[0] >> 2) % 4);
	if ((r = open_bytes(data + 1, size - 1, data[0] % 4)) == NULL)
		return (0);
	read_all(r);
	order = shuffle_reader_order(r);
	n = shuffle_reader_sample(r, &s);
	if (order != SHUFFLE_ORDER_NONE) {
		if (shuffle_boundaries(&r, 1, 3, order,
		    shuffle_reader_descending(r), &b, &err) == -1)
			abort();
		shuffle_boundaries_free(b, 3);
		if (shuffle_reader_seek(r, n > 0 ? s[n / 2].key : "m",
		    n > 0 ? s[n / 2].len : 1, &err) == 0)
			read_all(r);
		else
			free(err);
	}
	shuffle_reader_free(r);
	return (0);
}
