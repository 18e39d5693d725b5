/*
 * Python broadcasts loaded in a fork-server: a broadcast of a Python
 * object that a job's functions read, of python.broadcast_preload bytes
 * or more, is unpickled once in the user's fork-server (FS_PYLOAD, its
 * memfd passed), so that the workers forked after share the object
 * copy-on-write instead of each unpickling it.  emberd never unpickles
 * anything: it passes the descriptor.  At most
 * python.broadcast_preload_max are loaded at once; a broadcast freed is
 * dropped (FS_PYDROP).  Each load or drop is a new generation of the
 * fork-server; a worker forked at an older one is retired, not reused.
 */
#ifndef EMBER_PYPRELOAD_H
#define EMBER_PYPRELOAD_H

#include <stdint.h>

#include <jansson.h>

struct broadcast;
struct pool;
struct pypreload;

/* The state of pool's fork-server: nothing loaded. */
struct pypreload *pypreload_create(struct pool *);
void		 pypreload_free(struct pypreload *);
/* The fork-server (re)started: nothing is loaded, generation 0. */
void		 pypreload_reset(struct pypreload *);
/* The generation of the fork-server's last load or drop sent. */
int32_t		 pypreload_gen(const struct pypreload *);
/* A job of pool's user starts whose functions read broadcast b: load it
 * if it is big enough and not loaded yet. */
void		 pypreload_want(struct pool *, struct broadcast *);
/* Broadcast id is freed: every fork-server that loaded it drops it. */
void		 pypreload_forget(int64_t id);
/* The ids of the broadcasts loaded, oldest first, for status. */
json_t		*pypreload_status(const struct pypreload *);

#endif
