#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include <event2/event.h>
#include <jansson.h>

#include "closer.h"
#include "commit.h"
#include "emberd.h"
#include "helper.h"
#include "log.h"
#include "queue.h"
#include "savelog.h"
#include "xmalloc.h"

enum commit_state {
	COMMIT_NEW,		/* nothing asked */
	COMMIT_BEGINNING,	/* save_begin runs */
	COMMIT_BEGUN,		/* PATH/_temporary/OPERATION is made (with
				   no ids: may be, its answer was lost) */
	COMMIT_FINISHING,	/* save_commit runs */
	COMMIT_FINISHED,	/* committed: nothing to undo */
	COMMIT_ABORTING,	/* save_abort runs */
	COMMIT_ABORTED,		/* undone (as far as it could be) */
};

struct commit {
	char			*path;
	char			*operation;
	char			*task_dir;	/* PATH/_temporary/OPERATION */
	int			 overwrite;
	uid_t			 uid;		/* the client's */
	gid_t			 gid;
	enum commit_state	 state;
	json_t			*ids;		/* what save_begin made */
	struct helper		*h;		/* the step running */
	commit_cb		 cb;
	void			*arg;
	int			 orphan;	/* nobody waits: in orphans */
	int			 partitions;	/* to commit */
	int			 runs;		/* of save_commit */
	const char		*lost_class;	/* save_begin's answer lost: */
	char			*lost_error;	/* told once undone */
	struct event		*retry;		/* the undo's next try */
	int			 tries;
	TAILQ_ENTRY(commit)	 entry;
};

/*
 * A step's helper that dies (or times out) leaves the step done in part:
 * save_commit is run again, up to COMMIT_RUNS times in all, as a run
 * finishes what the one before it began; save_abort is tried again until
 * it is done, each second for a minute, then each minute.  A client that
 * waits for an undo waits for COMMIT_UNDO_WAITED tries; then it hears of
 * the failure and the undo goes on without it.
 */
#define COMMIT_RUNS		3
#define COMMIT_UNDO_WAITED	5
#define COMMIT_UNDO_FAST	60

/* Commits freed while a step ran: they end when it answers. */
static TAILQ_HEAD(, commit) orphans = TAILQ_HEAD_INITIALIZER(orphans);
static size_t		 norphans;

static void	commit_answer_cb(const struct hmsg_reply *, int *, size_t,
		    const char *, const char *, void *);

/* Make a commit. */
struct commit *
commit_create(const char *path, int overwrite, const char *operation,
    uid_t uid, gid_t gid)
{
	struct commit	*c;

	c = xcalloc(1, sizeof *c);
	c->path = xstrdup(path);
	c->operation = xstrdup(operation);
	xasprintf(&c->task_dir, "%s%s_temporary/%s", path,
	    path[strlen(path) - 1] == '/' ? "" : "/", operation);
	c->overwrite = overwrite;
	c->uid = uid;
	c->gid = gid;
	return (c);
}

/* Return where tasks write. */
const char *
commit_task_dir(const struct commit *c)
{
	return (c->task_dir);
}

/* Free a commit that nothing refers to. */
static void
commit_destroy(struct commit *c)
{
	if (c->orphan) {
		TAILQ_REMOVE(&orphans, c, entry);
		if (--norphans == 0)
			ember_check_drained();
	}
	if (c->retry != NULL)
		event_free(c->retry);
	if (c->ids != NULL)
		json_decref(c->ids);
	free(c->lost_error);
	free(c->path);
	free(c->operation);
	free(c->task_dir);
	free(c);
}

/* Ask a helper, as the client's user, for one step with args (taken);
 * one nobody waits for is background work. */
static int
commit_ask(struct commit *c, const char *verb, json_t *args,
    enum commit_state state, const char **class, char **err)
{
	json_object_set_new(args, "path", json_string(c->path));
	json_object_set_new(args, "operation", json_string(c->operation));
	if (c->orphan)
		c->h = helper_run_background(c->uid, c->gid, verb, args, -1,
		    commit_answer_cb, c, class, err);
	else
		c->h = helper_run(c->uid, c->gid, verb, args, -1,
		    commit_answer_cb, c, class, err);
	json_decref(args);
	if (c->h == NULL)
		return (-1);
	log_debug("operation %s: %s %s", c->operation, verb, c->path);
	c->state = state;
	return (0);
}

/* Nobody waits for the commit any more: it ends on its own. */
static void
commit_orphan(struct commit *c)
{
	if (c->orphan)
		return;
	c->orphan = 1;
	TAILQ_INSERT_TAIL(&orphans, c, entry);
	norphans++;
}

/* Tell whoever waits how the step ended; a beginning whose answer was
 * lost is told so once it is undone. */
static void
commit_tell(struct commit *c, const char *class, const char *msg)
{
	if (c->lost_error != NULL) {
		class = c->lost_class;
		msg = c->lost_error;
	}
	c->cb(class, msg, c->arg);
}

static void	commit_undo(struct commit *);

static void
commit_retry_cb(evutil_socket_t fd, short events, void *arg)
{
	(void)fd; (void)events;
	commit_undo(arg);
}

/* The undo could not be asked, or its helper died: try it again later.
 * A client waiting hears of it after a few tries. */
static void
commit_undo_later(struct commit *c, const char *class, const char *msg)
{
	struct timeval	 tv = { c->tries < COMMIT_UNDO_FAST ? 1 : 60, 0 };

	c->state = COMMIT_BEGUN;
	c->tries++;
	if (c->tries == 1 || c->tries % COMMIT_UNDO_FAST == 0)
		log_info("operation %s: undoing the save waits, to be tried "
		    "again: %s", c->operation, msg);
	if (!c->orphan && c->tries >= COMMIT_UNDO_WAITED) {
		log_warn("operation %s: the save's client is told, and the "
		    "undo goes on", c->operation);
		commit_tell(c, class, msg);
		return;
	}
	if (c->retry == NULL)
		c->retry = evtimer_new(ember_base, commit_retry_cb, c);
	evtimer_add(c->retry, &tv);
}

/* Ask for save_abort: with the ids, or by name after a lost beginning. */
static void
commit_undo(struct commit *c)
{
	const char	*class;
	char		*err = NULL;
	json_t		*args = json_object();

	if (c->ids != NULL)
		json_object_set(args, "ids", c->ids);
	if (commit_ask(c, "save_abort", args, COMMIT_ABORTING, &class,
	    &err) == 0)
		return;
	commit_undo_later(c, class, err);
	free(err);
}

/* Ask for save_abort with nobody waiting; the commit ends with it. */
static void
commit_abort_orphan(struct commit *c)
{
	commit_orphan(c);
	commit_undo(c);
}

/* Ask for save_commit, once more. */
static int
commit_ask_finish(struct commit *c, const char **class, char **err)
{
	c->runs++;
	return (commit_ask(c, "save_commit", json_pack("{s:i,s:b,s:O}",
	    "partitions", c->partitions, "overwrite", c->overwrite, "ids",
	    c->ids), COMMIT_FINISHING, class, err));
}

/* Read a step's answer: 0, or -1 with *class and *msg. */
static int
commit_read_answer(struct commit *c, const struct hmsg_reply *reply,
    const char *hclass, const char *herr, const char **class,
    const char **msg)
{
	if (hclass != NULL) {
		*class = hclass;
		*msg = herr;
		return (-1);
	}
	if (reply->error != NULL) {
		*class = c->state == COMMIT_BEGINNING ? "ACTION_INVALID" :
		    "SAVE_FAILED";
		*msg = reply->error;
		return (-1);
	}
	if (c->state == COMMIT_BEGINNING)
		c->ids = json_incref(reply->u.save_begin.ids);
	return (0);
}

/* save_begin's helper died: it may have made the operation's directory.
 * Undo that by name, then tell. */
static void
commit_begin_lost(struct commit *c, const char *class, const char *msg)
{
	log_warn("operation %s: save_begin: %s; undoing what it made",
	    c->operation, msg);
	savelog_begun(c->uid, c->gid, c->path, c->operation, c->overwrite,
	    NULL);
	c->state = COMMIT_BEGUN;
	c->lost_class = class;
	c->lost_error = xstrdup(msg);
	if (c->orphan)
		commit_abort_orphan(c);
	else
		commit_undo(c);
}

/* save_commit's helper died: run the commit again.  0 if it runs. */
static int
commit_finish_again(struct commit *c, const char *msg)
{
	const char	*class;
	char		*err = NULL;

	if (c->orphan || c->runs >= COMMIT_RUNS)
		return (-1);
	log_warn("operation %s: save_commit: %s; the commit is run again",
	    c->operation, msg);
	if (commit_ask_finish(c, &class, &err) == 0)
		return (0);
	log_warn("operation %s: running the commit again: %s", c->operation,
	    err);
	free(err);
	return (-1);
}

/* A helper answered a step, or could not. */
static void
commit_answer_cb(const struct hmsg_reply *reply, int *fds, size_t nfds,
    const char *hclass, const char *herr, void *arg)
{
	struct commit	*c = arg;
	const char	*class = NULL, *msg = NULL;
	int		 rc;

	c->h = NULL;
	while (nfds > 0)
		closer_close_drained(fds[--nfds]);
	rc = commit_read_answer(c, reply, hclass, herr, &class, &msg);
	switch (c->state) {
	case COMMIT_BEGINNING:
		if (rc == -1 && hclass != NULL) {
			commit_begin_lost(c, hclass, herr);
			return;
		}
		c->state = rc == 0 ? COMMIT_BEGUN : COMMIT_NEW;
		if (rc == 0)
			savelog_begun(c->uid, c->gid, c->path, c->operation,
			    c->overwrite, c->ids);
		break;
	case COMMIT_FINISHING:
		if (rc == -1 && hclass != NULL &&
		    commit_finish_again(c, herr) == 0)
			return;
		if (rc == 0 && c->runs > 1)
			log_info("operation %s: the commit was run again and "
			    "succeeded", c->operation);
		else if (rc == -1 && c->runs > 1)
			log_warn("operation %s: the commit was run again and "
			    "failed: the save is undone", c->operation);
		c->state = rc == 0 ? COMMIT_FINISHED : COMMIT_BEGUN;
		if (rc == 0)
			savelog_ended(c->uid, c->operation);
		break;
	case COMMIT_ABORTING:
		if (rc == -1 && hclass != NULL) {
			commit_undo_later(c, hclass, herr);
			return;
		}
		c->state = COMMIT_ABORTED;
		savelog_ended(c->uid, c->operation);
		if (rc == -1)
			log_warn("operation %s: save_abort: %s", c->operation,
			    msg);
		else if (c->tries > 0)
			log_info("operation %s: the save is undone, at try %d",
			    c->operation, c->tries + 1);
		break;
	default:
		fatalx("%s: no step was running", __func__);
	}
	if (!c->orphan) {
		commit_tell(c, class, msg);
		return;
	}
	if (c->state == COMMIT_BEGUN)
		commit_abort_orphan(c);
	else
		commit_destroy(c);
}

/* Ask for save_begin. */
int
commit_begin(struct commit *c, commit_cb cb, void *arg, const char **class,
    char **err)
{
	if (c->state != COMMIT_NEW || c->h != NULL)
		fatalx("%s: operation %s: begun twice", __func__, c->operation);
	c->cb = cb;
	c->arg = arg;
	return (commit_ask(c, "save_begin", json_pack("{s:b}", "overwrite",
	    c->overwrite), COMMIT_BEGINNING, class, err));
}

/* Ask for save_commit. */
int
commit_finish(struct commit *c, int partitions, commit_cb cb, void *arg,
    const char **class, char **err)
{
	if (c->state != COMMIT_BEGUN || c->h != NULL)
		fatalx("%s: operation %s: not begun", __func__, c->operation);
	c->cb = cb;
	c->arg = arg;
	c->partitions = partitions;
	savelog_committing(c->uid, c->operation, partitions);
	return (commit_ask_finish(c, class, err));
}

/* Ask for save_abort; 1 if there is nothing to undo (no answer comes). */
int
commit_abort(struct commit *c, commit_cb cb, void *arg, const char **class,
    char **err)
{
	(void)class; (void)err;
	if (c->h != NULL)
		fatalx("%s: operation %s: a step runs", __func__, c->operation);
	if (c->state != COMMIT_BEGUN)
		return (1);
	c->cb = cb;
	c->arg = arg;
	commit_undo(c);
	return (0);
}

/* Forget a commit; what it began and did not commit is undone. */
void
commit_free(struct commit *c)
{
	if (c == NULL)
		return;
	c->cb = NULL;
	c->arg = NULL;
	if (c->h != NULL || (c->retry != NULL &&
	    evtimer_pending(c->retry, NULL))) {
		commit_orphan(c);	/* it goes on as it is */
		return;
	}
	if (c->state == COMMIT_BEGUN) {
		commit_abort_orphan(c);
		return;
	}
	commit_destroy(c);
}

/* Finish a save a past run left: its commit again, else its undo. */
void
commit_recover(const char *path, const char *operation, int overwrite,
    uid_t uid, gid_t gid, json_t *ids, int partitions)
{
	struct commit	*c;
	const char	*class;
	char		*err = NULL;

	c = commit_create(path, overwrite, operation, uid, gid);
	c->ids = ids != NULL ? json_incref(ids) : NULL;
	c->state = COMMIT_BEGUN;
	commit_orphan(c);
	if (partitions >= 0 && c->ids != NULL) {
		log_info("operation %s: the commit of a save to %s that "
		    "emberd left is run again", operation, path);
		c->partitions = partitions;
		if (commit_ask_finish(c, &class, &err) == 0)
			return;
		log_warn("operation %s: %s", operation, err);
		free(err);
	} else
		log_info("operation %s: a save to %s that emberd left is "
		    "undone", operation, path);
	commit_undo(c);
}

/* Count the saves being undone with nobody waiting. */
size_t
commit_pending(void)
{
	return (norphans);
}

/* Cancel the steps still running. */
void
commit_free_all(void)
{
	struct commit	*c;

	while ((c = TAILQ_FIRST(&orphans)) != NULL) {
		if (c->h != NULL) {
			log_warn("operation %s: emberd exits before its save "
			    "step answered; the next start finishes it",
			    c->operation);
			helper_cancel(c->h);
			c->h = NULL;
		} else if (c->retry != NULL)
			log_warn("operation %s: emberd exits before it could "
			    "undo the save; the next start undoes it",
			    c->operation);
		commit_destroy(c);
	}
}
