#include <sys/mman.h>

#include <errno.h>
#include <fcntl.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include <event2/buffer.h>

#include "emberd.h"
#include "limit.h"
#include "log.h"
#include "spool.h"
#include "xmalloc.h"

/* Batches appended are indexed by their sizes, so that whole records come
 * back without parsing; small ones share an entry up to this. */
#define SPOOL_MERGE	(64 * 1024)

struct spool_batch {
	size_t		bytes;
	int32_t		records;
};

struct spool {
	uid_t			 uid;
	int			 fd;
	off_t			 written;	/* end of the file */
	off_t			 read;		/* taken up to here */
	int64_t			 charged;	/* to LIMIT_SPOOL */
	struct spool_batch	*batches;	/* not taken yet, from first */
	size_t			 first, nbatches, size;
};

/* A nameless file: O_TMPFILE in emberd's local directory, or memory. */
static int
spool_open(char **err)
{
	const char	*dir = ember_local_dir();
	int		 fd = -1;

	if (dir != NULL)
		fd = open(dir, O_TMPFILE | O_RDWR | O_EXCL | O_CLOEXEC |
		    O_NOCTTY, 0600);
	if (fd == -1)
		fd = memfd_create("ember-spool", MFD_CLOEXEC);
	if (fd == -1)
		xasprintf(err, "cannot make a spool file: %s",
		    strerror(errno));
	return (fd);
}

struct spool *
spool_create(uid_t uid, char **err)
{
	struct spool	*s;
	int		 fd;

	if ((fd = spool_open(err)) == -1)
		return (NULL);
	s = xcalloc(1, sizeof *s);
	s->uid = uid;
	s->fd = fd;
	return (s);
}

void
spool_free(struct spool *s)
{
	if (s == NULL)
		return;
	if (s->charged > 0)
		limit_release(s->uid, LIMIT_SPOOL, s->charged);
	close(s->fd);
	free(s->batches);
	free(s);
}

size_t
spool_pending(const struct spool *s)
{
	return ((size_t)(s->written - s->read));
}

/* Write len bytes of p at the end of the file. */
static int
spool_write(struct spool *s, const void *p, size_t len, char **err)
{
	ssize_t	n;

	while (len > 0) {
		n = pwrite(s->fd, p, len, s->written);
		if (n == -1 && errno == EINTR)
			continue;
		if (n <= 0) {
			xasprintf(err, "cannot write the spool: %s",
			    n == 0 ? "no space" : strerror(errno));
			return (-1);
		}
		s->written += n;
		p = (const char *)p + n;
		len -= (size_t)n;
	}
	return (0);
}

/* Index a batch appended: on the last entry if both are small. */
static void
spool_index(struct spool *s, size_t bytes, int32_t records)
{
	struct spool_batch	*last;

	if (s->nbatches > 0) {
		last = &s->batches[s->first + s->nbatches - 1];
		if (last->bytes + bytes <= SPOOL_MERGE) {
			last->bytes += bytes;
			last->records += records;
			return;
		}
	}
	if (s->first + s->nbatches == s->size) {
		if (s->first > 0) {
			memmove(s->batches, s->batches + s->first,
			    s->nbatches * sizeof *s->batches);
			s->first = 0;
		} else {
			s->size = s->size * 2 + 16;
			s->batches = xreallocarray(s->batches, s->size,
			    sizeof *s->batches);
		}
	}
	s->batches[s->first + s->nbatches].bytes = bytes;
	s->batches[s->first + s->nbatches].records = records;
	s->nbatches++;
}

int
spool_append(struct spool *s, struct evbuffer *from, size_t bytes,
    int32_t records, char **err)
{
	struct evbuffer_iovec	 v;
	size_t			 left = bytes, len;

	if (limit_charge(s->uid, LIMIT_SPOOL, (int64_t)bytes, err) == -1) {
		evbuffer_drain(from, bytes);
		return (-1);
	}
	s->charged += (int64_t)bytes;
	while (left > 0) {
		if (evbuffer_peek(from, -1, NULL, &v, 1) < 1)
			fatalx("spool: short batch");
		len = v.iov_len < left ? v.iov_len : left;
		if (spool_write(s, v.iov_base, len, err) == -1) {
			evbuffer_drain(from, left);
			return (-1);
		}
		evbuffer_drain(from, len);
		left -= len;
	}
	spool_index(s, bytes, records);
	return (0);
}

/* Give back the file's room for what was taken: at once in the middle,
 * all of it when the spool is empty. */
static void
spool_trim(struct spool *s, off_t from, size_t len)
{
	if (s->read == s->written) {
		if (ftruncate(s->fd, 0) == 0)
			s->read = s->written = 0;
		return;
	}
	(void)fallocate(s->fd, FALLOC_FL_PUNCH_HOLE | FALLOC_FL_KEEP_SIZE,
	    from, (off_t)len);
}

int
spool_take(struct spool *s, struct evbuffer *to, size_t max, size_t *bytes,
    int32_t *records, char **err)
{
	struct evbuffer_iovec	 v;
	struct spool_batch	*b;
	size_t			 want = 0, got = 0;
	int32_t			 n = 0;
	ssize_t			 r;

	while (s->nbatches > 0 && (want == 0 || want +
	    s->batches[s->first].bytes <= max)) {
		b = &s->batches[s->first];
		want += b->bytes;
		n += b->records;
		s->first++;
		s->nbatches--;
	}
	if (s->nbatches == 0)
		s->first = 0;
	if (evbuffer_reserve_space(to, (ev_ssize_t)want, &v, 1) != 1)
		fatalx("evbuffer_reserve_space failed");
	while (got < want) {
		r = pread(s->fd, (char *)v.iov_base + got, want - got,
		    s->read + (off_t)got);
		if (r == -1 && errno == EINTR)
			continue;
		if (r <= 0) {
			xasprintf(err, "cannot read the spool: %s",
			    r == 0 ? "short file" : strerror(errno));
			return (-1);
		}
		got += (size_t)r;
	}
	v.iov_len = want;
	evbuffer_commit_space(to, &v, 1);
	s->read += (off_t)want;
	spool_trim(s, s->read - (off_t)want, want);
	limit_release(s->uid, LIMIT_SPOOL, (int64_t)want);
	s->charged -= (int64_t)want;
	*bytes = want;
	*records = n;
	return (0);
}
