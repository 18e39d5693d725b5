#include <sys/uio.h>

#include <errno.h>
#include <unistd.h>

#include <event2/buffer.h>

#include "frame.h"
#include "log.h"
#include "protocol.h"

int
fd_read_full(int fd, void *buf, size_t len)
{
	unsigned char	*p = buf;
	ssize_t		 n;

	while (len > 0) {
		n = read(fd, p, len);
		if (n == -1 && errno == EINTR)
			continue;
		if (n <= 0) {
			if (n == 0)
				errno = 0;
			return (-1);
		}
		p += n;
		len -= (size_t)n;
	}
	return (0);
}

int
fd_write_full(int fd, const void *buf, size_t len)
{
	const unsigned char	*p = buf;
	ssize_t			 n;

	while (len > 0) {
		n = write(fd, p, len);
		if (n == -1 && errno == EINTR)
			continue;
		if (n == -1)
			return (-1);
		p += n;
		len -= (size_t)n;
	}
	return (0);
}

/* Write all of an iovec array, which is changed on the way. */
int
fd_writev_full(int fd, struct iovec *iov, int n)
{
	ssize_t	w;
	size_t	left;

	while (n > 0) {
		if ((w = writev(fd, iov, n)) == -1) {
			if (errno == EINTR)
				continue;
			return (-1);
		}
		left = (size_t)w;
		while (n > 0 && left >= iov->iov_len) {
			left -= iov->iov_len;
			iov++;
			n--;
		}
		if (n > 0) {
			iov->iov_base = (char *)iov->iov_base + left;
			iov->iov_len -= left;
		}
	}
	return (0);
}

int
fd_read_int32(int fd, int32_t *v)
{
	unsigned char	b[4];

	if (fd_read_full(fd, b, sizeof b) == -1)
		return (-1);
	*v = be32_get(b);
	return (0);
}

int
fd_write_int32(int fd, int32_t v)
{
	unsigned char	b[4];

	be32_put(b, v);
	return (fd_write_full(fd, b, sizeof b));
}

enum frame_status
frame_peek(struct evbuffer *buf, size_t max, int32_t *len)
{
	unsigned char	hdr[4];

	if (evbuffer_copyout(buf, hdr, sizeof hdr) < (ev_ssize_t)sizeof hdr)
		return (FRAME_INCOMPLETE);
	*len = be32_get(hdr);
	if (*len < 0)
		return (FRAME_OK);
	if ((size_t)*len > max)
		return (FRAME_TOO_LARGE);
	if (evbuffer_get_length(buf) < sizeof hdr + (size_t)*len)
		return (FRAME_INCOMPLETE);
	return (FRAME_OK);
}

/* Read the int32 at off in buf: 0, or -1 if it is not all there. */
static int
frame_int32_at(struct evbuffer *buf, size_t off, int32_t *v)
{
	struct evbuffer_ptr	 p;
	unsigned char		 hdr[4];

	if (evbuffer_ptr_set(buf, &p, off, EVBUFFER_PTR_SET) == -1 ||
	    evbuffer_copyout_from(buf, &p, hdr, sizeof hdr) !=
	    (ev_ssize_t)sizeof hdr)
		return (-1);
	*v = be32_get(hdr);
	return (0);
}

/* Skip the frame at *off (a header alone for NULL). */
static int
frame_skip_one(struct evbuffer *buf, size_t *off)
{
	int32_t	len;

	if (frame_int32_at(buf, *off, &len) == -1)
		return (-1);
	*off += 4 + (len > 0 ? (size_t)len : 0);
	return (0);
}

/* Skip a pair's or group's frames after its marker: the key, then one
 * value or a count of them (the batch was checked: it is not negative). */
static int
frame_skip_keyed(struct evbuffer *buf, size_t *off, int32_t marker)
{
	int32_t	values = 1;

	if (frame_skip_one(buf, off) == -1)
		return (-1);
	if (marker == EMBER_GROUP) {
		if (frame_int32_at(buf, *off, &values) == -1)
			return (-1);
		*off += 4;
	}
	while (values-- > 0)
		if (frame_skip_one(buf, off) == -1)
			return (-1);
	return (0);
}

int
frame_skip_records(struct evbuffer *buf, int64_t n, size_t *bytes)
{
	size_t	off = 0;
	int32_t	len;

	while (n-- > 0) {
		if (frame_int32_at(buf, off, &len) == -1)
			return (-1);
		off += 4;
		if (len > 0)
			off += (size_t)len;
		else if ((len == EMBER_PAIR || len == EMBER_GROUP) &&
		    frame_skip_keyed(buf, &off, len) == -1)
			return (-1);
	}
	*bytes = off;
	return (0);
}

void
evbuffer_add_int32(struct evbuffer *buf, int32_t v)
{
	unsigned char	b[4];

	be32_put(b, v);
	if (evbuffer_add(buf, b, sizeof b) == -1)
		fatalx("evbuffer_add failed");
}

void
evbuffer_add_frame(struct evbuffer *buf, const void *data, size_t len)
{
	evbuffer_add_int32(buf, (int32_t)len);
	if (len > 0 && evbuffer_add(buf, data, len) == -1)
		fatalx("evbuffer_add failed");
}
