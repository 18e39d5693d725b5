/* Messages with an optional file descriptor (SCM_RIGHTS) on a
 * SOCK_SEQPACKET socket: the fork-server's control channel. */
#ifndef EMBER_FDPASS_H
#define EMBER_FDPASS_H

#include <sys/types.h>

#include "protocol.h"

/* sendmsg len bytes with fd passed along (SCM_RIGHTS) if fd >= 0, retrying
 * on EINTR: what sendmsg returns. */
ssize_t	fd_send_with(int sock, const void *, size_t, int fd);

/* sendmsg len bytes with nfds descriptors passed along, retrying on EINTR:
 * what sendmsg returns. */
ssize_t	fd_send_many(int sock, const void *, size_t, const int *fds,
	    size_t nfds);
/*
 * recvmsg up to len bytes, retrying on EINTR; descriptors that come along
 * (close-on-exec) are appended to fds[*nfds], up to max in all; one past
 * max is closed and sets *overflow.  What recvmsg returns.
 */
ssize_t	fd_recv_many(int sock, void *, size_t, int *fds, size_t max,
	    size_t *nfds, int *overflow);

/* A message's FS_MSG_SIZE bytes, into buf. */
void	fs_msg_encode(const struct fs_msg *, unsigned char *buf);
/* Send one message, with fd if fd >= 0.  0, or -1 with errno. */
int	fs_msg_send(int sock, const struct fs_msg *, int fd);

/*
 * Receive one message; *fd gets a passed descriptor (close-on-exec) or -1.
 * 1 on a message, 0 on end of file, -1 with errno (EAGAIN included), and
 * -1 with errno EBADMSG for a packet of the wrong size.
 */
int	fs_msg_recv(int sock, struct fs_msg *, int *fd);

/* The name of a message type, for logs ("FS_FORKED"; "unknown"). */
const char *fs_msg_type_name(int32_t);

#endif
