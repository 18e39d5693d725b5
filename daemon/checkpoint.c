#include <sys/stat.h>

#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <pwd.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#include <event2/event.h>
#include <uuid/uuid.h>

#include "checkpoint.h"
#include "connection.h"
#include "emberd.h"
#include "helper.h"
#include "jread.h"
#include "limit.h"
#include "localdir.h"
#include "log.h"
#include "operation.h"
#include "plan.h"
#include "queue.h"
#include "session.h"
#include "xmalloc.h"

/*
 * A checkpoint's life: PENDING (lazy, not computed yet), WRITING (its
 * tasks run, or its manifest is being written), READY.  A dropped one is
 * out of the registry's lookups at once, and its files go when no
 * operation reads or writes it any more.
 */
enum ckpt_state {
	CKPT_PENDING,
	CKPT_WRITING,
	CKPT_READY,
};
static const char *const ckpt_state_names[] = { "pending", "writing",
    "ready" };

struct ckpt_waiter {
	struct operation		*op;
	TAILQ_ENTRY(ckpt_waiter)	 entry;
};

struct checkpoint {
	char			 id[37];
	uid_t			 uid;		/* the client's */
	gid_t			 gid;
	struct session		*session;	/* local: the owner */
	int			 local;
	int			 eager;
	enum ckpt_state		 state;
	int			 partitions;
	int64_t			 records;
	int64_t			 bytes;		/* charged to the uid */
	int			 written;	/* partitions written */
	json_t			*plan;		/* lazy: what to compute */
	json_t			*files;		/* and its text files */
	char			*uid_dir;	/* BASE/UID */
	char			*dir;		/* BASE/UID/ID */
	uint64_t		 created_ms;
	int			 users;		/* operations reading it */
	int			 dropped;
	struct operation	*writer;	/* computing it */
	struct helper		*helper;	/* writing its manifest */
	int			 recording;	/* helper: the manifest of a
						   lazy one, not computed */
	int			 commit_waits;	/* for that to be written */
	struct session		*loader;	/* adopted lazy: whose read
						   fetches its plan */
	void			(*done)(struct operation *, const char *);
	TAILQ_HEAD(, ckpt_waiter) waiters;	/* lazy: reads waiting */
	TAILQ_ENTRY(checkpoint)	 entry;
};
static TAILQ_HEAD(, checkpoint) checkpoints =
    TAILQ_HEAD_INITIALIZER(checkpoints);

/* The base directories, emberd's own: descriptors and paths. */
static int	 ckpt_local_fd = -1, ckpt_reliable_fd = -1;
static char	*ckpt_local_path, *ckpt_reliable_path;
static char	*ckpt_reliable_error;	/* why reliable ones are refused */
static int64_t	 ckpt_started;		/* ms since the epoch: what is older
					   is a leftover */
static struct event *ckpt_timer;

/* A removal or a clean a helper does for emberd; a clean of the start
 * (adopt) holds back the uid's reliable checkpoints until it is done. */
struct ckpt_call {
	struct helper		*helper;
	uid_t			 uid;
	gid_t			 gid;
	char			*uid_dir;
	char			*id;		/* a removal's */
	int			 local;		/* in which base */
	struct ckpt_call	*lead;		/* whose helper removes it too */
	int			 adopt;
	TAILQ_ENTRY(ckpt_call)	 entry;
};
static TAILQ_HEAD(, ckpt_call) ckpt_calls = TAILQ_HEAD_INITIALIZER(ckpt_calls);
/* Removals that failed (a helper limit, a fork-server restarting): tried
 * again by the cleaner.  Until then no clean removes or adopts them. */
static TAILQ_HEAD(, ckpt_call) ckpt_retries =
    TAILQ_HEAD_INITIALIZER(ckpt_retries);
/* Checkpoints one removal helper removes, at most. */
#define CKPT_REMOVE_BATCH	64

/* In checkpoint.dir, emberd's own: the reliable checkpoints being
 * removed ("UID ID" lines), so that a removal emberd did not see through
 * is done after its restart, and the checkpoint not served again. */
#define CKPT_REMOVING	".removing"

/* The bound of a clean's or a removal's reply: so much, and so much more
 * per checkpoint it may speak of (an id and a few numbers). */
#define CKPT_REPLY_BASE	4096
#define CKPT_REPLY_EACH	256
/* The largest manifest a helper reads: a lazy one's holds its plan and
 * text files, which came through a helper's reply. */
#define CKPT_MAX_MANIFEST	(HELPER_MAX_REPLY - 4096)

static void	checkpoint_remove(struct checkpoint *);
static void	checkpoint_commit_manifest(struct checkpoint *);
static void	checkpoint_write_manifest(struct checkpoint *, json_t *,
		    helper_cb);
static const char *checkpoint_call_error(json_t *, int *, size_t,
		    const char *);
static void	checkpoint_record(struct checkpoint *);
static void	checkpoint_collect(struct checkpoint *);
static int64_t	checkpoint_now_ms(void);

const char *
checkpoint_id(const struct checkpoint *c)
{
	return (c->id);
}

int
checkpoint_partitions(const struct checkpoint *c)
{
	return (c->partitions);
}

const char *
checkpoint_dir(const struct checkpoint *c)
{
	return (c->dir);
}

int
checkpoint_sync(const struct checkpoint *c)
{
	return (!c->local);
}

int64_t
checkpoint_records(const struct checkpoint *c)
{
	return (c->records);
}

int64_t
checkpoint_bytes(const struct checkpoint *c)
{
	return (c->bytes);
}

int
checkpoint_ready(const struct checkpoint *c)
{
	return (c->state == CKPT_READY);
}

/*
 * Open (made if missing) a base directory, emberd's own: a directory
 * owned by emberd's user, writable by it alone, not a link.  Workers of
 * every user go through it to their own directory, so it is 0711.
 */
static int
checkpoint_open_base(const char *path, int create, char **err)
{
	struct stat	st;
	int		fd;

	int		saved;

	if ((create && mkdir(path, 0711) == -1 && errno != EEXIST) ||
	    (fd = open(path, O_RDONLY | O_DIRECTORY | O_NOFOLLOW | O_CLOEXEC |
	    O_NOCTTY)) == -1) {
		saved = errno;
		xasprintf(err, "%s: %s", path, strerror(errno));
		errno = saved;
		return (-1);
	}
	if (fstat(fd, &st) == -1 || st.st_uid != geteuid() ||
	    (st.st_mode & 022) != 0) {
		xasprintf(err, "%s: not emberd's own (owned by uid %ld, mode "
		    "%04o; it must be emberd's, writable by it alone)", path,
		    (long)st.st_uid, (unsigned)(st.st_mode & 07777));
		close(fd);
		errno = EPERM;
		return (-1);
	}
	if ((st.st_mode & 0111) != 0111 && fchmod(fd, 0711) == -1) {
		xasprintf(err, "%s: chmod: %s", path, strerror(errno));
		close(fd);
		return (-1);
	}
	return (fd);
}

/*
 * Open (made if missing) checkpoint.dir: an absolute path whose every
 * parent is root's or emberd's and closed to others, as daemon.local_dir
 * is (localdir.c): else the owner of a parent could swap a user's
 * checkpoints for files of their own.  -1 with *err and errno.
 */
static int
checkpoint_open_reliable(char **err)
{
	char	*e = NULL;

	if (ckpt_reliable_path[0] != '/') {
		xasprintf(err, "\"%s\" is not an absolute path",
		    ckpt_reliable_path);
		errno = EINVAL;
		return (-1);
	}
	if (localdir_check_parents(ckpt_reliable_path, &e) == -1) {
		xasprintf(err, "%s: %s", ckpt_reliable_path, e);
		free(e);
		return (-1);
	}
	return (checkpoint_open_base(ckpt_reliable_path, 1, err));
}

/* The base directory of local or reliable checkpoints, opened (and made)
 * on first use: -1 with *err naming it. */
static int
checkpoint_base(int local, char **err)
{
	char	*e = NULL;

	if (local) {
		if (ckpt_local_fd == -1 && (ckpt_local_fd =
		    checkpoint_open_base(ckpt_local_path, 1, &e)) == -1) {
			xasprintf(err, "daemon.local_dir: %s", e);
			free(e);
		}
		return (ckpt_local_fd);
	}
	if (ckpt_reliable_fd == -1 &&
	    (ckpt_reliable_fd = checkpoint_open_reliable(&e)) == -1) {
		free(ckpt_reliable_error);
		ckpt_reliable_error = e;
	}
	if (ckpt_reliable_fd == -1)
		xasprintf(err, "checkpoint.dir: %s", ckpt_reliable_error);
	return (ckpt_reliable_fd);
}

/* The user whose workers write the checkpoints of client uid:gid. */
static int
checkpoint_user(uid_t uid, gid_t gid, uid_t *juid, gid_t *jgid)
{
	return (session_job_user(uid, gid, juid, jgid));
}

/*
 * The directory of client uid in a base: BASE/UID, made by emberd in its
 * own directory and given to the user its jobs run as, mode 0700.  One
 * found with another owner, other modes, or as a link is refused.
 */
static char *
checkpoint_uid_dir(int base, const char *basepath, uid_t uid, gid_t gid,
    char **err)
{
	struct stat	 st;
	char		 name[24], *path;
	uid_t		 juid;
	gid_t		 jgid;
	int		 fd, made = 1;

	if (checkpoint_user(uid, gid, &juid, &jgid) == -1) {
		xasprintf(err, "no user to write uid %ld's checkpoints as",
		    (long)uid);
		return (NULL);
	}
	snprintf(name, sizeof name, "%ld", (long)uid);
	xasprintf(&path, "%s/%s", basepath, name);
	if (mkdirat(base, name, 0700) == -1) {
		if (errno != EEXIST) {
			xasprintf(err, "%s: %s", path, strerror(errno));
			free(path);
			return (NULL);
		}
		made = 0;
	}
	fd = openat(base, name, O_RDONLY | O_DIRECTORY | O_NOFOLLOW |
	    O_CLOEXEC | O_NOCTTY);
	if (fd == -1 || fstat(fd, &st) == -1) {
		xasprintf(err, "%s: %s", path, strerror(errno));
		goto fail;
	}
	if (made && geteuid() == 0 && (fchown(fd, juid, jgid) == -1 ||
	    fchmod(fd, 0700) == -1)) {
		xasprintf(err, "%s: chown: %s", path, strerror(errno));
		goto fail;
	}
	if (!made && (st.st_uid != juid || (st.st_mode & 077) != 0)) {
		xasprintf(err, "%s: owned by uid %ld with mode %04o, not by "
		    "uid %ld alone; refusing it", path, (long)st.st_uid,
		    (unsigned)(st.st_mode & 07777), (long)juid);
		goto fail;
	}
	close(fd);
	return (path);
fail:
	if (fd != -1)
		close(fd);
	free(path);
	return (NULL);
}

/*
 * Open client uid's directory in a base, for a helper: emberd's own entry
 * of its own directory, never followed if a link, and the user's (whom
 * uid's jobs run as) alone.  Helpers get this descriptor, never a name.
 * -1 with *err.
 */
static int
checkpoint_open_uid(int local, uid_t uid, gid_t gid, char **err)
{
	struct stat	 st;
	char		 name[24];
	uid_t		 juid;
	gid_t		 jgid;
	int		 base = local ? ckpt_local_fd : ckpt_reliable_fd, fd;

	snprintf(name, sizeof name, "%ld", (long)uid);
	if (base == -1 || checkpoint_user(uid, gid, &juid, &jgid) == -1) {
		xasprintf(err, "uid %ld: no checkpoint directory", (long)uid);
		return (-1);
	}
	if ((fd = openat(base, name, O_RDONLY | O_DIRECTORY | O_NOFOLLOW |
	    O_CLOEXEC | O_NOCTTY)) == -1) {
		xasprintf(err, "%s/%s: %s", local ? ckpt_local_path :
		    ckpt_reliable_path, name, strerror(errno));
		return (-1);
	}
	if (fstat(fd, &st) == -1 || st.st_uid != juid ||
	    (st.st_mode & 077) != 0) {
		xasprintf(err, "%s/%s: not uid %ld's alone; refusing it",
		    local ? ckpt_local_path : ckpt_reliable_path, name,
		    (long)juid);
		close(fd);
		return (-1);
	}
	return (fd);
}

int
checkpoint_open_dir(const struct checkpoint *c, char **err)
{
	return (checkpoint_open_uid(c->local, c->uid, c->gid, err));
}

/* Run verb for c's uid on its directory in base local, as background
 * work if background is set; helper_run's return. */
static struct helper *
checkpoint_run(uid_t uid, gid_t gid, int local, int background,
    const char *verb, json_t *args, helper_cb cb, void *arg,
    const char **class, char **err)
{
	struct helper	*h;
	int		 fd;

	*class = "INTERNAL";
	if ((fd = checkpoint_open_uid(local, uid, gid, err)) == -1)
		return (NULL);
	if (background)
		h = helper_run_background(uid, gid, verb, args, fd, cb, arg,
		    class, err);
	else
		h = helper_run(uid, gid, verb, args, fd, cb, arg, class, err);
	close(fd);
	return (h);
}

/* Free a checkpoint that is out of the registry and of every list. */
static void
checkpoint_free(struct checkpoint *c)
{
	if (c->plan != NULL)
		json_decref(c->plan);
	if (c->files != NULL)
		json_decref(c->files);
	free(c->uid_dir);
	free(c->dir);
	free(c);
}

/* Charge a new checkpoint to its uid. */
static int
checkpoint_charge(uid_t uid, char **err)
{
	return (limit_charge(uid, LIMIT_CHECKPOINTS, 1, err));
}

struct checkpoint *
checkpoint_create(struct session *s, struct operation *writer, int local,
    int eager, json_t *plan, json_t *files, int partitions, const char **class,
    char **err)
{
	struct checkpoint	*c;
	uuid_t			 u;
	char			*e = NULL;
	int			 base;
	const char		*basepath;

	*class = "CHECKPOINT_FAILED";
	if ((base = checkpoint_base(local, err)) == -1)
		return (NULL);
	basepath = local ? ckpt_local_path : ckpt_reliable_path;
	if (checkpoint_charge(session_uid(s), &e) == -1) {
		*class = "LIMIT_EXCEEDED";
		*err = e;
		return (NULL);
	}
	c = xcalloc(1, sizeof *c);
	TAILQ_INIT(&c->waiters);
	c->uid = session_uid(s);
	c->gid = session_gid(s);
	if ((c->uid_dir = checkpoint_uid_dir(base, basepath, c->uid, c->gid,
	    &e)) == NULL) {
		xasprintf(err, "%s%s", local ? "" : "checkpoint.dir: ", e);
		free(e);
		limit_release(c->uid, LIMIT_CHECKPOINTS, 1);
		free(c);
		return (NULL);
	}
	uuid_generate(u);
	uuid_unparse_lower(u, c->id);
	xasprintf(&c->dir, "%s/%s", c->uid_dir, c->id);
	c->session = local ? s : NULL;
	c->local = local;
	c->eager = eager;
	c->partitions = partitions;
	c->created_ms = ember_now_ms();
	c->state = eager ? CKPT_WRITING : CKPT_PENDING;
	c->writer = eager ? writer : NULL;
	if (!eager) {
		c->plan = json_incref(plan);
		c->files = files != NULL ? json_incref(files) : NULL;
	}
	TAILQ_INSERT_TAIL(&checkpoints, c, entry);
	log_debug("checkpoint %s: %s %s of %d partitions for uid %ld", c->id,
	    eager ? "eager" : "lazy", local ? "local" : "reliable",
	    partitions, (long)c->uid);
	if (!eager && !local)
		checkpoint_record(c);
	return (c);
}

int
checkpoint_written(struct checkpoint *c, int64_t records, int64_t bytes,
    char **err)
{
	if (bytes > 0 && limit_charge(c->uid, LIMIT_CHECKPOINT_BYTES, bytes,
	    err) == -1)
		return (-1);
	c->bytes += bytes;
	c->records += records;
	c->written++;
	return (0);
}

/* Forget what a computation wrote, and give back its bytes. */
static void
checkpoint_reset(struct checkpoint *c)
{
	if (c->bytes > 0)
		limit_release(c->uid, LIMIT_CHECKPOINT_BYTES, c->bytes);
	c->bytes = 0;
	c->records = 0;
	c->written = 0;
}

/* Tell the reads waiting for c that it is ready, or why it is not. */
static void
checkpoint_wake(struct checkpoint *c, const char *why)
{
	TAILQ_HEAD(, ckpt_waiter) list = TAILQ_HEAD_INITIALIZER(list);
	struct ckpt_waiter	*w;

	/* An operation told may end, and a drop may be waiting for that:
	 * c is held until every one was told. */
	while ((w = TAILQ_FIRST(&c->waiters)) != NULL) {
		TAILQ_REMOVE(&c->waiters, w, entry);
		TAILQ_INSERT_TAIL(&list, w, entry);
	}
	c->users++;
	while ((w = TAILQ_FIRST(&list)) != NULL) {
		TAILQ_REMOVE(&list, w, entry);
		operation_checkpoint_ready(w->op, why);
		free(w);
	}
	checkpoint_unuse(c);
}

/* The manifest is written (or not): tell the writing operation. */
static void
checkpoint_committed_cb(json_t *reply, int *fds, size_t nfds,
    const char *class, const char *error, void *arg)
{
	struct checkpoint	*c = arg;
	struct operation	*op = c->writer;
	const char		*why;
	char			*msg = NULL;

	(void)class;
	c->helper = NULL;
	ember_check_drained();
	if ((why = checkpoint_call_error(reply, fds, nfds, error)) != NULL)
		xasprintf(&msg, "checkpoint %s: %s", c->id, why);
	c->writer = NULL;
	if (msg == NULL) {
		c->state = CKPT_READY;
		log_info("checkpoint %s ready: %d partitions, %lld records, "
		    "%lld bytes", c->id, c->partitions, (long long)c->records,
		    (long long)c->bytes);
	}
	/* The operation answers its client (and may end) first; it
	 * forgets c then. */
	if (op != NULL && c->done != NULL)
		c->done(op, msg);
	c->done = NULL;
	if (msg != NULL)
		checkpoint_abandon(c, NULL);
	else
		checkpoint_wake(c, NULL);	/* c may be gone */
	free(msg);
}

void
checkpoint_commit(struct checkpoint *c, struct operation *op,
    void (*done)(struct operation *, const char *))
{
	c->writer = op;
	c->done = done;
	if (c->written != c->partitions)
		fatalx("checkpoint %s: %d of %d partitions written", c->id,
		    c->written, c->partitions);
	if (c->local) {
		/* Only emberd knows of it: no manifest to write. */
		c->state = CKPT_READY;
		c->writer = NULL;
		c->done = NULL;
		done(op, NULL);
		checkpoint_wake(c, NULL);	/* c may be gone */
		return;
	}
	if (c->recording) {
		/* Its pending manifest is being written: this one after. */
		c->commit_waits = 1;
		return;
	}
	checkpoint_commit_manifest(c);
}

/* Have the user's helper write c's manifest, last. */
static void
checkpoint_commit_manifest(struct checkpoint *c)
{
	checkpoint_write_manifest(c, json_pack("{s:i,s:i,s:I,s:I,s:b,s:I}",
	    "version", 1, "partitions", c->partitions, "records",
	    (json_int_t)c->records, "bytes", (json_int_t)c->bytes, "eager",
	    c->eager, "created", (json_int_t)time(NULL)),
	    checkpoint_committed_cb);
}

/* Have the user's helper write manifest m (stolen) as c's; cb answers. */
static void
checkpoint_write_manifest(struct checkpoint *c, json_t *m, helper_cb cb)
{
	json_t		*args;
	const char	*class;
	char		*err = NULL;

	args = json_pack("{s:s,s:s,s:o}", "dir", c->uid_dir, "id", c->id,
	    "manifest", m);
	c->helper = checkpoint_run(c->uid, c->gid, 0, 0, "checkpoint_commit",
	    args, cb, c, &class, &err);
	json_decref(args);
	if (c->helper == NULL) {
		cb(NULL, NULL, 0, class, err, c);
		free(err);
	}
}

/* The pending manifest of a lazy reliable checkpoint is written (or not:
 * the checkpoint is served, but would not outlive emberd). */
static void
checkpoint_recorded_cb(json_t *reply, int *fds, size_t nfds,
    const char *class, const char *error, void *arg)
{
	struct checkpoint	*c = arg;

	(void)class;
	c->helper = NULL;
	c->recording = 0;
	ember_check_drained();
	if ((error = checkpoint_call_error(reply, fds, nfds, error)) != NULL)
		log_warn("checkpoint %s: its manifest: %s (it will not "
		    "outlive this emberd until it is computed)", c->id, error);
	if (c->commit_waits) {
		c->commit_waits = 0;
		checkpoint_commit_manifest(c);
		return;
	}
	checkpoint_collect(c);		/* c may be gone */
}

/* Write the manifest of a lazy reliable checkpoint, which keeps its plan
 * (and its text files as checked), so that it outlives emberd. */
static void
checkpoint_record(struct checkpoint *c)
{
	json_t	*m;

	m = json_pack("{s:i,s:b,s:b,s:i,s:O,s:I}", "version", 1, "pending", 1,
	    "eager", 0, "partitions", c->partitions, "plan", c->plan,
	    "created", (json_int_t)time(NULL));
	if (c->files != NULL)
		json_object_set(m, "files", c->files);
	c->recording = 1;
	checkpoint_write_manifest(c, m, checkpoint_recorded_cb);
}

/* Forget a helper call. */
static void
checkpoint_call_free(struct ckpt_call *k)
{
	TAILQ_REMOVE(&ckpt_calls, k, entry);
	free(k->uid_dir);
	free(k->id);
	free(k);
	ember_check_drained();
}

/* A helper's error: the call's, or the verb's ("error" in the reply). */
static const char *
checkpoint_call_error(json_t *reply, int *fds, size_t nfds,
    const char *error)
{
	size_t	i;

	for (i = 0; i < nfds; i++)
		close(fds[i]);
	if (reply != NULL && json_is_string(json_object_get(reply, "error")))
		return (json_string_value(json_object_get(reply, "error")));
	return (error);
}

/* Start a helper call, as background work that leaves the user's own
 * helpers alone; on failure the callback runs at once. */
static void
checkpoint_call(struct ckpt_call *k, const char *verb, json_t *args,
    helper_cb cb)
{
	const char	*class;
	char		*err = NULL;

	TAILQ_INSERT_TAIL(&ckpt_calls, k, entry);
	k->helper = checkpoint_run(k->uid, k->gid, k->local, 1, verb, args,
	    cb, k, &class, &err);
	/* A clean's answer is small, whatever the user's files hold: some
	 * numbers per checkpoint emberd keeps or may adopt. */
	if (k->helper != NULL)
		helper_limit_reply(k->helper, CKPT_REPLY_BASE +
		    CKPT_REPLY_EACH * (json_array_size(json_object_get(args,
		    "keep")) + (size_t)json_integer_value(json_object_get(args,
		    "max"))));
	json_decref(args);
	if (k->helper == NULL) {
		cb(NULL, NULL, 0, class, err, k);
		free(err);
	}
}

/* Note the removal of a reliable checkpoint in CKPT_REMOVING. */
static void
checkpoint_note_removal(const struct checkpoint *c)
{
	char	line[80];
	int	fd, n;

	if (c->local || ckpt_reliable_fd == -1)
		return;
	fd = openat(ckpt_reliable_fd, CKPT_REMOVING, O_WRONLY | O_CREAT |
	    O_APPEND | O_NOFOLLOW | O_CLOEXEC | O_NOCTTY, 0600);
	n = snprintf(line, sizeof line, "%ld %s\n", (long)c->uid, c->id);
	if (fd == -1 || write(fd, line, (size_t)n) != n)
		log_warn("%s/%s: %s", ckpt_reliable_path, CKPT_REMOVING,
		    strerror(errno));
	if (fd != -1)
		close(fd);
}

/* Empty CKPT_REMOVING once no removal is left to do. */
static void
checkpoint_forget_removals(void)
{
	struct ckpt_call	*k;
	int			 fd;

	if (ckpt_reliable_fd == -1 || !TAILQ_EMPTY(&ckpt_retries))
		return;
	TAILQ_FOREACH(k, &ckpt_calls, entry) {
		if (k->id != NULL)
			return;
	}
	fd = openat(ckpt_reliable_fd, CKPT_REMOVING, O_WRONLY | O_TRUNC |
	    O_NOFOLLOW | O_CLOEXEC | O_NOCTTY);
	if (fd != -1)
		close(fd);
}

/* The removals a past run noted and may not have done: to be retried,
 * and neither adopted nor removed by the start-up scan meanwhile. */
static void
checkpoint_load_removals(void)
{
	struct ckpt_call	*k;
	struct passwd		*pw;
	char			 id[64];
	long			 uid;
	FILE			*f;
	int			 fd;

	fd = openat(ckpt_reliable_fd, CKPT_REMOVING, O_RDONLY | O_NOFOLLOW |
	    O_CLOEXEC | O_NOCTTY);
	if (fd == -1 || (f = fdopen(fd, "r")) == NULL) {
		if (fd != -1)
			close(fd);
		return;
	}
	while (fscanf(f, "%ld %63s", &uid, id) == 2) {
		if (uid < 0 || !plan_is_uuid(id))
			continue;
		k = xcalloc(1, sizeof *k);
		k->uid = (uid_t)uid;
		k->gid = (pw = getpwuid(k->uid)) != NULL ? pw->pw_gid :
		    (gid_t)uid;
		xasprintf(&k->uid_dir, "%s/%ld", ckpt_reliable_path, uid);
		k->id = xstrdup(id);
		TAILQ_INSERT_TAIL(&ckpt_retries, k, entry);
	}
	fclose(f);
}

/* Is id one of the strings of a? */
static int
checkpoint_listed(json_t *a, const char *id)
{
	json_t	*v;
	size_t	 i;

	json_array_foreach(a, i, v) {
		if (json_is_string(v) && strcmp(json_string_value(v), id) == 0)
			return (1);
	}
	return (0);
}

static void	checkpoint_remove_batch(const char *);

/* One removal of a batch answered: done, or left to the cleaner. */
static void
checkpoint_removed_one(struct ckpt_call *k, const char *error,
    json_t *failed)
{
	k->lead = NULL;
	if (error == NULL || (json_is_array(failed) &&
	    !checkpoint_listed(failed, k->id))) {
		log_debug("checkpoint %s removed", k->id);
		checkpoint_call_free(k);
		return;
	}
	log_warn("checkpoint %s: removing it: %s (the cleaner will try again)",
	    k->id, error);
	TAILQ_REMOVE(&ckpt_calls, k, entry);
	TAILQ_INSERT_TAIL(&ckpt_retries, k, entry);
}

/* A batch's answer: nothing waits for it but the log.  The removals that
 * failed go to the cleaner; the next batch of their directory goes. */
static void
checkpoint_removed_cb(json_t *reply, int *fds, size_t nfds,
    const char *class, const char *error, void *arg)
{
	struct ckpt_call	*lead = arg, *k, *next;
	json_t			*failed;
	char			*dir = xstrdup(lead->uid_dir);

	(void)class;
	failed = reply != NULL ? json_object_get(reply, "failed") : NULL;
	error = checkpoint_call_error(reply, fds, nfds, error);
	lead->helper = NULL;
	TAILQ_FOREACH_SAFE(k, &ckpt_calls, entry, next) {
		if (k->lead == lead)
			checkpoint_removed_one(k, error, failed);
	}
	checkpoint_removed_one(lead, error, failed);
	checkpoint_forget_removals();
	ember_check_drained();
	checkpoint_remove_batch(dir);
	free(dir);
}

/*
 * Start the next batch of the removals waiting in a uid's directory,
 * unless one runs there: one background helper removes up to
 * CKPT_REMOVE_BATCH checkpoints, so a burst of drops costs a helper or
 * two, not one each.
 */
static void
checkpoint_remove_batch(const char *uid_dir)
{
	struct ckpt_call	*k, *lead = NULL;
	const char		*class;
	char			*err = NULL;
	json_t			*ids, *args;

	TAILQ_FOREACH(k, &ckpt_calls, entry) {
		if (k->id != NULL && k->helper != NULL &&
		    strcmp(k->uid_dir, uid_dir) == 0)
			return;
	}
	ids = json_array();
	TAILQ_FOREACH(k, &ckpt_calls, entry) {
		if (k->id == NULL || k->lead != NULL ||
		    strcmp(k->uid_dir, uid_dir) != 0)
			continue;
		if (lead == NULL)
			lead = k;
		else
			k->lead = lead;
		json_array_append_new(ids, json_string(k->id));
		if (json_array_size(ids) == CKPT_REMOVE_BATCH)
			break;
	}
	if (lead == NULL) {
		json_decref(ids);
		return;
	}
	args = json_pack("{s:s,s:o}", "dir", lead->uid_dir, "ids", ids);
	lead->helper = checkpoint_run(lead->uid, lead->gid, lead->local, 1,
	    "checkpoint_remove", args, checkpoint_removed_cb, lead, &class,
	    &err);
	/* Its answer names at most the ids that stay. */
	if (lead->helper != NULL)
		helper_limit_reply(lead->helper, CKPT_REPLY_BASE +
		    CKPT_REPLY_EACH * json_array_size(ids));
	json_decref(args);
	if (lead->helper == NULL) {
		checkpoint_removed_cb(NULL, NULL, 0, class, err, lead);
		free(err);
	}
}

/* Try the removals that failed again. */
static void
checkpoint_retry_removals(void)
{
	struct ckpt_call	*k;
	json_t			*dirs = json_object();
	const char		*dir;
	json_t			*v;

	/* A removal that fails again goes back to ckpt_retries. */
	while ((k = TAILQ_FIRST(&ckpt_retries)) != NULL) {
		TAILQ_REMOVE(&ckpt_retries, k, entry);
		TAILQ_INSERT_TAIL(&ckpt_calls, k, entry);
		json_object_set_new(dirs, k->uid_dir, json_true());
	}
	json_object_foreach(dirs, dir, v)
		checkpoint_remove_batch(dir);
	json_decref(dirs);
}

/* Have the user's helper remove c's directory, with the removals of the
 * same directory asked meanwhile. */
static void
checkpoint_remove_files(struct checkpoint *c)
{
	struct ckpt_call	*k = xcalloc(1, sizeof *k);

	checkpoint_note_removal(c);
	k->uid = c->uid;
	k->gid = c->gid;
	k->uid_dir = xstrdup(c->uid_dir);
	k->id = xstrdup(c->id);
	k->local = c->local;
	TAILQ_INSERT_TAIL(&ckpt_calls, k, entry);
	checkpoint_remove_batch(k->uid_dir);
}

void
checkpoint_abandon(struct checkpoint *c, struct operation *op)
{
	if (op != NULL && c->writer != op)
		return;
	if (c->helper != NULL && !c->recording) {
		helper_cancel(c->helper);
		c->helper = NULL;
	}
	c->commit_waits = 0;
	c->writer = NULL;
	c->done = NULL;
	checkpoint_reset(c);
	if (c->eager || (c->dropped && c->users == 0 && !c->recording)) {
		/* Nobody has its id yet, or nobody wants it. */
		checkpoint_remove_files(c);
		checkpoint_remove(c);
		return;
	}
	/* A lazy one waits to be computed again, with its manifest; the
	 * next computation writes its partition files over these. */
	c->state = CKPT_PENDING;
	checkpoint_wake(c, "computing it failed");	/* c may be gone */
}

/* Take c out of the registry and free it; its files go too. */
static void
checkpoint_remove(struct checkpoint *c)
{
	TAILQ_REMOVE(&checkpoints, c, entry);
	limit_release(c->uid, LIMIT_CHECKPOINTS, 1);
	checkpoint_reset(c);
	checkpoint_free(c);
}

struct checkpoint *
checkpoint_find(uid_t uid, const char *id)
{
	struct checkpoint	*c;

	TAILQ_FOREACH(c, &checkpoints, entry) {
		if (c->uid == uid && !c->dropped && strcmp(c->id, id) == 0)
			return (c);
	}
	return (NULL);
}

void
checkpoint_use(struct checkpoint *c)
{
	c->users++;
}

/* Drop c now if it is dropped and nobody uses it any more. */
static void
checkpoint_collect(struct checkpoint *c)
{
	if (!c->dropped || c->users > 0 || c->writer != NULL ||
	    c->recording || c->helper != NULL)
		return;
	checkpoint_remove_files(c);
	checkpoint_remove(c);
}

void
checkpoint_unuse(struct checkpoint *c)
{
	if (c->users <= 0)
		fatalx("checkpoint %s: unused too often", c->id);
	c->users--;
	checkpoint_collect(c);
}

/* Compute c, pending with its plan, in s: 0, or -1 with *err. */
static int
checkpoint_compute(struct checkpoint *c, struct session *s, char **err)
{
	char	*e = NULL;

	c->state = CKPT_WRITING;
	if ((c->writer = operation_materialize(s, c, c->plan, c->files,
	    &e)) == NULL) {
		c->state = CKPT_PENDING;
		xasprintf(err, "plan.source.checkpoint: computing checkpoint "
		    "%s: %s", c->id, e);
		free(e);
		return (-1);
	}
	return (0);
}

/* The plan of an adopted lazy checkpoint came from its manifest (or
 * not): compute it for the reads waiting. */
static void
checkpoint_planned_cb(json_t *reply, int *fds, size_t nfds,
    const char *class, const char *error, void *arg)
{
	struct checkpoint	*c = arg;
	struct session		*s = c->loader;
	json_t			*plan, *files;
	char			*err = NULL;

	(void)class;
	c->helper = NULL;
	c->loader = NULL;
	c->state = CKPT_PENDING;
	ember_check_drained();
	if ((error = checkpoint_call_error(reply, fds, nfds, error)) == NULL &&
	    !json_is_object(plan = json_object_get(reply, "plan")))
		error = "its manifest holds no plan";
	files = json_object_get(reply, "files");
	if (error == NULL && files != NULL && !json_is_array(files))
		error = "its manifest's files are not an array";
	if (error == NULL && s == NULL)
		error = "the session that read it closed";
	if (error != NULL) {
		xasprintf(&err, "checkpoint %s: reading its manifest: %s",
		    c->id, error);
		checkpoint_wake(c, err);	/* c may be gone */
		free(err);
		return;
	}
	c->plan = json_incref(plan);
	c->files = files != NULL ? json_incref(files) : NULL;
	if (TAILQ_EMPTY(&c->waiters)) {
		checkpoint_collect(c);		/* c may be gone */
		return;
	}
	if (checkpoint_compute(c, s, &err) == -1) {
		checkpoint_wake(c, err);	/* c may be gone */
		free(err);
	}
}

/* Have the user's helper read the plan of c, adopted lazy, from its
 * manifest (it is the user's data: emberd's scan kept only a summary). */
static int
checkpoint_fetch_plan(struct checkpoint *c, struct session *s, char **err)
{
	const char	*class;
	json_t		*args;
	char		*e = NULL;

	args = json_pack("{s:s,s:s,s:I}", "dir", c->uid_dir, "id", c->id,
	    "max", (json_int_t)CKPT_MAX_MANIFEST);
	c->helper = checkpoint_run(c->uid, c->gid, 0, 0, "checkpoint_plan",
	    args, checkpoint_planned_cb, c, &class, &e);
	json_decref(args);
	if (c->helper == NULL) {
		xasprintf(err, "plan.source.checkpoint: checkpoint %s: "
		    "reading its manifest: %s", c->id, e);
		free(e);
		return (-1);
	}
	c->state = CKPT_WRITING;
	c->loader = s;
	return (0);
}

int
checkpoint_wait(struct checkpoint *c, struct operation *op,
    struct session *s, char **err)
{
	struct ckpt_waiter	*w;

	/* The first read: compute it, once. */
	if (c->state == CKPT_PENDING && c->plan == NULL &&
	    checkpoint_fetch_plan(c, s, err) == -1)
		return (-1);
	if (c->state == CKPT_PENDING && checkpoint_compute(c, s, err) == -1)
		return (-1);
	w = xcalloc(1, sizeof *w);
	w->op = op;
	TAILQ_INSERT_TAIL(&c->waiters, w, entry);
	return (0);
}

void
checkpoint_unwait(struct checkpoint *c, struct operation *op)
{
	struct ckpt_waiter	*w;

	TAILQ_FOREACH(w, &c->waiters, entry) {
		if (w->op == op) {
			TAILQ_REMOVE(&c->waiters, w, entry);
			free(w);
			return;
		}
	}
}

/* Drop c: out of the lookups now, its files once nobody reads it. */
static void
checkpoint_drop(struct checkpoint *c)
{
	log_debug("checkpoint %s dropped (%d reading it)", c->id, c->users);
	c->dropped = 1;
	c->session = NULL;	/* it may be freed before c */
	checkpoint_collect(c);
}

void
checkpoint_drop_request(struct connection *conn, struct session *s,
    json_t *req)
{
	static const char *const keys[] = { "op", "checkpoint", NULL };
	struct checkpoint	*c;
	const char		*id = NULL;
	char			*err;

	if (jread_only(req, "", keys, &err) == -1 ||
	    jread_string(req, "", "checkpoint", JREAD_REQUIRED, &id,
	    &err) == -1) {
		connection_reply_error(conn, "REQUEST_INVALID",
		    "checkpoint_drop: %s", err);
		free(err);
		return;
	}
	if (!plan_is_uuid(id)) {
		connection_reply_error(conn, "REQUEST_INVALID",
		    "checkpoint_drop: checkpoint: \"%s\" is not a UUID", id);
		return;
	}
	if ((c = checkpoint_find(session_uid(s), id)) == NULL) {
		connection_reply_error(conn, "CHECKPOINT_NOT_FOUND",
		    "no checkpoint %s", id);
		return;
	}
	checkpoint_drop(c);
	connection_reply_ok(conn, NULL);
}

void
checkpoint_drop_session(struct session *s)
{
	struct checkpoint	*c, *next;

	TAILQ_FOREACH_SAFE(c, &checkpoints, entry, next) {
		if (c->loader == s)
			c->loader = NULL;	/* the fetch fails then */
		if (c->session == s && !c->dropped)
			checkpoint_drop(c);
	}
}

json_t *
checkpoint_status(uid_t uid)
{
	json_t			*a = json_array(), *o;
	struct checkpoint	*c;
	uint64_t		 now = ember_now_ms();

	TAILQ_FOREACH(c, &checkpoints, entry) {
		if ((uid != 0 && c->uid != uid) || c->dropped)
			continue;
		o = json_pack("{s:s,s:I,s:s,s:b,s:s,s:i,s:I,s:I,s:i,s:I}",
		    "id", c->id, "uid", (json_int_t)c->uid,
		    "kind", c->local ? "local" : "reliable", "eager", c->eager,
		    "state", ckpt_state_names[c->state],
		    "partitions", c->partitions,
		    "records", (json_int_t)c->records,
		    "bytes", (json_int_t)c->bytes, "readers", c->users,
		    "age_ms", (json_int_t)(now - c->created_ms));
		if (c->session != NULL)
			json_object_set_new(o, "session",
			    json_string(session_id(c->session)));
		json_array_append_new(a, o);
	}
	return (a);
}

/* Read one manifest a start-up scan found (the user's own file, so
 * checked like any input) into the registry. */
static void
checkpoint_adopt(uid_t uid, gid_t gid, const char *uid_dir, json_t *m)
{
	struct checkpoint	*c;
	json_int_t		 partitions = 0, records = 0, bytes = 0;
	const char		*id = NULL;
	int			 eager = 1, pending = 0;
	char			*err = NULL;

	if (jread_string(m, "manifest", "id", JREAD_REQUIRED, &id,
	    &err) == -1 ||
	    jread_int(m, "manifest", "partitions", JREAD_REQUIRED, &partitions,
	    &err) == -1 ||
	    jread_bool(m, "manifest", "pending", JREAD_OPTIONAL, &pending,
	    &err) == -1 ||
	    jread_int(m, "manifest", "records", JREAD_REQUIRED, &records,
	    &err) == -1 ||
	    jread_int(m, "manifest", "bytes", JREAD_REQUIRED, &bytes,
	    &err) == -1 ||
	    jread_bool(m, "manifest", "eager", JREAD_OPTIONAL, &eager,
	    &err) == -1 || !plan_is_uuid(id) || partitions < 1 ||
	    partitions > PLAN_MAX_PARTITIONS || records < 0 || bytes < 0) {
		log_warn("%s: a manifest that does not hold: %s", uid_dir,
		    err != NULL ? err : "bad values");
		free(err);
		return;
	}
	if (pending)
		records = 0;
	if (checkpoint_find(uid, id) != NULL)
		return;
	if (checkpoint_charge(uid, &err) == -1) {
		log_warn("checkpoint %s of uid %ld kept on disk but not "
		    "served: %s", id, (long)uid, err);
		free(err);
		return;
	}
	if (bytes > 0 && limit_charge(uid, LIMIT_CHECKPOINT_BYTES, bytes,
	    &err) == -1) {
		log_warn("checkpoint %s of uid %ld kept on disk but not "
		    "served: %s", id, (long)uid, err);
		free(err);
		limit_release(uid, LIMIT_CHECKPOINTS, 1);
		return;
	}
	c = xcalloc(1, sizeof *c);
	TAILQ_INIT(&c->waiters);
	strcpy(c->id, id);
	c->uid = uid;
	c->gid = gid;
	c->eager = pending ? 0 : eager;
	c->state = pending ? CKPT_PENDING : CKPT_READY;
	c->partitions = (int)partitions;
	c->records = records;
	c->bytes = bytes;
	c->written = pending ? 0 : c->partitions;
	/* A lazy one's plan is read from its manifest by its first read
	 * (checkpoint_wait), and checked then as the user's plan. */
	c->uid_dir = xstrdup(uid_dir);
	xasprintf(&c->dir, "%s/%s", uid_dir, id);
	c->created_ms = ember_now_ms();
	TAILQ_INSERT_TAIL(&checkpoints, c, entry);
	log_info("checkpoint %s of uid %ld: %d partitions, %lld records%s, "
	    "kept from an earlier run", id, (long)uid, c->partitions,
	    (long long)records, pending ? " (lazy, not computed yet)" : "");
}

/*
 * Charge each ready checkpoint of a clean's what its helper measured on
 * disk (sizes: id -> bytes), whatever the user wrote there behind
 * emberd's back.  Bytes past the uid's bound are charged all the same:
 * they are held; the uid's next checkpoint is refused.
 */
static void
checkpoint_measured(struct ckpt_call *k, json_t *sizes)
{
	struct checkpoint	*c;
	json_int_t		 bytes;
	json_t			*v;
	char			*err = NULL;

	if (!json_is_object(sizes))
		return;
	TAILQ_FOREACH(c, &checkpoints, entry) {
		if (c->uid != k->uid || c->local != k->local ||
		    c->state != CKPT_READY ||
		    !json_is_integer(v = json_object_get(sizes, c->id)) ||
		    (bytes = json_integer_value(v)) < 0 || bytes == c->bytes)
			continue;
		if (bytes < c->bytes)
			limit_release(c->uid, LIMIT_CHECKPOINT_BYTES,
			    c->bytes - bytes);
		else if (limit_charge(c->uid, LIMIT_CHECKPOINT_BYTES,
		    bytes - c->bytes, &err) == -1) {
			log_warn("checkpoint %s holds %lld bytes on disk: %s",
			    c->id, (long long)bytes, err);
			free(err);
			err = NULL;
			limit_force(c->uid, LIMIT_CHECKPOINT_BYTES,
			    bytes - c->bytes);
		}
		c->bytes = bytes;
	}
}

/* A clean's answer: what it removed, and what a start's scan adopts. */
static void
checkpoint_cleaned_cb(json_t *reply, int *fds, size_t nfds,
    const char *class, const char *error, void *arg)
{
	struct ckpt_call	*k = arg;
	json_t			*m;
	size_t			 i;

	(void)class;
	if ((error = checkpoint_call_error(reply, fds, nfds, error)) != NULL)
		log_warn("%s: cleaning: %s", k->uid_dir, error);
	else {
		if (json_integer_value(json_object_get(reply, "removed")) > 0)
			log_info("%s: removed %lld checkpoint(s) left "
			    "behind", k->uid_dir, (long long)
			    json_integer_value(json_object_get(reply,
			    "removed")));
		json_array_foreach(json_object_get(reply, "checkpoints"), i,
		    m) {
			if (k->adopt && json_is_object(m))
				checkpoint_adopt(k->uid, k->gid, k->uid_dir, m);
		}
		checkpoint_measured(k, json_object_get(reply, "sizes"));
		if (json_integer_value(json_object_get(reply, "refused")) > 0 ||
		    json_integer_value(json_object_get(reply, "more")) > 0)
			log_warn("%s: %lld manifest(s) that do not hold "
			    "removed, %lld past daemon.max_checkpoints_per_uid "
			    "kept on disk but not served", k->uid_dir,
			    (long long)json_integer_value(json_object_get(reply,
			    "refused")), (long long)json_integer_value(
			    json_object_get(reply, "more")));
	}
	checkpoint_call_free(k);
}

/*
 * Clean uid's directory in a base: remove what no checkpoint of the
 * registry owns and is older than before; with adopt, keep (and adopt)
 * the reliable ones that have a manifest.
 */
static void
checkpoint_clean_uid(const char *basepath, uid_t uid, int local, int adopt,
    int64_t before)
{
	struct ckpt_call	*k, *r;
	struct checkpoint	*c;
	struct passwd		*pw;
	json_t			*keep = json_array();

	k = xcalloc(1, sizeof *k);
	k->uid = uid;
	k->gid = (pw = getpwuid(uid)) != NULL ? pw->pw_gid : (gid_t)uid;
	k->adopt = adopt;
	k->local = local;
	xasprintf(&k->uid_dir, "%s/%ld", basepath, (long)uid);
	TAILQ_FOREACH(c, &checkpoints, entry) {
		if (c->uid == uid && c->local == local)
			json_array_append_new(keep, json_string(c->id));
	}
	/* Dropped ones being removed: neither removed twice nor adopted. */
	TAILQ_FOREACH(r, &ckpt_calls, entry) {
		if (r->id != NULL && strcmp(r->uid_dir, k->uid_dir) == 0)
			json_array_append_new(keep, json_string(r->id));
	}
	TAILQ_FOREACH(r, &ckpt_retries, entry) {
		if (strcmp(r->uid_dir, k->uid_dir) == 0)
			json_array_append_new(keep, json_string(r->id));
	}
	checkpoint_call(k, "checkpoint_clean", json_pack("{s:s,s:o,s:I,s:b,"
	    "s:I,s:I}", "dir", k->uid_dir, "keep", keep, "before_ms",
	    (json_int_t)before, "complete", !local, "max", (json_int_t)
	    (local ? 0 : ember_conf.daemon_max_checkpoints_per_uid),
	    "max_manifest", (json_int_t)CKPT_MAX_MANIFEST),
	    checkpoint_cleaned_cb);
}

/* Clean every uid's directory a base holds. */
static void
checkpoint_clean_base(int base, const char *basepath, int local, int adopt,
    int64_t before)
{
	struct dirent	*e;
	struct stat	 st;
	char		*end;
	long		 uid;
	DIR		*d;
	int		 fd;

	if (base == -1 || (fd = dup(base)) == -1)
		return;
	if ((d = fdopendir(fd)) == NULL) {
		close(fd);
		return;
	}
	rewinddir(d);
	while ((e = readdir(d)) != NULL) {
		errno = 0;
		uid = strtol(e->d_name, &end, 10);
		if (*end != '\0' || end == e->d_name || uid < 0 || errno != 0)
			continue;
		/* The entry is in emberd's own directory; what is in it is
		 * the user's, and only the user's helper looks in it. */
		if (fstatat(base, e->d_name, &st, AT_SYMLINK_NOFOLLOW) == -1 ||
		    !S_ISDIR(st.st_mode))
			continue;
		checkpoint_clean_uid(basepath, (uid_t)uid, local, adopt,
		    before);
	}
	closedir(d);
}

/* The cleaner: local directories whose checkpoint is gone (its session
 * closed, or a removal failed), and reliable leftovers. */
static void
checkpoint_timer_cb(evutil_socket_t fd, short events, void *arg)
{
	struct timeval	tv;
	int64_t		before = checkpoint_now_ms() - 1000;

	(void)fd; (void)events; (void)arg;
	checkpoint_retry_removals();
	checkpoint_clean_base(ckpt_local_fd, ckpt_local_path, 1, 0, before);
	/* A start-up scan that could not run is made up for here; what no
	 * checkpoint owns goes as a local leftover does (by its ctime, which
	 * its owner cannot set back or ahead). */
	if (!checkpoint_scanning((uid_t)-1))
		checkpoint_clean_base(ckpt_reliable_fd, ckpt_reliable_path, 0,
		    1, before);
	tv.tv_sec = ember_conf.checkpoint_clean_interval / 1000;
	tv.tv_usec = (ember_conf.checkpoint_clean_interval % 1000) * 1000;
	evtimer_add(ckpt_timer, &tv);
}

/* Milliseconds since the epoch, as file times are. */
static int64_t
checkpoint_now_ms(void)
{
	struct timespec	ts;

	clock_gettime(CLOCK_REALTIME, &ts);
	return ((int64_t)ts.tv_sec * 1000 + ts.tv_nsec / 1000000);
}

int
checkpoint_scanning(uid_t uid)
{
	struct ckpt_call	*k;

	TAILQ_FOREACH(k, &ckpt_calls, entry) {
		if (k->adopt && (k->uid == uid || uid == (uid_t)-1))
			return (1);
	}
	return (0);
}

void
checkpoint_init(void)
{
	struct timeval	 tv;
	char		*err = NULL;

	ckpt_started = checkpoint_now_ms();
	/* Local checkpoints of a run that crashed, if any. */
	xasprintf(&ckpt_local_path, "%s/checkpoints", ember_local_dir());
	if ((ckpt_local_fd = checkpoint_open_base(ckpt_local_path, 0,
	    &err)) == -1 && errno != ENOENT)
		log_error("daemon.local_dir: %s", err);
	free(err);
	err = NULL;
	ckpt_reliable_path = xstrdup(ember_conf.checkpoint_dir);
	if ((ckpt_reliable_fd = checkpoint_open_reliable(&err)) == -1) {
		/* Missing is a machine without reliable checkpoints; the
		 * others are mistakes. */
		if (errno == ENOENT)
			log_info("checkpoint.dir: %s; reliable checkpoints are "
			    "refused until it can be made", err);
		else
			log_error("checkpoint.dir: %s; reliable checkpoints "
			    "are refused", err);
		ckpt_reliable_error = err;
	}
	/* What a run that ended (or crashed) left: local ones all go,
	 * reliable ones without a manifest go, the others are kept. */
	checkpoint_clean_base(ckpt_local_fd, ckpt_local_path, 1, 0,
	    ckpt_started);
	if (ckpt_reliable_fd != -1)
		checkpoint_load_removals();
	checkpoint_clean_base(ckpt_reliable_fd, ckpt_reliable_path, 0, 1,
	    ckpt_started);
	checkpoint_retry_removals();
	ckpt_timer = evtimer_new(ember_base, checkpoint_timer_cb, NULL);
	tv.tv_sec = ember_conf.checkpoint_clean_interval / 1000;
	tv.tv_usec = (ember_conf.checkpoint_clean_interval % 1000) * 1000;
	evtimer_add(ckpt_timer, &tv);
}

/* Remove the empty directories of a base, emberd's own entries (rmdir
 * follows no link and removes nothing of a user's). */
static void
checkpoint_remove_empty(int base)
{
	struct dirent	*e;
	DIR		*d;
	int		 fd;

	if ((fd = dup(base)) == -1)
		return;
	if ((d = fdopendir(fd)) == NULL) {
		close(fd);
		return;
	}
	rewinddir(d);
	while ((e = readdir(d)) != NULL) {
		if (strcmp(e->d_name, ".") != 0 && strcmp(e->d_name, "..") != 0)
			unlinkat(base, e->d_name, AT_REMOVEDIR);
	}
	closedir(d);
}

size_t
checkpoint_drain(void)
{
	static int		 dropped;
	struct checkpoint	*c, *next;
	struct ckpt_call	*k;
	size_t			 n = 0;

	if (!dropped) {
		dropped = 1;
		TAILQ_FOREACH_SAFE(c, &checkpoints, entry, next) {
			if (c->local && !c->dropped)
				checkpoint_drop(c);
		}
	}
	TAILQ_FOREACH(k, &ckpt_calls, entry)
		n++;
	TAILQ_FOREACH(c, &checkpoints, entry) {
		if (c->helper != NULL)
			n++;
	}
	return (n);
}

void
checkpoint_shutdown(void)
{
	struct checkpoint	*c;
	struct ckpt_call	*k;

	if (ckpt_timer != NULL)
		event_free(ckpt_timer);
	ckpt_timer = NULL;
	while ((k = TAILQ_FIRST(&ckpt_calls)) != NULL) {
		if (k->helper != NULL)
			helper_cancel(k->helper);
		checkpoint_call_free(k);
	}
	while ((k = TAILQ_FIRST(&ckpt_retries)) != NULL) {
		TAILQ_REMOVE(&ckpt_retries, k, entry);
		free(k->uid_dir);
		free(k->id);
		free(k);
	}
	while ((c = TAILQ_FIRST(&checkpoints)) != NULL) {
		if (c->helper != NULL)
			helper_cancel(c->helper);
		TAILQ_REMOVE(&checkpoints, c, entry);
		checkpoint_free(c);
	}
	if (ckpt_local_fd != -1) {
		/* The uids' directories that are empty, and the base if it
		 * is then: what is left goes at the next start. */
		checkpoint_remove_empty(ckpt_local_fd);
		close(ckpt_local_fd);
		rmdir(ckpt_local_path);
	}
	if (ckpt_reliable_fd != -1)
		close(ckpt_reliable_fd);
	ckpt_local_fd = ckpt_reliable_fd = -1;
	free(ckpt_local_path);
	free(ckpt_reliable_path);
	free(ckpt_reliable_error);
	ckpt_local_path = ckpt_reliable_path = ckpt_reliable_error = NULL;
}
