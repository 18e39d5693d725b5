/*
 * A channel: emberd's end of a peer's socket, the one transport of every
 * peer (workers, helpers, fork-servers, clients).  Unlike a bufferevent
 * (libevent 2.1 reads at most 4 KiB per call), it reads up to its high
 * mark in one readv, stops reading at the mark so the peer's writes block
 * (back-pressure), and writes small messages straight away instead of a
 * loop turn later.  Its events go only when a turn finds them idle (the
 * input still at the mark, nothing to write), so a stream of messages
 * taken and queued in the same turn costs no epoll_ctl a message.
 * Descriptors go with given bytes of the output, and come, if asked
 * for, with the input bytes they rode on.  A packet
 * channel keeps a SOCK_SEQPACKET socket's message boundaries: every
 * packet has the one size it was made with.
 *
 * Framing is the owner's (frame_peek and channel_frame), with a maximum:
 * a length over it is refused before anything is allocated for it.
 */
#ifndef EMBER_CHANNEL_H
#define EMBER_CHANNEL_H

#include <stddef.h>
#include <stdint.h>

#include "frame.h"

struct channel;
struct evbuffer;

/* read_cb runs after new input or at end of file (channel_eof says which;
 * with an error_cb, the end goes there instead). */
struct channel	*channel_create(int fd, size_t high, void (*read_cb)(void *),
		     void *arg);
/* A SOCK_SEQPACKET socket whose every packet read is size bytes: one of
 * another size ends the channel (EBADMSG); each write is one packet of
 * out_size.  Up to max_fds descriptors come with a packet
 * (channel_take_fd_with). */
struct channel	*channel_create_packets(int fd, size_t size, size_t out_size,
		     size_t max_fds, void (*read_cb)(void *), void *arg);
void		 channel_free(struct channel *);
struct evbuffer	*channel_input(struct channel *);
struct evbuffer	*channel_output(struct channel *);
/* The peer's end, or a read or write error: error_cb gets 0 or the errno,
 * once, from the loop (from no channel call but channel_read), and the
 * channel stops.  Without one, read_cb hears of it. */
void		 channel_set_error_cb(struct channel *,
		     void (*error_cb)(void *, int));
/* Let the loop write whatever is queued, without channel_flush, and run
 * write_cb after a write leaves no more than low bytes queued. */
void		 channel_set_write_cb(struct channel *, size_t low,
		     void (*write_cb)(void *));
/* Read with recvmsg, keeping up to max descriptors that come along until
 * taken; more are closed as they come (channel_fds_refused counts them). */
void		 channel_accept_fds(struct channel *, size_t max);
/* The oldest descriptor received and not taken, or -1. */
int		 channel_take_fd(struct channel *);
/* The descriptor that came with the next len bytes of input, or -1;
 * those that came with bytes already consumed are closed. */
int		 channel_take_fd_with(struct channel *, size_t len);
size_t		 channel_fds_refused(const struct channel *);
/*
 * The frame at the head of the input (frame_peek), its length not over
 * max: for an incomplete one, the mark is raised to hold all of it
 * (channel_want(ch, 0) puts it back).  FRAME_TOO_LARGE leaves the mark
 * alone.
 */
enum frame_status channel_frame(struct channel *, size_t max, int32_t *len);
/* Pass fd (duplicated: the caller keeps its own) with the next byte
 * queued on the output (or, after others passed there, the byte after
 * theirs): the peer receives it with that byte.  The bytes must follow
 * before the next flush. */
void		 channel_pass_fd(struct channel *, int fd);
/* Read what the socket holds now, as the loop would: read_cb (or
 * error_cb) runs. */
void		 channel_read(struct channel *);
/* Write what is queued; what the socket does not take goes when it can. */
void		 channel_flush(struct channel *);
/* Queue output without arming the loop's write: channel_uncork writes it
 * at once (no epoll_ctl, no loop pass when the socket takes it all). */
void		 channel_cork(struct channel *);
/* Write what is queued now, as channel_flush, and stop corking. */
void		 channel_uncork(struct channel *);
/* Read until len bytes are buffered, then stop; 0 for the default mark.
 * Above the default mark no read goes past len. */
void		 channel_want(struct channel *, size_t len);
/* Input was consumed: read again if it went below the mark. */
void		 channel_resume(struct channel *);
/* Read no more, for good; what is queued is still written. */
void		 channel_hold(struct channel *);
/* No more reading or writing. */
void		 channel_stop(struct channel *);
/* Stopped, and the peer told so: it reads the end of file.  The
 * descriptor stays open until channel_free. */
void		 channel_shut(struct channel *);
int		 channel_eof(const struct channel *);
/* Is the peer still there and quiet?  Asks the socket, not the loop. */
int		 channel_alive(struct channel *);

#endif
