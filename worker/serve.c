#include <errno.h>
#include <poll.h>
#include <signal.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#include <jansson.h>

#include "held.h"
#include "fdpass.h"
#include "frame.h"
#include "framebuf.h"
#include "log.h"
#include "output.h"
#include "plan.h"
#include "protocol.h"
#include "run.h"
#include "taskdesc.h"
#include "serve.h"
#include "xmalloc.h"

/* Descriptors are read through a buffer of this size (more for a larger
 * one), so that one read() takes a descriptor and any sent behind it. */
#define SERVE_BUFFER	(64 * 1024)

/* Broadcast descriptors received but not yet taken by a descriptor's
 * adds; more than this is a corrupt emberd. */
#define SERVE_MAX_FDS	1024
/* A worker that waited this long for its next task gives back what it
 * keeps for the next tasks (run_release_spares). */
#define SERVE_IDLE_MS	1000

struct server {
	int		 fd;
	struct framebuf	 in;	/* read from emberd, not taken */
	int		 fds[SERVE_MAX_FDS];	/* received, in order */
	size_t		 nfds;
	int		 fds_overflow;
	struct output	*out;
	int		 stoppable;	/* the task may end at a STOP_TASK */

	/* The last plan parsed, reused by the next tasks of its operation. */
	char		*operation;
	struct plan	*plan;
};

/* A run, and the decoded descriptor its strings point into. */
struct serve_run {
	struct run	 run;
	struct taskdesc	 desc;
};

/* Read what emberd sent, for framebuf_fill: nothing held back may wait
 * while we wait for emberd, nor memory kept for the next tasks once the
 * wait is long, and broadcasts' descriptors ride on their descriptor's
 * bytes. */
static ssize_t
serve_read_cb(void *arg, void *p, size_t len)
{
	struct server	*w = arg;
	struct pollfd	 pfd = { w->fd, POLLIN, 0 };

	if (output_flush(w->out, NULL) == -1) {
		errno = EPIPE;
		return (-1);
	}
	if (run_holds_spares() && poll(&pfd, 1, SERVE_IDLE_MS) == 0)
		run_release_spares();
	return (fd_recv_many(w->fd, p, len, w->fds, SERVE_MAX_FDS, &w->nfds,
	    &w->fds_overflow));
}

/* Read until len bytes are buffered: 1, 0 on end of file, -1 on error. */
static int
serve_fill(struct server *w, size_t len)
{
	int	rc;

	rc = framebuf_fill(&w->in, len, 0, serve_read_cb, w);
	if (rc == -1 && errno == ENOMEM)
		fatalx("a descriptor of %zu bytes: out of memory", len);
	return (rc);
}

/* Tell whether a whole frame is buffered. */
static int
serve_has_frame(struct server *w)
{
	size_t	avail = framebuf_len(&w->in);

	return (avail >= 4 && avail - 4 >= (size_t)(uint32_t)be32_get(
	    framebuf_data(&w->in)));
}

/* Take a STOP_TASK out of the buffered frames: 1 if there was one. */
static int
serve_take_stop(struct server *w)
{
	unsigned char	*buf = w->in.buf;
	size_t		 at = w->in.start, end = w->in.end;
	int32_t		 len;

	while (end - at >= 4) {
		len = be32_get(buf + at);
		if (len == EMBER_STOP_TASK) {
			memmove(buf + at, buf + at + 4, end - at - 4);
			w->in.end -= 4;
			return (1);
		}
		if (len < 0 || end - at - 4 < (size_t)len)
			return (0);	/* serve_read_frame judges it */
		at += 4 + (size_t)len;
	}
	return (0);
}

/* Make room to read more without blocking: compact, and grow (up to a
 * descriptor's bound) when a partial frame fills the buffer. */
static int
serve_room(struct server *w)
{
	size_t	need = framebuf_len(&w->in) + 1;

	if (need > w->in.size &&
	    w->in.size >= 8 + (size_t)EMBER_MAX_TASK_FRAME)
		return (0);
	if (framebuf_room(&w->in, need, 0) == -1)
		fatalx("the descriptor buffer: out of memory");
	return (1);
}

/*
 * The stop check between records: read what emberd sent, if anything,
 * without blocking, and look for STOP_TASK among the frames (descriptors
 * sent ahead stay buffered for later).
 */
static int
serve_stop_check_cb(void *arg)
{
	struct server	*w = arg;
	struct pollfd	 pfd = { w->fd, POLLIN, 0 };
	ssize_t		 n;

	if (!w->stoppable)
		return (0);
	while (poll(&pfd, 1, 0) == 1 && serve_room(w)) {
		n = fd_recv_many(w->fd, w->in.buf + w->in.end,
		    w->in.size - w->in.end, w->fds, SERVE_MAX_FDS, &w->nfds,
		    &w->fds_overflow);
		if (n <= 0)
			break;	/* the next read of a descriptor sees it */
		w->in.end += (size_t)n;
	}
	return (serve_take_stop(w));
}

/* Drop a consumed frame; give back the memory a large one took. */
static void
serve_consume(struct server *w, size_t len)
{
	framebuf_take(&w->in, len);
	if (framebuf_len(&w->in) == 0)
		framebuf_shrink(&w->in, SERVE_BUFFER);
}

/*
 * Read the next descriptor frame: 1 with *data and *len (valid until
 * serve_consume), 0 when emberd closed the socket, -1 with *err for a
 * broken frame or a read error.
 */
static int
serve_read_frame(struct server *w, const char **data, size_t *len,
    char **err)
{
	int32_t	n;
	int	rc;

	*err = NULL;
again:
	if ((rc = serve_fill(w, 4)) <= 0)
		goto fail;
	n = be32_get(framebuf_data(&w->in));
	if (n == EMBER_STOP_TASK) {
		/* The task it was for had ended before it came. */
		serve_consume(w, 4);
		goto again;
	}
	if (n < 0 || n > EMBER_MAX_TASK_FRAME) {
		xasprintf(err, "frame length %d", n);
		return (-1);
	}
	if ((rc = serve_fill(w, 4 + (size_t)n)) <= 0)
		goto fail;
	*data = (const char *)framebuf_data(&w->in) + 4;
	*len = (size_t)n;
	return (1);
fail:
	if (rc == -1 && !output_broken(w->out))
		log_warn("read from emberd: %s", strerror(errno));
	else if (framebuf_len(&w->in) != 0)
		log_warn("emberd closed the socket inside a task descriptor");
	return (rc == 0 ? 0 : -1);
}

/* Take the plan of a descriptor, or the cached one of its operation, or
 * with reuse the cached one for its operation: 0, -1 for a bad plan, -2
 * for none. */
static int
serve_plan(struct server *w, json_t *j, const char *operation, int reuse,
    struct plan **out, char **err)
{
	if (j == NULL) {
		if (w->plan == NULL || (!reuse &&
		    strcmp(w->operation, operation) != 0)) {
			xasprintf(err, "task descriptor without a plan "
			    "(operation %s)", operation);
			return (-2);
		}
		if (reuse) {
			free(w->operation);
			w->operation = xstrdup(operation);
		}
		*out = w->plan;
		return (0);
	}
	plan_free(w->plan);
	free(w->operation);
	w->plan = NULL;
	w->operation = NULL;
	/* A stage's plan: its source may be the shuffle. */
	if (plan_parse_stage(j, out, err) == -1)
		return (-1);
	w->plan = *out;
	w->operation = xstrdup(operation);
	return (0);
}

/* Free what a parsed task holds. */
static void
serve_task_clear(struct serve_run *wt)
{
	taskdesc_clear(&wt->desc);
	memset(wt, 0, sizeof *wt);
}

/* The next descriptor received, or -1. */
static int
serve_take_fd(struct server *w)
{
	int	fd;

	if (w->nfds == 0)
		return (-1);
	fd = w->fds[0];
	memmove(w->fds, w->fds + 1, --w->nfds * sizeof *w->fds);
	return (fd);
}

/* Give each broadcast add the next received descriptor, and the next to
 * one with an index, in order: 0, or -1 with *err when too many came. */
static int
serve_take_fds(struct server *w, struct taskdesc *d, char **err)
{
	size_t	i;

	if (w->fds_overflow) {
		*err = xstrdup("broadcasts: more descriptors than expected");
		return (-1);
	}
	for (i = 0; i < d->nbroadcasts; i++) {
		if (!d->broadcasts[i].add)
			continue;
		d->broadcasts[i].fd = serve_take_fd(w);
		if (d->broadcasts[i].index > 0)
			d->broadcasts[i].index_fd = serve_take_fd(w);
	}
	/* Then the checkpoint directories: the source's, the written's. */
	if (d->source_dir_passed && (d->source_dirfd = serve_take_fd(w)) == -1) {
		*err = xstrdup("source_fd: no descriptor came");
		return (-1);
	}
	if (d->ckpt_dir_passed && (d->ckpt_dirfd = serve_take_fd(w)) == -1) {
		*err = xstrdup("checkpoint.fd: no descriptor came");
		return (-1);
	}
	/* Then the uid's shuffle directory. */
	if (d->shuffle_dir_passed &&
	    (d->shuffle_dirfd = serve_take_fd(w)) == -1) {
		*err = xstrdup("shuffle.fd: no descriptor came");
		return (-1);
	}
	return (0);
}

/* Parse a task descriptor: 0, -1 with *err for a bad one, -2 with *err
 * when it cannot run (no plan and none cached, a broadcast that cannot be
 * taken), 1 for one that only changed the broadcasts held. */
static int
serve_parse(struct server *w, const char *data, size_t len,
    struct serve_run *wt, char **err)
{
	struct taskdesc	*d = &wt->desc;
	struct run	*t = &wt->run;
	struct plan	*plan;
	size_t		 i;
	int		 rc = -1;

	memset(wt, 0, sizeof *wt);
	if (taskdesc_decode(data, len, d, err) == -1)
		goto out;
	if (serve_take_fds(w, d, err) == -1)
		goto out;
	/* The broadcasts change whatever happens to this task. */
	if (held_apply(d->broadcasts, d->nbroadcasts, err) == -1) {
		rc = -2;
		goto out;
	}
	if (d->held_only) {
		rc = 1;
		goto out;
	}
	if ((rc = serve_plan(w, d->plan, d->operation, d->reuse_plan, &plan,
	    err)) != 0)
		goto out;
	rc = -1;
	if (d->files != NULL && plan_files_from_json(plan, d->files,
	    err) == -1)
		goto out;
	for (i = 0; i < plan->nfiles; i++) {
		if (plan->files[i].size < 0) {
			*err = xstrdup("files: missing");
			goto out;
		}
	}
	if (d->source_dir != NULL) {
		free(plan->checkpoint_dir);
		plan->checkpoint_dir = xstrdup(d->source_dir);
	}
	plan->partitions = d->partitions;
	t->plan = plan;
	t->partition = d->partition;
	t->mode = d->mode;
	t->fn = d->fn;
	t->save_dir = d->save_dir;
	t->save_attempt = (uint64_t)d->save_attempt;
	t->skip = d->skip;
	t->ckpt_dir = d->ckpt_dir;
	t->ckpt_dirfd = d->ckpt_dir_passed ? d->ckpt_dirfd : -1;
	t->ckpt_sync = d->ckpt_sync;
	t->source_dirfd = d->source_dir_passed ? d->source_dirfd : -1;
	t->shuffle_dir = d->shuffle_dir;
	t->shuffle_dirfd = d->shuffle_dir_passed ? d->shuffle_dirfd : -1;
	t->shuffle_stage = d->shuffle_stage;
	t->shuffle_buckets = d->shuffle_buckets;
	t->shuffle_op = d->shuffle_op;
	t->shuffle_memory = d->shuffle_memory;
	rc = 0;
out:
	if (rc != 0)
		serve_task_clear(wt);
	return (rc);
}

/* Report a failed task and give up on this worker. */
static int
serve_fail(struct server *w, const char *prefix, char *err)
{
	char	*message;

	if (prefix != NULL) {
		xasprintf(&message, "%s%s", prefix, err);
		free(err);
	} else
		message = err;
	log_debug("task failed: %s", message);
	output_fail(w->out, message);
	free(message);
	return (1);
}

/* Nanoseconds from a to b. */
static int64_t
serve_elapsed(const struct timespec *a, const struct timespec *b)
{
	return ((int64_t)(b->tv_sec - a->tv_sec) * 1000000000 +
	    (b->tv_nsec - a->tv_nsec));
}

/*
 * Run the task of partition p of a parsed descriptor, begun at *begin;
 * more says whether more of its batch follow.  0, or 1 to stop serving.
 */
static int
serve_run_one(struct server *w, struct serve_run *t, int p, int more,
    const struct timespec *begin)
{
	struct timespec	 end;
	int64_t		 metrics[EMBER_METRIC_COUNT];
	char		*err;
	int		 rc;

	t->run.partition = p;
	/*
	 * The end of the task before may have been held back, betting
	 * on this one being quick too; if it is not, send it now.
	 */
	if (!run_is_quick(&t->run) && output_flush(w->out, NULL) == -1)
		return (1);

	output_reset(w->out);
	output_set_partition(w->out, p);
	/* Only a stream's task stops short: the others' results
	 * would be wrong, and emberd kills their workers instead. */
	w->stoppable = t->run.mode == MODE_RECORDS;
	rc = run_execute(&t->run, w->out, metrics, &err);
	w->stoppable = 0;
	if (rc == -1)
		return (serve_fail(w, NULL, err));
	clock_gettime(CLOCK_MONOTONIC, &end);
	metrics[EMBER_METRIC_ELAPSED_NS] = serve_elapsed(begin, &end);
	if (output_finish(w->out, metrics, EMBER_METRIC_COUNT,
	    more || serve_has_frame(w), &err) == -1) {
		log_debug("%s", err);
		free(err);
		return (1);
	}
	return (0);
}

/* Serve tasks until emberd closes the socket or one fails: each
 * descriptor's, then those of its batch, in order. */
static int
serve_loop(struct server *w)
{
	struct serve_run	 t;
	struct timespec		 begin;
	const char		*data;
	size_t			 len, i;
	char			*err;
	int			 rc;

	for (;;) {
		if ((rc = serve_read_frame(w, &data, &len, &err)) == 0)
			return (0);
		if (rc == -1) {
			if (err == NULL)
				return (1);
			return (serve_fail(w, "bad task descriptor: ", err));
		}
		clock_gettime(CLOCK_MONOTONIC, &begin);
		rc = serve_parse(w, data, len, &t, &err);
		serve_consume(w, 4 + len);
		if (rc == -1)
			return (serve_fail(w, "bad task descriptor: ", err));
		if (rc == -2)
			return (serve_fail(w, NULL, err));
		if (rc == 1)
			continue;	/* nothing to run, nothing to answer */
		rc = serve_run_one(w, &t, t.desc.partition,
		    t.desc.nbatch > 0, &begin);
		for (i = 0; rc == 0 && i < t.desc.nbatch; i++) {
			clock_gettime(CLOCK_MONOTONIC, &begin);
			rc = serve_run_one(w, &t, t.desc.batch[i],
			    i + 1 < t.desc.nbatch, &begin);
		}
		serve_task_clear(&t);
		if (rc != 0)
			return (rc);
	}
}

/* Run a worker on its socket; returns the exit code. */
int
serve_main(int fd)
{
	struct server	w;
	int		rc;

	signal(SIGPIPE, SIG_IGN);
	memset(&w, 0, sizeof w);
	w.fd = fd;
	if (framebuf_init(&w.in, SERVE_BUFFER) == -1)
		fatalx("the descriptor buffer: out of memory");
	w.out = output_create(fd);
	output_set_stop_check(w.out, serve_stop_check_cb, &w);

	rc = serve_loop(&w);
	/* emberd closed the socket after the last task's end: nothing is
	 * left to send, and what the frees would touch (the heap, the read
	 * buffer's unmapping) is pages a fresh worker would fault in only
	 * to exit. */
	if (rc == 0)
		_exit(0);

	output_free(w.out);
	plan_free(w.plan);
	free(w.operation);
	framebuf_free(&w.in);
	close(fd);
	return (rc);
}
