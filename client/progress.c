#include <sys/stat.h>

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
	int64_t		 partitions;
	uint64_t	 started_ms, drawn_ms;

	pthread_t	 thread;	/* progress_watch */
	int		 watching;
	pthread_mutex_t	 lock;
	int		 stop;
	char		*socket_path;
	char		*operation;
};

/*
 * The line on screen, for the exit and signal handlers to erase.  The
 * watcher thread draws while the main thread may be in a signal handler
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

/* Ctrl-C or a kill: erase the line, then die of the signal. */
static void
progress_signal(int sig)
{
	struct timespec	ms = { 0, 1000000 };
	int		i;

	atomic_store(&progress_dying, 1);
	/* Bounded: a draw to a terminal stopped with ^S never returns. */
	for (i = 0; i < 100 && atomic_load(&progress_drawing); i++)
		nanosleep(&ms, NULL);
	progress_erase();
	signal(sig, SIG_DFL);
	raise(sig);
}

/* Whether standard output and standard error are the same terminal: the
 * line would then be drawn over the records. */
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

struct progress *
progress_create(int64_t partitions)
{
	struct progress	*p;

	static int	 handlers;

	if (!isatty(STDERR_FILENO) || progress_same_terminal())
		return (NULL);
	if ((p = calloc(1, sizeof *p)) == NULL)
		return (NULL);
	if (!handlers) {
		handlers = 1;
		atexit(progress_erase);
		signal(SIGINT, progress_signal);
		signal(SIGTERM, progress_signal);
		signal(SIGHUP, progress_signal);
	}
	p->partitions = partitions;
	p->started_ms = progress_now_ms();
	pthread_mutex_init(&p->lock, NULL);
	return (p);
}

/* Draw the line; records < 0 when they are not known. */
static void
progress_draw(struct progress *p, int64_t done, int64_t records, int force)
{
	uint64_t	now = progress_now_ms();
	char		line[128];
	int		len;

	if (!force && now - p->drawn_ms < PROGRESS_INTERVAL_MS)
		return;
	p->drawn_ms = now;

	/* One write, so that an erase never lands inside the line. */
	len = snprintf(line, sizeof line, "\r\033[K%lld/%lld partitions",
	    (long long)done, (long long)p->partitions);
	if (records >= 0)
		len += snprintf(line + len, sizeof line - len, ", %lld records",
		    (long long)records);
	len += snprintf(line + len, sizeof line - len, ", %.1fs",
	    (double)(now - p->started_ms) / 1000.0);

	atomic_store(&progress_drawing, 1);
	if (!atomic_load(&progress_dying)) {
		atomic_store(&progress_shown, 1);
		(void)write(STDERR_FILENO, line, len);
	}
	atomic_store(&progress_drawing, 0);
}

void
progress_stream(struct progress *p, int64_t done, int64_t records)
{
	if (p != NULL)
		progress_draw(p, done, records, 0);
}

/* Poll emberd's status for the operation's partitions done. */
static void *
progress_watch_main(void *arg)
{
	struct progress	*p = arg;
	struct ember	*e;
	json_t		*reply, *ops, *op;
	char		*text, *err = NULL;
	size_t		 i;
	int		 stop;

	if ((e = ember_connect(p->socket_path, &err)) == NULL) {
		free(err);
		return (NULL);
	}
	for (;;) {
		pthread_mutex_lock(&p->lock);
		stop = p->stop;
		pthread_mutex_unlock(&p->lock);
		if (stop || (text = ember_status(e)) == NULL)
			break;
		reply = json_loads(text, 0, NULL);
		free(text);
		ops = json_object_get(reply, "operations");
		json_array_foreach(ops, i, op) {
			if (strcmp(json_string_value(json_object_get(op, "id")) ?
			    json_string_value(json_object_get(op, "id")) : "",
			    p->operation) != 0)
				continue;
			pthread_mutex_lock(&p->lock);
			if (json_is_integer(json_object_get(op, "partitions")))
				p->partitions = json_integer_value(
				    json_object_get(op, "partitions"));
			if (!p->stop)
				progress_draw(p, json_integer_value(
				    json_object_get(op, "done")), -1, 1);
			pthread_mutex_unlock(&p->lock);
		}
		json_decref(reply);
		usleep(PROGRESS_INTERVAL_MS * 1000);
	}
	ember_close(e);
	return (NULL);
}

void
progress_watch(struct progress *p, const char *socket_path,
    const char *operation)
{
	sigset_t	block, old;

	if (p == NULL)
		return;
	p->socket_path = socket_path != NULL ? strdup(socket_path) : NULL;
	p->operation = strdup(operation);
	if (p->operation == NULL)
		return;
	sigemptyset(&block);
	sigaddset(&block, SIGINT);
	sigaddset(&block, SIGTERM);
	sigaddset(&block, SIGHUP);
	pthread_sigmask(SIG_BLOCK, &block, &old);
	if (pthread_create(&p->thread, NULL, progress_watch_main, p) == 0)
		p->watching = 1;
	pthread_sigmask(SIG_SETMASK, &old, NULL);
}

void
progress_free(struct progress *p)
{
	if (p == NULL)
		return;
	pthread_mutex_lock(&p->lock);
	p->stop = 1;
	progress_erase();
	pthread_mutex_unlock(&p->lock);
	if (p->watching)
		pthread_join(p->thread, NULL);
	pthread_mutex_destroy(&p->lock);
	free(p->socket_path);
	free(p->operation);
	free(p);
}
