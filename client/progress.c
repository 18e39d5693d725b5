#include <sys/stat.h>

#include <errno.h>
#include <pthread.h>
#include <signal.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#include <jansson.h>

#include "ember.h"
#include "progress.h"

#define PROGRESS_INTERVAL_MS	100

struct progress {
	/* Stored by the stream's loop or the status poll, read by draws. */
	atomic_llong	 partitions;	/* 0: not known yet */
	atomic_llong	 done;
	atomic_llong	 records;	/* -1: not known (reply actions) */
	uint64_t	 started_ms;
	int		 same_terminal;	/* standard output's too */

	pthread_t	 thread;
	int		 running;
	pthread_mutex_t	 lock;
	pthread_cond_t	 wake;
	int		 stop;		/* under lock */
	int		 held;		/* under lock: records going out */
	char		*socket_path;	/* under lock, with operation */
	char		*operation;	/* to poll status for, or NULL */
};

/*
 * The line on screen, for the exit and signal handlers to erase.  The
 * drawing thread draws while the main thread may be in a signal handler
 * (the thread blocks the signals, so they always land on the main one):
 * the handler raises dying, waits for a draw under way to finish, then
 * erases.  A draw looks at dying only after raising drawing, so one of
 * the two always sees the other (both are sequentially consistent).
 */
static atomic_int	progress_shown;
static atomic_int	progress_dying;
static atomic_int	progress_drawing;

/* Erase the line, if one is shown; async-signal-safe. */
static void
progress_erase(void)
{
	if (atomic_exchange(&progress_shown, 0))
		(void)write(STDERR_FILENO, "\r\033[K", 4);
}

/* Erase the line for good, even if the thread is drawing it; the exit's
 * handler, and the signals' before they kill. */
static void
progress_vanish(void)
{
	struct timespec	ms = { 0, 1000000 };
	int		i;

	atomic_store(&progress_dying, 1);
	/* Bounded: a draw to a terminal stopped with ^S never returns. */
	for (i = 0; i < 100 && atomic_load(&progress_drawing); i++)
		nanosleep(&ms, NULL);
	progress_erase();
}

/* Ctrl-C or a kill: erase the line, then die of the signal. */
static void
progress_signal(int sig)
{
	progress_vanish();
	signal(sig, SIG_DFL);
	raise(sig);
}

/* Whether standard output is the terminal the line is drawn on. */
static int
progress_same_terminal(void)
{
	struct stat	out, err;

	if (!isatty(STDOUT_FILENO))
		return (0);
	if (fstat(STDOUT_FILENO, &out) == -1 || fstat(STDERR_FILENO, &err) ==
	    -1)
		return (1);
	return (out.st_rdev == err.st_rdev);
}

static uint64_t
progress_now_ms(void)
{
	struct timespec	ts;

	clock_gettime(CLOCK_MONOTONIC, &ts);
	return ((uint64_t)ts.tv_sec * 1000 + (uint64_t)ts.tv_nsec / 1000000);
}

/* Draw the line: one write, so that an erase never lands inside it. */
static void
progress_draw(struct progress *p)
{
	char		line[128];
	long long	total = atomic_load(&p->partitions);
	long long	records = atomic_load(&p->records);
	int		len;

	len = snprintf(line, sizeof line, "\r\033[K%lld/", (long long)
	    atomic_load(&p->done));
	if (total > 0)
		len += snprintf(line + len, sizeof line - len, "%lld", total);
	else
		len += snprintf(line + len, sizeof line - len, "?");
	len += snprintf(line + len, sizeof line - len, " partitions");
	if (records >= 0)
		len += snprintf(line + len, sizeof line - len, ", %lld records",
		    records);
	len += snprintf(line + len, sizeof line - len, ", %.1fs",
	    (double)(progress_now_ms() - p->started_ms) / 1000.0);

	atomic_store(&progress_drawing, 1);
	if (!atomic_load(&progress_dying)) {
		atomic_store(&progress_shown, 1);
		(void)write(STDERR_FILENO, line, len);
	}
	atomic_store(&progress_drawing, 0);
}

/* Ask emberd's status for the watched operation's partitions; 0, or -1
 * when there is nothing to ask (no connection). */
static int
progress_poll(struct progress *p, struct ember **e, const char *socket_path,
    const char *operation)
{
	json_t		*reply, *op, *n;
	const char	*id;
	char		*text, *err = NULL;
	size_t		 i;

	if (*e == NULL && (*e = ember_connect(socket_path, &err)) == NULL) {
		free(err);
		return (-1);
	}
	if ((text = ember_status(*e)) == NULL)
		return (-1);
	reply = json_loads(text, 0, NULL);
	free(text);
	json_array_foreach(json_object_get(reply, "operations"), i, op) {
		id = json_string_value(json_object_get(op, "id"));
		if (id == NULL || strcmp(id, operation) != 0)
			continue;
		if (json_is_integer(n = json_object_get(op, "partitions")))
			atomic_store(&p->partitions, json_integer_value(n));
		if (json_is_integer(n = json_object_get(op, "done")))
			atomic_store(&p->done, json_integer_value(n));
	}
	json_decref(reply);
	return (0);
}

/* Sleep until the next tick or progress_free; 1 if it is time to stop.
 * Called and returns with the lock held. */
static int
progress_tick(struct progress *p)
{
	struct timespec	until;

	clock_gettime(CLOCK_MONOTONIC, &until);
	until.tv_nsec += PROGRESS_INTERVAL_MS * 1000000L;
	if (until.tv_nsec >= 1000000000L) {
		until.tv_sec++;
		until.tv_nsec -= 1000000000L;
	}
	while (!p->stop) {
		if (pthread_cond_timedwait(&p->wake, &p->lock, &until) ==
		    ETIMEDOUT)
			break;
	}
	return (p->stop);
}

/* The drawing thread: every tick, poll status if watching, then draw. */
static void *
progress_main(void *arg)
{
	struct progress	*p = arg;
	struct ember	*e = NULL;
	char		*socket_path, *operation;

	pthread_mutex_lock(&p->lock);
	while (!progress_tick(p)) {
		if ((operation = p->operation) != NULL) {
			socket_path = p->socket_path;
			/* Neither changes once set; the poll blocks. */
			pthread_mutex_unlock(&p->lock);
			if (progress_poll(p, &e, socket_path, operation) == -1 &&
			    e != NULL) {
				ember_close(e);
				e = NULL;
			}
			pthread_mutex_lock(&p->lock);
			if (p->stop)
				break;
		}
		if (!p->held)
			progress_draw(p);
	}
	pthread_mutex_unlock(&p->lock);
	if (e != NULL)
		ember_close(e);
	return (NULL);
}

/* Start the drawing thread, with the signals left to the main one. */
static void
progress_start(struct progress *p)
{
	sigset_t		block, old;
	pthread_condattr_t	attr;

	pthread_mutex_init(&p->lock, NULL);
	pthread_condattr_init(&attr);
	pthread_condattr_setclock(&attr, CLOCK_MONOTONIC);
	pthread_cond_init(&p->wake, &attr);
	pthread_condattr_destroy(&attr);
	sigemptyset(&block);
	sigaddset(&block, SIGINT);
	sigaddset(&block, SIGTERM);
	sigaddset(&block, SIGHUP);
	pthread_sigmask(SIG_BLOCK, &block, &old);
	if (pthread_create(&p->thread, NULL, progress_main, p) == 0)
		p->running = 1;
	pthread_sigmask(SIG_SETMASK, &old, NULL);
}

struct progress *
progress_create(int64_t partitions)
{
	struct progress	*p;

	static int	 handlers;

	if (!isatty(STDERR_FILENO))
		return (NULL);
	if ((p = calloc(1, sizeof *p)) == NULL)
		return (NULL);
	if (!handlers) {
		handlers = 1;
		atexit(progress_vanish);
		signal(SIGINT, progress_signal);
		signal(SIGTERM, progress_signal);
		signal(SIGHUP, progress_signal);
	}
	atomic_init(&p->partitions, partitions);
	atomic_init(&p->done, 0);
	atomic_init(&p->records, -1);
	p->started_ms = progress_now_ms();
	p->same_terminal = progress_same_terminal();
	progress_start(p);
	return (p);
}

void
progress_stream(struct progress *p, int64_t done, int64_t records)
{
	if (p == NULL)
		return;
	atomic_store_explicit(&p->done, done, memory_order_relaxed);
	atomic_store_explicit(&p->records, records, memory_order_relaxed);
}

void
progress_watch(struct progress *p, const char *socket_path,
    const char *operation)
{
	if (p == NULL)
		return;
	pthread_mutex_lock(&p->lock);
	p->socket_path = socket_path != NULL ? strdup(socket_path) : NULL;
	p->operation = strdup(operation);
	pthread_mutex_unlock(&p->lock);
}

void
progress_hold(struct progress *p)
{
	if (p == NULL || !p->same_terminal)
		return;
	pthread_mutex_lock(&p->lock);
	p->held = 1;
	progress_erase();
	pthread_mutex_unlock(&p->lock);
}

void
progress_let_go(struct progress *p)
{
	if (p == NULL || !p->same_terminal)
		return;
	pthread_mutex_lock(&p->lock);
	p->held = 0;
	if (!p->stop)
		progress_draw(p);
	pthread_mutex_unlock(&p->lock);
}

void
progress_free(struct progress *p)
{
	if (p == NULL)
		return;
	pthread_mutex_lock(&p->lock);
	p->stop = 1;
	pthread_cond_signal(&p->wake);
	progress_erase();
	pthread_mutex_unlock(&p->lock);
	if (p->running)
		pthread_join(p->thread, NULL);
	pthread_cond_destroy(&p->wake);
	pthread_mutex_destroy(&p->lock);
	free(p->socket_path);
	free(p->operation);
	free(p);
}
