/* A worker: runs the tasks emberd sends on its socket, one after another. */
#ifndef EMBER_WORKER_WORKER_H
#define EMBER_WORKER_WORKER_H

/* Serve tasks on fd until emberd closes it (0) or a task fails (1). */
int	worker_main(int fd);

#endif
