/*
 * Spools: the rest of a partition whose client stopped reading, kept by
 * emberd so that the worker that computes it can go (stream.stall_timeout)
 * when the plan cannot be computed again.  A spool is a nameless file
 * (O_TMPFILE in emberd's local directory, or a memfd), holding record
 * frames as they will be sent; its bytes count against the uid's
 * daemon.max_spool_per_uid and everyone's daemon.max_spool.
 */
#ifndef EMBER_SPOOL_H
#define EMBER_SPOOL_H

#include <sys/types.h>

#include <stddef.h>
#include <stdint.h>

struct evbuffer;
struct spool;

/* A new empty spool charged to uid, or NULL with *err. */
struct spool	*spool_create(uid_t, char **err);
void		 spool_free(struct spool *);
/* Move bytes (records whole records) from the front of from to the end of
 * the spool: 0, or -1 with *err (a limit, by its conf key, or the write's
 * error); from is drained either way. */
int		 spool_append(struct spool *, struct evbuffer *from,
		     size_t bytes, int32_t records, char **err);
/* Bytes in the spool not taken yet. */
size_t		 spool_pending(const struct spool *);
/* Add to to the next whole records, about max bytes of them (at least
 * one batch): 0 and their bytes and count, or -1 with *err. */
int		 spool_take(struct spool *, struct evbuffer *to, size_t max,
		     size_t *bytes, int32_t *records, char **err);

#endif
