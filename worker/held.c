#include <sys/mman.h>
#include <sys/resource.h>
#include <sys/stat.h>

#include <errno.h>
#include <fcntl.h>
#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#include "bindex.h"
#include "held.h"
#include "taskdesc.h"
#include "log.h"
#include "xmalloc.h"

/*
 * A set: the view of a broadcast's index (common/bindex.h), the one
 * emberd passed with it, mapped read-only, or one this worker built into
 * a table of its own for a broadcast that came without one.
 */
struct held_set {
	struct bindex		*ix;
	void			*table;		/* built here, or NULL */
	size_t			 tablesize;
};

struct held {
	int64_t			 id;
	unsigned char		*map;		/* NULL when empty */
	size_t			 size;
	void			*imap;		/* its index, or NULL */
	size_t			 isize;
	struct held_set		*set;
};

static struct held	**broadcasts;
static size_t		  nbroadcasts, broadcasts_size;

/* Tables from this size up are aligned to and mapped with huge pages. */
#define SET_HUGE_PAGE	(2 * 1024 * 1024)
#define SET_HUGE_FROM	(8 * 1024 * 1024)

/* The bytes a table of size bytes maps: whole pages, huge ones if large. */
static size_t
held_set_mapped_size(size_t size)
{
	size_t	bytes = size, unit = 4096;

	if (bytes >= SET_HUGE_FROM)
		unit = SET_HUGE_PAGE;
	return ((bytes + unit - 1) & ~(unit - 1));
}

/*
 * Map a set's table, zeroed.  A large one is read at random, so it asks
 * for huge pages (a TLB miss per probe otherwise) and is faulted in up
 * front, because a prefetch of a page not yet mapped does nothing.  A
 * table too large for the worker's memory limit fails the task with a
 * message instead of killing the worker.  NULL with errno on failure.
 */
static void *
held_set_map(size_t size)
{
	unsigned char	*p, *aligned;
	size_t		 bytes = held_set_mapped_size(size), head;

	if (bytes < SET_HUGE_FROM) {
		p = mmap(NULL, bytes, PROT_READ | PROT_WRITE,
		    MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
		return (p == MAP_FAILED ? NULL : p);
	}
	p = mmap(NULL, bytes + SET_HUGE_PAGE, PROT_READ | PROT_WRITE,
	    MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
	if (p == MAP_FAILED)
		return (NULL);
	aligned = (unsigned char *)(((uintptr_t)p + SET_HUGE_PAGE - 1) &
	    ~(uintptr_t)(SET_HUGE_PAGE - 1));
	head = (size_t)(aligned - p);
	if (head != 0)
		munmap(p, head);
	munmap(aligned + bytes, SET_HUGE_PAGE - head);
	madvise(aligned, bytes, MADV_HUGEPAGE);
#ifdef MADV_POPULATE_WRITE
	if (madvise(aligned, bytes, MADV_POPULATE_WRITE) == -1)
		log_debug("madvise MADV_POPULATE_WRITE: %s", strerror(errno));
#else
	memset(aligned, 0, bytes);
#endif
	return (aligned);
}

/* Why memory ran out, if the worker's address-space limit is why. */
static const char *
held_limit_hint(void)
{
	static char	hint[96];
	struct rlimit	rl;

	if (errno != ENOMEM || getrlimit(RLIMIT_AS, &rl) == -1 ||
	    rl.rlim_cur == RLIM_INFINITY)
		return ("");
	snprintf(hint, sizeof hint, " (workers.max_memory: the worker may "
	    "map %llu MiB)", (unsigned long long)(rl.rlim_cur >> 20));
	return (hint);
}

/* Milliseconds since a. */
static double
held_ms_since(const struct timespec *a)
{
	struct timespec	b;

	clock_gettime(CLOCK_MONOTONIC, &b);
	return ((b.tv_sec - a->tv_sec) * 1e3 + (b.tv_nsec - a->tv_nsec) / 1e6);
}

/*
 * Build the set of a broadcast's lines into a table of this worker's, for
 * a broadcast that came without an index.
 */
static int
held_set_build(struct held *b, char **err)
{
	struct held_set		*set;
	struct bindex_stats	 st;
	struct timespec		 start;
	size_t			 lines, size;
	char			*why;

	clock_gettime(CLOCK_MONOTONIC, &start);
	if ((size = bindex_size(b->map, b->size, &lines)) == 0) {
		xasprintf(err, "broadcast %" PRId64 ": %zu bytes is too "
		    "large for a set", b->id, b->size);
		return (-1);
	}
	if (b->size != 0)
		madvise(b->map, b->size, MADV_WILLNEED);
	set = xcalloc(1, sizeof *set);
	set->tablesize = size;
	if ((set->table = held_set_map(size)) == NULL) {
		xasprintf(err, "broadcast %" PRId64 ": no memory for a "
		    "set of %zu lines (%zu MiB): %s%s", b->id, lines,
		    held_set_mapped_size(size) >> 20, strerror(errno),
		    held_limit_hint());
		free(set);
		return (-1);
	}
	bindex_build(b->map, b->size, lines, set->table, size, &st);
	if ((set->ix = bindex_open(set->table, size, b->map, b->size,
	    &why)) == NULL)
		fatalx("broadcast %" PRId64 ": the set built: %s", b->id, why);
	b->set = set;
	log_debug("broadcast %" PRId64 ": set of %zu lines (%zu distinct, "
	    "%zu MiB) built in %.1f ms", b->id, st.lines, st.distinct,
	    held_set_mapped_size(size) >> 20, held_ms_since(&start));
	return (0);
}

/* The set of a broadcast's index, passed with it: its header checked. */
static int
held_set_open(struct held *b, char **err)
{
	struct held_set	*set;
	char		*why;

	set = xcalloc(1, sizeof *set);
	if ((set->ix = bindex_open(b->imap, b->isize, b->map, b->size,
	    &why)) == NULL) {
		xasprintf(err, "broadcast %" PRId64 ": its index is corrupt: "
		    "%s", b->id, why);
		free(why);
		free(set);
		return (-1);
	}
	b->set = set;
	return (0);
}

/* Free a set. */
static void
held_set_free(struct held_set *set)
{
	if (set == NULL)
		return;
	bindex_close(set->ix);
	if (set->table != NULL)
		munmap(set->table, held_set_mapped_size(set->tablesize));
	free(set);
}

/* Find a held broadcast; its index, or -1. */
static ssize_t
held_find(int64_t id)
{
	size_t	i;

	for (i = 0; i < nbroadcasts; i++) {
		if (broadcasts[i]->id == id)
			return ((ssize_t)i);
	}
	return (-1);
}

/* Close the descriptors that came with an add. */
static void
held_close_fds(const struct taskdesc_broadcast *c)
{
	if (c->fd >= 0)
		close(c->fd);
	if (c->index_fd >= 0)
		close(c->index_fd);
}

/* Unmap and free a broadcast. */
static void
held_free(struct held *b)
{
	held_set_free(b->set);
	if (b->map != NULL)
		munmap(b->map, b->size);
	if (b->imap != NULL)
		munmap(b->imap, b->isize);
	free(b);
}

/*
 * Map size bytes of a descriptor emberd passed (a sealed memfd: nobody
 * can change its bytes), read-only; *map stays NULL for none.
 */
static int
held_map(int64_t id, const char *what, int fd, json_int_t size, void **map,
    char **err)
{
	struct stat	st;

	*map = NULL;
	if (fd < 0) {
		xasprintf(err, "broadcast %" PRId64 ": no descriptor came with "
		    "its %s", id, what);
		return (-1);
	}
	if (fstat(fd, &st) == -1) {
		xasprintf(err, "broadcast %" PRId64 ": its %s: %s", id, what,
		    strerror(errno));
		return (-1);
	}
	if (!S_ISREG(st.st_mode)) {
		xasprintf(err, "broadcast %" PRId64 ": its %s: not a regular "
		    "file", id, what);
		return (-1);
	}
	if (st.st_size != size) {
		xasprintf(err, "broadcast %" PRId64 ": its %s: %lld bytes, "
		    "expected %lld", id, what, (long long)st.st_size,
		    (long long)size);
		return (-1);
	}
	if (size == 0)
		return (0);
	*map = mmap(NULL, (size_t)size, PROT_READ, MAP_SHARED, fd, 0);
	if (*map == MAP_FAILED) {
		*map = NULL;
		xasprintf(err, "broadcast %" PRId64 ": its %s: mmap: %s%s",
		    id, what, strerror(errno), held_limit_hint());
		return (-1);
	}
	return (0);
}

/*
 * Map a new broadcast, and its index if one came, from the descriptors
 * emberd passed with the task descriptor; they are closed either way.
 */
static int
held_add(const struct taskdesc_broadcast *c, char **err)
{
	struct held	*b;
	void		*map = NULL, *imap = NULL;

	if (held_find(c->id) != -1) {
		xasprintf(err, "broadcast %" PRId64 ": already held", c->id);
		goto fail;
	}
	if (held_map(c->id, "bytes", c->fd, c->size, &map, err) == -1)
		goto fail;
	if (c->index > 0 && held_map(c->id, "index", c->index_fd, c->index,
	    &imap, err) == -1)
		goto fail;
	b = xcalloc(1, sizeof *b);
	b->id = c->id;
	b->map = map;
	b->size = (size_t)c->size;
	b->imap = imap;
	b->isize = (size_t)c->index;
	held_close_fds(c);
	if (nbroadcasts == broadcasts_size) {
		broadcasts_size = broadcasts_size == 0 ? 8 :
		    broadcasts_size * 2;
		broadcasts = xreallocarray(broadcasts, broadcasts_size,
		    sizeof *broadcasts);
	}
	broadcasts[nbroadcasts++] = b;
	log_debug("broadcast %" PRId64 ": %zu bytes, index of %zu", c->id,
	    b->size, b->isize);
	return (0);

fail:
	if (map != NULL)
		munmap(map, (size_t)c->size);
	if (imap != NULL)
		munmap(imap, (size_t)c->index);
	held_close_fds(c);
	return (-1);
}

/* Drop a held broadcast. */
static int
held_remove(int64_t id, char **err)
{
	ssize_t	i;

	if ((i = held_find(id)) == -1) {
		xasprintf(err, "broadcast %" PRId64 ": not held, cannot remove "
		    "it", id);
		return (-1);
	}
	log_debug("broadcast %" PRId64 ": removed", id);
	held_free(broadcasts[i]);
	broadcasts[i] = broadcasts[--nbroadcasts];
	return (0);
}

/* Apply a descriptor's broadcast changes in order. */
int
held_apply(const struct taskdesc_broadcast *changes, size_t n, char **err)
{
	size_t	i;

	*err = NULL;
	for (i = 0; i < n; i++) {
		if (!changes[i].add) {
			if (held_remove(changes[i].id, err) == -1)
				goto fail;
		} else if (held_add(&changes[i], err) == -1) {
			i++;
			goto fail;
		}
	}
	return (0);
fail:
	/* The descriptors of the changes not applied are closed too. */
	for (; i < n; i++) {
		if (changes[i].add)
			held_close_fds(&changes[i]);
	}
	return (-1);
}

/* The bytes of a held broadcast. */
const void *
held_bytes(int64_t id, size_t *len)
{
	ssize_t	i;

	if ((i = held_find(id)) == -1) {
		*len = 0;
		return (NULL);
	}
	*len = broadcasts[i]->size;
	if (broadcasts[i]->map == NULL)
		return ("");
	return (broadcasts[i]->map);
}

/* The set of a held broadcast's lines, built on first use. */
const struct held_set *
held_set_get(int64_t id, char **err)
{
	ssize_t	i;

	*err = NULL;
	if ((i = held_find(id)) == -1) {
		xasprintf(err, "broadcast %" PRId64 " is not held by this "
		    "worker", id);
		return (NULL);
	}
	if (broadcasts[i]->set != NULL)
		return (broadcasts[i]->set);
	if (broadcasts[i]->imap != NULL) {
		if (held_set_open(broadcasts[i], err) == -1)
			return (NULL);
	} else if (held_set_build(broadcasts[i], err) == -1)
		return (NULL);
	return (broadcasts[i]->set);
}

/* Look a record up in a set. */
int
held_set_contains(const struct held_set *set, const char *data,
    size_t len)
{
	return (bindex_contains(set->ix, data, len));
}

/* The number of distinct lines of a set. */
size_t
held_set_size(const struct held_set *set)
{
	return (bindex_count(set->ix));
}

/* Drop every broadcast. */
void
held_clear(void)
{
	size_t	i;

	for (i = 0; i < nbroadcasts; i++)
		held_free(broadcasts[i]);
	free(broadcasts);
	broadcasts = NULL;
	nbroadcasts = broadcasts_size = 0;
}

/* How many broadcasts are held. */
size_t
held_count(void)
{
	return (nbroadcasts);
}

/* The bytes of the broadcasts held. */
size_t
held_bytes_held(void)
{
	size_t	i, n = 0;

	for (i = 0; i < nbroadcasts; i++)
		n += broadcasts[i]->size;
	return (n);
}

/* The bytes of the sets built. */
size_t
held_set_bytes_held(void)
{
	size_t	i, n = 0;

	for (i = 0; i < nbroadcasts; i++) {
		if (broadcasts[i]->set != NULL &&
		    broadcasts[i]->set->table != NULL)
			n += held_set_mapped_size(
			    broadcasts[i]->set->tablesize);
	}
	return (n);
}
