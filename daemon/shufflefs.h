/*
 * Each uid's shuffle directory a tmpfs of its own, sized by
 * daemon.max_shuffle_per_uid: the kernel, not what map tasks say they
 * wrote, bounds what a user's code can put there.  The mounts live in a
 * mount namespace of emberd's, made at start: no one outside sees them,
 * and they go with emberd's last process, whatever ends it.  Where the
 * namespace cannot be made (emberd not root, no CAP_SYS_ADMIN, a
 * container, daemon.shuffle_mounts = no), the directories are plain ones
 * on local_dir's filesystem, bounded by the bytes map tasks report.
 */
#ifndef EMBER_SHUFFLEFS_H
#define EMBER_SHUFFLEFS_H

#include <sys/types.h>

#include <jansson.h>

/* At start, before any thread: make emberd's own mount namespace if it
 * runs as root and daemon.shuffle_mounts is yes.  Never fails: the plain
 * directories remain. */
void		 shufflefs_init(void);
/* Log which bounds hold, and why not the mounts (once, where the log
 * goes after a detach). */
void		 shufflefs_log(void);
/* Whether each uid's shuffle directory is a mount of its own. */
int		 shufflefs_active(void);
/* Uid has one more operation with stages. */
void		 shufflefs_hold(uid_t);
/* Uid has one less: 1 if it was its last and the uid's mount, and every
 * file in it, is gone (rmdir'd too); 0 if its files are still to be
 * removed one operation at a time (other operations, or no mounts). */
int		 shufflefs_release(uid_t);
/* Open uid's directory name in base (emberd's own), mounted on its
 * first use for a job user juid:jgid: a descriptor, or -1 with *err. */
int		 shufflefs_open(int base, const char *basepath, uid_t,
		     uid_t juid, gid_t jgid, char **err);
/* Whether uid's directory is mounted now. */
int		 shufflefs_mounted(uid_t);
/* After a SIGHUP: give the live mounts daemon.max_shuffle_per_uid. */
void		 shufflefs_reload(void);
/* At exit: unmount every uid's directory. */
void		 shufflefs_shutdown(void);
/* What status shows: by (tmpfs per user, or as reported) and why. */
json_t		*shufflefs_status(void);

#endif
