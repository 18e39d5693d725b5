#include <sys/queue.h>

#include <stdlib.h>
#include <string.h>

#include "broadcast.h"
#include "emberd.h"
#include "fslink.h"
#include "log.h"
#include "pool.h"
#include "pypreload.h"
#include "worker.h"
#include "xmalloc.h"

struct pypreload {
	struct pool		*pool;
	int32_t			 gen;	/* loads and drops sent */
	int64_t			*ids;	/* loaded, oldest first */
	size_t			 n;
	TAILQ_ENTRY(pypreload)	 entry;
};

static TAILQ_HEAD(, pypreload) pypreloads =
    TAILQ_HEAD_INITIALIZER(pypreloads);

struct pypreload *
pypreload_create(struct pool *p)
{
	struct pypreload	*py;

	py = xcalloc(1, sizeof *py);
	py->pool = p;
	TAILQ_INSERT_TAIL(&pypreloads, py, entry);
	return (py);
}

void
pypreload_free(struct pypreload *py)
{
	if (py == NULL)
		return;
	TAILQ_REMOVE(&pypreloads, py, entry);
	free(py->ids);
	free(py);
}

void
pypreload_reset(struct pypreload *py)
{
	py->gen = 0;
	py->n = 0;
}

int32_t
pypreload_gen(const struct pypreload *py)
{
	return (py->gen);
}

/* Is id loaded?  Its index, or -1. */
static ssize_t
pypreload_find(const struct pypreload *py, int64_t id)
{
	size_t	i;

	for (i = 0; i < py->n; i++) {
		if (py->ids[i] == id)
			return ((ssize_t)i);
	}
	return (-1);
}

/* Drop the i-th loaded broadcast; the idle workers that have it go. */
static void
pypreload_drop(struct pypreload *py, size_t i)
{
	int64_t	id = py->ids[i];

	memmove(py->ids + i, py->ids + i + 1, (py->n - i - 1) *
	    sizeof *py->ids);
	py->n--;
	if (fslink_pydrop(pool_fslink(py->pool), (int32_t)id) == -1)
		return;
	py->gen++;
	log_debug("uid %ld: broadcast %lld dropped by the fork-server",
	    (long)pool_client(py->pool), (long long)id);
	worker_retire_stale(py->pool);
}

void
pypreload_want(struct pool *p, struct broadcast *b)
{
	struct pypreload	*py = pool_pypreload(p);
	struct fslink		*fs = pool_fslink(p);
	int64_t			 id = broadcast_id(b);

	if (ember_conf.python_broadcast_preload == 0 ||
	    broadcast_size(b) < ember_conf.python_broadcast_preload ||
	    id > INT32_MAX || !fslink_running(fs) ||
	    pypreload_find(py, id) != -1)
		return;
	/* The cap may have been lowered by a reload: drop down to it. */
	while (py->n > 0 &&
	    py->n >= (size_t)ember_conf.python_broadcast_preload_max)
		pypreload_drop(py, 0);
	if (fslink_pyload(fs, (int32_t)id, broadcast_fd(b)) == -1)
		return;
	py->ids = xreallocarray(py->ids, py->n + 1, sizeof *py->ids);
	py->ids[py->n++] = id;
	py->gen++;
	log_debug("uid %ld: broadcast %lld (%lld bytes) loaded by the "
	    "fork-server", (long)pool_client(p), (long long)id,
	    (long long)broadcast_size(b));
	/* The idle workers lack it: a job's fresh workers will share it. */
	worker_retire_stale(p);
}

json_t *
pypreload_status(const struct pypreload *py)
{
	json_t	*a = json_array();
	size_t	 i;

	for (i = 0; i < py->n; i++)
		json_array_append_new(a, json_integer((json_int_t)py->ids[i]));
	return (a);
}

void
pypreload_forget(int64_t id)
{
	struct pypreload	*py;
	ssize_t			 i;

	TAILQ_FOREACH(py, &pypreloads, entry) {
		if ((i = pypreload_find(py, id)) != -1)
			pypreload_drop(py, (size_t)i);
	}
}
