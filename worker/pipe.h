/* The pipe op: records through a shell command, like Spark's RDD.pipe. */
#ifndef EMBER_WORKER_PIPE_H
#define EMBER_WORKER_PIPE_H

#include <stddef.h>

struct op;

struct op	*pipe_create(const char *command, size_t len);

#endif
