#include <errno.h>
#include <signal.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#include <jansson.h>

#include "broadcast.h"
#include "frame.h"
#include "jread.h"
#include "log.h"
#include "output.h"
#include "plan.h"
#include "protocol.h"
#include "task.h"
#include "worker.h"
#include "xmalloc.h"

/* Descriptors are read through a buffer of this size (more for a larger
 * one), so that one read() takes a descriptor and any sent behind it. */
#define WORKER_BUFFER	(64 * 1024)

struct worker {
	int		 fd;
	char		*buf;
	size_t		 size, start, end;
	struct output	*out;

	/* The last plan parsed, reused by the next tasks of its operation. */
	char		*operation;
	struct plan	*plan;
};

/* The modes a descriptor may ask for. */
static const struct {
	const char	*name;
	enum task_mode	 mode;
} worker_modes[] = {
	{ "records", TASK_RECORDS },
	{ "count", TASK_COUNT },
	{ "count_by_value", TASK_COUNT_BY_VALUE },
	{ "reduce", TASK_REDUCE },
	{ "save", TASK_SAVE },
};

/* A task, and the descriptor's strings it points to. */
struct worker_task {
	struct task	 task;
	char		*save_dir;
	char		*save_name;
};

/* Read until len bytes are buffered: 1, 0 on end of file, -1 on error. */
static int
worker_fill(struct worker *w, size_t len)
{
	ssize_t	n;

	while (w->end - w->start < len) {
		if (w->start + len > w->size) {
			memmove(w->buf, w->buf + w->start, w->end - w->start);
			w->end -= w->start;
			w->start = 0;
			if (len > w->size) {
				w->size = len;
				w->buf = xrealloc(w->buf, w->size);
			}
		}
		/* Nothing held back may wait while we wait for emberd. */
		if (output_flush(w->out, NULL) == -1)
			return (-1);
		n = read(w->fd, w->buf + w->end, w->size - w->end);
		if (n == -1 && errno == EINTR)
			continue;
		if (n <= 0)
			return ((int)n);
		w->end += (size_t)n;
	}
	return (1);
}

/* Tell whether a whole frame is buffered. */
static int
worker_has_frame(struct worker *w)
{
	size_t	avail = w->end - w->start;

	return (avail >= 4 && avail - 4 >= (size_t)(uint32_t)be32_get(
	    (unsigned char *)w->buf + w->start));
}

/* Drop a consumed frame; give back the memory a large one took. */
static void
worker_consume(struct worker *w, size_t len)
{
	w->start += len;
	if (w->start != w->end)
		return;
	w->start = w->end = 0;
	if (w->size > WORKER_BUFFER) {
		w->size = WORKER_BUFFER;
		w->buf = xrealloc(w->buf, w->size);
	}
}

/*
 * Read the next descriptor frame: 1 with *data and *len (valid until
 * worker_consume), 0 when emberd closed the socket, -1 with *err for a
 * broken frame or a read error.
 */
static int
worker_read_frame(struct worker *w, const char **data, size_t *len,
    char **err)
{
	int32_t	n;
	int	rc;

	*err = NULL;
	if ((rc = worker_fill(w, 4)) <= 0)
		goto fail;
	n = be32_get((unsigned char *)w->buf + w->start);
	if (n < 0 || n > EMBER_MAX_TASK_FRAME) {
		xasprintf(err, "frame length %d", n);
		return (-1);
	}
	if ((rc = worker_fill(w, 4 + (size_t)n)) <= 0)
		goto fail;
	*data = w->buf + w->start + 4;
	*len = (size_t)n;
	return (1);
fail:
	if (rc == -1 && !output_broken(w->out))
		log_warn("read from emberd: %s", strerror(errno));
	else if (w->end != w->start)
		log_warn("emberd closed the socket inside a task descriptor");
	return (rc == 0 ? 0 : -1);
}

/* Take the plan of a descriptor, or the cached one of its operation: 0,
 * -1 for a bad plan, -2 for none. */
static int
worker_plan(struct worker *w, json_t *d, const char *operation,
    struct plan **out, char **err)
{
	json_t	*j;

	j = json_object_get(d, "plan");
	if (j == NULL) {
		if (w->plan == NULL || strcmp(w->operation, operation) != 0) {
			xasprintf(err, "task descriptor without a plan "
			    "(operation %s)", operation);
			return (-2);
		}
		*out = w->plan;
		return (0);
	}
	plan_free(w->plan);
	free(w->operation);
	w->plan = NULL;
	w->operation = NULL;
	if (plan_parse(j, out, err) == -1)
		return (-1);
	w->plan = *out;
	w->operation = xstrdup(operation);
	return (0);
}

/* Read the reduce function of a descriptor. */
static int
worker_parse_fn(json_t *d, struct task *t, char **err)
{
	const char	*fn;

	if (jread_string(d, "", "fn", JREAD_REQUIRED, &fn, err) == -1)
		return (-1);
	if (strcmp(fn, "sum") == 0)
		t->fn = TASK_REDUCE_SUM;
	else if (strcmp(fn, "min") == 0)
		t->fn = TASK_REDUCE_MIN;
	else if (strcmp(fn, "max") == 0)
		t->fn = TASK_REDUCE_MAX;
	else
		return (jread_fail(err, "fn", "expected \"sum\", \"min\" or "
		    "\"max\""));
	return (0);
}

/* Read where a save task writes: a directory and a plain file name. */
static int
worker_parse_save(json_t *d, struct worker_task *wt, char **err)
{
	static const char *const keys[] = { "dir", "name", NULL };
	const char	*dir, *name;
	json_t		*save;

	if (jread_object(d, "", "save", JREAD_REQUIRED, &save, err) == -1 ||
	    jread_only(save, "save", keys, err) == -1 ||
	    jread_string(save, "save", "dir", JREAD_REQUIRED, &dir,
	    err) == -1 ||
	    jread_string(save, "save", "name", JREAD_REQUIRED, &name,
	    err) == -1)
		return (-1);
	if (*dir == '\0')
		return (jread_fail(err, "save.dir", "is empty"));
	if (*name == '\0' || strchr(name, '/') != NULL ||
	    strcmp(name, ".") == 0 || strcmp(name, "..") == 0)
		return (jread_fail(err, "save.name", "\"%s\" is not a file "
		    "name", name));
	wt->save_dir = xstrdup(dir);
	wt->save_name = xstrdup(name);
	wt->task.save_dir = wt->save_dir;
	wt->task.save_name = wt->save_name;
	return (0);
}

/* Free what a parsed task holds. */
static void
worker_task_clear(struct worker_task *wt)
{
	free(wt->save_dir);
	free(wt->save_name);
	memset(wt, 0, sizeof *wt);
}

/* Parse a task descriptor: 0, -1 with *err for a bad one, -2 with *err
 * when it cannot run (no plan and none cached, a broadcast that cannot be
 * taken). */
static int
worker_parse(struct worker *w, const char *data, size_t len,
    struct worker_task *wt, char **err)
{
	struct task	*t = &wt->task;
	json_t		*d, *files = NULL, *broadcasts = NULL;
	json_error_t	 jerr;
	const char	*operation, *mode = "records";
	json_int_t	 partition, partitions;
	struct plan	*plan;
	size_t		 i;
	int		 rc = -1;

	memset(wt, 0, sizeof *wt);
	if ((d = json_loadb(data, len, JSON_ALLOW_NUL, &jerr)) == NULL) {
		xasprintf(err, "not JSON: %s", jerr.text);
		return (-1);
	}
	if (!json_is_object(d)) {
		*err = xstrdup("not a JSON object");
		goto out;
	}
	if (jread_string(d, "", "operation", JREAD_REQUIRED, &operation,
	    err) == -1 ||
	    jread_int(d, "", "partition", JREAD_REQUIRED, &partition,
	    err) == -1 ||
	    jread_int(d, "", "partitions", JREAD_REQUIRED, &partitions,
	    err) == -1 ||
	    jread_string(d, "", "mode", JREAD_OPTIONAL, &mode, err) == -1 ||
	    jread_array(d, "", "files", JREAD_OPTIONAL, &files, err) == -1 ||
	    jread_array(d, "", "broadcasts", JREAD_OPTIONAL, &broadcasts,
	    err) == -1)
		goto out;
	if (partitions < 1 || partitions > PLAN_MAX_PARTITIONS) {
		jread_fail(err, "partitions", "must be from 1 to %d",
		    PLAN_MAX_PARTITIONS);
		goto out;
	}
	if (partition < 0 || partition >= partitions) {
		jread_fail(err, "partition", "must be from 0 to %lld",
		    (long long)partitions - 1);
		goto out;
	}
	for (i = 0; i < sizeof worker_modes / sizeof *worker_modes; i++) {
		if (strcmp(mode, worker_modes[i].name) == 0)
			break;
	}
	if (i == sizeof worker_modes / sizeof *worker_modes) {
		jread_fail(err, "mode", "unknown mode \"%s\"", mode);
		goto out;
	}
	t->mode = worker_modes[i].mode;
	if ((t->mode == TASK_REDUCE && worker_parse_fn(d, t, err) == -1) ||
	    (t->mode == TASK_SAVE && worker_parse_save(d, wt, err) == -1))
		goto out;

	/* The broadcasts change whatever happens to this task. */
	if (broadcasts != NULL && broadcast_apply(broadcasts, err) == -1) {
		rc = -2;
		goto out;
	}
	if ((rc = worker_plan(w, d, operation, &plan, err)) != 0)
		goto out;
	rc = -1;
	if (files != NULL && plan_files_from_json(plan, files, err) == -1)
		goto out;
	for (i = 0; i < plan->nfiles; i++) {
		if (plan->files[i].size < 0) {
			*err = xstrdup("files: missing");
			goto out;
		}
	}
	plan->partitions = (int)partitions;
	t->plan = plan;
	t->partition = (int)partition;
	rc = 0;
out:
	if (rc != 0)
		worker_task_clear(wt);
	json_decref(d);
	return (rc);
}

/* Report a failed task and give up on this worker. */
static int
worker_fail(struct worker *w, const char *prefix, char *err)
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
worker_elapsed(const struct timespec *a, const struct timespec *b)
{
	return ((int64_t)(b->tv_sec - a->tv_sec) * 1000000000 +
	    (b->tv_nsec - a->tv_nsec));
}

/* Serve tasks until emberd closes the socket or one fails. */
static int
worker_loop(struct worker *w)
{
	struct worker_task	 t;
	struct timespec		 begin, end;
	int64_t			 metrics[EMBER_METRIC_COUNT];
	const char		*data;
	size_t			 len;
	char			*err;
	int			 rc;

	for (;;) {
		if ((rc = worker_read_frame(w, &data, &len, &err)) == 0)
			return (0);
		if (rc == -1) {
			if (err == NULL)
				return (1);
			return (worker_fail(w, "bad task descriptor: ", err));
		}
		clock_gettime(CLOCK_MONOTONIC, &begin);
		rc = worker_parse(w, data, len, &t, &err);
		worker_consume(w, 4 + len);
		if (rc == -1)
			return (worker_fail(w, "bad task descriptor: ", err));
		if (rc == -2)
			return (worker_fail(w, NULL, err));

		/*
		 * The end of the task before may have been held back, betting
		 * on this one being quick too; if it is not, send it now.
		 */
		if (!task_is_quick(&t.task) &&
		    output_flush(w->out, NULL) == -1) {
			worker_task_clear(&t);
			return (1);
		}

		output_reset(w->out);
		rc = task_run(&t.task, w->out, metrics, &err);
		worker_task_clear(&t);
		if (rc == -1)
			return (worker_fail(w, NULL, err));
		clock_gettime(CLOCK_MONOTONIC, &end);
		metrics[EMBER_METRIC_ELAPSED_NS] = worker_elapsed(&begin, &end);
		if (output_finish(w->out, metrics, EMBER_METRIC_COUNT,
		    worker_has_frame(w), &err) == -1) {
			log_debug("%s", err);
			free(err);
			return (1);
		}
	}
}

/* Run a worker on its socket; returns the exit code. */
int
worker_main(int fd)
{
	struct worker	w;
	int		rc;

	signal(SIGPIPE, SIG_IGN);
	memset(&w, 0, sizeof w);
	w.fd = fd;
	w.size = WORKER_BUFFER;
	w.buf = xmalloc(w.size);
	w.out = output_create(fd);

	rc = worker_loop(&w);

	output_free(w.out);
	plan_free(w.plan);
	free(w.operation);
	free(w.buf);
	close(fd);
	return (rc);
}
