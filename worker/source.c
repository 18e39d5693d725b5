#include <sys/stat.h>

#include <errno.h>
#include <fcntl.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "checkpoint.h"
#include "log.h"
#include "mapped.h"
#include "ops.h"
#include "output.h"
#include "plan.h"
#include "source.h"
#include "xmalloc.h"

/* A text file is read in blocks of this size; the buffer grows only for a
 * line longer than it, and shrinks back after the task. */
#define SOURCE_TEXT_BUFFER	(256 * 1024)

/* The read buffer, kept across tasks. */
static char	*source_buf;
static size_t	 source_size;

/* Format v in decimal, ending at end; return where it starts. */
static char *
source_format_int(int64_t v, char *end)
{
	uint64_t	u = v < 0 ? -(uint64_t)v : (uint64_t)v;
	char		*p = end;

	do {
		*--p = '0' + (char)(u % 10);
		u /= 10;
	} while (u != 0);
	if (v < 0)
		*--p = '-';
	return (p);
}

/* Push a range partition: numbers as decimal text. */
static int
source_run_range(const struct plan *plan, int partition, struct chain *chain,
    int64_t *records_in)
{
	char		 buf[24], *end = buf + sizeof buf;
	struct record	 r = { NULL, 0, 0, 0, NULL, 0 };
	int64_t		 first, count, i;
	uint64_t	 v;
	int		 rc;

	plan_range_slice(plan, partition, &first, &count);
	v = (uint64_t)first;
	for (i = 0; i < count; i++) {
		r.data = source_format_int((int64_t)v, end);
		r.len = (size_t)(end - r.data);
		(*records_in)++;
		if ((rc = chain_push(chain, &r)) != OP_OK)
			return (rc == OP_STOP ? OP_OK : OP_FAIL);
		v += (uint64_t)plan->range_step;	/* wraps past the end */
	}
	return (OP_OK);
}

/* Push a parallelize partition: strings, and nulls. */
static int
source_run_parallelize(const struct plan *plan, int partition,
    struct chain *chain, int64_t *records_in)
{
	struct record	 r = { NULL, 0, 0, 0, NULL, 0 };
	json_t		*j;
	int64_t		 begin, end, i;
	int		 rc;

	plan_slice((int64_t)json_array_size(plan->records), plan->partitions,
	    partition, &begin, &end);
	for (i = begin; i < end; i++) {
		j = json_array_get(plan->records, (size_t)i);
		if (json_is_string(j)) {
			r.data = json_string_value(j);
			r.len = json_string_length(j);
			r.null = 0;
		} else {
			r.data = NULL;
			r.len = 0;
			r.null = 1;
		}
		(*records_in)++;
		if ((rc = chain_push(chain, &r)) != OP_OK)
			return (rc == OP_STOP ? OP_OK : OP_FAIL);
	}
	return (OP_OK);
}

/*
 * Push the complete lines of source_buf[*start, fill) that start before
 * end (a file offset; base is that of source_buf[0]) as one block, and
 * move *start past what the chain took.  OP_STOP once the block held the
 * partition's last line.
 */
static int
source_push_block(struct chain *chain, int64_t base, int64_t end,
    size_t *start, size_t fill, int64_t *records_in)
{
	const char	*last;
	size_t		 stop, lim, used;
	int64_t		 lines;
	int		 rc, final = 0;

	if (base + (int64_t)*start >= end || *start >= fill)
		return (OP_OK);
	last = memrchr(source_buf + *start, '\n', fill - *start);
	if (last == NULL)
		return (OP_OK);
	stop = (size_t)(last - source_buf) + 1;
	lim = (size_t)(end - base);	/* lines start before it */
	if (stop > lim) {
		/* The line that holds lim - 1 is the partition's last. */
		last = memchr(source_buf + lim - 1, '\n', stop - (lim - 1));
		stop = (size_t)(last - source_buf) + 1;
		final = 1;
	}
	rc = chain_push_lines(chain, source_buf + *start, stop - *start,
	    &used, &lines);
	*records_in += lines;
	*start += used;
	if (rc == OP_OK && final)
		rc = OP_STOP;
	return (rc);
}

/*
 * Push the lines of a mapped file that start in [begin, end), size bytes
 * of it being there, to a chain that takes blocks: the blocks are the
 * mapping's own bytes, about SOURCE_TEXT_BUFFER at a time, nothing is
 * copied.  The same lines as source_run_file's reads.
 */
static int
source_push_mapped(const char *m, int64_t begin, int64_t end, int64_t size,
    struct chain *chain, int64_t *records_in)
{
	struct record	 r = { NULL, 0, 0, 0, NULL, 0 };
	const char	*last;
	int64_t		 start = begin, lim, stop, lines;
	size_t		 used;
	int		 rc, final = 0;

	if (begin > 0) {
		/* Lines start after a newline: skip the partial one. */
		if ((last = memchr(m + begin - 1, '\n',
		    (size_t)(size - begin + 1))) == NULL)
			return (OP_OK);
		start = last - m + 1;
	}
	while (start < end && start < size && !final) {
		lim = size - start > SOURCE_TEXT_BUFFER ?
		    start + SOURCE_TEXT_BUFFER : size;
		last = memrchr(m + start, '\n', (size_t)(lim - start));
		if (last == NULL)	/* a line longer than a block */
			last = memchr(m + lim, '\n', (size_t)(size - lim));
		if (last == NULL) {
			/* The file's last line, with no final newline. */
			r.data = m + start;
			r.len = (size_t)(size - start);
			(*records_in)++;
			rc = chain_push(chain, &r);
			if (mapped_shrank())
				return (OP_FAIL);
			return (rc == OP_FAIL ? OP_FAIL : OP_OK);
		}
		stop = last - m + 1;
		if (stop > end) {
			/* The line that holds end - 1 is the last. */
			last = memchr(m + end - 1, '\n',
			    (size_t)(stop - end + 1));
			if (last != NULL)	/* else cut under us */
				stop = last - m + 1;
			final = 1;
		}
		rc = chain_push_lines(chain, m + start, (size_t)(stop - start),
		    &used, &lines);
		*records_in += lines;
		start += (int64_t)used;
		if (rc != OP_OK)
			return (rc == OP_STOP ? OP_OK : OP_FAIL);
		if (mapped_shrank())
			break;
	}
	return (OP_OK);
}

/*
 * Push the lines of one file that start in [begin, end) through a
 * mapping, for a chain that takes blocks.  A file that shrank since the
 * job started is read as far as it goes; one that shrinks during the read
 * fails the task (the reads past its end saw zeros, not its bytes).
 * 1 when the file cannot be mapped: the caller reads it.
 */
static int
source_map_file(int fd, const struct plan_file *f, const struct stat *st,
    int64_t begin, int64_t end, struct chain *chain, int64_t *records_in,
    char **err)
{
	const char	*m;
	int64_t		 size = st->st_size < f->size ? st->st_size :
			     f->size;
	int64_t		 at = begin > 0 ? begin - 1 : 0;
	int		 rc;

	if (size <= at)
		return (OP_OK);
	if (mapped_open(fd, at, (size_t)(size - at), &m) == -1)
		return (1);
	/* Nothing read from the mapping leaves before a check after it. */
	if (chain_output(chain) != NULL)
		output_set_guard(chain_output(chain), mapped_shrank);
	rc = source_push_mapped(m - at, begin, end, size, chain, records_in);
	if (chain_output(chain) != NULL)
		output_set_guard(chain_output(chain), NULL);
	if (mapped_shrank()) {
		xasprintf(err, "text: %s: the file shrank while it was read",
		    f->path);
		rc = OP_FAIL;
		/* Lines read over the zeros may wait in the output. */
		if (chain_output(chain) != NULL)
			output_discard(chain_output(chain));
	}
	mapped_close();
	return (rc);
}

/*
 * Push the lines of one file that start in [begin, end) (file offsets).
 * This is Hadoop's LineRecordReader rule: a line belongs to the partition
 * where it starts, so a range that starts inside a line skips to the next
 * one, and the last line that starts in the range is read to its end even
 * past the range.  The file's recorded size is its end: a line that runs
 * to it ends there, and a file that shrank since is read as far as it goes.
 */
static int
source_run_file(const struct plan_file *f, int64_t begin, int64_t end,
    struct chain *chain, int64_t *records_in, char **err)
{
	struct record	 r = { NULL, 0, 0, 0, NULL, 0 };
	int64_t		 base;		/* file offset of source_buf[0] */
	size_t		 fill = 0, start = 0, scan = 0, want;
	char		*nl;
	struct stat	 st;
	ssize_t		 n;
	int		 fd, eof = 0, skip, rc = OP_OK;
	int		 lines = chain_takes_lines(chain);

	/* The path may have changed since the job's check: a FIFO must not
	 * block the open, a terminal must not become ours. */
	if ((fd = open(f->path, O_RDONLY | O_CLOEXEC | O_NOCTTY |
	    O_NONBLOCK)) == -1) {
		xasprintf(err, "text: %s: %s", f->path, strerror(errno));
		return (OP_FAIL);
	}
	if (fstat(fd, &st) == -1 || !S_ISREG(st.st_mode)) {
		close(fd);
		xasprintf(err, "text: %s: not a regular file any more",
		    f->path);
		return (OP_FAIL);
	}
	if (lines && (rc = source_map_file(fd, f, &st, begin, end, chain,
	    records_in, err)) != 1) {
		close(fd);
		return (rc);
	}
	rc = OP_OK;
	posix_fadvise(fd, 0, 0, POSIX_FADV_SEQUENTIAL);

	/* Start on the byte before the range to see whether a line ends
	 * there; if not, skip the partial line. */
	skip = begin > 0;
	base = skip ? begin - 1 : 0;
	for (;;) {
		if (skip) {
			nl = memchr(source_buf + scan, '\n', fill - scan);
			if (nl != NULL) {
				skip = 0;
				start = scan = (size_t)(nl - source_buf) + 1;
			} else
				start = scan = fill;
		}
		/* A chain that takes blocks gets the complete lines at once. */
		if (!skip && lines &&
		    (rc = source_push_block(chain, base, end, &start, fill,
		    records_in)) != OP_OK) {
			rc = rc == OP_STOP ? OP_OK : OP_FAIL;
			goto done;
		}
		scan = start > scan ? start : scan;
		/* Take the complete lines in the buffer. */
		while (!skip) {
			if (base + (int64_t)start >= end)
				goto done;
			nl = memchr(source_buf + scan, '\n', fill - scan);
			if (nl == NULL) {
				scan = fill;
				if (!eof || start == fill)
					break;
				nl = source_buf + fill;	/* no final '\n' */
			}
			r.data = source_buf + start;
			r.len = (size_t)(nl - r.data);
			start = scan = (size_t)(nl - source_buf) + 1;
			(*records_in)++;
			if ((rc = chain_push(chain, &r)) != OP_OK) {
				rc = rc == OP_STOP ? OP_OK : OP_FAIL;
				goto done;
			}
			if (start > fill)
				goto done;	/* that was the last line */
		}
		if (eof)
			goto done;

		/* Make room: drop what was consumed, or grow for a long line. */
		if (start > 0) {
			memmove(source_buf, source_buf + start, fill - start);
			base += (int64_t)start;
			fill -= start;
			scan -= start;
			start = 0;
		}
		if (fill == source_size) {
			source_size *= 2;
			source_buf = xrealloc(source_buf, source_size);
		}
		want = source_size - fill;
		if ((int64_t)want > f->size - (base + (int64_t)fill))
			want = (size_t)(f->size - (base + (int64_t)fill));
		if (want == 0) {
			eof = 1;
			continue;
		}
		n = pread(fd, source_buf + fill, want, base + (int64_t)fill);
		if (n == -1) {
			if (errno == EINTR)
				continue;
			xasprintf(err, "text: %s: %s", f->path,
			    strerror(errno));
			rc = OP_FAIL;
			goto done;
		}
		if (n == 0)
			eof = 1;	/* shorter than when the job started */
		fill += (size_t)n;
	}
done:
	close(fd);
	return (rc);
}

/* Push a text partition: a byte range of the files laid end to end. */
static int
source_run_text(const struct plan *plan, int partition, struct chain *chain,
    int64_t *records_in, char **err)
{
	const struct plan_file	*f;
	int64_t			 total = 0, offset = 0, begin, end, fb, fe;
	size_t			 i;
	int			 rc = OP_OK;

	for (i = 0; i < plan->nfiles; i++)
		total += plan->files[i].size;
	plan_slice(total, plan->partitions, partition, &begin, &end);
	if (begin == end)
		return (OP_OK);

	if (source_buf == NULL) {
		source_size = SOURCE_TEXT_BUFFER;
		source_buf = xmalloc(source_size);
	}
	for (i = 0; i < plan->nfiles && offset < end && rc == OP_OK; i++) {
		f = &plan->files[i];
		fb = begin > offset ? begin - offset : 0;
		fe = end - offset < f->size ? end - offset : f->size;
		if (fb < fe)
			rc = source_run_file(f, fb, fe, chain, records_in, err);
		offset += f->size;
	}
	if (source_size > 4 * SOURCE_TEXT_BUFFER) {
		source_size = SOURCE_TEXT_BUFFER;
		source_buf = xrealloc(source_buf, source_size);
	}
	return (rc);
}

/* Run the source of a partition into the chain. */
int
source_run(const struct plan *plan, int partition, int checkpoint_dirfd,
    struct chain *chain, int64_t *records_in, char **err)
{
	*err = NULL;
	switch (plan->source) {
	case PLAN_SOURCE_RANGE:
		return (source_run_range(plan, partition, chain, records_in));
	case PLAN_SOURCE_PARALLELIZE:
		return (source_run_parallelize(plan, partition, chain,
		    records_in));
	case PLAN_SOURCE_TEXT:
		return (source_run_text(plan, partition, chain, records_in,
		    err));
	case PLAN_SOURCE_CHECKPOINT:
		if (plan->checkpoint_dir == NULL) {
			*err = xstrdup("checkpoint_dir: missing");
			return (OP_FAIL);
		}
		return (ckpt_source_run(plan->checkpoint_dir, checkpoint_dirfd,
		    partition, chain, records_in, err));
	case PLAN_SOURCE_SHUFFLE:
		*err = xstrdup("a shuffle source: not supported by this "
		    "worker");
		return (OP_FAIL);
	}
	fatalx("%s: unknown source %d", __func__, plan->source);
}

/* Count a partition without reading it, if the source can. */
int
source_count(const struct plan *plan, int partition, int64_t *count)
{
	int64_t	first, begin, end;

	switch (plan->source) {
	case PLAN_SOURCE_RANGE:
		plan_range_slice(plan, partition, &first, count);
		return (0);
	case PLAN_SOURCE_PARALLELIZE:
		plan_slice((int64_t)json_array_size(plan->records),
		    plan->partitions, partition, &begin, &end);
		*count = end - begin;
		return (0);
	case PLAN_SOURCE_TEXT:
	case PLAN_SOURCE_CHECKPOINT:
	case PLAN_SOURCE_SHUFFLE:
		break;
	}
	return (-1);
}
