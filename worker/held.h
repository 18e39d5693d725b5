/*
 * Held broadcasts: the broadcasts a worker holds, across tasks until
 * emberd removes them (docs/protocol.md, section 3); emberd's uploaded
 * broadcasts are daemon/broadcast.c.  Each broadcast is a file emberd wrote,
 * mapped read-only and shared: no worker copies its bytes, so a broadcast
 * costs the same for every task that uses it after the first.
 *
 * The set of a broadcast's lines is its index (common/bindex.h), built
 * when the broadcast was put and mapped read-only like its bytes; for a
 * broadcast that came without one, it is built on first use.  Either is
 * kept until the broadcast is removed.  It stores offsets into the
 * mapping, never the bytes: 8 bytes a slot, about 11 bytes a distinct
 * line.
 */
#ifndef EMBER_WORKER_HELD_H
#define EMBER_WORKER_HELD_H

#include <stddef.h>
#include <stdint.h>

#include <jansson.h>

struct held_set;

struct taskdesc_broadcast;

/*
 * Apply a descriptor's n broadcast changes in order (common/taskdesc.h):
 * an add maps the descriptors that came with it (its bytes, of its size,
 * and its index if it has one; the descriptors are closed, mapped or
 * not); a removal drops it.  Adding one
 * already held or removing one not held is an error.  0, or -1 with
 * *err allocated; the changes before the failing one stay applied (the
 * task fails and the worker exits), the descriptors of the others are
 * closed.
 */
int	 held_apply(const struct taskdesc_broadcast *, size_t n, char **err);

/* The bytes of broadcast id and their length, or NULL if not held.  An
 * empty broadcast has bytes of length 0, never NULL. */
const void *held_bytes(int64_t id, size_t *len);

/*
 * The set of broadcast id's lines: its index, its header checked (a
 * corrupt one is an error naming what is wrong), or built now if it came
 * without one and is not yet built: lines end
 * at '\n' (a '\r' before it is part of the line); a last line without a
 * newline counts, the empty piece after a final newline does not.  The
 * same set is returned until the broadcast is removed.  NULL with *err
 * allocated if id is not held or the set cannot be built.
 */
const struct held_set *held_set_get(int64_t id, char **err);

/* Is data one of the set's lines?  1 or 0; -1 if the set's index is
 * corrupt (a slot past the bytes). */
int	 held_set_contains(const struct held_set *,
	     const char *data, size_t len);

/* The number of distinct lines of a set. */
size_t	 held_set_size(const struct held_set *);

/* Drop every broadcast and set (at exit, so nothing is left to free). */
void	 held_clear(void);

/* For diagnostics: broadcasts held, their bytes, and the bytes of the
 * sets built here (an index mapped with its broadcast is not counted). */
size_t	 held_count(void);
size_t	 held_bytes_held(void);
size_t	 held_set_bytes_held(void);

#endif
