/*
 * Limits: what each client uid makes emberd hold, counted per uid and in
 * total against the daemon.max_* keys.  A charge over either bound is
 * refused with a message that names the key, for a LIMIT_EXCEEDED reply;
 * emberd then serves on.
 */
#ifndef EMBER_LIMIT_H
#define EMBER_LIMIT_H

#include <sys/types.h>

#include <stdint.h>

#include <jansson.h>

/* Descriptors kept for emberd's own use when daemon.max_connections is
 * auto: the listener, the loop, fork-servers, workers, files. */
#define LIMIT_FD_RESERVE	128

enum limit_kind {
	LIMIT_CONNECTIONS,	/* open client connections */
	LIMIT_INPUT,		/* bytes of client frames being read */
	LIMIT_SESSIONS,		/* sessions open */
	LIMIT_OPERATIONS,	/* operations not yet ended */
	LIMIT_RESULTS,		/* bytes of merged results (count_by_value) */
	LIMIT_BROADCASTS,	/* broadcasts kept */
	LIMIT_BROADCAST_BYTES,	/* their bytes */
	LIMIT_HELPERS,		/* helper processes running */
	LIMIT_SPOOL,		/* bytes spooled for stalled streams */
	LIMIT_CHECKPOINTS,	/* checkpoints kept */
	LIMIT_CHECKPOINT_BYTES,	/* their bytes on disk */
	LIMIT_SHUFFLE_BYTES,	/* bytes of shuffle files */
	LIMIT_PLAN_BYTES,	/* bytes of plans' text kept */
	LIMIT_KINDS
};

/* Charge n more of kind to uid: 0, or -1 with *err (allocated) saying
 * which limit, by its conf key, the charge would pass.  Nothing is
 * charged then. */
int		 limit_charge(uid_t, enum limit_kind, int64_t n, char **err);
/* The same against the total bound alone: the uid's is held elsewhere
 * (the kernel's, for a uid's shuffle mount), though still counted. */
int		 limit_charge_total(uid_t, enum limit_kind, int64_t n,
		     char **err);
/* Charge n even past the bounds: what uid holds already, found rather
 * than asked for (bytes on disk); its next charge is refused. */
void		 limit_force(uid_t, enum limit_kind, int64_t n);
void		 limit_release(uid_t, enum limit_kind, int64_t n);
/* How much more of kind uid may be charged, within both bounds. */
int64_t		 limit_room(uid_t, enum limit_kind);
int64_t		 limit_used(uid_t, enum limit_kind);
/* The total bound of kind now (daemon.max_connections "auto" resolved). */
int64_t		 limit_total(enum limit_kind);
/* What uid holds and may hold, for status; root (0) gets every uid. */
json_t		*limit_status(uid_t);

#endif
