#include <stdlib.h>
#include <string.h>

#include "ring.h"
#include "xmalloc.h"

/* Items a ring makes room for the first time. */
#define RING_FIRST_SIZE	16

void
ring_init(struct ring *r, size_t item_size)
{
	memset(r, 0, sizeof *r);
	r->item_size = item_size;
}

void
ring_free(struct ring *r)
{
	free(r->items);
	ring_init(r, r->item_size);
}

/* Double the room, the items copied in order to the start. */
static void
ring_grow(struct ring *r)
{
	unsigned char	*grown;
	size_t		 size, first;

	size = r->size == 0 ? RING_FIRST_SIZE : r->size * 2;
	grown = xreallocarray(NULL, size, r->item_size);
	first = r->size - r->head < r->n ? r->size - r->head : r->n;
	if (r->n > 0) {
		memcpy(grown, r->items + r->head * r->item_size,
		    first * r->item_size);
		memcpy(grown + first * r->item_size, r->items,
		    (r->n - first) * r->item_size);
	}
	free(r->items);
	r->items = grown;
	r->head = 0;
	r->size = size;
}

void *
ring_push(struct ring *r)
{
	if (r->n == r->size)
		ring_grow(r);
	return (r->items + ((r->head + r->n++) % r->size) * r->item_size);
}

void *
ring_first(const struct ring *r)
{
	if (r->n == 0)
		return (NULL);
	return (r->items + r->head * r->item_size);
}

void
ring_pop(struct ring *r)
{
	r->head = (r->head + 1) % r->size;
	r->n--;
}
