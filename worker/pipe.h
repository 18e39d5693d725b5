/* The pipe op: records through a shell command, like Spark's RDD.pipe. */
#ifndef EMBER_WORKER_PIPE_H
#define EMBER_WORKER_PIPE_H

struct op;

/* A pipe op running command (the plan's string, which must outlive it). */
struct op	*pipe_create(const char *command);

#endif
