/*
 * What the two files of the checkpoints share: checkpoint.c (the
 * registry: a checkpoint's life, its readers and writer, its manifest,
 * drops, status) and checkpoint_store.c (what lies on disk: the base
 * directories, the removal journal, removals, adoption and cleaning).
 * Nothing else includes it: the rest of emberd sees checkpoint.h.
 */
#ifndef EMBER_CHECKPOINT_PRIVATE_H
#define EMBER_CHECKPOINT_PRIVATE_H

#include <sys/types.h>

#include <stdint.h>

#include <event2/event.h>
#include <jansson.h>

#include "checkpoint.h"
#include "helper.h"
#include "queue.h"

struct operation;
struct session;

/*
 * A checkpoint's life: PENDING (lazy, not computed yet), WRITING (its
 * tasks run, or its manifest is being written), READY.  A dropped one is
 * out of the registry's lookups at once, and its files go when no
 * operation reads or writes it any more.
 */
enum ckpt_state {
	CKPT_PENDING,
	CKPT_WRITING,
	CKPT_READY,
};

struct ckpt_waiter {
	struct operation		*op;
	TAILQ_ENTRY(ckpt_waiter)	 entry;
};

struct checkpoint {
	char			 id[37];
	uid_t			 uid;		/* the client's */
	gid_t			 gid;
	struct session		*session;	/* local: the owner */
	int			 local;
	int			 eager;
	enum ckpt_state		 state;
	int			 partitions;
	int64_t			 records;
	int64_t			 bytes;		/* charged to the uid */
	int			 written;	/* partitions written */
	char			*plan;		/* lazy: what to compute, as
						   compact JSON text: a tree
						   costs many times more */
	json_t			*files;		/* and its text files */
	char			*uid_dir;	/* BASE/UID */
	char			*dir;		/* BASE/UID/ID */
	uint64_t		 created_ms;
	int			 users;		/* operations reading it */
	int			 dropped;
	struct operation	*writer;	/* computing it */
	struct helper		*helper;	/* writing its manifest */
	int			 recording;	/* helper: the manifest of a
						   lazy one, not computed */
	int			 commit_waits;	/* for that to be written */
	struct session		*loader;	/* adopted lazy: whose read
						   fetches its plan */
	void			(*done)(struct operation *, const char *);
	TAILQ_HEAD(, ckpt_waiter) waiters;	/* lazy: reads waiting */
	TAILQ_ENTRY(checkpoint)	 entry;
};
TAILQ_HEAD(checkpoint_list, checkpoint);
/* The registry. */
extern struct checkpoint_list	 checkpoints;

/* The base directories, emberd's own: descriptors and paths. */
extern int	 ckpt_local_fd, ckpt_reliable_fd;
extern char	*ckpt_local_path, *ckpt_reliable_path;
extern char	*ckpt_reliable_error;	/* why reliable ones are refused */
/* The cleaner's. */
extern struct event *ckpt_timer;

/* A removal or a clean a helper does for emberd; a clean of the start
 * (adopt) holds back the uid's reliable checkpoints until it is done. */
struct ckpt_call {
	struct helper		*helper;
	uid_t			 uid;
	gid_t			 gid;
	char			*uid_dir;
	char			*id;		/* a removal's */
	int			 local;		/* in which base */
	struct ckpt_call	*lead;		/* whose helper removes it too */
	int			 adopt;
	TAILQ_ENTRY(ckpt_call)	 entry;
};
TAILQ_HEAD(ckpt_call_list, ckpt_call);
/* The calls running or waiting for their turn. */
extern struct ckpt_call_list	 ckpt_calls;
/* Removals that failed (a helper limit, a fork-server restarting): tried
 * again by the cleaner.  Until then no clean removes or adopts them. */
extern struct ckpt_call_list	 ckpt_retries;
/* Checkpoints one removal helper removes, at most. */
#define CKPT_REMOVE_BATCH	64

/* In checkpoint.dir, emberd's own: the reliable checkpoints being
 * removed ("UID ID" lines), so that a removal emberd did not see through
 * is done after its restart, and the checkpoint not served again. */
#define CKPT_REMOVING	".removing"

/* The bound of a clean's or a removal's reply: so much, and so much more
 * per checkpoint it may speak of (an id and a few numbers). */
#define CKPT_REPLY_BASE	4096
#define CKPT_REPLY_EACH	256
/* The largest manifest a helper reads: a lazy one's holds its plan and
 * text files, which came through a helper's reply. */
#define CKPT_MAX_MANIFEST	(HELPER_MAX_REPLY - 4096)

/* checkpoint.c: the registry. */
/* Charge a new checkpoint to its uid. */
int		 checkpoint_charge(uid_t uid, char **err);
/* Take c out of the registry and free it; its files go too. */
void		 checkpoint_remove(struct checkpoint *);

/* checkpoint_store.c: the base directories, the removal journal,
 * removals, adoption and cleaning. */
/* Open (made if missing) checkpoint.dir: an absolute path whose every
 * parent is root's or emberd's and closed to others, as daemon.local_dir
 * is (localdir.c).  -1 with *err and errno. */
int		 checkpoint_open_reliable(char **err);
/* Open (made if missing) a base directory, emberd's own, 0711. */
int		 checkpoint_open_base(const char *path, int create, char **err);
/* The base directory of local or reliable checkpoints, opened (and made)
 * on first use: -1 with *err naming it. */
int		 checkpoint_base(int local, char **err);
/* The directory of client uid in a base: BASE/UID, made by emberd in its
 * own directory and given to the user its jobs run as, mode 0700. */
char		*checkpoint_uid_dir(int base, const char *basepath, uid_t uid,
		     gid_t gid, char **err);
/* Run verb for a uid on its directory in base local, as background work
 * if background is set; helper_run's return. */
struct helper	*checkpoint_run(uid_t uid, gid_t gid, int local,
		     int background, const char *verb, json_t *args,
		     helper_cb cb, void *arg, const char **class, char **err);
/* Forget a helper call. */
void		 checkpoint_call_free(struct ckpt_call *);
/* A helper's error: the call's, or the verb's ("error" in the reply). */
const char	*checkpoint_call_error(const struct hmsg_reply *reply,
		     int *fds, size_t nfds, const char *error);
/* The removals a past run noted and may not have done: to be retried,
 * and neither adopted nor removed by the start-up scan meanwhile. */
void		 checkpoint_load_removals(void);
/* Try the removals that failed again. */
void		 checkpoint_retry_removals(void);
/* Have the user's helper remove c's directory, with the removals of the
 * same directory asked meanwhile. */
void		 checkpoint_remove_files(struct checkpoint *);
/* Clean every uid's directory a base holds. */
/* Call fn for each uid's directory in base (a directory named by a uid,
 * not a link), looked at by name alone: its contents are the user's. */
void		 checkpoint_each_uid(int base, void (*fn)(uid_t, void *),
		     void *arg);
void		 checkpoint_clean_base(int base, const char *basepath,
		     int local, int adopt, int64_t before);
/* The cleaner: local directories whose checkpoint is gone, and reliable
 * leftovers. */
void		 checkpoint_timer_cb(evutil_socket_t, short, void *);
/* Arm the cleaner for checkpoint.clean_interval from now. */
void		 checkpoint_arm_cleaner(void);
/* Milliseconds since the epoch, as file times are. */
int64_t		 checkpoint_now_ms(void);
/* Remove the empty directories of a base, emberd's own entries. */
void		 checkpoint_remove_empty(int base);

#endif
