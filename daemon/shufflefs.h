/*
 * Each uid's shuffle directory a tmpfs of its own, sized by
 * daemon.max_shuffle_per_uid: the kernel, not what map tasks say they
 * wrote, bounds what a user's code can put there.  The mounts are the
 * host's, under emberd's own LOCALDIR/shuffle; a uid's is made with its
 * first operation in stages and stays until emberd exits, emptied by the
 * user's helper when the uid's last such operation ends.  Where they
 * cannot be made (emberd not root, no CAP_SYS_ADMIN, a refused probe,
 * daemon.shuffle_mounts = no), the directories are plain ones on
 * local_dir's filesystem, bounded by the bytes map tasks report.
 */
#ifndef EMBER_SHUFFLEFS_H
#define EMBER_SHUFFLEFS_H

#include <sys/types.h>

#include <jansson.h>

/* At start, before anything uses base (LOCALDIR/shuffle, emberd's own;
 * -1 if there is none): unmount what a killed emberd left there, then,
 * if emberd runs as root and daemon.shuffle_mounts is yes, probe a
 * mount.  Never fails: the plain directories remain. */
void		 shufflefs_start(int base, const char *basepath);
/* Log which bounds hold, and why not the mounts (once, where the log
 * goes after a detach). */
void		 shufflefs_log(void);
/* Whether each uid's shuffle directory is a mount of its own. */
int		 shufflefs_active(void);
/* Uid has one more operation with stages. */
void		 shufflefs_hold(uid_t);
/* Uid has one less: 1 if it was its last and the uid has a mount, which
 * the caller has the user's helper empty, and then calls
 * shufflefs_cleaned; 0 if its files are removed one operation at a time
 * (other operations, or no mounts). */
int		 shufflefs_release(uid_t);
/* Whether uid's mount is being emptied: no map task may start in it,
 * or the helper could remove its files. */
int		 shufflefs_emptying(uid_t);
/* The uid's mount was emptied, or could not be: map tasks may start, and
 * a resize the kernel refused is tried again. */
void		 shufflefs_cleaned(uid_t);
/* Open uid's directory in the base, mounted on its first use for a job
 * user juid:jgid: a descriptor, or -1 with *err. */
int		 shufflefs_open(uid_t, uid_t juid, gid_t jgid, char **err);
/* Whether uid's directory is mounted now. */
int		 shufflefs_mounted(uid_t);
/* Open the root of uid's mount, as it is: a descriptor, or -1 if it is
 * not mounted. */
int		 shufflefs_open_root(uid_t);
/* The bytes uid's shuffle files are bounded by now: its mount's size. */
long long	 shufflefs_size(uid_t);
/* The files (inodes) they are bounded by. */
long long	 shufflefs_inodes(uid_t);
/* After a SIGHUP: give the live mounts daemon.max_shuffle_per_uid. */
void		 shufflefs_reload(void);
/* At exit: unmount every uid's directory. */
void		 shufflefs_shutdown(void);
/* What status shows: by (tmpfs per user, or as reported) and why. */
json_t		*shufflefs_status(void);

#endif
