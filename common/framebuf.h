/*
 * A buffered reader of frames: the bytes read and not yet taken, in one
 * growable buffer, for every reader that pulls frames off a descriptor (a
 * worker's descriptors from emberd, a checkpoint's partition files,
 * libember's socket).  How the bytes come (read(), recvmsg() with
 * descriptors) is the caller's, as a function framebuf_fill calls.
 * Nothing here aborts: a buffer that cannot grow is -1 with ENOMEM, for
 * libember to report and the rest to make fatal.
 */
#ifndef EMBER_FRAMEBUF_H
#define EMBER_FRAMEBUF_H

#include <sys/types.h>

#include <stddef.h>

struct framebuf {
	unsigned char	*buf;
	size_t		 size;	/* allocated */
	size_t		 start;	/* the first byte not taken */
	size_t		 end;	/* past the last byte read */
};

/* Read up to len bytes into p: the bytes read, 0 at the end, or -1 with
 * errno (EINTR is retried). */
typedef ssize_t	(*framebuf_read_fn)(void *arg, void *p, size_t len);

/* An empty buffer of size bytes: 0, or -1 (ENOMEM). */
int	 framebuf_init(struct framebuf *, size_t size);
void	 framebuf_free(struct framebuf *);

/* The bytes read and not taken, and where they start. */
#define framebuf_len(f)		((f)->end - (f)->start)
#define framebuf_data(f)	((f)->buf + (f)->start)

/* Take n bytes (framebuf_len at most); with none left, the next read
 * starts at the front.  Inline: a stream's reader takes every record. */
static inline void
framebuf_take(struct framebuf *f, size_t n)
{
	f->start += n;
	if (f->start == f->end)
		f->start = f->end = 0;
}
/*
 * Make room for need bytes not taken: move them to the front and, if
 * they do not fit, grow to twice the size or to need + ahead (room to
 * read past them), whichever is larger.  0, or -1 (ENOMEM, the buffer
 * as it was).
 */
int	 framebuf_room(struct framebuf *, size_t need, size_t ahead);
/* Read with fn until need bytes are there (making room as above): 1; 0
 * at the end before them; -1 with errno (ENOMEM, or fn's). */
int	 framebuf_fill(struct framebuf *, size_t need, size_t ahead,
	     framebuf_read_fn fn, void *arg);
/* Give back what a large frame took: with no more than size bytes not
 * taken, move them to the front and shrink to size (kept as it is if
 * that fails). */
void	 framebuf_shrink(struct framebuf *, size_t size);

#endif
