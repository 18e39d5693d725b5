/*
 * Tests for common/frame.c, common/record.h and common/fdpass.c: big-endian
 * integers, records, frames on evbuffers and file descriptors, fork-server messages.
 */
#include <sys/socket.h>
#include <sys/uio.h>
#include <sys/wait.h>

#include <errno.h>
#include <fcntl.h>
#include <limits.h>
#include <signal.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include <event2/buffer.h>

#include "fdpass.h"
#include "frame.h"
#include "protocol.h"
#include "record.h"
#include "suites.h"

START_TEST(test_be32)
{
	static const int32_t values[] = {
		0, 1, -1, 2, -2, 255, 256, -256, 0x12345678, -0x12345678,
		INT32_MAX, INT32_MIN, INT32_MAX - 1, INT32_MIN + 1,
		EMBER_END_OF_DATA_SECTION, EMBER_NULL, EMBER_RECORD_BATCH,
	};
	unsigned char	b[6];
	size_t		i;

	be32_put(b, 0x01020304);
	ck_assert_mem_eq(b, "\x01\x02\x03\x04", 4);
	be32_put(b, -1);
	ck_assert_mem_eq(b, "\xff\xff\xff\xff", 4);
	be32_put(b, EMBER_NULL);
	ck_assert_mem_eq(b, "\xff\xff\xff\xfb", 4);
	be32_put(b, INT32_MIN);
	ck_assert_mem_eq(b, "\x80\x00\x00\x00", 4);

	for (i = 0; i < sizeof values / sizeof *values; i++) {
		/* Unaligned on purpose. */
		memset(b, 0xaa, sizeof b);
		be32_put(b + 1, values[i]);
		ck_assert_int_eq(be32_get(b + 1), values[i]);
		ck_assert_uint_eq(b[0], 0xaa);
		ck_assert_uint_eq(b[5], 0xaa);
	}
}
END_TEST

START_TEST(test_be64)
{
	static const int64_t values[] = {
		0, 1, -1, 0x0102030405060708LL, -0x0102030405060708LL,
		INT64_MAX, INT64_MIN, INT64_MAX - 1, INT64_MIN + 1,
		(int64_t)INT32_MAX + 1, (int64_t)INT32_MIN - 1,
		0x80000000LL, 0xffffffffLL, -0x100000000LL,
	};
	unsigned char	b[10];
	size_t		i;

	be64_put(b, 0x0102030405060708LL);
	ck_assert_mem_eq(b, "\x01\x02\x03\x04\x05\x06\x07\x08", 8);
	be64_put(b, -2);
	ck_assert_mem_eq(b, "\xff\xff\xff\xff\xff\xff\xff\xfe", 8);
	be64_put(b, INT64_MIN);
	ck_assert_mem_eq(b, "\x80\x00\x00\x00\x00\x00\x00\x00", 8);

	for (i = 0; i < sizeof values / sizeof *values; i++) {
		memset(b, 0xaa, sizeof b);
		be64_put(b + 1, values[i]);
		ck_assert_int_eq(be64_get(b + 1), values[i]);
		ck_assert_uint_eq(b[0], 0xaa);
		ck_assert_uint_eq(b[9], 0xaa);
	}
}
END_TEST

START_TEST(test_record_codec)
{
	unsigned char	 buf[64], *p;
	int64_t		 count;

	/* A record, a null one, an empty one: length words and bytes. */
	p = record_put(buf, "abc", 3, 0);
	ck_assert_ptr_eq(p, buf + record_size(3));
	ck_assert_int_eq(be32_get(buf), 3);
	ck_assert_int_eq(memcmp(buf + RECORD_HEAD, "abc", 3), 0);
	p = record_put(p, "ignored", 7, 1);
	ck_assert_int_eq(be32_get(buf + 7), EMBER_NULL);
	ck_assert_ptr_eq(p, buf + 11);
	p = record_put(p, NULL, 0, 0);
	ck_assert_int_eq(be32_get(buf + 11), 0);
	ck_assert_ptr_eq(p, buf + 15);

	/* A counted record's count frame, read back; a short one, or one
	 * whose frame is not 8 bytes, is refused. */
	record_count_put(buf, INT64_C(-2) << 40);
	ck_assert_int_eq(record_count_get(buf, RECORD_COUNT_FRAME, &count), 0);
	ck_assert(count == INT64_C(-2) << 40);
	ck_assert_int_eq(record_count_get(buf, RECORD_COUNT_FRAME - 1,
	    &count), -1);
	be32_put(buf, 7);
	ck_assert_int_eq(record_count_get(buf, sizeof buf, &count), -1);
	ck_assert_uint_eq(record_counted_size(5), 4 + 5 + 4 + 8);
}
END_TEST

START_TEST(test_frame_peek)
{
	struct evbuffer	*buf;
	int32_t		 len;

	ck_assert_ptr_nonnull(buf = evbuffer_new());

	/* Nothing, then a partial header. */
	len = 99;
	ck_assert_int_eq(frame_peek(buf, 100, &len), FRAME_INCOMPLETE);
	evbuffer_add(buf, "\x00\x00\x00", 3);
	ck_assert_int_eq(frame_peek(buf, 100, &len), FRAME_INCOMPLETE);

	/* A header of 10 with a partial body. */
	evbuffer_add(buf, "\x0a" "01234", 6);
	ck_assert_int_eq(frame_peek(buf, 100, &len), FRAME_INCOMPLETE);
	evbuffer_add(buf, "5678", 4);
	ck_assert_int_eq(frame_peek(buf, 100, &len), FRAME_INCOMPLETE);
	evbuffer_add(buf, "9", 1);
	ck_assert_int_eq(frame_peek(buf, 100, &len), FRAME_OK);
	ck_assert_int_eq(len, 10);
	/* Peeking removes nothing. */
	ck_assert_uint_eq(evbuffer_get_length(buf), 14);
	ck_assert_int_eq(frame_peek(buf, 100, &len), FRAME_OK);
	evbuffer_drain(buf, 14);

	/* An empty frame is whole with its header alone. */
	evbuffer_add_int32(buf, 0);
	ck_assert_int_eq(frame_peek(buf, 100, &len), FRAME_OK);
	ck_assert_int_eq(len, 0);
	evbuffer_drain(buf, 4);

	evbuffer_free(buf);
}
END_TEST

START_TEST(test_frame_skip_records)
{
	struct evbuffer	*b = evbuffer_new();
	size_t		 bytes = 99;

	evbuffer_add_frame(b, "ab", 2);
	evbuffer_add_int32(b, EMBER_NULL);
	evbuffer_add_frame(b, "", 0);
	evbuffer_add_frame(b, "xyz", 3);
	ck_assert_int_eq(frame_skip_records(b, 0, &bytes), 0);
	ck_assert_uint_eq(bytes, 0);
	ck_assert_int_eq(frame_skip_records(b, 2, &bytes), 0);
	ck_assert_uint_eq(bytes, 6 + 4);	/* "ab", then NULL's header */
	ck_assert_int_eq(frame_skip_records(b, 4, &bytes), 0);
	ck_assert_uint_eq(bytes, 6 + 4 + 4 + 7);
	/* Fewer records than asked for. */
	ck_assert_int_eq(frame_skip_records(b, 5, &bytes), -1);
	evbuffer_free(b);
}
END_TEST

START_TEST(test_frame_skip_keyed_records)
{
	struct evbuffer	*b = evbuffer_new();
	size_t		 bytes = 99;

	/* A pair ("k", "v"), a group ("g", ["a", null]), a pair ("", null),
	 * a plain record: four records, each skipped whole. */
	evbuffer_add_int32(b, EMBER_PAIR);
	evbuffer_add_frame(b, "k", 1);
	evbuffer_add_frame(b, "v", 1);
	evbuffer_add_int32(b, EMBER_GROUP);
	evbuffer_add_frame(b, "g", 1);
	evbuffer_add_int32(b, 2);
	evbuffer_add_frame(b, "a", 1);
	evbuffer_add_int32(b, EMBER_NULL);
	evbuffer_add_int32(b, EMBER_PAIR);
	evbuffer_add_frame(b, "", 0);
	evbuffer_add_int32(b, EMBER_NULL);
	evbuffer_add_frame(b, "xyz", 3);
	ck_assert_int_eq(frame_skip_records(b, 1, &bytes), 0);
	ck_assert_uint_eq(bytes, 4 + 5 + 5);
	ck_assert_int_eq(frame_skip_records(b, 2, &bytes), 0);
	ck_assert_uint_eq(bytes, 14 + 4 + 5 + 4 + 5 + 4);
	ck_assert_int_eq(frame_skip_records(b, 3, &bytes), 0);
	ck_assert_uint_eq(bytes, 36 + 4 + 4 + 4);
	ck_assert_int_eq(frame_skip_records(b, 4, &bytes), 0);
	ck_assert_uint_eq(bytes, evbuffer_get_length(b));
	ck_assert_int_eq(frame_skip_records(b, 5, &bytes), -1);
	/* A keyed record cut short is not there. */
	evbuffer_add_int32(b, EMBER_GROUP);
	evbuffer_add_frame(b, "g", 1);
	evbuffer_add_int32(b, 1);
	ck_assert_int_eq(frame_skip_records(b, 5, &bytes), -1);
	evbuffer_free(b);
}
END_TEST

START_TEST(test_frame_peek_special)
{
	static const int32_t specials[] = {
		EMBER_END_OF_DATA_SECTION, EMBER_EXCEPTION_THROWN,
		EMBER_TIMING_DATA, EMBER_END_OF_STREAM, EMBER_NULL,
		EMBER_RECORD_BATCH, INT32_MIN,
	};
	struct evbuffer	*buf;
	int32_t		 len;
	size_t		 i;

	ck_assert_ptr_nonnull(buf = evbuffer_new());
	for (i = 0; i < sizeof specials / sizeof *specials; i++) {
		evbuffer_add_int32(buf, specials[i]);
		/* Whole with no body, whatever the limit. */
		ck_assert_int_eq(frame_peek(buf, 0, &len), FRAME_OK);
		ck_assert_int_eq(len, specials[i]);
		ck_assert_uint_eq(evbuffer_get_length(buf), 4);
		evbuffer_drain(buf, 4);
	}
	evbuffer_free(buf);
}
END_TEST

START_TEST(test_frame_peek_limit)
{
	struct evbuffer	*buf;
	unsigned char	*body;
	int32_t		 len;
	const size_t	 max = 4096;

	ck_assert_ptr_nonnull(buf = evbuffer_new());
	ck_assert_ptr_nonnull(body = calloc(1, max + 1));

	/* Over the limit: refused from the header alone. */
	evbuffer_add_int32(buf, (int32_t)max + 1);
	ck_assert_int_eq(frame_peek(buf, max, &len), FRAME_TOO_LARGE);
	ck_assert_int_eq(len, (int32_t)max + 1);
	evbuffer_add(buf, body, max + 1);
	ck_assert_int_eq(frame_peek(buf, max, &len), FRAME_TOO_LARGE);
	evbuffer_drain(buf, evbuffer_get_length(buf));

	evbuffer_add_int32(buf, INT32_MAX);
	ck_assert_int_eq(frame_peek(buf, max, &len), FRAME_TOO_LARGE);
	evbuffer_drain(buf, evbuffer_get_length(buf));

	/* Exactly the limit is fine, once all of it is there. */
	evbuffer_add_int32(buf, (int32_t)max);
	evbuffer_add(buf, body, max - 1);
	ck_assert_int_eq(frame_peek(buf, max, &len), FRAME_INCOMPLETE);
	evbuffer_add(buf, body, 1);
	ck_assert_int_eq(frame_peek(buf, max, &len), FRAME_OK);
	ck_assert_int_eq(len, (int32_t)max);

	free(body);
	evbuffer_free(buf);
}
END_TEST

START_TEST(test_evbuffer_add_frame)
{
	struct evbuffer	*buf;
	unsigned char	 out[32];
	int32_t		 len;

	ck_assert_ptr_nonnull(buf = evbuffer_new());
	evbuffer_add_frame(buf, "hello", 5);
	evbuffer_add_frame(buf, "", 0);
	evbuffer_add_int32(buf, EMBER_NULL);
	evbuffer_add_int32(buf, 0x7f000001);
	ck_assert_uint_eq(evbuffer_get_length(buf), 9 + 4 + 4 + 4);
	ck_assert_int_eq(evbuffer_copyout(buf, out, sizeof out), 21);
	ck_assert_mem_eq(out, "\x00\x00\x00\x05hello" "\x00\x00\x00\x00"
	    "\xff\xff\xff\xfb" "\x7f\x00\x00\x01", 21);

	/* What evbuffer_add_frame writes, frame_peek reads back. */
	ck_assert_int_eq(frame_peek(buf, 5, &len), FRAME_OK);
	ck_assert_int_eq(len, 5);
	evbuffer_drain(buf, 9);
	ck_assert_int_eq(frame_peek(buf, 5, &len), FRAME_OK);
	ck_assert_int_eq(len, 0);
	evbuffer_free(buf);
}
END_TEST

/* Make a socketpair and size bytes of a pattern to send over it. */
static unsigned char *
frame_pattern(size_t size, int sv[2])
{
	unsigned char	*out;
	size_t		 i;

	ck_assert_int_eq(socketpair(AF_UNIX, SOCK_STREAM, 0, sv), 0);
	ck_assert_ptr_nonnull(out = malloc(size));
	for (i = 0; i < size; i++)
		out[i] = (unsigned char)(i * 7 + i / 251);
	return (out);
}

START_TEST(test_fd_full)
{
	const size_t	 size = 4 * 1024 * 1024;
	unsigned char	*out, *in;
	int		 sv[2], status;
	pid_t		 pid;

	out = frame_pattern(size, sv);
	ck_assert_ptr_nonnull(in = malloc(size));

	/* More than a socket buffer: both sides see short counts. */
	ck_assert_int_ne(pid = fork(), -1);
	if (pid == 0) {
		close(sv[0]);
		_exit(fd_write_full(sv[1], out, size) == 0 &&
		    fd_write_int32(sv[1], -5) == 0 &&
		    fd_write_int32(sv[1], INT32_MIN) == 0 ? 0 : 1);
	}
	close(sv[1]);
	ck_assert_int_eq(fd_read_full(sv[0], in, size), 0);
	ck_assert_mem_eq(in, out, size);
	{
		int32_t v;

		ck_assert_int_eq(fd_read_int32(sv[0], &v), 0);
		ck_assert_int_eq(v, -5);
		ck_assert_int_eq(fd_read_int32(sv[0], &v), 0);
		ck_assert_int_eq(v, INT32_MIN);
	}
	ck_assert_int_eq(waitpid(pid, &status, 0), pid);
	ck_assert(WIFEXITED(status) && WEXITSTATUS(status) == 0);

	/* The writer is gone: end of file is -1 with errno 0. */
	errno = EINVAL;
	ck_assert_int_eq(fd_read_full(sv[0], in, 1), -1);
	ck_assert_int_eq(errno, 0);
	close(sv[0]);
	free(out);
	free(in);
}
END_TEST

START_TEST(test_fd_writev_full)
{
	const size_t	 size = 3 * 1024 * 1024 + 17;
	unsigned char	*out, *in;
	struct iovec	 iov[3];
	int		 sv[2], status;
	pid_t		 pid;

	out = frame_pattern(size, sv);
	ck_assert_ptr_nonnull(in = malloc(size));

	/* Uneven iovecs larger than the socket buffer: writes stop inside
	 * one and the rest must follow from there. */
	ck_assert_int_ne(pid = fork(), -1);
	if (pid == 0) {
		close(sv[0]);
		iov[0].iov_base = out;
		iov[0].iov_len = 5;
		iov[1].iov_base = out + 5;
		iov[1].iov_len = 2 * 1024 * 1024;
		iov[2].iov_base = out + 5 + 2 * 1024 * 1024;
		iov[2].iov_len = size - 5 - 2 * 1024 * 1024;
		_exit(fd_writev_full(sv[1], iov, 3) == 0 ? 0 : 1);
	}
	close(sv[1]);
	ck_assert_int_eq(fd_read_full(sv[0], in, size), 0);
	ck_assert_mem_eq(in, out, size);
	ck_assert_int_eq(waitpid(pid, &status, 0), pid);
	ck_assert(WIFEXITED(status) && WEXITSTATUS(status) == 0);
	close(sv[0]);
	free(out);
	free(in);
}
END_TEST

START_TEST(test_fd_eof)
{
	unsigned char	buf[8];
	int32_t		v;
	int		sv[2];

	signal(SIGPIPE, SIG_IGN);

	/* A frame cut short by end of file. */
	ck_assert_int_eq(socketpair(AF_UNIX, SOCK_STREAM, 0, sv), 0);
	ck_assert_int_eq(fd_write_full(sv[1], "\x00\x00", 2), 0);
	close(sv[1]);
	errno = EINVAL;
	ck_assert_int_eq(fd_read_int32(sv[0], &v), -1);
	ck_assert_int_eq(errno, 0);
	close(sv[0]);

	/* Nothing at all. */
	ck_assert_int_eq(socketpair(AF_UNIX, SOCK_STREAM, 0, sv), 0);
	close(sv[1]);
	errno = EINVAL;
	ck_assert_int_eq(fd_read_full(sv[0], buf, sizeof buf), -1);
	ck_assert_int_eq(errno, 0);
	/* A zero-length read needs nothing. */
	ck_assert_int_eq(fd_read_full(sv[0], buf, 0), 0);
	close(sv[0]);

	/* Writing to a closed peer is an error, not a signal. */
	ck_assert_int_eq(socketpair(AF_UNIX, SOCK_STREAM, 0, sv), 0);
	close(sv[0]);
	ck_assert_int_eq(fd_write_int32(sv[1], 1), -1);
	ck_assert_int_eq(errno, EPIPE);
	close(sv[1]);
}
END_TEST

START_TEST(test_fs_msg)
{
	struct fs_msg	out = { FS_EXIT, -7, 4242, INT32_MIN }, in;
	int		sv[2], fd = 99;

	ck_assert_int_eq(socketpair(AF_UNIX, SOCK_SEQPACKET, 0, sv), 0);
	ck_assert_int_eq(fs_msg_send(sv[0], &out, -1), 0);
	ck_assert_int_eq(fs_msg_recv(sv[1], &in, &fd), 1);
	ck_assert_int_eq(fd, -1);
	ck_assert_int_eq(in.type, FS_EXIT);
	ck_assert_int_eq(in.id, -7);
	ck_assert_int_eq(in.pid, 4242);
	ck_assert_int_eq(in.value, INT32_MIN);

	/* Both directions, one message per packet. */
	out.type = FS_FORK;
	out.id = 1;
	ck_assert_int_eq(fs_msg_send(sv[1], &out, -1), 0);
	out.id = 2;
	ck_assert_int_eq(fs_msg_send(sv[1], &out, -1), 0);
	ck_assert_int_eq(fs_msg_recv(sv[0], &in, &fd), 1);
	ck_assert_int_eq(in.id, 1);
	ck_assert_int_eq(fs_msg_recv(sv[0], &in, &fd), 1);
	ck_assert_int_eq(in.id, 2);

	/* Nothing waiting on a non-blocking socket. */
	ck_assert_int_ne(fcntl(sv[0], F_SETFL, O_NONBLOCK), -1);
	ck_assert_int_eq(fs_msg_recv(sv[0], &in, &fd), -1);
	ck_assert_int_eq(errno, EAGAIN);

	/* The peer closed: end of file. */
	close(sv[1]);
	ck_assert_int_eq(fs_msg_recv(sv[0], &in, &fd), 0);
	ck_assert_int_eq(fd, -1);
	close(sv[0]);
}
END_TEST

START_TEST(test_fs_msg_names)
{
	ck_assert_str_eq(fs_msg_type_name(FS_HELLO), "FS_HELLO");
	ck_assert_str_eq(fs_msg_type_name(FS_FORK), "FS_FORK");
	ck_assert_str_eq(fs_msg_type_name(FS_FORKED), "FS_FORKED");
	ck_assert_str_eq(fs_msg_type_name(FS_FORK_FAILED), "FS_FORK_FAILED");
	ck_assert_str_eq(fs_msg_type_name(FS_KILL), "FS_KILL");
	ck_assert_str_eq(fs_msg_type_name(FS_EXIT), "FS_EXIT");
	ck_assert_str_eq(fs_msg_type_name(FS_HELPER), "FS_HELPER");
	ck_assert_str_eq(fs_msg_type_name(FS_HELPER_FORKED),
	    "FS_HELPER_FORKED");
	ck_assert_str_eq(fs_msg_type_name(FS_HELPER_FAILED),
	    "FS_HELPER_FAILED");
	ck_assert_str_eq(fs_msg_type_name(FS_PYLOAD), "FS_PYLOAD");
	ck_assert_str_eq(fs_msg_type_name(FS_PYDROP), "FS_PYDROP");
	ck_assert_str_eq(fs_msg_type_name(0), "unknown");
	ck_assert_str_eq(fs_msg_type_name(12), "unknown");
}
END_TEST

START_TEST(test_fs_msg_fd)
{
	struct fs_msg	out = { FS_FORKED, 3, 1234, 0 }, in;
	int		sv[2], p[2], fd = -1;
	char		c = 0;

	ck_assert_int_eq(socketpair(AF_UNIX, SOCK_SEQPACKET, 0, sv), 0);
	ck_assert_int_eq(pipe(p), 0);
	ck_assert_int_eq(fs_msg_send(sv[0], &out, p[1]), 0);

	ck_assert_int_eq(fs_msg_recv(sv[1], &in, &fd), 1);
	ck_assert_int_eq(in.type, FS_FORKED);
	ck_assert_int_eq(in.id, 3);
	ck_assert_int_eq(in.pid, 1234);
	ck_assert_int_ge(fd, 0);
	ck_assert_int_ne(fd, p[1]);
	ck_assert_int_eq(fcntl(fd, F_GETFD) & FD_CLOEXEC, FD_CLOEXEC);
	close(p[1]);

	/* The received descriptor is the pipe's write end. */
	ck_assert_int_eq(write(fd, "x", 1), 1);
	ck_assert_int_eq(read(p[0], &c, 1), 1);
	ck_assert_int_eq(c, 'x');
	close(fd);
	/* That was the last write end. */
	ck_assert_int_eq(read(p[0], &c, 1), 0);
	close(p[0]);
	close(sv[0]);
	close(sv[1]);
}
END_TEST

START_TEST(test_fs_msg_bad_size)
{
	struct fs_msg	in;
	unsigned char	big[FS_MSG_SIZE + 4];
	int		sv[2], fd = 99;

	ck_assert_int_eq(socketpair(AF_UNIX, SOCK_SEQPACKET, 0, sv), 0);

	ck_assert_int_eq(send(sv[0], "\x00\x00\x00\x01\x00\x00\x00\x02", 8, 0),
	    8);
	ck_assert_int_eq(fs_msg_recv(sv[1], &in, &fd), -1);
	ck_assert_int_eq(errno, EBADMSG);
	ck_assert_int_eq(fd, -1);

	memset(big, 0, sizeof big);
	ck_assert_int_eq(send(sv[0], big, sizeof big, 0), (ssize_t)sizeof big);
	ck_assert_int_eq(fs_msg_recv(sv[1], &in, &fd), -1);
	ck_assert_int_eq(errno, EBADMSG);
	ck_assert_int_eq(fd, -1);

	/* The channel is still in step: a good message reads fine. */
	in.type = FS_HELLO;
	in.id = EMBER_PROTOCOL_VERSION;
	in.pid = 1;
	in.value = 0;
	ck_assert_int_eq(fs_msg_send(sv[0], &in, -1), 0);
	memset(&in, 0, sizeof in);
	ck_assert_int_eq(fs_msg_recv(sv[1], &in, &fd), 1);
	ck_assert_int_eq(in.type, FS_HELLO);
	ck_assert_int_eq(in.id, EMBER_PROTOCOL_VERSION);
	close(sv[0]);
	close(sv[1]);
}
END_TEST

START_TEST(test_fs_msg_bad_size_fd)
{
	struct fs_msg	 in;
	struct msghdr	 mh;
	struct iovec	 iov;
	union {
		struct cmsghdr	hdr;
		char		buf[CMSG_SPACE(sizeof(int))];
	} cmsg;
	int		 sv[2], p[2], fd = 99;
	char		 c;

	/* A short packet carrying a descriptor: refused, and the descriptor
	 * is closed rather than leaked. */
	ck_assert_int_eq(socketpair(AF_UNIX, SOCK_SEQPACKET, 0, sv), 0);
	ck_assert_int_eq(pipe(p), 0);
	memset(&mh, 0, sizeof mh);
	memset(&cmsg, 0, sizeof cmsg);
	iov.iov_base = (void *)"\x00\x00\x00\x03";
	iov.iov_len = 4;
	mh.msg_iov = &iov;
	mh.msg_iovlen = 1;
	mh.msg_control = cmsg.buf;
	mh.msg_controllen = sizeof cmsg.buf;
	cmsg.hdr.cmsg_len = CMSG_LEN(sizeof(int));
	cmsg.hdr.cmsg_level = SOL_SOCKET;
	cmsg.hdr.cmsg_type = SCM_RIGHTS;
	memcpy(CMSG_DATA(&cmsg.hdr), &p[1], sizeof p[1]);
	ck_assert_int_eq(sendmsg(sv[0], &mh, 0), 4);
	close(p[1]);

	ck_assert_int_eq(fs_msg_recv(sv[1], &in, &fd), -1);
	ck_assert_int_eq(errno, EBADMSG);
	ck_assert_int_eq(fd, -1);
	/* No copy of the write end is left open anywhere. */
	ck_assert_int_eq(read(p[0], &c, 1), 0);
	close(p[0]);
	close(sv[0]);
	close(sv[1]);
}
END_TEST

/* Build the frame suite. */
Suite *
frame_suite(void)
{
	Suite	*s = suite_create("frame");
	TCase	*tc;

	tc = tcase_create("integers");
	tcase_add_test(tc, test_be32);
	tcase_add_test(tc, test_be64);
	tcase_add_test(tc, test_record_codec);
	suite_add_tcase(s, tc);

	tc = tcase_create("evbuffer");
	tcase_add_test(tc, test_frame_peek);
	tcase_add_test(tc, test_frame_peek_special);
	tcase_add_test(tc, test_frame_skip_records);
	tcase_add_test(tc, test_frame_skip_keyed_records);
	tcase_add_test(tc, test_frame_peek_limit);
	tcase_add_test(tc, test_evbuffer_add_frame);
	suite_add_tcase(s, tc);

	tc = tcase_create("fd");
	tcase_set_timeout(tc, 10);
	tcase_add_test(tc, test_fd_full);
	tcase_add_test(tc, test_fd_writev_full);
	tcase_add_test(tc, test_fd_eof);
	suite_add_tcase(s, tc);

	tc = tcase_create("fdpass");
	tcase_set_timeout(tc, 5);
	tcase_add_test(tc, test_fs_msg);
	tcase_add_test(tc, test_fs_msg_names);
	tcase_add_test(tc, test_fs_msg_fd);
	tcase_add_test(tc, test_fs_msg_bad_size);
	tcase_add_test(tc, test_fs_msg_bad_size_fd);
	suite_add_tcase(s, tc);

	return (s);
}
