/*
 * Checkpoints on disk, as the job's user sees them (docs/design.md,
 * "Checkpoints").  A checkpoint is a directory DIR/ID under the uid's own
 * directory: one file per partition (part-NNNNN, the records as frames,
 * ending with END_OF_DATA_SECTION), each written under a temporary name,
 * fsynced and renamed into place by the task that computed it, and for a
 * reliable checkpoint a manifest (manifest.json) written last: the
 * checkpoint exists once the manifest does.
 *
 * Everything here runs as the user (a worker, or a one-shot helper of the
 * user's fork-server), never in emberd, and works through directory
 * descriptors with O_NOFOLLOW, so that the user's own links cannot turn it
 * against the user's other files.
 */
#ifndef EMBER_WORKER_CHECKPOINT_H
#define EMBER_WORKER_CHECKPOINT_H

#include <stddef.h>
#include <stdint.h>

#include <jansson.h>

struct chain;
struct record;
struct ckpt_writer;

/* Start writing partition's file in the checkpoint directory dir
 * (UID/ID, made if missing), ID opened in ufd, the uid's directory as
 * emberd passed it (dir names it only for messages): NULL with *err
 * allocated on error. */
struct ckpt_writer *ckpt_writer_open(const char *dir, int ufd,
		     int partition, int sync, char **err);
/* Append a record: 0, or -1 with *err (a write error, a full disk). */
int		 ckpt_writer_record(struct ckpt_writer *, const void *,
		     size_t, int null, char **err);
/* Append a pair or group (worker/keyed.h), as a batch holds it. */
int		 ckpt_writer_keyed(struct ckpt_writer *,
		     const struct record *, char **err);
/* End the file, fsync it (reliable) and rename it into place. */
int		 ckpt_writer_commit(struct ckpt_writer *, char **err);
/* Bytes written so far. */
int64_t		 ckpt_writer_bytes(const struct ckpt_writer *);
/* Close; a file not committed is removed. */
void		 ckpt_writer_free(struct ckpt_writer *);

/* Push the records of partition's file in dir (ID in ufd, as above) into
 * the chain: OP_OK, or OP_FAIL with *err allocated (or NULL when the
 * chain failed). */
int		 ckpt_source_run(const char *dir, int ufd, int partition,
		     struct chain *, int64_t *records_in, char **err);

/*
 * The verbs a helper runs for emberd (worker/helper.c's table), each on
 * the uid's directory, passed as the one descriptor of the request
 * (args.dir is its name, for messages).  Each replies with its fields,
 * or {"error": why}; none hands out descriptors.
 *  checkpoint_commit {dir, id, manifest}: write ID/manifest.json last;
 *    with manifest.pending (a lazy checkpoint, not computed yet), make
 *    ID and write it before any partition.
 *  checkpoint_remove {dir, id}: remove ID, its manifest first.
 *  checkpoint_clean {dir, keep, before_ms, complete, max, max_manifest}:
 *    remove every entry not in keep that has been there since before
 *    before_ms (by its ctime, which its owner cannot set); from those in
 *    keep, what is not a checkpoint's own; answer "sizes", the bytes on
 *    disk of those in keep.  With complete, keep the ones whose manifest
 *    holds (at most max_manifest bytes) and answer at most max of them
 *    as summaries {id, partitions, records, bytes, eager, pending}
 *    ("more": how many more), never the manifests themselves; "refused":
 *    how many did not hold.
 *  checkpoint_plan {dir, id, max}: the plan (and files) of ID's pending
 *    manifest, of at most max bytes.
 */
json_t		*ckpt_verb_commit(json_t *args, const int *fds_in,
		     size_t nin, int *fds_out, size_t *nout, char **err);
json_t		*ckpt_verb_remove(json_t *args, const int *fds_in,
		     size_t nin, int *fds_out, size_t *nout, char **err);
json_t		*ckpt_verb_clean(json_t *args, const int *fds_in,
		     size_t nin, int *fds_out, size_t *nout, char **err);
json_t		*ckpt_verb_plan(json_t *args, const int *fds_in,
		     size_t nin, int *fds_out, size_t *nout, char **err);

#endif
