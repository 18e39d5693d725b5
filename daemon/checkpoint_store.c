/*
 * What the checkpoints keep on disk, emberd's side: the base directories
 * and each uid's, the journal of removals (checkpoint.dir/.removing), the
 * removals and cleans the users' helpers do, the start-up scan's adoption
 * of what they find, and the cleaner's timer.  The registry is
 * checkpoint.c's.
 */
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


#include "emberd.h"
#include "jread.h"
#include "limit.h"
#include "localdir.h"
#include "log.h"
#include "operation.h"
#include "plan.h"
#include "session.h"
#include "userdb.h"
#include "xmalloc.h"

#include "checkpoint_private.h"
#include "closer.h"

int		 ckpt_local_fd = -1, ckpt_reliable_fd = -1;
char		*ckpt_local_path, *ckpt_reliable_path;
char		*ckpt_reliable_error;
struct event	*ckpt_timer;
struct ckpt_call_list ckpt_calls = TAILQ_HEAD_INITIALIZER(ckpt_calls);
struct ckpt_call_list ckpt_retries = TAILQ_HEAD_INITIALIZER(ckpt_retries);

static void	checkpoint_remove_batch(const char *);

/*
 * Open (made if missing) a base directory, emberd's own: a directory
 * owned by emberd's user, writable by it alone, not a link.  Workers of
 * every user go through it to their own directory, so it is 0711.
 */
int
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
int
checkpoint_open_reliable(char **err)
{
	char	*e = NULL;

	if (ckpt_reliable_path[0] != '/') {
		xasprintf(err, "\"%s\" is not an absolute path",
		    ckpt_reliable_path);
		errno = EINVAL;
		return (-1);
	}
	/* Made with its parents (a fresh machine has no /var/lib/ember),
	 * each checked once it is there. */
	if (localdir_make_parents(ckpt_reliable_path, &e) == -1 ||
	    localdir_check_parents(ckpt_reliable_path, &e) == -1) {
		*err = e;	/* it names the path */
		return (-1);
	}
	return (checkpoint_open_base(ckpt_reliable_path, 1, err));
}

/* The base directory of local or reliable checkpoints, opened (and made)
 * on first use: -1 with *err naming it. */
int
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
char *
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
struct helper *
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

/* Forget a helper call. */
void
checkpoint_call_free(struct ckpt_call *k)
{
	TAILQ_REMOVE(&ckpt_calls, k, entry);
	free(k->uid_dir);
	free(k->id);
	free(k);
	ember_check_drained();
}

/* A helper's error: the call's, or the verb's ("error" in the reply). */
const char *
checkpoint_call_error(const struct hmsg_reply *reply, int *fds,
    size_t nfds, const char *error)
{
	size_t	i;

	for (i = 0; i < nfds; i++)
		closer_close_drained(fds[i]);
	if (reply != NULL && reply->error != NULL)
		return (reply->error);
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
void
checkpoint_load_removals(void)
{
	struct ckpt_call		*k;
	const struct userdb_user	*pw;
	char				 id[64];
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
		/* At start, before the loop: a lookup may wait. */
		k->gid = (pw = userdb_uid_now(k->uid)) != NULL ? pw->gid :
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
checkpoint_removed_cb(const struct hmsg_reply *reply, int *fds,
    size_t nfds, const char *class, const char *error, void *arg)
{
	struct ckpt_call	*lead = arg, *k, *next;
	json_t			*failed;
	char			*dir = xstrdup(lead->uid_dir);

	(void)class;
	failed = reply != NULL ? reply->u.checkpoint_remove.failed : NULL;
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
void
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
void
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
	char			*err = NULL;

	TAILQ_FOREACH(c, &checkpoints, entry) {
		bytes = -1;
		if (c->uid != k->uid || c->local != k->local ||
		    c->state != CKPT_READY ||
		    jread_int(sizes, "sizes", c->id, JREAD_OPTIONAL, &bytes,
		    &err) == -1 || bytes < 0 || bytes == c->bytes)
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
checkpoint_cleaned_cb(const struct hmsg_reply *reply, int *fds,
    size_t nfds, const char *class, const char *error, void *arg)
{
	struct ckpt_call	*k = arg;
	const struct hmsg_checkpoint_clean *clean;
	json_t			*m;
	size_t			 i;

	(void)class;
	if ((error = checkpoint_call_error(reply, fds, nfds, error)) != NULL)
		log_warn("%s: cleaning: %s", k->uid_dir, error);
	else {
		clean = &reply->u.checkpoint_clean;
		if (clean->removed > 0)
			log_info("%s: removed %lld checkpoint(s) left "
			    "behind", k->uid_dir, (long long)clean->removed);
		json_array_foreach(clean->checkpoints, i, m) {
			if (k->adopt)
				checkpoint_adopt(k->uid, k->gid, k->uid_dir, m);
		}
		checkpoint_measured(k, clean->sizes);
		if (clean->refused > 0 || clean->more > 0)
			log_warn("%s: %lld manifest(s) that do not hold "
			    "removed, %lld past daemon.max_checkpoints_per_uid "
			    "kept on disk but not served", k->uid_dir,
			    (long long)clean->refused, (long long)clean->more);
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
	struct ckpt_call		*k, *r;
	struct checkpoint		*c;
	const struct userdb_user	*pw;
	json_t				*keep;

	/* The start's scan may wait for a lookup; the cleaner, on the loop,
	 * takes the cached user, or leaves uid to its next round. */
	if (ckpt_timer == NULL)
		pw = userdb_uid_now(uid);
	else if (userdb_uid(uid, &pw) == 0)
		return;
	keep = json_array();
	k = xcalloc(1, sizeof *k);
	k->uid = uid;
	k->gid = pw != NULL ? pw->gid : (gid_t)uid;
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

void
checkpoint_each_uid(int base, void (*fn)(uid_t, void *), void *arg)
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
		fn((uid_t)uid, arg);
	}
	closedir(d);
}

struct ckpt_clean {
	const char	*basepath;
	int		 local, adopt;
	int64_t		 before;
};

static void
checkpoint_clean_one(uid_t uid, void *arg)
{
	const struct ckpt_clean	*c = arg;

	checkpoint_clean_uid(c->basepath, uid, c->local, c->adopt, c->before);
}

/* Clean every uid's directory a base holds. */
void
checkpoint_clean_base(int base, const char *basepath, int local, int adopt,
    int64_t before)
{
	struct ckpt_clean	c = { basepath, local, adopt, before };

	checkpoint_each_uid(base, checkpoint_clean_one, &c);
}

/* The cleaner: local directories whose checkpoint is gone (its session
 * closed, or a removal failed), and reliable leftovers. */
void
checkpoint_timer_cb(evutil_socket_t fd, short events, void *arg)
{
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
	checkpoint_arm_cleaner();
}

void
checkpoint_arm_cleaner(void)
{
	struct timeval	tv;

	tv.tv_sec = ember_conf.checkpoint_clean_interval / 1000;
	tv.tv_usec = (ember_conf.checkpoint_clean_interval % 1000) * 1000;
	evtimer_add(ckpt_timer, &tv);
}

/* Milliseconds since the epoch, as file times are. */
int64_t
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

/* Remove the empty directories of a base, emberd's own entries (rmdir
 * follows no link and removes nothing of a user's). */
void
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
