/* The fork-server: forks workers for emberd and reports their exits. */
#ifndef EMBER_WORKER_FORKSERVER_H
#define EMBER_WORKER_FORKSERVER_H

#include <sys/types.h>

#include <stddef.h>
#include <stdint.h>

/* The descriptor emberd hands the fork-server its control channel on. */
#define FORKSERVER_FD	3

/* How emberd asked the fork-server to run (its command line). */
struct forkserver_options {
	int		  drop;		/* run as uid:gid, for good */
	uid_t		  uid;
	gid_t		  gid;
	char		**preload;	/* plugins to load before any fork */
	size_t		  npreload;
	char		**pypreload;	/* Python modules to import, likewise */
	size_t		  npypreload;
	uint64_t	  memory_limit;	/* each worker's RLIMIT_AS; 0: none */
	uint64_t	  nproc_limit;	/* the user's RLIMIT_NPROC; 0: none */
};

/* Serve fork and kill requests on ctl until emberd goes away; returns the
 * exit code. */
int	forkserver_main(int ctl, const struct forkserver_options *);

#endif
