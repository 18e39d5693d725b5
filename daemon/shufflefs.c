/*
 * Each uid's shuffle directory a tmpfs of its own (shufflefs.h).  A map
 * task's code is the user's: it can write anything into the directory it
 * is given, whatever it then says it wrote.  A tmpfs of
 * daemon.max_shuffle_per_uid bytes stops it with ENOSPC, and unmounting
 * it removes all it holds at once, with no helper.
 *
 * The mounts are made in a mount namespace of emberd's, whose mounts are
 * slaves of the host's: what the admin mounts later still reaches emberd
 * and its workers, and emberd's own never reach anyone else.  The
 * namespace goes with emberd's last process (its fork-servers and workers
 * die with it), and so do the mounts, even after a SIGKILL.
 */
#include <sys/types.h>
#include <sys/mount.h>
#include <sys/stat.h>

#include <errno.h>
#include <fcntl.h>
#include <sched.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include <jansson.h>

#include "emberd.h"
#include "log.h"
#include "queue.h"
#include "shufflefs.h"
#include "xmalloc.h"

/*
 * Inodes a mount may hold past one per page of its size.  Every file
 * that holds a byte takes a page of size=, so size / page is what size=
 * lets a user fill anyway; only empty files and directories (an
 * operation's own, one per operation) cost an inode without a page, and
 * each inode is kernel memory (about 1 KiB with its dentry) that size=
 * does not count: a mount costs at most about 1.25 times its size.
 */
#define SHUFFLEFS_INODE_SLACK	1024

struct shufflefs_user {
	uid_t				 uid;
	int				 ops;	  /* live, with stages */
	int				 mounted;
	TAILQ_ENTRY(shufflefs_user)	 entry;
};
static TAILQ_HEAD(, shufflefs_user) shufflefs_users =
    TAILQ_HEAD_INITIALIZER(shufflefs_users);

static int	 shufflefs_on;		/* the namespace is emberd's own */
static char	*shufflefs_why;		/* why not */
static int	 shufflefs_base = -1;	/* LOCALDIR/shuffle, a dup */
static char	*shufflefs_base_path;

static void	shufflefs_refuse(const char *, ...)
		    __attribute__((format(printf, 1, 2)));

/* Say why the mounts are not used. */
static void
shufflefs_refuse(const char *fmt, ...)
{
	va_list	ap;

	va_start(ap, fmt);
	free(shufflefs_why);
	if (vasprintf(&shufflefs_why, fmt, ap) == -1)
		fatal("vasprintf");
	va_end(ap);
}

void
shufflefs_init(void)
{
	if (geteuid() != 0)
		shufflefs_refuse("emberd is not root: every job runs as its "
		    "own user");
	else if (!ember_conf.daemon_shuffle_mounts)
		shufflefs_refuse("daemon.shuffle_mounts is no");
	else if (unshare(CLONE_NEWNS) == -1)
		shufflefs_refuse("unshare(CLONE_NEWNS): %s (emberd needs "
		    "CAP_SYS_ADMIN and the mnt namespace type)",
		    strerror(errno));
	else if (mount(NULL, "/", NULL, MS_REC | MS_SLAVE, NULL) == -1)
		shufflefs_refuse("making / a slave in emberd's namespace: %s",
		    strerror(errno));
	else
		shufflefs_on = 1;
}

void
shufflefs_log(void)
{
	if (shufflefs_on)
		log_info("shuffle bounds: a tmpfs per user "
		    "(daemon.max_shuffle_per_uid %lld)",
		    (long long)ember_conf.daemon_max_shuffle_per_uid);
	else if (geteuid() != 0)
		log_info("shuffle bounds: as reported (%s)", shufflefs_why);
	else
		log_warn("shuffle bounds: as reported by map tasks, not by the "
		    "kernel: %s", shufflefs_why);
}

int
shufflefs_active(void)
{
	return (shufflefs_on);
}

/* Find uid's entry, made with create. */
static struct shufflefs_user *
shufflefs_find(uid_t uid, int create)
{
	struct shufflefs_user	*u;

	TAILQ_FOREACH(u, &shufflefs_users, entry) {
		if (u->uid == uid)
			return (u);
	}
	if (!create)
		return (NULL);
	u = xcalloc(1, sizeof *u);
	u->uid = uid;
	TAILQ_INSERT_TAIL(&shufflefs_users, u, entry);
	return (u);
}

void
shufflefs_hold(uid_t uid)
{
	if (shufflefs_on)
		shufflefs_find(uid, 1)->ops++;
}

/* Write a mount's size options for the conf's bound. */
static void
shufflefs_options(char *buf, size_t len)
{
	long long	page = sysconf(_SC_PAGESIZE), size, inodes;

	/* tmpfs takes size=0 as no bound at all: a bound of 0 is a page. */
	size = ember_conf.daemon_max_shuffle_per_uid;
	if (size < page)
		size = page;
	inodes = size / page + SHUFFLEFS_INODE_SLACK;
	snprintf(buf, len, "size=%lld,nr_inodes=%lld", size, inodes);
}

/* Unmount uid's directory, and remove the mount point. */
static void
shufflefs_unmount(struct shufflefs_user *u)
{
	char	*path, name[24];

	if (!u->mounted)
		return;
	snprintf(name, sizeof name, "%ld", (long)u->uid);
	xasprintf(&path, "%s/%s", shufflefs_base_path, name);
	/* Detached: a worker still on its way out may hold a descriptor;
	 * the files go when it closes it. */
	if (umount2(path, MNT_DETACH | UMOUNT_NOFOLLOW) == -1)
		log_warn("shuffle: umount %s: %s", path, strerror(errno));
	else {
		u->mounted = 0;
		log_debug("shuffle: %s unmounted", path);
		/* Not empty: files of an earlier run, which a helper
		 * removes. */
		(void)unlinkat(shufflefs_base, name, AT_REMOVEDIR);
	}
	free(path);
}

int
shufflefs_release(uid_t uid)
{
	struct shufflefs_user	*u;

	if (!shufflefs_on || (u = shufflefs_find(uid, 0)) == NULL)
		return (0);
	if (--u->ops > 0)
		return (0);
	shufflefs_unmount(u);
	if (u->mounted)
		return (0);	/* still there: remove the files one by one */
	TAILQ_REMOVE(&shufflefs_users, u, entry);
	free(u);
	return (1);
}

/* Remember the base the mounts are in. */
static int
shufflefs_set_base(int base, const char *basepath, char **err)
{
	if (shufflefs_base != -1)
		return (0);
	if ((shufflefs_base = fcntl(base, F_DUPFD_CLOEXEC, 0)) == -1) {
		xasprintf(err, "%s: dup: %s", basepath, strerror(errno));
		return (-1);
	}
	shufflefs_base_path = xstrdup(basepath);
	return (0);
}

/* Mount a tmpfs of juid:jgid's on the directory name in the base, made
 * (root's, mode 0700) if missing. */
static int
shufflefs_mount(const char *name, uid_t juid, gid_t jgid, char **err)
{
	char	target[64], opts[160], source[48];
	int	fd;

	if (mkdirat(shufflefs_base, name, 0700) == -1 && errno != EEXIST) {
		xasprintf(err, "%s/%s: %s", shufflefs_base_path, name,
		    strerror(errno));
		return (-1);
	}
	/* The entry is in emberd's own directory, which no user can write;
	 * mounted through a handle all the same, never a followed link. */
	if ((fd = openat(shufflefs_base, name, O_PATH | O_DIRECTORY |
	    O_NOFOLLOW | O_CLOEXEC)) == -1) {
		xasprintf(err, "%s/%s: %s", shufflefs_base_path, name,
		    strerror(errno));
		return (-1);
	}
	snprintf(target, sizeof target, "/proc/self/fd/%d", fd);
	snprintf(source, sizeof source, "ember-shuffle-%s", name);
	shufflefs_options(opts, sizeof opts - 48);
	snprintf(opts + strlen(opts), sizeof opts - strlen(opts),
	    ",mode=0700,uid=%ld,gid=%ld", (long)juid, (long)jgid);
	if (mount(source, target, "tmpfs", MS_NOSUID | MS_NODEV | MS_NOEXEC,
	    opts) == -1) {
		xasprintf(err, "%s/%s: mount tmpfs (%s): %s",
		    shufflefs_base_path, name, opts, strerror(errno));
		close(fd);
		return (-1);
	}
	close(fd);
	log_debug("shuffle: %s/%s: tmpfs %s", shufflefs_base_path, name, opts);
	return (0);
}

int
shufflefs_open(int base, const char *basepath, uid_t uid, uid_t juid,
    gid_t jgid, char **err)
{
	struct shufflefs_user	*u = shufflefs_find(uid, 1);
	struct stat		 st, bst;
	char			 name[24];
	int			 fd;

	if (shufflefs_set_base(base, basepath, err) == -1)
		return (-1);
	snprintf(name, sizeof name, "%ld", (long)uid);
	if (!u->mounted) {
		if (shufflefs_mount(name, juid, jgid, err) == -1)
			return (-1);
		u->mounted = 1;
	}
	fd = openat(shufflefs_base, name, O_RDONLY | O_DIRECTORY | O_NOFOLLOW |
	    O_CLOEXEC | O_NOCTTY);
	/* The mount's root, the job user's: never the directory under it. */
	if (fd == -1 || fstat(fd, &st) == -1 ||
	    fstat(shufflefs_base, &bst) == -1 || st.st_dev == bst.st_dev ||
	    st.st_uid != juid || (st.st_mode & 077) != 0) {
		xasprintf(err, "%s/%s: not the uid's mount", basepath, name);
		if (fd != -1)
			close(fd);
		return (-1);
	}
	return (fd);
}

int
shufflefs_mounted(uid_t uid)
{
	struct shufflefs_user	*u = shufflefs_find(uid, 0);

	return (u != NULL && u->mounted);
}

void
shufflefs_reload(void)
{
	struct shufflefs_user	*u;
	char			*path, opts[128];

	shufflefs_options(opts, sizeof opts);
	TAILQ_FOREACH(u, &shufflefs_users, entry) {
		if (!u->mounted)
			continue;
		xasprintf(&path, "%s/%ld", shufflefs_base_path, (long)u->uid);
		/* tmpfs refuses a size below what the mount holds: that
		 * one keeps its size until it is made again. */
		if (mount(NULL, path, NULL, MS_REMOUNT | MS_NOSUID | MS_NODEV |
		    MS_NOEXEC, opts) == -1)
			log_warn("SIGHUP: shuffle: %s: remount (%s): %s", path,
			    opts, strerror(errno));
		else
			log_info("SIGHUP: shuffle: %s: %s", path, opts);
		free(path);
	}
}

void
shufflefs_shutdown(void)
{
	struct shufflefs_user	*u;

	while ((u = TAILQ_FIRST(&shufflefs_users)) != NULL) {
		shufflefs_unmount(u);
		TAILQ_REMOVE(&shufflefs_users, u, entry);
		free(u);
	}
	if (shufflefs_base != -1)
		close(shufflefs_base);
	shufflefs_base = -1;
	free(shufflefs_base_path);
	shufflefs_base_path = NULL;
	free(shufflefs_why);
	shufflefs_why = NULL;
}

json_t *
shufflefs_status(void)
{
	struct shufflefs_user	*u;
	json_t			*s;
	int			 n = 0;

	if (!shufflefs_on)
		return (json_pack("{s:s,s:I,s:s}", "by", "as reported",
		    "max_per_uid",
		    (json_int_t)ember_conf.daemon_max_shuffle_per_uid,
		    "why", shufflefs_why != NULL ? shufflefs_why : ""));
	TAILQ_FOREACH(u, &shufflefs_users, entry)
		n += u->mounted;
	s = json_pack("{s:s,s:I,s:i}", "by", "tmpfs per user", "max_per_uid",
	    (json_int_t)ember_conf.daemon_max_shuffle_per_uid, "mounts", n);
	return (s);
}
