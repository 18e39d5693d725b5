#include <sys/types.h>
#include <sys/eventfd.h>
#include <sys/resource.h>
#include <sys/syscall.h>

#include <errno.h>
#include <pthread.h>
#include <signal.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include <event2/buffer.h>
#include <event2/event.h>

#include "queue.h"

#include "emberd.h"
#include "log.h"
#include "parser.h"
#include "request.h"
#include "xmalloc.h"

/* Threads: two, and one uid's frames are parsed one at a time, so that
 * one uid's long parse holds no other uid's. */
#define PARSER_THREADS		2
/* Their nice value: the loop's turns come before a parse. */
#define PARSER_NICE		5

enum parser_state {
	PARSER_QUEUED,		/* in its user's queue */
	PARSER_RUNNING,		/* a thread parses it */
	PARSER_DONE,		/* parsed, in the done list for the loop */
};

struct parser_user;

struct parser_job {
	struct parser_user	*user;
	enum parser_state	 state;
	int			 cancelled;	/* its owner is gone */
	struct evbuffer		*frame;		/* until parsed */
	size_t			 max_values;
	json_t			*req;		/* DONE: the result */
	char			*err;
	void			(*done_cb)(json_t *, char *, void *);
	void			*arg;
	TAILQ_ENTRY(parser_job)	 entry;		/* user's queue, or done */
};
TAILQ_HEAD(parser_jobs, parser_job);

/* A uid with frames in the parser; gone when it has none. */
struct parser_user {
	uid_t			 uid;
	size_t			 njobs;		/* queued, running or done */
	int			 running;	/* one of them is being parsed */
	struct parser_jobs	 queue;
	int			 ready;		/* in parser_ready */
	TAILQ_ENTRY(parser_user) ready_entry;
	TAILQ_ENTRY(parser_user) entry;
};
TAILQ_HEAD(parser_users, parser_user);

struct parser_tree {
	json_t			*req;
	TAILQ_ENTRY(parser_tree) entry;
};

static pthread_mutex_t		 parser_lock = PTHREAD_MUTEX_INITIALIZER;
static pthread_cond_t		 parser_wake = PTHREAD_COND_INITIALIZER;
/* All under the lock: uids with frames; those with some queued, served
 * in turn from the head; jobs parsed; trees to drop. */
static struct parser_users	 parser_users =
    TAILQ_HEAD_INITIALIZER(parser_users);
static struct parser_users	 parser_ready =
    TAILQ_HEAD_INITIALIZER(parser_ready);
static struct parser_jobs	 parser_done =
    TAILQ_HEAD_INITIALIZER(parser_done);
static TAILQ_HEAD(, parser_tree) parser_trees =
    TAILQ_HEAD_INITIALIZER(parser_trees);
static size_t			 parser_queued, parser_running, parser_ntrees;
static int			 parser_stopping;
static pthread_t		 parser_threads[PARSER_THREADS];
static int			 parser_nthreads;
/* The loop's: the eventfd the threads write when a job is done. */
static int			 parser_fd = -1;
static struct event		*parser_ev;
static struct event		*parser_next;	/* delivers one more job */
static void			(*parser_room_cb)(uid_t);

/* Parse one frame; the lock is not held. */
static void
parser_run(struct parser_job *job)
{
	size_t	 len = evbuffer_get_length(job->frame);
	void	*data;

	data = evbuffer_pullup(job->frame, (ev_ssize_t)len);
	if (data == NULL && len > 0)
		fatalx("%s: out of memory", __func__);
	job->req = request_parse(data != NULL ? data : "", len,
	    job->max_values, &job->err);
	evbuffer_free(job->frame);	/* its bytes are no use now */
	job->frame = NULL;
}

/* Tell the loop a job is done; the lock is held. */
static void
parser_notify_locked(void)
{
	uint64_t	one = 1;

	while (write(parser_fd, &one, sizeof one) == -1 && errno == EINTR)
		;
}

/* Take the next job, from the first uid in turn that has none being
 * parsed; the lock is held. */
static struct parser_job *
parser_next_locked(void)
{
	struct parser_user	*u;
	struct parser_job	*job;

	TAILQ_FOREACH(u, &parser_ready, ready_entry) {
		if (!u->running)
			break;
	}
	if (u == NULL)
		return (NULL);
	u->running = 1;
	job = TAILQ_FIRST(&u->queue);
	TAILQ_REMOVE(&u->queue, job, entry);
	TAILQ_REMOVE(&parser_ready, u, ready_entry);
	if (TAILQ_EMPTY(&u->queue))
		u->ready = 0;
	else
		TAILQ_INSERT_TAIL(&parser_ready, u, ready_entry);
	parser_queued--;
	return (job);
}

/* Parse frames and drop trees, until emberd stops. */
static void *
parser_main(void *arg)
{
	struct parser_job	*job;
	struct parser_tree	*t;

	(void)arg;
	/* This thread alone. */
	(void)setpriority(PRIO_PROCESS, (id_t)syscall(SYS_gettid),
	    PARSER_NICE);
	pthread_mutex_lock(&parser_lock);
	for (;;) {
		job = NULL;
		while (!parser_stopping && parser_ntrees == 0 &&
		    (job = parser_next_locked()) == NULL)
			pthread_cond_wait(&parser_wake, &parser_lock);
		if (parser_stopping)
			break;
		/* Memory first: a dropped tree frees what a parse takes. */
		if (job == NULL && (t = TAILQ_FIRST(&parser_trees)) != NULL) {
			TAILQ_REMOVE(&parser_trees, t, entry);
			parser_ntrees--;
			pthread_mutex_unlock(&parser_lock);
			json_decref(t->req);
			free(t);
			pthread_mutex_lock(&parser_lock);
			continue;
		}
		job->state = PARSER_RUNNING;
		parser_running++;
		pthread_mutex_unlock(&parser_lock);
		parser_run(job);
		pthread_mutex_lock(&parser_lock);
		parser_running--;
		job->user->running = 0;
		job->state = PARSER_DONE;
		TAILQ_INSERT_TAIL(&parser_done, job, entry);
		parser_notify_locked();
		/* The uid's next frame may wait for a thread now. */
		pthread_cond_signal(&parser_wake);
	}
	pthread_mutex_unlock(&parser_lock);
	return (NULL);
}

/* Start a thread, with every signal blocked: the loop takes them. */
static void
parser_start_thread(void)
{
	sigset_t	all, old;
	int		error;

	sigfillset(&all);
	pthread_sigmask(SIG_SETMASK, &all, &old);
	error = pthread_create(&parser_threads[parser_nthreads], NULL,
	    parser_main, NULL);
	pthread_sigmask(SIG_SETMASK, &old, NULL);
	if (error != 0) {
		/* The threads there are go on; the first is a must. */
		if (parser_nthreads == 0)
			fatalx("parser: pthread_create: %s", strerror(error));
		log_warn("parser: pthread_create: %s", strerror(error));
		return;
	}
	parser_nthreads++;
}

/* Queue a tree to drop; the lock is held. */
static void
parser_drop_locked(json_t *req)
{
	struct parser_tree	*t;

	if (req == NULL)
		return;
	t = xmalloc(sizeof *t);
	t->req = req;
	TAILQ_INSERT_TAIL(&parser_trees, t, entry);
	parser_ntrees++;
	pthread_cond_signal(&parser_wake);
}

/* A job left the parser: its uid has room for another frame.  The lock
 * is held. */
static void
parser_forget_locked(struct parser_job *job)
{
	struct parser_user	*u = job->user;

	if (--u->njobs == 0) {
		TAILQ_REMOVE(&parser_users, u, entry);
		free(u);
	}
	if (job->frame != NULL)
		evbuffer_free(job->frame);
	free(job);
}

/*
 * Hand the first job done to its owner.  One a loop turn, as any request
 * (handling a big one may take the loop a while): the next waits for a
 * zero timer, which fires after the loop polled its sockets again.
 */
static void
parser_deliver(void)
{
	static const struct timeval	 now = { 0, 0 };
	struct parser_job		*job;
	uid_t				 uid;
	json_t				*req;
	char				*err;
	void				(*cb)(json_t *, char *, void *);
	void				*cb_arg;

	pthread_mutex_lock(&parser_lock);
	if ((job = TAILQ_FIRST(&parser_done)) == NULL) {
		pthread_mutex_unlock(&parser_lock);
		return;
	}
	TAILQ_REMOVE(&parser_done, job, entry);
	if (!TAILQ_EMPTY(&parser_done))
		evtimer_add(parser_next, &now);
	uid = job->user->uid;
	req = job->req;
	err = job->err;
	cb = job->cancelled ? NULL : job->done_cb;
	cb_arg = job->arg;
	if (cb == NULL)
		parser_drop_locked(req);
	parser_forget_locked(job);
	pthread_mutex_unlock(&parser_lock);
	if (cb != NULL)
		cb(req, err, cb_arg);
	else
		free(err);
	parser_room_cb(uid);
}

/* A thread finished a job. */
static void
parser_done_cb(evutil_socket_t fd, short events, void *arg)
{
	uint64_t	n;

	(void)events; (void)arg;
	(void)read(fd, &n, sizeof n);
	parser_deliver();
}

/* The loop's next turn: the next job done. */
static void
parser_next_cb(evutil_socket_t fd, short events, void *arg)
{
	(void)fd; (void)events; (void)arg;
	parser_deliver();
}

void
parser_init(void (*room_cb)(uid_t))
{
	parser_room_cb = room_cb;
	parser_stopping = 0;
	parser_fd = eventfd(0, EFD_NONBLOCK | EFD_CLOEXEC);
	if (parser_fd == -1)
		fatal("parser: eventfd");
	parser_ev = event_new(ember_base, parser_fd, EV_READ | EV_PERSIST,
	    parser_done_cb, NULL);
	event_add(parser_ev, NULL);
	parser_next = evtimer_new(ember_base, parser_next_cb, NULL);
}

void
parser_shutdown(void)
{
	struct parser_job	*job;
	struct parser_tree	*t;
	int			 i;

	if (parser_ev == NULL)
		return;
	pthread_mutex_lock(&parser_lock);
	parser_stopping = 1;
	pthread_cond_broadcast(&parser_wake);
	pthread_mutex_unlock(&parser_lock);
	for (i = 0; i < parser_nthreads; i++)
		pthread_join(parser_threads[i], NULL);
	parser_nthreads = 0;
	/* The threads are gone: what is left is the loop's alone.  Every
	 * owner has cancelled (connections are closed first). */
	while ((job = TAILQ_FIRST(&parser_done)) != NULL) {
		TAILQ_REMOVE(&parser_done, job, entry);
		json_decref(job->req);
		free(job->err);
		parser_forget_locked(job);
	}
	while ((t = TAILQ_FIRST(&parser_trees)) != NULL) {
		TAILQ_REMOVE(&parser_trees, t, entry);
		json_decref(t->req);
		free(t);
	}
	parser_ntrees = 0;
	event_free(parser_next);
	parser_next = NULL;
	event_free(parser_ev);
	parser_ev = NULL;
	close(parser_fd);
	parser_fd = -1;
}

/* The uid's entry; the lock is held. */
static struct parser_user *
parser_find_locked(uid_t uid)
{
	struct parser_user	*u;

	TAILQ_FOREACH(u, &parser_users, entry) {
		if (u->uid == uid)
			return (u);
	}
	return (NULL);
}

int
parser_full(uid_t uid)
{
	struct parser_user	*u;
	int			 full;

	pthread_mutex_lock(&parser_lock);
	u = parser_find_locked(uid);
	full = u != NULL && u->njobs >= PARSER_PER_UID;
	pthread_mutex_unlock(&parser_lock);
	return (full);
}

struct parser_job *
parser_parse(uid_t uid, struct evbuffer *frame, size_t max_values,
    void (*done_cb)(json_t *, char *, void *), void *arg)
{
	struct parser_job	*job;
	struct parser_user	*u;

	job = xcalloc(1, sizeof *job);
	job->frame = frame;
	job->max_values = max_values;
	job->done_cb = done_cb;
	job->arg = arg;
	job->state = PARSER_QUEUED;
	pthread_mutex_lock(&parser_lock);
	if ((u = parser_find_locked(uid)) == NULL) {
		u = xcalloc(1, sizeof *u);
		u->uid = uid;
		TAILQ_INIT(&u->queue);
		TAILQ_INSERT_TAIL(&parser_users, u, entry);
	}
	job->user = u;
	u->njobs++;
	TAILQ_INSERT_TAIL(&u->queue, job, entry);
	if (!u->ready) {
		u->ready = 1;
		TAILQ_INSERT_TAIL(&parser_ready, u, ready_entry);
	}
	parser_queued++;
	/* Another thread when every one is busy, up to a few. */
	if (parser_nthreads < PARSER_THREADS &&
	    parser_queued + parser_running > (size_t)parser_nthreads)
		parser_start_thread();
	pthread_cond_signal(&parser_wake);
	pthread_mutex_unlock(&parser_lock);
	return (job);
}

void
parser_cancel(struct parser_job *job)
{
	struct parser_user	*u = job->user;
	uid_t			 uid = u->uid;

	pthread_mutex_lock(&parser_lock);
	if (job->state != PARSER_QUEUED) {
		/* A thread has it, or the loop will: dropped then. */
		job->cancelled = 1;
		pthread_mutex_unlock(&parser_lock);
		return;
	}
	TAILQ_REMOVE(&u->queue, job, entry);
	if (TAILQ_EMPTY(&u->queue) && u->ready) {
		TAILQ_REMOVE(&parser_ready, u, ready_entry);
		u->ready = 0;
	}
	parser_queued--;
	parser_forget_locked(job);
	pthread_mutex_unlock(&parser_lock);
	parser_room_cb(uid);
}

void
parser_drop(json_t *req)
{
	pthread_mutex_lock(&parser_lock);
	if (parser_nthreads == 0 || parser_stopping) {
		pthread_mutex_unlock(&parser_lock);
		json_decref(req);
		return;
	}
	parser_drop_locked(req);
	pthread_mutex_unlock(&parser_lock);
}

size_t
parser_backlog(void)
{
	size_t	n;

	pthread_mutex_lock(&parser_lock);
	n = parser_queued + parser_running + parser_ntrees;
	pthread_mutex_unlock(&parser_lock);
	return (n);
}
