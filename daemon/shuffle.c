/*
 * An operation in stages (docs/plans.md, "Stages"): its map stages run
 * one after the other, each task writing its shuffle file in the uid's
 * shuffle directory, before the last stage's tasks, which are the
 * operation's own (operation.c) and read the files of the stage before.
 * emberd never reads a shuffle file: it makes the uid's directory, passes
 * its descriptor, counts the bytes the map tasks say they wrote, and has
 * the operation's files removed, as the user, when the operation ends.
 * Where emberd can (shufflefs.c), the uid's directory is a tmpfs of
 * daemon.max_shuffle_per_uid bytes, which bounds what the user's code
 * writes whatever it says; it stays mounted, and the user's helper
 * empties it when the uid's last operation in stages ends.
 */
#include <sys/types.h>
#include <sys/stat.h>

#include <errno.h>
#include <fcntl.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include <jansson.h>

#include "checkpoint_private.h"
#include "closer.h"
#include "emberd.h"
#include "helper.h"
#include "limit.h"
#include "localdir.h"
#include "log.h"
#include "operation_private.h"
#include "plan.h"
#include "pool.h"
#include "scheduler.h"
#include "session.h"
#include "shufflefs.h"
#include "stage.h"
#include "task.h"
#include "userdb.h"
#include "xmalloc.h"

/* The most map tasks an operation runs again for lost shuffle files. */
#define OPERATION_MAX_RERUNS	64

/* LOCALDIR/shuffle, emberd's own, opened on first use. */
static int	 shuffle_base = -1;
static char	*shuffle_base_path;

/* Open (made if missing, with create) the base directory: -1 with *err
 * (and errno). */
static int
shuffle_open_base(int create, char **err)
{
	char	*e = NULL;
	int	 saved;

	if (shuffle_base != -1)
		return (shuffle_base);
	if (localdir_path() == NULL) {
		*err = xstrdup("no daemon.local_dir");
		return (-1);
	}
	free(shuffle_base_path);
	xasprintf(&shuffle_base_path, "%s/shuffle", localdir_path());
	if ((shuffle_base = checkpoint_open_base(shuffle_base_path, create,
	    &e)) == -1) {
		saved = errno;
		xasprintf(err, "daemon.local_dir: %s", e);
		free(e);
		errno = saved;
	}
	return (shuffle_base);
}

/*
 * Open the uid's directory, made if missing and given to the user its
 * jobs run as: -1 (logged) if it cannot be, and the task then fails in
 * its worker, saying so.
 */
static int
shuffle_open_uid(const struct operation *op)
{
	struct stat	 st;
	char		*path, *err = NULL, name[24];
	struct pool	*p;
	uid_t		 juid;
	gid_t		 jgid;
	int		 fd;

	if (shufflefs_active()) {
		/* Owned by whom the uid's workers run as: its pool's user,
		 * which a SIGHUP changing workers.root_user leaves be. */
		fd = -1;
		if (shuffle_open_base(1, &err) != -1 && (p = pool_of_client(
		    op->uid, session_gid(op->session))) != NULL) {
			pool_job_user(p, &juid, &jgid);
			fd = shufflefs_open(op->uid, juid, jgid, &err);
		}
		if (fd == -1) {
			log_warn("operation %s: shuffle: %s", op->id,
			    err != NULL ? err : "no user to run jobs as");
			free(err);
			return (-1);
		}
		return (fd);
	}
	if (shuffle_open_base(1, &err) == -1 ||
	    (path = checkpoint_uid_dir(shuffle_base, shuffle_base_path,
	    op->uid, session_gid(op->session), &err)) == NULL) {
		log_warn("operation %s: shuffle: %s", op->id, err);
		free(err);
		return (-1);
	}
	free(path);
	snprintf(name, sizeof name, "%ld", (long)op->uid);
	fd = openat(shuffle_base, name, O_RDONLY | O_DIRECTORY | O_NOFOLLOW |
	    O_CLOEXEC | O_NOCTTY);
	if (fd != -1 && (fstat(fd, &st) == -1 || (st.st_mode & 077) != 0)) {
		close(fd);
		fd = -1;
	}
	if (fd == -1)
		log_warn("operation %s: shuffle: %s/%s: cannot open it",
		    op->id, shuffle_base_path, name);
	return (fd);
}

int
operation_stages_prepare(struct operation *op, json_t *plan_json, char **err)
{
	struct stage	*s;
	json_t		*files;
	int		 i;

	if (!plan_is_wide(op->plan))
		return (0);
	if ((op->stages = stage_cut(op->plan, plan_json, &op->nstages,
	    err)) == NULL)
		return (-1);
	for (i = 0; i < op->nstages; i++) {
		s = &op->stages[i];
		xasprintf(&s->name, "%s/s%d", op->id, i);
		files = s->from != NULL && s->from->source == PLAN_SOURCE_TEXT ?
		    plan_files_to_json(s->from) : NULL;
		s->plan_text = taskdesc_encode_plan(s->plan, files,
		    s->from == op->plan && op->source != NULL ?
		    checkpoint_dir(op->source) : NULL);
		/* The text is all the tasks need; the tree may hold a
		 * parallelize source's records, at twenty times the bytes. */
		json_decref(s->plan);
		s->plan = NULL;
	}
	op->npartitions = op->stages[op->nstages - 1].partitions;
	op->stage = 0;
	shufflefs_hold(op->uid);
	return (0);
}

int
operation_in_map_stage(const struct operation *op)
{
	return (op->nstages > 1 && op->stage < op->nstages - 1);
}

/* Start the running map stage's tasks while the window has room. */
void
operation_stage_fill(struct operation *op)
{
	struct stage	*s = &op->stages[op->stage];
	struct task	*t;

	/* The uid's mount is being emptied: the helper would remove what
	 * the tasks write.  shuffle_emptied_cb fills it then. */
	if (op->failing || op->waiting || shufflefs_emptying(op->uid))
		return;
	while (op->stage_next < s->partitions &&
	    op->map_live < 2 * ember_workers_max()) {
		t = task_create(op, &operation_task_ops, op->stage_next++, 1);
		t->stage = op->stage;
		TAILQ_INSERT_TAIL(&op->map_tasks, t, op_entry);
		op->map_live++;
		scheduler_submit(t);
	}
}

/* Stop a map task wherever it is, and free it. */
static void
operation_stage_retire(struct operation *op, struct task *t)
{
	TAILQ_REMOVE(&op->map_tasks, t, op_entry);
	op->map_live--;
	task_free(t);
}

/* Queue again the tasks that waited for a lost shuffle file, once no
 * map task runs again for one. */
static void
operation_stage_resume(struct operation *op)
{
	struct task	*t;

	TAILQ_FOREACH(t, &op->map_tasks, op_entry) {
		if (t->rerun)
			return;
	}
	TAILQ_FOREACH(t, &op->map_tasks, op_entry) {
		if (t->waiting_input) {
			t->waiting_input = 0;
			scheduler_submit(t);
		}
	}
	TAILQ_FOREACH(t, &op->tasks, op_entry) {
		if (t->waiting_input) {
			t->waiting_input = 0;
			if (!ACTION_STREAMS(op->action))
				scheduler_submit(t);
		}
	}
	if (ACTION_STREAMS(op->action))
		operation_pump(op);	/* it queues its parked head */
}

int
operation_input_lost(struct operation *op, struct task *t, const char *cause)
{
	struct task	*m;
	int		 stage, map, n = 0;

	if (op->nstages == 0 || op->failing ||
	    sscanf(cause, "SHUFFLE_LOST stage %d map %d: %n", &stage, &map,
	    &n) != 2 || n == 0 || stage < 0 || stage >= t->stage ||
	    map < 0 || map >= op->stages[stage].partitions ||
	    op->reruns >= OPERATION_MAX_RERUNS)
		return (0);
	TAILQ_FOREACH(m, &op->map_tasks, op_entry) {
		if (m->rerun && m->stage == stage && m->partition == map) {
			log_info("operation %s: stage %d: partition %d: %s; "
			    "waiting for map task %d of stage %d", op->id,
			    t->stage, t->partition, cause, map, stage);
			return (1);	/* it runs again already */
		}
	}
	log_warn("operation %s: stage %d: partition %d: %s; running map "
	    "task %d of stage %d again", op->id, t->stage, t->partition,
	    cause, map, stage);
	op->reruns++;
	m = task_create(op, &operation_task_ops, map, 1);
	m->stage = stage;
	m->rerun = 1;
	TAILQ_INSERT_TAIL(&op->map_tasks, m, op_entry);
	op->map_live++;
	scheduler_submit(m);
	return (1);
}

void
operation_stage_task_finished(struct operation *op, struct task *t)
{
	int64_t	 bytes = t->metrics[EMBER_METRIC_BYTES_OUT];
	char	*err = NULL;

	if (t->rerun) {
		/* Its file replaced the lost one, whose bytes are counted. */
		operation_stage_retire(op, t);
		operation_stage_resume(op);
		return;
	}
	operation_stage_retire(op, t);
	/* With a mount of its own, the uid's bound is the kernel's; what
	 * the task says it wrote still counts against everyone's. */
	if ((shufflefs_mounted(op->uid) ? limit_charge_total(op->uid,
	    LIMIT_SHUFFLE_BYTES, bytes, &err) : limit_charge(op->uid,
	    LIMIT_SHUFFLE_BYTES, bytes, &err)) == -1) {
		operation_abort(op, "LIMIT_EXCEEDED", err);
		free(err);
		return;
	}
	op->shuffle_bytes += bytes;
	ember_counters.shuffle_bytes += (uint64_t)bytes;
	if (++op->stage_done < op->stages[op->stage].partitions) {
		operation_stage_fill(op);
		return;
	}
	log_debug("operation %s: stage %d done", op->id, op->stage);
	ember_counters.stages++;
	op->stage++;
	op->stage_next = op->stage_done = 0;
	if (operation_in_map_stage(op))
		operation_stage_fill(op);
	else if (ACTION_STREAMS(op->action))
		operation_pump(op);	/* it starts the last stage's tasks */
	else
		operation_fill(op);
}

void
operation_stage_task_failed(struct operation *op, struct task *t)
{
	char	*why;

	/* The hint rests on the words of the user's own task, and only
	 * adds to the error that user reads. */
	if (shufflefs_mounted(op->uid) && t->error != NULL &&
	    strstr(t->error, strerror(ENOSPC)) != NULL)
		xasprintf(&why, "stage %d: %s (uid %ld's shuffle files are "
		    "bounded by daemon.max_shuffle_per_uid, %lld bytes, and "
		    "%lld files)", t->stage, t->error, (long)op->uid,
		    shufflefs_size(op->uid), shufflefs_inodes(op->uid));
	else
		xasprintf(&why, "stage %d: %s", t->stage, t->error);
	operation_stage_retire(op, t);
	operation_abort(op, "TASK_FAILED", why);
	free(why);
}

void
operation_stage_describe(struct operation *op, const struct task *t,
    struct taskdesc *d)
{
	const struct stage	*s = &op->stages[t->stage];

	d->operation = s->name;
	d->partitions = s->partitions;
	d->shuffle_dir = op->id;
	d->shuffle_memory = ember_conf.workers_shuffle_memory;
	if (s->out_op != NULL) {
		d->mode = MODE_SHUFFLE;
		d->skip = 0;
		d->shuffle_stage = t->stage;
		d->shuffle_buckets = s->buckets;
		d->shuffle_op_text = s->out_op;
	}
	d->shuffle_dirfd = shuffle_open_uid(op);
	d->shuffle_dir_passed = d->shuffle_dirfd != -1;
}

const char *
operation_stage_plan(const struct operation *op, const struct task *t,
    uint64_t *key)
{
	*key = (op->serial << 12) | (uint64_t)t->stage;
	return (op->stages[t->stage].plan_text);
}

/* An operation's files were removed, or could not be: say so (the
 * error names the directory).  Nothing is allocated for the call: a
 * helper still queued at exit is dropped with nothing to free. */
static void
operation_stages_removed_cb(const struct hmsg_reply *reply, int *fds,
    size_t nfds, const char *class, const char *error, void *arg)
{
	(void)arg;
	while (nfds > 0)
		closer_close_drained(fds[--nfds]);
	if (class == NULL && reply->error != NULL)
		error = reply->error;
	if (error != NULL)
		log_warn("shuffle: removing an operation's files: %s", error);
}

/* The uid's mount is emptied, or will not be: start the map tasks of
 * the uid's operations that waited for it. */
static void
shuffle_emptied(uid_t uid)
{
	struct operation	*op;

	shufflefs_cleaned(uid);
	TAILQ_FOREACH(op, &operations, entry) {
		if (op->uid == uid && op->nstages > 0 &&
		    operation_in_map_stage(op))
			operation_stage_fill(op);
	}
}

/* The user's helper emptied the uid's mount, or could not (the error
 * names it).  The uid rides in arg: nothing to free if the helper is
 * dropped at exit. */
static void
shuffle_emptied_cb(const struct hmsg_reply *reply, int *fds, size_t nfds,
    const char *class, const char *error, void *arg)
{
	while (nfds > 0)
		closer_close_drained(fds[--nfds]);
	if (class == NULL && reply->error != NULL)
		error = reply->error;
	if (error != NULL)
		log_warn("shuffle: emptying a uid's directory: %s", error);
	shuffle_emptied((uid_t)(uintptr_t)arg);
}

/*
 * Have the user empty the uid's mount once its last operation in stages
 * ended: whatever the user's code left there, anywhere, would count
 * against the uid's next operation.  All of it goes, whenever made: an
 * operation that starts meanwhile starts its map tasks once it is done
 * (operation_stage_fill), so none of its files are there yet.
 */
static void
shuffle_empty_uid(uid_t uid, gid_t gid)
{
	const char	*class;
	char		*err = NULL, *path;
	json_t		*args;
	int		 fd;

	xasprintf(&path, "%s/%ld", shuffle_base_path, (long)uid);
	/* The mount's own root: never one a user stacked on its path. */
	if ((fd = shufflefs_open_root(uid)) == -1) {
		log_warn("shuffle: %s: its mount: %s", path, strerror(errno));
		free(path);
		shufflefs_cleaned(uid);	/* none waits yet */
		return;
	}
	args = json_pack("{s:s,s:[],s:I}", "dir", path, "keep", "before_ms",
	    (json_int_t)INT64_MAX);
	if (helper_run_background(uid, gid, "checkpoint_clean", args, fd,
	    shuffle_emptied_cb, (void *)(uintptr_t)uid, &class,
	    &err) == NULL) {
		log_warn("%s: emptying it: %s", path, err);
		free(err);
		shufflefs_cleaned(uid);
	}
	json_decref(args);
	free(path);
	close(fd);
}

void
operation_stages_free(struct operation *op)
{
	const struct userdb_user	*pw;
	struct task			*t;
	const char			*class;
	char				*err = NULL, *path;
	json_t				*args;
	int				 fd;

	if (op->nstages == 0)
		return;
	while ((t = TAILQ_FIRST(&op->map_tasks)) != NULL)
		operation_stage_retire(op, t);
	limit_release(op->uid, LIMIT_SHUFFLE_BYTES, op->shuffle_bytes);
	if (shufflefs_release(op->uid)) {
		/* The uid's last: everything in its mount goes. */
		pw = userdb_uid_now(op->uid);
		shuffle_empty_uid(op->uid, op->session != NULL ?
		    session_gid(op->session) : pw != NULL ? pw->gid :
		    (gid_t)op->uid);
	} else if (op->session != NULL && (fd = shufflefs_active() ?
	    shufflefs_open_root(op->uid) : shuffle_open_uid(op)) != -1) {
		/* (Not mounted yet: none of its tasks ran, nothing to go.) */
		xasprintf(&path, "%s/%ld", shuffle_base_path, (long)op->uid);
		args = json_pack("{s:s,s:s}", "dir", path, "id", op->id);
		if (helper_run_background(op->uid, session_gid(op->session),
		    "checkpoint_remove", args, fd, operation_stages_removed_cb,
		    NULL, &class, &err) == NULL) {
			log_warn("operation %s: removing its shuffle files: %s",
			    op->id, err);
			free(err);
		}
		json_decref(args);
		free(path);
		close(fd);
	}
	stage_free_all(op->stages, op->nstages);
	op->stages = NULL;
	op->nstages = 0;
}

/* A start's clean of a uid's directory is done, or could not be (the
 * error names it). */
static void
shuffle_cleaned_cb(const struct hmsg_reply *reply, int *fds, size_t nfds,
    const char *class, const char *error, void *arg)
{
	(void)arg;
	while (nfds > 0)
		closer_close_drained(fds[--nfds]);
	if (class == NULL && reply->error != NULL)
		error = reply->error;
	if (error != NULL)
		log_warn("shuffle: removing what an earlier run left: %s",
		    error);
}

/* Have the user empty one uid's directory: its files are of operations
 * of an earlier run, which no longer exist. */
static void
shuffle_clean_uid(uid_t uid, __attribute__((unused)) void *arg)
{
	const struct userdb_user	*pw = userdb_uid_now(uid);
	const char			*class;
	struct stat			 st;
	char				*err = NULL, *path, name[24];
	json_t				*args;
	int				 fd;

	snprintf(name, sizeof name, "%ld", (long)uid);
	/* A mount point of emberd's own (its mount a killed emberd left,
	 * unmounted by shufflefs_start) is empty: gone, or a start without
	 * mounts would refuse it. */
	if (fstatat(shuffle_base, name, &st, AT_SYMLINK_NOFOLLOW) == 0 &&
	    st.st_uid == geteuid() && unlinkat(shuffle_base, name,
	    AT_REMOVEDIR) == 0)
		return;
	if ((fd = openat(shuffle_base, name, O_RDONLY | O_DIRECTORY |
	    O_NOFOLLOW | O_CLOEXEC | O_NOCTTY)) == -1)
		return;
	xasprintf(&path, "%s/%s", shuffle_base_path, name);
	/* The user's helper lists and removes, never emberd: everything
	 * made before now goes. */
	args = json_pack("{s:s,s:[],s:I,s:b,s:I,s:I}", "dir", path, "keep",
	    "before_ms", (json_int_t)checkpoint_now_ms(), "complete", 0, "max",
	    (json_int_t)0, "max_manifest", (json_int_t)CKPT_MAX_MANIFEST);
	if (helper_run_background(uid, pw != NULL ? pw->gid : (gid_t)uid,
	    "checkpoint_clean", args, fd, shuffle_cleaned_cb, NULL, &class,
	    &err) == NULL) {
		log_warn("%s: removing what an earlier run left: %s", path,
		    err);
		free(err);
	}
	free(path);
	json_decref(args);
	close(fd);
}

void
shuffle_start(void)
{
	char	*err = NULL;
	int	 want;

	/* The base is made for the probe; without mounts, opened if it is
	 * there, for what a killed emberd's mounts left in it. */
	want = geteuid() == 0 && ember_conf.daemon_shuffle_mounts;
	if (geteuid() == 0 && shuffle_open_base(want, &err) == -1) {
		if (errno != ENOENT || want)
			log_warn("shuffle: %s", err);
		free(err);
	}
	shufflefs_start(shuffle_base, shuffle_base_path);
}

void
shuffle_clean_stale(void)
{
	char	*err = NULL;

	/* Made by the first operation in stages, not before. */
	if (shuffle_open_base(0, &err) == -1) {
		if (errno != ENOENT)
			log_warn("shuffle: %s", err);
		free(err);
		return;
	}
	checkpoint_each_uid(shuffle_base, shuffle_clean_uid, NULL);
}

void
shuffle_shutdown(void)
{
	shufflefs_shutdown();
	if (shuffle_base == -1)
		return;
	/* The uids' directories that are empty, and the base if it is
	 * then: what is left goes at the next start. */
	checkpoint_remove_empty(shuffle_base);
	close(shuffle_base);
	shuffle_base = -1;
	rmdir(shuffle_base_path);
	free(shuffle_base_path);
	shuffle_base_path = NULL;
}
