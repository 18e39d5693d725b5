/*
 * A channel: emberd's end of a worker's socketpair.  Unlike a bufferevent
 * (libevent 2.1 reads at most 4 KiB per call), it reads up to its high mark
 * in one readv, stops reading at the mark so the worker's writes block, and
 * writes small messages straight away instead of a loop turn later.
 */
#ifndef EMBER_CHANNEL_H
#define EMBER_CHANNEL_H

#include <stddef.h>

struct channel;
struct evbuffer;

/* read_cb runs after new input or at end of file (channel_eof says which). */
struct channel	*channel_create(int fd, size_t high, void (*read_cb)(void *),
		     void *arg);
void		 channel_free(struct channel *);
struct evbuffer	*channel_input(struct channel *);
struct evbuffer	*channel_output(struct channel *);
/* Pass fd (duplicated: the caller keeps its own) with the next byte
 * queued on the output (or, after others passed there, the byte after
 * theirs): the peer receives it with that byte.  The bytes must follow
 * before the next flush. */
void		 channel_pass_fd(struct channel *, int fd);
/* Write what is queued; what the socket does not take goes when it can. */
void		 channel_flush(struct channel *);
/* Read until len bytes are buffered, then stop; 0 for the default mark. */
void		 channel_want(struct channel *, size_t len);
/* Input was consumed: read again if it went below the mark. */
void		 channel_resume(struct channel *);
/* No more reading or writing. */
void		 channel_stop(struct channel *);
int		 channel_eof(const struct channel *);
/* Is the peer still there and quiet?  Asks the socket, not the loop. */
int		 channel_alive(struct channel *);

#endif
