/* Messages with an optional file descriptor (SCM_RIGHTS) on a
 * SOCK_SEQPACKET socket: the fork-server's control channel. */
#ifndef EMBER_FDPASS_H
#define EMBER_FDPASS_H

#include "protocol.h"

/* Send one message, with fd if fd >= 0.  0, or -1 with errno. */
int	fs_msg_send(int sock, const struct fs_msg *, int fd);

/*
 * Receive one message; *fd gets a passed descriptor (close-on-exec) or -1.
 * 1 on a message, 0 on end of file, -1 with errno (EAGAIN included), and
 * -1 with errno EBADMSG for a packet of the wrong size.
 */
int	fs_msg_recv(int sock, struct fs_msg *, int *fd);

#endif
