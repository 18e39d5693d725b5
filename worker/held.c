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

#include "held.h"
#include "taskdesc.h"
#include "log.h"
#include "xmalloc.h"

/*
 * A slot of a set is 0 when empty, else the line's offset plus one in the
 * high 40 bits and 24 bits of the line's hash in the low bits: the tag
 * settles almost every mismatch without touching the mapping.  A line's
 * length is not stored: the line at an offset ends at the next newline.
 */
#define SET_TAG_BITS	24
#define SET_TAG_MASK	((UINT64_C(1) << SET_TAG_BITS) - 1)
#define SET_MAX_SIZE	((UINT64_C(1) << (64 - SET_TAG_BITS)) - 2)

/* Lines hashed ahead of their insertion, so their slots are prefetched. */
#define SET_BATCH	32

struct held_set {
	const unsigned char	*base;
	size_t			 size;
	uint64_t		*slots;
	size_t			 nslots;
	size_t			 count;		/* distinct lines */
	size_t			 lines;
};

struct held {
	int64_t			 id;
	unsigned char		*map;		/* NULL when empty */
	size_t			 size;
	struct held_set	*set;
};

/* A line waiting for its slot during a build. */
struct held_line {
	uint64_t		 hash;
	size_t			 off;
	size_t			 len;
	size_t			 slot;
};

static struct held	**broadcasts;
static size_t		  nbroadcasts, broadcasts_size;

/* Multipliers of the hash (odd, with well spread bits). */
#define HASH_K0	UINT64_C(0xa0761d6478bd642f)
#define HASH_K1	UINT64_C(0xe7037ed1a0b428db)
#define HASH_K2	UINT64_C(0x8ebc6af09c88c6e3)

/* Multiply to 128 bits and fold the halves. */
static inline uint64_t
held_mix(uint64_t a, uint64_t b)
{
	__uint128_t	r = (__uint128_t)a * b;

	return ((uint64_t)r ^ (uint64_t)(r >> 64));
}

/* Load 8 bytes, unaligned. */
static inline uint64_t
held_load8(const unsigned char *p)
{
	uint64_t	v;

	memcpy(&v, p, sizeof v);
	return (v);
}

/* Load 4 bytes, unaligned. */
static inline uint64_t
held_load4(const unsigned char *p)
{
	uint32_t	v;

	memcpy(&v, p, sizeof v);
	return (v);
}

/*
 * Hash a line.  Multiply-and-fold over 16 bytes a round; lines of up to
 * 16 bytes (numbers, ids, words) take two loads and two multiplies.
 */
static inline uint64_t
held_hash(const unsigned char *p, size_t len)
{
	uint64_t	a, b, seed = HASH_K2;
	size_t		left = len, step;
	__uint128_t	r;

	if (len <= 16) {
		if (len >= 4) {
			step = (len >> 3) << 2;
			a = (held_load4(p) << 32) |
			    held_load4(p + step);
			b = (held_load4(p + len - 4) << 32) |
			    held_load4(p + len - 4 - step);
		} else if (len > 0) {
			a = ((uint64_t)p[0] << 16) |
			    ((uint64_t)p[len >> 1] << 8) | p[len - 1];
			b = 0;
		} else
			a = b = 0;
	} else {
		while (left > 16) {
			seed = held_mix(held_load8(p) ^ HASH_K1,
			    held_load8(p + 8) ^ seed);
			p += 16;
			left -= 16;
		}
		a = held_load8(p + left - 16);
		b = held_load8(p + left - 8);
	}
	r = (__uint128_t)(a ^ HASH_K1) * (b ^ seed);
	return (held_mix((uint64_t)r ^ HASH_K0 ^ len,
	    (uint64_t)(r >> 64) ^ HASH_K1));
}

/* The first slot to probe for a hash: its high bits scaled to the table. */
static inline size_t
held_set_slot(const struct held_set *set, uint64_t hash)
{
	return ((size_t)(((__uint128_t)hash * set->nslots) >> 64));
}

/* Is the line at off equal to data? */
static inline int
held_set_equal(const struct held_set *set, size_t off,
    const unsigned char *data, size_t len)
{
	if (len > set->size - off)
		return (0);
	if (memcmp(set->base + off, data, len) != 0)
		return (0);
	return (off + len == set->size || set->base[off + len] == '\n');
}

/* Find a line: its slot, or the empty slot where it belongs. */
static inline size_t
held_set_find(const struct held_set *set, uint64_t hash,
    size_t slot, const unsigned char *data, size_t len, int *found)
{
	uint64_t	s, tag = hash & SET_TAG_MASK;

	for (;;) {
		s = set->slots[slot];
		if (s == 0) {
			*found = 0;
			return (slot);
		}
		if ((s & SET_TAG_MASK) == tag && held_set_equal(set,
		    (size_t)(s >> SET_TAG_BITS) - 1, data, len)) {
			*found = 1;
			return (slot);
		}
		if (++slot == set->nslots)
			slot = 0;
	}
}

/*
 * Count the lines of a mapping, a word at a time: a byte of x is zero
 * exactly where the word had a newline, and the top bit of each byte of t
 * marks one.
 */
static size_t
held_count_lines(const unsigned char *p, size_t size)
{
	const uint64_t	ones = UINT64_C(0x0101010101010101);
	const uint64_t	low7 = UINT64_C(0x7f7f7f7f7f7f7f7f);
	uint64_t	x, t;
	size_t		i = 0, n = 0;

	for (; i + 8 <= size; i += 8) {
		x = held_load8(p + i) ^ (ones * '\n');
		t = ~(((x & low7) + low7) | x | low7);
		n += (size_t)__builtin_popcountll(t);
	}
	for (; i < size; i++)
		n += p[i] == '\n';
	if (size > 0 && p[size - 1] != '\n')
		n++;
	return (n);
}

/* Tables from this size up are aligned to and mapped with huge pages. */
#define SET_HUGE_PAGE	(2 * 1024 * 1024)
#define SET_HUGE_FROM	(8 * 1024 * 1024)

/* The bytes a table of n slots maps: whole pages, huge ones if large. */
static size_t
held_set_mapped_size(size_t nslots)
{
	size_t	bytes = nslots * sizeof (uint64_t), unit = 4096;

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
static uint64_t *
held_set_map(size_t nslots)
{
	unsigned char	*p, *aligned;
	size_t		 bytes = held_set_mapped_size(nslots), head;

	if (bytes < SET_HUGE_FROM) {
		p = mmap(NULL, bytes, PROT_READ | PROT_WRITE,
		    MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
		return (p == MAP_FAILED ? NULL : (uint64_t *)p);
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
	return ((uint64_t *)aligned);
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

/* Insert a batch of hashed lines whose slots were prefetched. */
static void
held_set_insert(struct held_set *set, struct held_line *batch,
    size_t n)
{
	size_t	i, slot;
	int	found;

	for (i = 0; i < n; i++) {
		slot = held_set_find(set, batch[i].hash, batch[i].slot,
		    set->base + batch[i].off, batch[i].len, &found);
		if (found)
			continue;
		set->slots[slot] = ((uint64_t)(batch[i].off + 1) <<
		    SET_TAG_BITS) | (batch[i].hash & SET_TAG_MASK);
		set->count++;
	}
}

/*
 * Build the set of a broadcast's lines, with a table sized from the number
 * of lines for a load of at most 3/4.  Lines are hashed a batch ahead of
 * their insertion and their slots prefetched, so that the cache misses of
 * a batch overlap.
 */
static int
held_set_build(struct held *b, char **err)
{
	struct held_set	*set;
	struct held_line	 batch[SET_BATCH];
	struct timespec		 start;
	const unsigned char	*p, *end, *nl;
	size_t			 n, len;

	clock_gettime(CLOCK_MONOTONIC, &start);
	if ((uint64_t)b->size > SET_MAX_SIZE) {
		xasprintf(err, "broadcast %" PRId64 ": %zu bytes is too "
		    "large for a set", b->id, b->size);
		return (-1);
	}
	set = xcalloc(1, sizeof *set);
	set->base = b->map;
	set->size = b->size;
	if (b->size != 0)
		madvise(b->map, b->size, MADV_WILLNEED);
	set->lines = held_count_lines(b->map, b->size);
	set->nslots = set->lines + set->lines / 3 + 8;
	set->slots = held_set_map(set->nslots);
	if (set->slots == NULL) {
		xasprintf(err, "broadcast %" PRId64 ": no memory for a "
		    "set of %zu lines (%zu MiB): %s%s", b->id,
		    set->lines, held_set_mapped_size(set->nslots) >> 20,
		    strerror(errno), held_limit_hint());
		free(set);
		return (-1);
	}

	p = b->map;
	end = p + b->size;
	while (p < end) {
		for (n = 0; n < SET_BATCH && p < end; n++) {
			nl = memchr(p, '\n', (size_t)(end - p));
			len = (size_t)((nl != NULL ? nl : end) - p);
			batch[n].off = (size_t)(p - b->map);
			batch[n].len = len;
			batch[n].hash = held_hash(p, len);
			batch[n].slot = held_set_slot(set, batch[n].hash);
			__builtin_prefetch(&set->slots[batch[n].slot], 1);
			p = nl != NULL ? nl + 1 : end;
		}
		held_set_insert(set, batch, n);
	}
	b->set = set;
	log_debug("broadcast %" PRId64 ": set of %zu lines (%zu distinct, "
	    "%zu MiB) built in %.1f ms", b->id, set->lines, set->count,
	    held_set_mapped_size(set->nslots) >> 20,
	    held_ms_since(&start));
	return (0);
}

/* Free a set. */
static void
held_set_free(struct held_set *set)
{
	if (set == NULL)
		return;
	munmap(set->slots, held_set_mapped_size(set->nslots));
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

/* Unmap and free a broadcast. */
static void
held_free(struct held *b)
{
	held_set_free(b->set);
	if (b->map != NULL)
		munmap(b->map, b->size);
	free(b);
}

/*
 * Map a new broadcast from the descriptor emberd passed with the task
 * descriptor (a sealed memfd: nobody can change its bytes).  The
 * descriptor is closed either way.
 */
static int
held_add(int64_t id, int fd, json_int_t size, char **err)
{
	struct held	*b;
	struct stat		 st;
	void			*map = NULL;

	if (fd < 0) {
		xasprintf(err, "broadcast %" PRId64 ": no descriptor came with "
		    "it", id);
		return (-1);
	}
	if (held_find(id) != -1) {
		xasprintf(err, "broadcast %" PRId64 ": already held", id);
		goto fail;
	}
	if (fstat(fd, &st) == -1) {
		xasprintf(err, "broadcast %" PRId64 ": %s", id,
		    strerror(errno));
		goto fail;
	}
	if (!S_ISREG(st.st_mode)) {
		xasprintf(err, "broadcast %" PRId64 ": not a regular file",
		    id);
		goto fail;
	}
	if (st.st_size != size) {
		xasprintf(err, "broadcast %" PRId64 ": %lld bytes, expected "
		    "%lld", id, (long long)st.st_size, (long long)size);
		goto fail;
	}
	if (size != 0) {
		map = mmap(NULL, (size_t)size, PROT_READ, MAP_SHARED, fd, 0);
		if (map == MAP_FAILED) {
			xasprintf(err, "broadcast %" PRId64 ": mmap: %s%s",
			    id, strerror(errno), held_limit_hint());
			goto fail;
		}
	}
	close(fd);

	b = xcalloc(1, sizeof *b);
	b->id = id;
	b->map = map;
	b->size = (size_t)size;
	if (nbroadcasts == broadcasts_size) {
		broadcasts_size = broadcasts_size == 0 ? 8 :
		    broadcasts_size * 2;
		broadcasts = xreallocarray(broadcasts, broadcasts_size,
		    sizeof *broadcasts);
	}
	broadcasts[nbroadcasts++] = b;
	log_debug("broadcast %" PRId64 ": %zu bytes", id, b->size);
	return (0);

fail:
	close(fd);
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
		} else if (held_add(changes[i].id, changes[i].fd,
		    changes[i].size, err) == -1) {
			i++;
			goto fail;
		}
	}
	return (0);
fail:
	/* The descriptors of the changes not applied are closed too. */
	for (; i < n; i++) {
		if (changes[i].add && changes[i].fd >= 0)
			close(changes[i].fd);
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
	if (broadcasts[i]->set == NULL &&
	    held_set_build(broadcasts[i], err) == -1)
		return (NULL);
	return (broadcasts[i]->set);
}

/* Look a record up in a set. */
int
held_set_contains(const struct held_set *set, const char *data,
    size_t len)
{
	uint64_t	hash;
	int		found;

	/* No line holds a newline; a record with one would match a run of
	 * lines. */
	if (set->count == 0 || (len != 0 && memchr(data, '\n', len) != NULL))
		return (0);
	hash = held_hash((const unsigned char *)data, len);
	held_set_find(set, hash, held_set_slot(set, hash),
	    (const unsigned char *)data, len, &found);
	return (found);
}

/* The number of distinct lines of a set. */
size_t
held_set_size(const struct held_set *set)
{
	return (set->count);
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
		if (broadcasts[i]->set != NULL)
			n += held_set_mapped_size(
			    broadcasts[i]->set->nslots);
	}
	return (n);
}
