/*
 * emberd's heap, kept flat.  Two things kept the pages of freed
 * connections from going back to the kernel:
 *
 * - libevent makes a small entry for a descriptor number the first time
 *   an event is added on it, and frees it only with the event base.  Made
 *   by channel_create's event_add, one sat among each connection's
 *   allocations, so no page of a freed connection was ever whole.  They
 *   are made here, together, before the first connection.
 * - emberd keeps freed heap (M_TRIM_THRESHOLD, ember_open_loop) so that
 *   stream buffers are not faulted in again and again.  Once what it holds
 *   free has grown well past its low mark and stayed so, the tick gives
 *   the free pages back with malloc_trim.
 */
#include <sys/eventfd.h>
#include <sys/resource.h>

#include <errno.h>
#include <fcntl.h>
#include <malloc.h>
#include <stdint.h>
#include <string.h>
#include <unistd.h>

#include <event2/event.h>

#include "emberd.h"
#include "heap.h"
#include "limit.h"
#include "log.h"

/* No more entries made up front than this (2.5 MiB of them and their
 * table): past it, libevent makes them as before. */
#define HEAP_MAX_FDS		65536
/* How often the heap is looked at; the growth of its free bytes worth a
 * trim while it moves, and once it is still (moving by less than
 * HEAP_STILL from a tick to the next). */
#define HEAP_TICK_MS		250
#define HEAP_TRIM_GROWTH	(1024 * 1024)
#define HEAP_TRIM_STILL		(256 * 1024)
#define HEAP_STILL		(64 * 1024)

static struct event	*heap_timer;
static size_t		 heap_low;	/* the least free since a trim */
static size_t		 heap_last;	/* free at the last tick */

static void
heap_noop_cb(evutil_socket_t fd, short events, void *arg)
{
	(void)fd; (void)events; (void)arg;
}

/* Add and delete ev on a duplicate of fd numbered at least n: its
 * number, or -1 when none is free below max. */
static int
heap_touch_fd(struct event *ev, int fd, int n, int max)
{
	int	dup;

	if ((dup = fcntl(fd, F_DUPFD_CLOEXEC, n)) == -1)
		return (-1);
	if (dup >= max) {
		close(dup);
		return (-1);
	}
	event_assign(ev, ember_base, dup, EV_READ, heap_noop_cb, NULL);
	event_add(ev, NULL);
	event_del(ev);
	close(dup);
	return (dup);
}

/* The descriptor numbers a connection may be given: two per connection
 * and emberd's own, within RLIMIT_NOFILE. */
static int
heap_fd_numbers(void)
{
	struct rlimit	rl;
	int64_t		n;

	n = limit_total(LIMIT_CONNECTIONS) * 2 + LIMIT_FD_RESERVE;
	if (getrlimit(RLIMIT_NOFILE, &rl) == 0 && rl.rlim_cur != RLIM_INFINITY &&
	    (int64_t)rl.rlim_cur < n)
		n = (int64_t)rl.rlim_cur;
	return (n > HEAP_MAX_FDS ? HEAP_MAX_FDS : (int)n);
}

/*
 * Have libevent make its entries for descriptor numbers below max now,
 * one after another.  An event is added on each free number (a duplicate
 * of an eventfd, which epoll takes), the highest first so that its table
 * is grown once; numbers in use get theirs with their own events.
 */
static void
heap_make_fd_entries(int max)
{
	struct event	*ev;
	int		 fd, n;

	if ((fd = eventfd(0, EFD_CLOEXEC | EFD_NONBLOCK)) == -1) {
		log_warn("heap: eventfd: %s", strerror(errno));
		return;
	}
	ev = event_new(ember_base, -1, 0, heap_noop_cb, NULL);
	heap_touch_fd(ev, fd, max - 1, max);
	for (n = 0; n < max - 1; n++) {
		if ((n = heap_touch_fd(ev, fd, n, max - 1)) == -1)
			break;
	}
	event_free(ev);
	close(fd);
}

/* Bytes the heap holds free (the top and the chunks between). */
static size_t
heap_free_bytes(void)
{
	struct mallinfo2 mi = mallinfo2();

	return (mi.fordblks);
}

static void
heap_arm(void)
{
	struct timeval	tv = { 0, HEAP_TICK_MS * 1000 };

	evtimer_add(heap_timer, &tv);
}

/*
 * Give the free pages back once the heap has held HEAP_TRIM_GROWTH more
 * free than its low mark for two ticks in a row (a mass of clients is
 * going, not a stream's buffers coming and going), and what is left of
 * such a mass once the heap is still.  The tick runs while the heap
 * moves, and stops when it is still: an idle emberd does not wake for
 * it.
 */
static void
heap_tick_cb(evutil_socket_t fd, short events, void *arg)
{
	size_t	now = heap_free_bytes();
	size_t	held = now < heap_last ? now : heap_last;
	int	still;

	(void)fd; (void)events; (void)arg;
	still = now + HEAP_STILL > heap_last && now < heap_last + HEAP_STILL;
	if (now < heap_low)
		heap_low = now;
	if (held >= heap_low + HEAP_TRIM_GROWTH ||
	    (still && now >= heap_low + HEAP_TRIM_STILL)) {
		malloc_trim(0);
		heap_low = heap_free_bytes();
		log_debug("heap: %zu bytes free, %zu once trimmed", now,
		    heap_low);
		now = heap_low;
	}
	heap_last = now;
	if (!still)
		heap_arm();
}

void
heap_check_soon(void)
{
	if (heap_timer != NULL && !evtimer_pending(heap_timer, NULL))
		heap_arm();
}

void
heap_start(void)
{
	heap_make_fd_entries(heap_fd_numbers());
	heap_low = heap_last = heap_free_bytes();
	heap_timer = evtimer_new(ember_base, heap_tick_cb, NULL);
}

void
heap_stop(void)
{
	if (heap_timer != NULL)
		event_free(heap_timer);
	heap_timer = NULL;
}
