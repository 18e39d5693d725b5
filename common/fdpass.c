#include <errno.h>
#include <string.h>
#include <sys/socket.h>
#include <unistd.h>

#include "fdpass.h"
#include "frame.h"

ssize_t
fd_send_with(int sock, const void *buf, size_t len, int fd)
{
	return (fd_send_many(sock, buf, len, &fd, fd >= 0 ? 1 : 0));
}

ssize_t
fd_send_many(int sock, const void *buf, size_t len, const int *fds,
    size_t nfds)
{
	struct msghdr	 mh;
	struct iovec	 iov;
	union {
		struct cmsghdr	hdr;
		char		buf[CMSG_SPACE(sizeof(int) * HELPER_MAX_FDS)];
	} cmsg;
	ssize_t		 n;

	if (nfds > HELPER_MAX_FDS) {
		errno = EINVAL;
		return (-1);
	}
	memset(&mh, 0, sizeof mh);
	iov.iov_base = (void *)buf;
	iov.iov_len = len;
	mh.msg_iov = &iov;
	mh.msg_iovlen = 1;
	if (nfds > 0) {
		memset(&cmsg, 0, sizeof cmsg);
		mh.msg_control = cmsg.buf;
		mh.msg_controllen = CMSG_SPACE(sizeof(int) * nfds);
		cmsg.hdr.cmsg_len = CMSG_LEN(sizeof(int) * nfds);
		cmsg.hdr.cmsg_level = SOL_SOCKET;
		cmsg.hdr.cmsg_type = SCM_RIGHTS;
		memcpy(CMSG_DATA(&cmsg.hdr), fds, sizeof(int) * nfds);
	}
	do
		n = sendmsg(sock, &mh, MSG_NOSIGNAL);
	while (n == -1 && errno == EINTR);
	return (n);
}

ssize_t
fd_recv_many(int sock, void *buf, size_t len, int *fds, size_t max,
    size_t *nfds, int *overflow)
{
	struct msghdr	 mh;
	struct iovec	 iov;
	struct cmsghdr	*c;
	union {
		struct cmsghdr	hdr;
		char		buf[CMSG_SPACE(sizeof(int) * 8)];
	} cmsg;
	ssize_t		 n;

	memset(&mh, 0, sizeof mh);
	iov.iov_base = buf;
	iov.iov_len = len;
	mh.msg_iov = &iov;
	mh.msg_iovlen = 1;
	mh.msg_control = cmsg.buf;
	mh.msg_controllen = sizeof cmsg.buf;
	do
		n = recvmsg(sock, &mh, MSG_CMSG_CLOEXEC);
	while (n == -1 && errno == EINTR);
	if (n == -1)
		return (n);
	if (mh.msg_flags & MSG_CTRUNC)
		*overflow = 1;
	for (c = CMSG_FIRSTHDR(&mh); c != NULL; c = CMSG_NXTHDR(&mh, c)) {
		int	*p = (int *)CMSG_DATA(c);
		size_t	 k, i;

		if (c->cmsg_level != SOL_SOCKET || c->cmsg_type != SCM_RIGHTS)
			continue;
		k = (c->cmsg_len - CMSG_LEN(0)) / sizeof(int);
		for (i = 0; i < k; i++) {
			if (*nfds < max)
				fds[(*nfds)++] = p[i];
			else {
				close(p[i]);
				*overflow = 1;
			}
		}
	}
	return (n);
}

void
fs_msg_encode(const struct fs_msg *m, unsigned char *buf)
{
	be32_put(buf, m->type);
	be32_put(buf + 4, m->id);
	be32_put(buf + 8, m->pid);
	be32_put(buf + 12, m->value);
}

int
fs_msg_send(int sock, const struct fs_msg *m, int fd)
{
	unsigned char	buf[FS_MSG_SIZE];

	fs_msg_encode(m, buf);
	return (fd_send_with(sock, buf, sizeof buf, fd) == (ssize_t)sizeof buf ?
	    0 : -1);
}

int
fs_msg_recv(int sock, struct fs_msg *m, int *fd)
{
	/* One byte more than a message: a longer packet reads as too long. */
	unsigned char	 buf[FS_MSG_SIZE + 1];
	size_t		 nfds = 0;
	int		 overflow = 0;	/* only one is ever expected */
	ssize_t		 n;

	*fd = -1;
	n = fd_recv_many(sock, buf, sizeof buf, fd, 1, &nfds, &overflow);
	if (n <= 0)
		return ((int)n);
	if (n != FS_MSG_SIZE) {
		if (*fd != -1)
			close(*fd);
		*fd = -1;
		errno = EBADMSG;
		return (-1);
	}
	m->type = be32_get(buf);
	m->id = be32_get(buf + 4);
	m->pid = be32_get(buf + 8);
	m->value = be32_get(buf + 12);
	return (1);
}

/* Name a fork-server message type. */
const char *
fs_msg_type_name(int32_t type)
{
	switch (type) {
	case FS_HELLO:
		return ("FS_HELLO");
	case FS_FORK:
		return ("FS_FORK");
	case FS_FORKED:
		return ("FS_FORKED");
	case FS_FORK_FAILED:
		return ("FS_FORK_FAILED");
	case FS_KILL:
		return ("FS_KILL");
	case FS_EXIT:
		return ("FS_EXIT");
	case FS_HELPER:
		return ("FS_HELPER");
	case FS_HELPER_FORKED:
		return ("FS_HELPER_FORKED");
	case FS_HELPER_FAILED:
		return ("FS_HELPER_FAILED");
	case FS_PYLOAD:
		return ("FS_PYLOAD");
	case FS_PYDROP:
		return ("FS_PYDROP");
	default:
		return ("unknown");
	}
}
