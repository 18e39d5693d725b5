/*
 * The closer: a thread of emberd's that closes the descriptors a peer
 * could have made slow to close.  The last close of a socket with
 * SO_LINGER waits for its peer to take the unsent bytes (for up to the
 * linger time, which its owner sets), the close of a file on FUSE for its
 * daemon's answer; and the close of a Unix socket releases the
 * descriptors still in flight in it, each of which may be such a socket.
 * A client or a user's process (a worker, a helper, the fork-server) can
 * pass emberd any of these, so emberd's loop never closes what a peer
 * passed, nor a socket a peer wrote on: it hands them here.  A blocked
 * close would hold its thread: a socket is told not to linger before it
 * is closed, a Unix socket drained of the descriptors in flight in it
 * (closer_close_drained), and when every thread is held, another starts,
 * up to a few.
 */
#ifndef EMBER_CLOSER_H
#define EMBER_CLOSER_H

#include <stddef.h>

/* Close fd off the loop, soon; -1 is ignored. */
void	closer_close(int fd);
/* The same for a descriptor no one else is to use (emberd's own end of
 * a socket, one a peer passed for nothing): a Unix socket is shut for
 * reading and what it holds read first, so that the descriptors in
 * flight in it are closed one by one, as any other. */
void	closer_close_drained(int fd);
/* Descriptors handed over and not yet closed: channels read no more
 * while it is high, so that peers pass them no faster than they close. */
size_t	closer_backlog(void);

#endif
