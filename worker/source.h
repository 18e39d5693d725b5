/* Task sources: the records of one partition, pushed into a chain. */
#ifndef EMBER_WORKER_SOURCE_H
#define EMBER_WORKER_SOURCE_H

#include <stdint.h>

struct chain;
struct plan;

/*
 * Push the partition's records into the chain until the source ends or the
 * chain stops.  *records_in counts the records read.  A checkpoint source
 * reads in checkpoint_dirfd, its uid's directory as emberd passed it.
 * OP_OK, or OP_FAIL with *err allocated for a source error, or left NULL
 * when the chain failed (chain_error has the message).
 */
int	source_run(const struct plan *, int partition, int checkpoint_dirfd,
	    struct chain *, int64_t *records_in, char **err);

/* The partition's record count, without reading it, when the source
 * knows it (range, parallelize): 0, or -1. */
int	source_count(const struct plan *, int partition, int64_t *count);

#endif
