#include <sys/stat.h>
#include <sys/xattr.h>

#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "cgroup.h"
#include "emberd.h"
#include "log.h"
#include "xmalloc.h"

/* The leaf emberd (and its keeper) move into: processes may not sit in a
 * cgroup whose controllers are enabled for its children. */
#define CGROUP_LEAF		"emberd"
/* The controllers the users' cgroups need. */
#define CGROUP_CONTROLLERS	"+pids +memory +cpu"

static int	 cgroup_fd = -1;	/* emberd's cgroup, when in use */
static char	*cgroup_path;		/* its path, for status and logs */
static char	 cgroup_why[256];	/* why not, when not */

/* Read a small file of dir into buf: its length, or -1. */
static ssize_t
cgroup_read(int dir, const char *name, char *buf, size_t len)
{
	ssize_t	n;
	int	fd;

	fd = openat(dir, name, O_RDONLY | O_NOFOLLOW | O_NOCTTY | O_CLOEXEC);
	if (fd == -1)
		return (-1);
	n = read(fd, buf, len - 1);
	close(fd);
	if (n >= 0)
		buf[n] = '\0';
	return (n);
}

/* Write value to a control file of dir: 0, or -1 with errno. */
static int
cgroup_write(int dir, const char *name, const char *value)
{
	ssize_t	n;
	int	fd, saved;

	fd = openat(dir, name, O_WRONLY | O_NOFOLLOW | O_NOCTTY | O_CLOEXEC);
	if (fd == -1)
		return (-1);
	n = write(fd, value, strlen(value));
	saved = errno;
	close(fd);
	errno = saved;
	return (n == (ssize_t)strlen(value) ? 0 : -1);
}

/* Say why cgroups are not used; returns -1. */
static int
cgroup_refuse(const char *fmt, ...)
	__attribute__((format(printf, 1, 2)));
static int
cgroup_refuse(const char *fmt, ...)
{
	va_list	ap;

	va_start(ap, fmt);
	vsnprintf(cgroup_why, sizeof cgroup_why, fmt, ap);
	va_end(ap);
	return (-1);
}

/* Where the cgroup v2 hierarchy is mounted, from mountinfo, or NULL. */
static char *
cgroup_find_mount(void)
{
	FILE	*f;
	char	 line[4096], *sep, mnt[4096], fstype[64];
	char	*found = NULL;

	if ((f = fopen("/proc/self/mountinfo", "re")) == NULL)
		return (NULL);
	while (found == NULL && fgets(line, sizeof line, f) != NULL) {
		/* id parent dev root mountpoint opts [tags] - type ... */
		if ((sep = strstr(line, " - ")) == NULL ||
		    sscanf(sep, " - %63s", fstype) != 1 ||
		    strcmp(fstype, "cgroup2") != 0 ||
		    sscanf(line, "%*s %*s %*s %*s %4095s", mnt) != 1)
			continue;
		found = xstrdup(mnt);
	}
	fclose(f);
	return (found);
}

/* emberd's cgroup v2 path, from /proc/self/cgroup's "0::" line, or
 * NULL. */
static char *
cgroup_find_own(void)
{
	FILE	*f;
	char	 line[4096], *found = NULL;

	if ((f = fopen("/proc/self/cgroup", "re")) == NULL)
		return (NULL);
	while (found == NULL && fgets(line, sizeof line, f) != NULL) {
		if (strncmp(line, "0::/", 4) != 0)
			continue;
		line[strcspn(line, "\n")] = '\0';
		found = xstrdup(line + 3);
	}
	fclose(f);
	return (found);
}

/* Was dir delegated to emberd (systemd's Delegate=yes marks it)? */
static int
cgroup_delegated(int dir)
{
	char	v[8];
	ssize_t	n;

	n = fgetxattr(dir, "trusted.delegate", v, sizeof v);
	if (n <= 0)
		n = fgetxattr(dir, "user.delegate", v, sizeof v);
	return (n > 0 && v[0] == '1');
}

/* Does dir offer every controller the users' cgroups need? */
static int
cgroup_has_controllers(int dir, char *missing, size_t len)
{
	static const char *const need[] = { "pids", "memory", "cpu", NULL };
	char	 buf[512], padded[520], word[32];
	int	 i;

	if (cgroup_read(dir, "cgroup.controllers", buf, sizeof buf) == -1) {
		snprintf(missing, len, "cgroup.controllers: %s",
		    strerror(errno));
		return (0);
	}
	buf[strcspn(buf, "\n")] = '\0';
	snprintf(padded, sizeof padded, " %s ", buf);
	for (i = 0; need[i] != NULL; i++) {
		snprintf(word, sizeof word, " %s ", need[i]);
		if (strstr(padded, word) == NULL) {
			snprintf(missing, len, "no %s controller (it has: %.100s)",
			    need[i], *buf != '\0' ? buf : "none");
			return (0);
		}
	}
	return (1);
}

/* Move every process of dir (emberd, its keeper) into its leaf. */
static int
cgroup_move_out(int dir)
{
	char	 buf[4096], *p, *pid;
	int	 leaf;

	if (mkdirat(dir, CGROUP_LEAF, 0755) == -1 && errno != EEXIST)
		return (cgroup_refuse("mkdir %s/%s: %s", cgroup_path,
		    CGROUP_LEAF, strerror(errno)));
	leaf = openat(dir, CGROUP_LEAF, O_RDONLY | O_DIRECTORY | O_NOFOLLOW |
	    O_CLOEXEC);
	if (leaf == -1)
		return (cgroup_refuse("%s/%s: %s", cgroup_path, CGROUP_LEAF,
		    strerror(errno)));
	if (cgroup_read(dir, "cgroup.procs", buf, sizeof buf) == -1) {
		close(leaf);
		return (cgroup_refuse("%s/cgroup.procs: %s", cgroup_path,
		    strerror(errno)));
	}
	for (p = buf; (pid = strsep(&p, "\n")) != NULL;) {
		if (*pid != '\0' && cgroup_write(leaf, "cgroup.procs",
		    pid) == -1 && errno != ESRCH) {
			close(leaf);
			return (cgroup_refuse("moving %s to %s/%s: %s", pid,
			    cgroup_path, CGROUP_LEAF, strerror(errno)));
		}
	}
	close(leaf);
	return (0);
}

/* Take emberd's cgroup for the users': 0, or -1 with cgroup_why set. */
static int
cgroup_take(void)
{
	char	*mount, *own, *path;
	int	 rc;

	if (geteuid() != 0)
		return (cgroup_refuse("emberd is not root"));
	if ((mount = cgroup_find_mount()) == NULL)
		return (cgroup_refuse("no cgroup v2 hierarchy is mounted"));
	if ((own = cgroup_find_own()) == NULL) {
		free(mount);
		return (cgroup_refuse("emberd is in no cgroup v2"));
	}
	if (strcmp(own, "/") == 0) {
		rc = cgroup_refuse("emberd's cgroup is the root of %s (run "
		    "it as a service with Delegate=yes)", mount);
		free(mount);
		free(own);
		return (rc);
	}
	xasprintf(&path, "%s%s", mount, own);
	free(mount);
	free(own);
	rc = cgroup_init_at(path);
	free(path);
	return (rc);
}

int
cgroup_init_at(const char *path)
{
	char	missing[200];
	int	dir;

	free(cgroup_path);
	cgroup_path = xstrdup(path);
	dir = open(cgroup_path, O_RDONLY | O_DIRECTORY | O_CLOEXEC);
	if (dir == -1)
		return (cgroup_refuse("%s: %s", cgroup_path, strerror(errno)));
	if (!cgroup_delegated(dir)) {
		close(dir);
		return (cgroup_refuse("%s was not delegated to emberd "
		    "(Delegate=yes in its unit)", cgroup_path));
	}
	if (!cgroup_has_controllers(dir, missing, sizeof missing)) {
		close(dir);
		return (cgroup_refuse("%s: %s", cgroup_path, missing));
	}
	if (cgroup_move_out(dir) == -1) {
		close(dir);
		return (-1);
	}
	if (cgroup_write(dir, "cgroup.subtree_control",
	    CGROUP_CONTROLLERS) == -1) {
		close(dir);
		return (cgroup_refuse("%s/cgroup.subtree_control: %s",
		    cgroup_path, strerror(errno)));
	}
	cgroup_fd = dir;
	return (0);
}

void
cgroup_init(void)
{
	if (cgroup_take() == 0) {
		log_info("per-user bounds: cgroup %s/user-UID (pids.max %lld, "
		    "memory.max %lld, cpu.weight %lld; 0 is max)", cgroup_path,
		    (long long)ember_conf.workers_max_pids_per_user,
		    (long long)ember_conf.workers_max_memory_per_user,
		    (long long)ember_conf.workers_cpu_weight);
		return;
	}
	log_warn("per-user bounds: rlimit (RLIMIT_NPROC %lld of each user's "
	    "processes, RLIMIT_AS per worker; no memory.max nor cpu.weight "
	    "per user): %s", (long long)ember_conf.workers_max_pids_per_user,
	    cgroup_why);
}

void
cgroup_free(void)
{
	struct dirent	*e;
	DIR		*d;
	int		 fd;

	free(cgroup_path);
	cgroup_path = NULL;
	if (cgroup_fd == -1)
		return;
	/* The fork-servers are gone: their cgroups are empty or soon. */
	if ((fd = dup(cgroup_fd)) != -1 && (d = fdopendir(fd)) != NULL) {
		while ((e = readdir(d)) != NULL) {
			if (strncmp(e->d_name, "user-", 5) == 0)
				unlinkat(cgroup_fd, e->d_name, AT_REMOVEDIR);
		}
		closedir(d);
	} else if (fd != -1)
		close(fd);
	close(cgroup_fd);
	cgroup_fd = -1;
}

int
cgroup_active(void)
{
	return (cgroup_fd != -1);
}

/* A limit as a cgroup file takes it: the number, or "max" for 0. */
static void
cgroup_format_limit(int64_t n, char *buf, size_t len)
{
	if (n <= 0)
		snprintf(buf, len, "max");
	else
		snprintf(buf, len, "%lld", (long long)n);
}

/* Write the conf's limits into a user's cgroup. */
static int
cgroup_set_limits(int dir)
{
	char	v[32];
	int64_t	weight = ember_conf.workers_cpu_weight;

	cgroup_format_limit(ember_conf.workers_max_pids_per_user, v, sizeof v);
	if (cgroup_write(dir, "pids.max", v) == -1)
		return (-1);
	cgroup_format_limit(ember_conf.workers_max_memory_per_user, v,
	    sizeof v);
	if (cgroup_write(dir, "memory.max", v) == -1)
		return (-1);
	snprintf(v, sizeof v, "%lld", (long long)(weight > 10000 ? 10000 :
	    weight));
	return (cgroup_write(dir, "cpu.weight", v));
}

int
cgroup_enter(uid_t uid, pid_t pid)
{
	char	name[32], v[32];
	int	dir;

	if (cgroup_fd == -1)
		return (0);
	/* Made by emberd under its own cgroup, mode 0755, owned by root:
	 * no user can write a limit or move a process there. */
	snprintf(name, sizeof name, "user-%lu", (unsigned long)uid);
	if (mkdirat(cgroup_fd, name, 0755) == -1 && errno != EEXIST) {
		log_error("cgroup %s/%s: %s", cgroup_path, name,
		    strerror(errno));
		return (-1);
	}
	dir = openat(cgroup_fd, name, O_RDONLY | O_DIRECTORY | O_NOFOLLOW |
	    O_CLOEXEC);
	snprintf(v, sizeof v, "%ld", (long)pid);
	if (dir == -1 || cgroup_set_limits(dir) == -1 ||
	    cgroup_write(dir, "cgroup.procs", v) == -1) {
		log_error("cgroup %s/%s: fork-server %ld: %s", cgroup_path,
		    name, (long)pid, strerror(errno));
		if (dir != -1)
			close(dir);
		return (-1);
	}
	close(dir);
	log_debug("fork-server %ld in cgroup %s/%s", (long)pid, cgroup_path,
	    name);
	return (0);
}

json_t *
cgroup_status(void)
{
	json_t	*s;

	s = json_pack("{s:s,s:I,s:I,s:I}", "by", cgroup_active() ? "cgroup" :
	    "rlimit",
	    "pids", (json_int_t)ember_conf.workers_max_pids_per_user,
	    "memory", (json_int_t)ember_conf.workers_max_memory_per_user,
	    "cpu_weight", (json_int_t)ember_conf.workers_cpu_weight);
	if (cgroup_active()) {
		json_object_set_new(s, "held", json_string("pids.max, "
		    "memory.max, cpu.weight"));
		json_object_set_new(s, "path", json_string(cgroup_path));
	} else {
		json_object_set_new(s, "held", json_string("RLIMIT_NPROC of "
		    "the user, RLIMIT_AS per worker"));
		json_object_set_new(s, "why", json_string(cgroup_why));
	}
	return (s);
}
