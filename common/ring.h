/*
 * A queue, first in first out, of items of one size in a ring that grows
 * by doubling: taking the first and adding at the end cost no copy but
 * the item's.
 */
#ifndef EMBER_RING_H
#define EMBER_RING_H

#include <stddef.h>

struct ring {
	unsigned char	*items;
	size_t		 item_size;
	size_t		 head;		/* index of the first */
	size_t		 n;		/* items queued */
	size_t		 size;		/* items the ring has room for */
};

/* An empty ring of items of item_size bytes; nothing is allocated yet. */
void	 ring_init(struct ring *, size_t item_size);
/* Free what the ring holds; it is empty, and may be used again. */
void	 ring_free(struct ring *);
/* Room for one more item at the end, to be filled by the caller. */
void	*ring_push(struct ring *);
/* The first item, or NULL if there is none. */
void	*ring_first(const struct ring *);
/* Take the first item away; the ring must not be empty. */
void	 ring_pop(struct ring *);

#endif
