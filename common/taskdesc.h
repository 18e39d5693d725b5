/*
 * Task descriptors: what emberd tells a worker to run (docs/protocol.md,
 * "Task descriptor"), a frame holding a fixed binary header (the members
 * every task has, the batch) and, only when the task has any, a JSON
 * object of the variable members (the plan, broadcasts, save, checkpoint,
 * shuffle).  emberd encodes them and ember-worker decodes them with the
 * functions here, so the members, the modes and the reduce functions are
 * named in one place.
 */
#ifndef EMBER_TASKDESC_H
#define EMBER_TASKDESC_H

#include <stddef.h>
#include <stdint.h>

#include <jansson.h>

#include "protocol.h"

struct evbuffer;

/* The header: int32 partition, partitions, mode, fn, flags; int64 skip;
 * int32 the operation id's length; then the id, an int32 batch count and
 * that many int32 partitions. */
#define TASKDESC_HEADER_FIXED	32
#define TASKDESC_MAX_OPERATION	128
#define TASKDESC_HEADER_MAX	(TASKDESC_HEADER_FIXED + \
				 TASKDESC_MAX_OPERATION + \
				 4 * EMBER_MAX_TASK_BATCH)
/* The header's flags. */
#define TASKDESC_REUSE_PLAN	0x1
#define TASKDESC_SOURCE_FD	0x2
#define TASKDESC_HELD_ONLY	0x4	/* broadcast removals alone: no task */

/* What a task sends back; the numbers are the header's mode. */
enum taskdesc_mode {
	MODE_RECORDS,		/* the records */
	MODE_COUNT,		/* none: they are counted */
	MODE_COUNT_BY_VALUE,	/* each distinct record and its count */
	MODE_REDUCE,		/* the partial sum, min or max */
	MODE_SAVE,		/* none: they are written to a part file */
	MODE_CHECKPOINT,	/* none: they are written to a checkpoint's
				   partition file */
	MODE_SHUFFLE,		/* none: they are written to the task's
				   shuffle file, for the next stage */
};

/* The functions of reduce; the numbers are the header's fn. */
enum reduce_fn {
	REDUCE_SUM,
	REDUCE_MIN,
	REDUCE_MAX,
};

/*
 * A change to the broadcasts a worker holds: add broadcast id, size bytes
 * whose descriptor (a sealed memfd) rides with the descriptor's frame,
 * and its set index of index bytes (common/bindex.h; 0: none) whose
 * descriptor rides right after; or remove it.  fd, index_fd: the
 * descriptors to pass (emberd) or that came (worker, filled in after
 * decoding; -1 until then).
 */
struct taskdesc_broadcast {
	int64_t		 id;
	int		 add;
	int		 fd;
	int64_t		 size;
	int		 index_fd;
	int64_t		 index;
};

struct taskdesc {
	const char		*operation;	/* at most TASKDESC_MAX_OPERATION
						   bytes */
	int			 partition;
	int			 partitions;
	enum taskdesc_mode	 mode;
	enum reduce_fn		 fn;		/* MODE_REDUCE */
	const char		*save_dir;	/* MODE_SAVE: the directory */
	int64_t			 save_attempt;	/* and a number no other
						   attempt of the task has */
	int64_t			 skip;		/* MODE_RECORDS: records to
						   drop first (a recompute) */
	const char		*ckpt_dir;	/* MODE_CHECKPOINT: the
						   checkpoint's directory */
	int			 ckpt_sync;	/* fsync the file (reliable) */
	const char		*source_dir;	/* a checkpoint source's
						   directory (plan member) */
	/*
	 * The checkpoint directories (BASE/UID) as descriptors emberd
	 * opened and checked, riding with the descriptor after the
	 * broadcasts' (the source's first): a worker never opens them by
	 * name.  The flags are encoded; the descriptors are emberd's to
	 * pass and the worker's once received (closed by taskdesc_clear).
	 */
	int			 source_dir_passed;
	int			 source_dirfd;
	int			 ckpt_dir_passed;
	int			 ckpt_dirfd;

	/*
	 * A task of an operation in stages (docs/protocol.md, "Stages"):
	 * its operation's directory in the uid's shuffle directory, whose
	 * descriptor rides after the checkpoint directories'; and for a map
	 * task (MODE_SHUFFLE), its stage, the buckets it writes, the wide op
	 * it writes for (JSON text to encode; decoded, borrowed from root)
	 * and the memory it may sort in.
	 */
	const char		*shuffle_dir;
	int			 shuffle_stage;
	int			 shuffle_buckets;
	const char		*shuffle_op_text;
	json_t			*shuffle_op;
	int64_t			 shuffle_memory;
	int			 shuffle_dir_passed;
	int			 shuffle_dirfd;

	/*
	 * More tasks of the same descriptor, run after partition in this
	 * order (docs/protocol.md, "batch"): their partitions, at most
	 * EMBER_MAX_TASK_BATCH - 1.  emberd's to encode; decoded, owned by
	 * the descriptor.
	 */
	int			*batch;
	size_t			 nbatch;

	/*
	 * No plan members: the worker runs the plan it holds from another
	 * operation, which emberd knows to be the same (docs/protocol.md,
	 * "reuse_plan").
	 */
	int			 reuse_plan;

	/*
	 * No task: the descriptor only tells an idle worker to let go of
	 * broadcasts that were dropped (its broadcasts are removals, and it
	 * has no other member).  The worker runs nothing and answers
	 * nothing.
	 */
	int			 held_only;

	/* Decoded, and owned by the descriptor until taskdesc_clear; NULL
	 * when absent. */
	json_t			*plan;
	json_t			*files;
	struct taskdesc_broadcast *broadcasts;	/* in order */
	size_t			 nbroadcasts;
	json_t			*root;
	char			 operation_id[TASKDESC_MAX_OPERATION + 1];
};

const char	*taskdesc_mode_name(enum taskdesc_mode);
int		 taskdesc_mode_from_string(const char *, enum taskdesc_mode *);
const char	*reduce_fn_name(enum reduce_fn);
int		 reduce_fn_from_string(const char *, enum reduce_fn *);

/* The plan members of a descriptor ("plan":...,"files":...,
 * "checkpoint_dir":...), made once per operation and spliced into the
 * first descriptor each worker gets.  files (taken) and checkpoint_dir
 * (where a checkpoint source's partition files are) may be NULL.  Values
 * equal to the last call's (json_equal) give the same bytes, copied
 * without a dump: a reference to plan and files is kept, so neither may
 * change afterwards. */
char		*taskdesc_encode_plan(json_t *plan, json_t *files,
		     const char *checkpoint_dir);
/*
 * Append the frame of a descriptor to out: d's members (not the decoded
 * ones), the n broadcast changes and the plan members (NULL: the worker
 * has the plan already, of this operation or, with d->reuse_plan, of
 * another).
 */
void		 taskdesc_encode(struct evbuffer *, const struct taskdesc *,
		     const struct taskdesc_broadcast *, size_t n,
		     const char *plan);
/* Decode a descriptor of len bytes: 0, or -1 with *err allocated (the
 * field and why): a header short, long or out of range, members that are
 * not a JSON object or hold a bad value.  taskdesc_clear frees what it
 * holds, either way. */
int		 taskdesc_decode(const char *, size_t, struct taskdesc *,
		     char **err);
void		 taskdesc_clear(struct taskdesc *);
/* Decode the broadcasts member alone (an array), into t. */
int		 taskdesc_decode_broadcasts(json_t *, struct taskdesc *,
		     char **err);

#endif
