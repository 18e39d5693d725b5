/*
 * Each uid's shuffle directory a tmpfs of its own (shufflefs.h).  A map
 * task's code is the user's: it can write anything into the directory it
 * is given, whatever it then says it wrote.  A tmpfs of
 * daemon.max_shuffle_per_uid bytes stops it with ENOSPC.
 *
 * emberd makes no mount namespace (under the systemd unit the mounts are
 * the unit's namespace's), so a filesystem the admin mounts later reaches
 * emberd and its jobs as it reaches everyone.  The mount points are under
 * emberd's own LOCALDIR/shuffle (root's, mode 0711: no user can put
 * anything in place of one); a user can stack a mount on their mount's
 * root, so emberd reaches each mount by its own descriptor, never by its
 * path.  A uid's mount, once made, stays until emberd exits:
 * a user's process that keeps a descriptor in it holds the one mount
 * whose bound is the uid's, never a detached one beside a fresh one, and
 * no unmount's teardown ever runs on the loop.  When the uid's last
 * operation in stages ends, the user's helper empties the mount
 * (shuffle.c).  A killed emberd leaves its mounts: the next start
 * unmounts them before anything uses the directory.
 */
#include <sys/types.h>
#include <sys/mount.h>
#include <sys/stat.h>

#include <errno.h>
#include <fcntl.h>
#include <limits.h>
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
 * Inodes a mount may hold: one per page of its size (every file that
 * holds a byte takes a page of size= anyway) and some slack for empty
 * files and directories (an operation's own, one per operation), capped.
 * Each inode is kernel memory (about 1 KiB with its dentry) that size=
 * does not count, and unswappable: 16g would allow 4.2 million, 4 GiB of
 * it per user, and as many to free one by one when the mount goes at
 * exit.  65536 is about 64 MiB and a few tens of milliseconds.
 */
#define SHUFFLEFS_INODE_SLACK	1024
#define SHUFFLEFS_INODE_MAX	65536

/* Mounts taken off a mount point at most, when a user stacked some. */
#define SHUFFLEFS_STACK_MAX	16

/* The probe's mount point in the base: not a uid's name. */
#define SHUFFLEFS_PROBE		".probe"

struct shufflefs_user {
	uid_t				 uid;
	int				 ops;	  /* live, with stages */
	int				 mounted;
	int				 root;	  /* the mount's own */
	int				 emptying; /* helpers at it */
	long long			 size;	  /* in force */
	TAILQ_ENTRY(shufflefs_user)	 entry;
};
static TAILQ_HEAD(, shufflefs_user) shufflefs_users =
    TAILQ_HEAD_INITIALIZER(shufflefs_users);

static int	 shufflefs_on;		/* the probe mounted */
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

/* The size a mount gets for the conf's bound. */
static long long
shufflefs_conf_size(void)
{
	long long	page = sysconf(_SC_PAGESIZE), size;

	/* tmpfs takes size=0 as no bound at all: a bound of 0 is a page. */
	size = ember_conf.daemon_max_shuffle_per_uid;
	return (size < page ? page : size);
}

/* The inodes a mount of size bytes may hold. */
static long long
shufflefs_size_inodes(long long size)
{
	long long	inodes = size / sysconf(_SC_PAGESIZE) +
			    SHUFFLEFS_INODE_SLACK;

	return (inodes > SHUFFLEFS_INODE_MAX ? SHUFFLEFS_INODE_MAX : inodes);
}

/* Write a mount's size options for size bytes. */
static void
shufflefs_options(long long size, char *buf, size_t len)
{
	snprintf(buf, len, "size=%lld,nr_inodes=%lld", size,
	    shufflefs_size_inodes(size));
}

/* Set the tmpfs options of opts ("key=value,..."), and the source, on
 * a filesystem context: 0, or -1. */
static int
shufflefs_configure(int fsfd, const char *source, const char *opts)
{
	char	*copy, *key, *value, *next;
	int	 rc = 0;

	if (source != NULL && fsconfig(fsfd, FSCONFIG_SET_STRING, "source",
	    source, 0) == -1)
		return (-1);
	copy = xstrdup(opts);
	for (key = copy; rc == 0 && key != NULL; key = next) {
		if ((next = strchr(key, ',')) != NULL)
			*next++ = '\0';
		if ((value = strchr(key, '=')) != NULL)
			*value++ = '\0';
		rc = fsconfig(fsfd, FSCONFIG_SET_STRING, key, value, 0);
	}
	free(copy);
	return (rc);
}

/*
 * Mount a tmpfs on the directory name in the base, made (root's, mode
 * 0700) if missing: the descriptor of the new mount's root, or -1 with
 * *err.  Made whole before it is attached, so that the descriptor is the
 * mount's own: a mount a user stacks on it later (FUSE) is never looked
 * up through it.
 */
static int
shufflefs_mount(const char *name, const char *opts, char **err)
{
	char	source[48];
	int	fd, fsfd = -1, mnt = -1;

	if (mkdirat(shufflefs_base, name, 0700) == -1 && errno != EEXIST) {
		xasprintf(err, "%s/%s: %s", shufflefs_base_path, name,
		    strerror(errno));
		return (-1);
	}
	/* The entry is in emberd's own directory, which no user can write;
	 * mounted on through a handle all the same, never a followed link. */
	if ((fd = openat(shufflefs_base, name, O_PATH | O_DIRECTORY |
	    O_NOFOLLOW | O_CLOEXEC)) == -1) {
		xasprintf(err, "%s/%s: %s", shufflefs_base_path, name,
		    strerror(errno));
		return (-1);
	}
	snprintf(source, sizeof source, "ember-shuffle-%s", name);
	if ((fsfd = fsopen("tmpfs", FSOPEN_CLOEXEC)) == -1 ||
	    shufflefs_configure(fsfd, source, opts) == -1 ||
	    fsconfig(fsfd, FSCONFIG_CMD_CREATE, NULL, NULL, 0) == -1 ||
	    (mnt = fsmount(fsfd, FSMOUNT_CLOEXEC, MOUNT_ATTR_NOSUID |
	    MOUNT_ATTR_NODEV | MOUNT_ATTR_NOEXEC)) == -1 ||
	    move_mount(mnt, "", fd, "", MOVE_MOUNT_F_EMPTY_PATH |
	    MOVE_MOUNT_T_EMPTY_PATH) == -1) {
		xasprintf(err, "%s/%s: mount tmpfs (%s): %s",
		    shufflefs_base_path, name, opts, strerror(errno));
		if (mnt != -1)
			close(mnt);
		mnt = -1;
	} else
		log_debug("shuffle: %s/%s: tmpfs %s", shufflefs_base_path,
		    name, opts);
	if (fsfd != -1)
		close(fsfd);
	close(fd);
	return (mnt);
}

/* Unmount what is on name in the base, and remove the mount point if it
 * is then empty: 0, or -1 (logged). */
static int
shufflefs_unmount(const char *name)
{
	char	*path;
	int	 rc = 0, i;

	xasprintf(&path, "%s/%s", shufflefs_base_path, name);
	/* Detached: a user's process may hold a descriptor in it; what it
	 * holds goes when it closes it.  Each call takes the top mount off:
	 * one a user stacked on it (FUSE) first. */
	for (i = 0; i < SHUFFLEFS_STACK_MAX; i++) {
		if (umount2(path, MNT_DETACH | UMOUNT_NOFOLLOW) == -1)
			break;
	}
	if (i == 0 || i == SHUFFLEFS_STACK_MAX) {
		log_warn("shuffle: umount %s: %s", path, i == 0 ?
		    strerror(errno) : "mounts stacked past counting");
		rc = -1;
	} else {
		log_debug("shuffle: %s unmounted", path);
		/* Not empty: files of a run without mounts, which a
		 * helper removes. */
		(void)unlinkat(shufflefs_base, name, AT_REMOVEDIR);
	}
	free(path);
	return (rc);
}

/* Undo mountinfo's octal escapes (space, tab, newline, backslash) in
 * place. */
static void
shufflefs_unescape(char *s)
{
	char	*out = s;

	for (; *s != '\0'; s++) {
		if (s[0] == '\\' && s[1] >= '0' && s[1] <= '3' &&
		    s[2] >= '0' && s[2] <= '7' && s[3] >= '0' && s[3] <= '7') {
			*out++ = (char)((s[1] - '0') * 64 + (s[2] - '0') * 8 +
			    (s[3] - '0'));
			s += 3;
		} else
			*out++ = *s;
	}
	*out = '\0';
}

/* Unmount every mount under the base a killed emberd left (they are the
 * host's, and outlive it): the number of points found. */
static int
shufflefs_unmount_stale(void)
{
	FILE	*f;
	json_t	*seen;
	char	*line = NULL, *point, *name, real[PATH_MAX];
	size_t	 size = 0, len;
	int	 total = 0;

	if (realpath(shufflefs_base_path, real) == NULL)
		return (0);
	len = strlen(real);
	if ((f = fopen("/proc/self/mountinfo", "re")) == NULL) {
		log_warn("shuffle: /proc/self/mountinfo: %s", strerror(errno));
		return (0);
	}
	/* Stacked mounts list their point once each: shufflefs_unmount
	 * takes them all off at the first. */
	seen = json_object();
	while (getline(&line, &size, f) != -1) {
		/* id parent major:minor root mount-point ... */
		if (strtok(line, " ") == NULL || strtok(NULL, " ") == NULL ||
		    strtok(NULL, " ") == NULL || strtok(NULL, " ") == NULL ||
		    (point = strtok(NULL, " ")) == NULL)
			continue;
		shufflefs_unescape(point);
		if (strncmp(point, real, len) != 0 || point[len] != '/' ||
		    strchr((name = point + len + 1), '/') != NULL ||
		    *name == '\0' || json_object_get(seen, name) != NULL)
			continue;
		json_object_set_new(seen, name, json_true());
		log_info("shuffle: unmounting %s, left by an earlier run",
		    point);
		if (shufflefs_unmount(name) == 0)
			total++;
	}
	fclose(f);
	json_decref(seen);
	free(line);
	return (total);
}

/* Mount and unmount a tiny tmpfs in the base: 0, or -1 with the reason
 * kept. */
static int
shufflefs_probe(void)
{
	char	*err = NULL, opts[64];
	int	 fd;

	shufflefs_options(sysconf(_SC_PAGESIZE), opts, sizeof opts);
	if ((fd = shufflefs_mount(SHUFFLEFS_PROBE, opts, &err)) == -1) {
		shufflefs_refuse("a probe mount failed: %s", err);
		free(err);
		(void)unlinkat(shufflefs_base, SHUFFLEFS_PROBE, AT_REMOVEDIR);
		return (-1);
	}
	close(fd);
	if (shufflefs_unmount(SHUFFLEFS_PROBE) == -1) {
		shufflefs_refuse("a probe mount could not be unmounted");
		return (-1);
	}
	return (0);
}

void
shufflefs_start(int base, const char *basepath)
{
	if (geteuid() != 0) {
		shufflefs_refuse("emberd is not root: every job runs as its "
		    "own user");
		return;
	}
	if (base == -1) {
		if (ember_conf.daemon_shuffle_mounts)
			shufflefs_refuse("no LOCALDIR/shuffle to mount in");
		else
			shufflefs_refuse("daemon.shuffle_mounts is no");
		return;
	}
	if ((shufflefs_base = fcntl(base, F_DUPFD_CLOEXEC, 0)) == -1)
		fatal("%s: dup", basepath);
	shufflefs_base_path = xstrdup(basepath);
	/* First, whatever the conf: a start without mounts must not find
	 * a killed run's mount where a user's plain directory goes. */
	shufflefs_unmount_stale();
	if (!ember_conf.daemon_shuffle_mounts)
		shufflefs_refuse("daemon.shuffle_mounts is no");
	else if (shufflefs_probe() == 0)
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
	u->root = -1;
	TAILQ_INSERT_TAIL(&shufflefs_users, u, entry);
	return (u);
}

void
shufflefs_hold(uid_t uid)
{
	if (shufflefs_on)
		shufflefs_find(uid, 1)->ops++;
}

int
shufflefs_release(uid_t uid)
{
	struct shufflefs_user	*u;

	if (!shufflefs_on || (u = shufflefs_find(uid, 0)) == NULL ||
	    u->ops == 0)
		return (0);
	/* The mount stays: its files go by the user's helper. */
	if (--u->ops > 0 || !u->mounted)
		return (0);
	u->emptying++;
	return (1);
}

int
shufflefs_emptying(uid_t uid)
{
	struct shufflefs_user	*u = shufflefs_find(uid, 0);

	return (u != NULL && u->emptying > 0);
}

/* Give u's mount the conf's size: 0, or -1 if the kernel refused (a
 * shrink below what it holds).  Through the mount's own descriptor: a
 * path would reach a mount a user stacked on it. */
static int
shufflefs_resize(struct shufflefs_user *u, const char *why)
{
	long long	 size = shufflefs_conf_size();
	char		 opts[128];
	int		 fsfd, rc = 0;

	if (!u->mounted || u->size == size)
		return (0);
	shufflefs_options(size, opts, sizeof opts);
	if ((fsfd = fspick(u->root, "", FSPICK_EMPTY_PATH |
	    FSPICK_CLOEXEC)) == -1 || shufflefs_configure(fsfd, NULL,
	    opts) == -1 || fsconfig(fsfd, FSCONFIG_CMD_RECONFIGURE, NULL,
	    NULL, 0) == -1) {
		log_warn("%s: shuffle: %s/%ld: remount (%s): %s; it keeps "
		    "%lld bytes until its files are removed", why,
		    shufflefs_base_path, (long)u->uid, opts, strerror(errno),
		    u->size);
		rc = -1;
	} else {
		log_info("%s: shuffle: %s/%ld: %s", why, shufflefs_base_path,
		    (long)u->uid, opts);
		u->size = size;
	}
	if (fsfd != -1)
		close(fsfd);
	return (rc);
}

void
shufflefs_cleaned(uid_t uid)
{
	struct shufflefs_user	*u;

	if (!shufflefs_on || (u = shufflefs_find(uid, 0)) == NULL)
		return;
	/* An operation that started and ended while one helper emptied
	 * the mount had another one run: wait for both. */
	if (u->emptying > 0 && --u->emptying > 0)
		return;
	(void)shufflefs_resize(u, "shuffle files removed");
}

/* Mount u's tmpfs for the job user juid: 0, or -1 with *err. */
static int
shufflefs_make(struct shufflefs_user *u, const char *name, uid_t juid,
    gid_t jgid, char **err)
{
	char	opts[160];

	u->size = shufflefs_conf_size();
	shufflefs_options(u->size, opts, sizeof opts - 48);
	snprintf(opts + strlen(opts), sizeof opts - strlen(opts),
	    ",mode=0700,uid=%ld,gid=%ld", (long)juid, (long)jgid);
	if ((u->root = shufflefs_mount(name, opts, err)) == -1)
		return (-1);
	u->mounted = 1;
	return (0);
}

/* Unmount u's tmpfs, and forget it. */
static void
shufflefs_forget(struct shufflefs_user *u, const char *name)
{
	(void)shufflefs_unmount(name);
	close(u->root);
	u->root = -1;
	u->mounted = 0;
}

int
shufflefs_open(uid_t uid, uid_t juid, gid_t jgid, char **err)
{
	struct shufflefs_user	*u = shufflefs_find(uid, 1);
	struct stat		 st;
	char			 name[24];
	int			 fd;

	snprintf(name, sizeof name, "%ld", (long)uid);
	if (!u->mounted && shufflefs_make(u, name, juid, jgid, err) == -1)
		return (-1);
	/* The mount's own root, through its descriptor: never a mount a
	 * user stacked on its path, nor the directory under it. */
	fd = openat(u->root, ".", O_RDONLY | O_DIRECTORY | O_CLOEXEC |
	    O_NOCTTY);
	if (fd == -1 || fstat(fd, &st) == -1 || st.st_uid != juid ||
	    (st.st_mode & 077) != 0) {
		xasprintf(err, "%s/%s: the mount is not uid %ld's to use "
		    "(owned by uid %ld, mode %04o)",
		    shufflefs_base_path, name, (long)juid,
		    fd == -1 ? -1L : (long)st.st_uid,
		    fd == -1 ? 0 : (unsigned)(st.st_mode & 07777));
		if (fd != -1)
			close(fd);
		return (-1);
	}
	return (fd);
}

int
shufflefs_open_root(uid_t uid)
{
	struct shufflefs_user	*u = shufflefs_find(uid, 0);

	if (u == NULL || !u->mounted)
		return (-1);
	return (openat(u->root, ".", O_RDONLY | O_DIRECTORY | O_CLOEXEC |
	    O_NOCTTY));
}

int
shufflefs_mounted(uid_t uid)
{
	struct shufflefs_user	*u = shufflefs_find(uid, 0);

	return (u != NULL && u->mounted);
}

long long
shufflefs_size(uid_t uid)
{
	struct shufflefs_user	*u = shufflefs_find(uid, 0);

	if (u != NULL && u->mounted)
		return (u->size);
	return (ember_conf.daemon_max_shuffle_per_uid);
}

long long
shufflefs_inodes(uid_t uid)
{
	return (shufflefs_size_inodes(shufflefs_size(uid)));
}

void
shufflefs_reload(void)
{
	struct shufflefs_user	*u;

	/* tmpfs refuses a size below what a mount holds: that one keeps
	 * its size, and is tried again once its files are removed. */
	TAILQ_FOREACH(u, &shufflefs_users, entry)
		(void)shufflefs_resize(u, "SIGHUP");
}

void
shufflefs_shutdown(void)
{
	struct shufflefs_user	*u;
	char			 name[24];

	while ((u = TAILQ_FIRST(&shufflefs_users)) != NULL) {
		if (u->mounted) {
			snprintf(name, sizeof name, "%ld", (long)u->uid);
			shufflefs_forget(u, name);
		}
		TAILQ_REMOVE(&shufflefs_users, u, entry);
		free(u);
	}
	if (shufflefs_base != -1)
		close(shufflefs_base);
	shufflefs_base = -1;
	shufflefs_on = 0;
	free(shufflefs_base_path);
	shufflefs_base_path = NULL;
	free(shufflefs_why);
	shufflefs_why = NULL;
}

json_t *
shufflefs_status(void)
{
	struct shufflefs_user	*u;
	long long		 conf = shufflefs_conf_size(), most = conf;
	int			 n = 0, pending = 0;

	if (!shufflefs_on)
		return (json_pack("{s:s,s:I,s:s}", "by", "as reported",
		    "max_per_uid",
		    (json_int_t)ember_conf.daemon_max_shuffle_per_uid,
		    "why", shufflefs_why != NULL ? shufflefs_why : ""));
	TAILQ_FOREACH(u, &shufflefs_users, entry) {
		if (!u->mounted)
			continue;
		n++;
		if (u->size != conf)
			pending++;
		if (u->size > most)
			most = u->size;
	}
	/* The bound in force: a mount a shrink was refused for keeps its
	 * size, and shows it. */
	if (most == conf)
		most = ember_conf.daemon_max_shuffle_per_uid;
	return (json_pack("{s:s,s:I,s:i,s:i,s:I}", "by", "tmpfs per user",
	    "max_per_uid", (json_int_t)most, "mounts", n, "resize_pending",
	    pending, "configured",
	    (json_int_t)ember_conf.daemon_max_shuffle_per_uid));
}
