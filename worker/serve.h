/*
 * The loop of a worker process: read the task descriptors emberd sends on
 * its socket and run them, one after another (emberd's view of the worker
 * is daemon/worker.c).
 */
#ifndef EMBER_WORKER_SERVE_H
#define EMBER_WORKER_SERVE_H

/* Serve tasks on fd until emberd closes it (0) or a task fails (1). */
int	serve_main(int fd);

#endif
