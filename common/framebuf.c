#include <errno.h>
#include <stdlib.h>
#include <string.h>

#include "framebuf.h"

int
framebuf_init(struct framebuf *f, size_t size)
{
	f->start = f->end = 0;
	f->size = size;
	if ((f->buf = malloc(size)) == NULL) {
		f->size = 0;
		return (-1);
	}
	return (0);
}

void
framebuf_free(struct framebuf *f)
{
	free(f->buf);
	f->buf = NULL;
	f->size = f->start = f->end = 0;
}

/* Move the bytes not taken to the front. */
static void
framebuf_compact(struct framebuf *f)
{
	size_t	have = framebuf_len(f);

	if (f->start == 0)
		return;
	if (have > 0)
		memmove(f->buf, f->buf + f->start, have);
	f->start = 0;
	f->end = have;
}

int
framebuf_room(struct framebuf *f, size_t need, size_t ahead)
{
	unsigned char	*nbuf;
	size_t		 nsize;

	framebuf_compact(f);
	if (f->size >= need)
		return (0);
	nsize = f->size * 2;
	if (nsize < need + ahead)
		nsize = need + ahead;
	if ((nbuf = realloc(f->buf, nsize)) == NULL) {
		errno = ENOMEM;
		return (-1);
	}
	f->buf = nbuf;
	f->size = nsize;
	return (0);
}

int
framebuf_fill(struct framebuf *f, size_t need, size_t ahead,
    framebuf_read_fn fn, void *arg)
{
	ssize_t	n;

	if (framebuf_len(f) >= need)
		return (1);
	/* Only for a frame not all there: moving its bytes to the front
	 * copies less than the frame, and the reads get all the room. */
	if (framebuf_room(f, need, ahead) == -1)
		return (-1);
	while (framebuf_len(f) < need) {
		n = fn(arg, f->buf + f->end, f->size - f->end);
		if (n == -1 && errno == EINTR)
			continue;
		if (n <= 0)
			return ((int)n);
		f->end += (size_t)n;
	}
	return (1);
}

void
framebuf_shrink(struct framebuf *f, size_t size)
{
	unsigned char	*nbuf;

	if (f->size <= size || framebuf_len(f) > size)
		return;
	framebuf_compact(f);
	if ((nbuf = realloc(f->buf, size)) != NULL) {
		f->buf = nbuf;
		f->size = size;
	}
}
