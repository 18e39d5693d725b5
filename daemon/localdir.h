/*
 * emberd's local directory (daemon.local_dir, else the socket's path with
 * ".local"): emberd's own files, and nobody else's.  It is created by
 * emberd, or, if it already exists, used only when emberd owns it with
 * mode 0700 or 0711 and it is no symbolic link; and only when every
 * directory above it is root's or emberd's and none is writable by
 * others without the sticky bit (else someone could replace it).  Files in it are made through the directory
 * handle, with O_NOFOLLOW|O_EXCL, never through a path.
 */
#ifndef EMBER_LOCALDIR_H
#define EMBER_LOCALDIR_H

#include <sys/types.h>

/* Create or check the directory and clean what a past run left; -1
 * (logged, naming daemon.local_dir and why) if it cannot be trusted. */
int		 localdir_open(void);
/* Clean it, and remove it if remove is set; at exit. */
void		 localdir_close(int remove);
/* Check the directories above path (local_dir's, checkpoint.dir): each
 * owned by root or emberd, none writable by others without the sticky
 * bit, or whoever can write there could replace path.  0, or -1 with
 * *err (allocated) naming the directory and why. */
int		 localdir_check_parents(const char *path, char **err);
/* The same for the file of conf key (daemon.socket, status.listen):
 * 0, or -1 logged, naming key and why. */
int		 localdir_check_above(const char *key, const char *path);
/* Its path (for logs and status), or NULL before localdir_open. */
const char	*localdir_path(void);
/* A new file name in it, created with O_CREAT|O_EXCL|O_NOFOLLOW and the
 * extra flags: the descriptor, or -1 with errno. */
int		 localdir_create(const char *name, int flags, mode_t);
/* Open name in it, a file emberd made (never following a link): the
 * descriptor, or -1 with errno. */
int		 localdir_open_file(const char *name, int flags);
/* Remove name from it (never following a link); 0 or -1 with errno. */
int		 localdir_unlink(const char *name);

#endif
