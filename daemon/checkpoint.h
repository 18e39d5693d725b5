/*
 * Checkpoints: datasets materialised once and read back by id
 * (docs/design.md, "Checkpoints").  emberd keeps the registry (id, uid,
 * session of a local one, state, partitions, records, bytes); the files
 * are the uid's own, in a directory per uid that emberd makes inside its
 * own base directory (daemon.local_dir/checkpoints for local checkpoints,
 * checkpoint.dir for reliable ones) and gives to the user.  Everything
 * inside that directory is done by the user's processes: the job's
 * workers write and read the partition files, and a one-shot helper of
 * the user's fork-server writes the manifest and removes checkpoints.
 */
#ifndef EMBER_CHECKPOINT_H
#define EMBER_CHECKPOINT_H

#include <sys/types.h>

#include <stdint.h>

#include <jansson.h>

struct checkpoint;
struct connection;
struct operation;
struct session;

/* Make the base directories and start the start-up scan and the cleaner;
 * a checkpoint.dir that cannot be used is logged, and reliable
 * checkpoints are then refused with the reason. */
void		 checkpoint_init(void);
void		 checkpoint_shutdown(void);

/*
 * A new checkpoint of the session's uid for the checkpoint action: its
 * directory is ready for the tasks.  Lazy ones keep plan (the client's
 * JSON) and files (a text source's, as checked: NULL for another) to
 * compute on first read.  NULL with *class and *err
 * (CHECKPOINT_FAILED naming the directory, LIMIT_EXCEEDED naming the key).
 * An eager one is written by the operation given (it may be NULL).
 */
struct checkpoint *checkpoint_create(struct session *, struct operation *,
		     int local, int eager, json_t *plan, json_t *files,
		     int partitions, const char **class, char **err);
const char	*checkpoint_id(const struct checkpoint *);
int		 checkpoint_partitions(const struct checkpoint *);
/* The directory its partition files are in, and whether they are
 * fsynced (reliable). */
const char	*checkpoint_dir(const struct checkpoint *);
int		 checkpoint_sync(const struct checkpoint *);
/* The uid's directory that directory is in (BASE/UID), opened and
 * checked by emberd, for the workers that read or write c: they get it
 * as a descriptor, never a name.  -1 with *err. */
int		 checkpoint_open_dir(const struct checkpoint *, char **err);
int64_t		 checkpoint_records(const struct checkpoint *);
int64_t		 checkpoint_bytes(const struct checkpoint *);

/* The writing operation: a task wrote a partition (records, bytes);
 * -1 with *err (LIMIT_EXCEEDED) if its bytes pass a bound. */
int		 checkpoint_written(struct checkpoint *, int64_t records,
		     int64_t bytes, char **err);
/* Every partition is written: commit it (the manifest of a reliable
 * one, off the loop), then done(op, NULL) or done(op, error); op forgets
 * the checkpoint then. */
void		 checkpoint_commit(struct checkpoint *, struct operation *,
		     void (*done)(struct operation *, const char *));
/* The writing operation ended without a commit (failed, interrupted):
 * what it wrote is removed; a lazy checkpoint waits to be computed again. */
void		 checkpoint_abandon(struct checkpoint *, struct operation *);

/* The checkpoint uid names id, for a plan's source, or NULL. */
struct checkpoint *checkpoint_find(uid_t, const char *id);
/* Is uid's part of checkpoint.dir still being read after the start
 * ((uid_t)-1: anyone's)?  Its checkpoints are not known until then. */
int		 checkpoint_scanning(uid_t);
/* An operation reads it until checkpoint_unuse; a drop waits for that. */
void		 checkpoint_use(struct checkpoint *);
void		 checkpoint_unuse(struct checkpoint *);
int		 checkpoint_ready(const struct checkpoint *);
/* op reads c, which is not ready: computed (once, whoever asks first)
 * in s; then operation_checkpoint_ready(op, NULL or why not).  -1 with
 * *err if its computation cannot start. */
int		 checkpoint_wait(struct checkpoint *, struct operation *,
		     struct session *, char **err);
void		 checkpoint_unwait(struct checkpoint *, struct operation *);

/* checkpoint_drop {checkpoint}: what to answer, in *a. */
struct request_answer;
void		 checkpoint_drop_request(struct session *, json_t *request,
		     struct request_answer *a);
/* Draining with no operation left: the local checkpoints go (they die
 * with emberd), by their users' helpers while those can still run; how
 * many checkpoint steps still run, which emberd waits for within
 * daemon.shutdown_grace. */
size_t		 checkpoint_drain(void);
/* The session closed: its local checkpoints go. */
void		 checkpoint_drop_session(struct session *);

json_t		*checkpoint_status(uid_t);

#endif
