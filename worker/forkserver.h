/* The fork-server: forks workers for emberd and reports their exits. */
#ifndef EMBER_WORKER_FORKSERVER_H
#define EMBER_WORKER_FORKSERVER_H

/* The descriptor emberd hands the fork-server its control channel on. */
#define FORKSERVER_FD	3

/* Serve fork and kill requests on ctl until emberd goes away; returns the
 * exit code. */
int	forkserver_main(int ctl);

#endif
