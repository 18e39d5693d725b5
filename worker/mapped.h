/*
 * A text file read through a read-only mapping instead of copied out of
 * the page cache.  A file that shrinks under the mapping would raise
 * SIGBUS on the first read past its new end: the handler puts a zero page
 * there instead and notes it, the read goes on over zeros, and the source
 * fails the task once the block is done (mapped_shrank, which also sees a
 * cut inside the last page, where nothing faults).  One mapping at
 * a time: a worker runs one task.
 */
#ifndef EMBER_WORKER_MAPPED_H
#define EMBER_WORKER_MAPPED_H

#include <stddef.h>
#include <stdint.h>

/* Map [offset, offset + len) of fd, read-only, and guard it; the bytes
 * at *data, or -1 with errno set (ENOMEM too when len is more than an
 * eighth of an address-space limit: the caller reads the file instead).
 * offset need not be page-aligned. */
int		 mapped_open(int fd, int64_t offset, size_t len,
		     const char **data);
/* Has a read past the file's end been turned into zeros since the
 * mapping was made, or is the file now shorter than the mapping (one
 * fstat)?  Either way bytes the file no longer has were read as zeros. */
int		 mapped_shrank(void);
/* Unmap and unguard. */
void		 mapped_close(void);

#endif
