#include <sys/resource.h>

#include <stddef.h>
#include <stdlib.h>

#include "emberd.h"
#include "limit.h"
#include "log.h"
#include "queue.h"
#include "xmalloc.h"

/* What each kind is called and which conf keys bound it. */
struct limit_def {
	const char	*what;		/* "connections", "bytes of input" */
	const char	*uid_key;
	size_t		 uid_offset;
	const char	*total_key;
	size_t		 total_offset;
};
#define DEF(what, field) { what,					\
	"daemon." #field "_per_uid",					\
	offsetof(struct conf, daemon_##field##_per_uid),		\
	"daemon." #field, offsetof(struct conf, daemon_##field) }
static const struct limit_def limit_defs[LIMIT_KINDS] = {
	DEF("connections", max_connections),
	DEF("bytes of frames being read", max_input),
	DEF("sessions", max_sessions),
	DEF("operations", max_operations),
	DEF("bytes of results", max_results),
	DEF("broadcasts", max_broadcasts),
	DEF("bytes of broadcasts", max_broadcast_bytes),
	DEF("helpers", max_helpers),
	DEF("bytes spooled for streams whose clients stopped reading",
	    max_spool),
	DEF("checkpoints", max_checkpoints),
	DEF("bytes of checkpoints", max_checkpoint_bytes),
	DEF("bytes of shuffle files", max_shuffle),
	DEF("bytes of plans kept", max_plan_bytes),
};

/* One uid's usage; it goes when the uid holds nothing. */
struct limit_user {
	uid_t			 uid;
	int64_t			 used[LIMIT_KINDS];
	TAILQ_ENTRY(limit_user)	 entry;
};
static TAILQ_HEAD(, limit_user) limit_users =
    TAILQ_HEAD_INITIALIZER(limit_users);
static int64_t	limit_all[LIMIT_KINDS];

static int64_t
limit_conf(size_t offset)
{
	return (*(const int64_t *)((const char *)&ember_conf + offset));
}

/*
 * daemon.max_connections "auto": each connection costs a descriptor and
 * may hold one the client passed, so half of what RLIMIT_NOFILE leaves
 * after emberd's own.
 */
int64_t
limit_total(enum limit_kind kind)
{
	struct rlimit	rl;
	int64_t		n;

	n = limit_conf(limit_defs[kind].total_offset);
	if (kind != LIMIT_CONNECTIONS || n != 0)
		return (n);
	if (getrlimit(RLIMIT_NOFILE, &rl) == -1 || rl.rlim_cur == RLIM_INFINITY)
		return (INT32_MAX);
	n = ((int64_t)rl.rlim_cur - LIMIT_FD_RESERVE) / 2;
	return (n < 16 ? 16 : n);
}

static struct limit_user *
limit_find(uid_t uid)
{
	struct limit_user	*u;

	TAILQ_FOREACH(u, &limit_users, entry) {
		if (u->uid == uid)
			return (u);
	}
	return (NULL);
}

/* Add n of kind to uid's use, u (NULL: made). */
static void
limit_add(uid_t uid, struct limit_user *u, enum limit_kind kind, int64_t n)
{
	if (u == NULL) {
		u = xcalloc(1, sizeof *u);
		u->uid = uid;
		TAILQ_INSERT_TAIL(&limit_users, u, entry);
	}
	u->used[kind] += n;
	limit_all[kind] += n;
}

/* Charge n of kind to uid, against the uid's bound too with per_uid. */
static int
limit_charge_bounds(uid_t uid, enum limit_kind kind, int64_t n, int per_uid,
    char **err)
{
	const struct limit_def	*d = &limit_defs[kind];
	struct limit_user	*u = limit_find(uid);
	int64_t			 used = u != NULL ? u->used[kind] : 0, max;

	max = limit_conf(d->uid_offset);
	if (per_uid && used + n > max) {
		xasprintf(err, "%s is %lld: uid %ld holds %lld %s and asked "
		    "for %lld more", d->uid_key, (long long)max, (long)uid,
		    (long long)used, d->what, (long long)n);
		return (-1);
	}
	/* Root's sessions pass everyone's bound, within root's own: when
	 * the other users hold them all, root must still see who. */
	max = limit_total(kind);
	if (limit_all[kind] + n > max &&
	    !(kind == LIMIT_SESSIONS && uid == 0)) {
		xasprintf(err, "%s is %lld: emberd holds %lld %s for all users "
		    "and uid %ld asked for %lld more", d->total_key,
		    (long long)max, (long long)limit_all[kind], d->what,
		    (long)uid, (long long)n);
		return (-1);
	}
	limit_add(uid, u, kind, n);
	return (0);
}

int
limit_charge(uid_t uid, enum limit_kind kind, int64_t n, char **err)
{
	return (limit_charge_bounds(uid, kind, n, 1, err));
}

int
limit_charge_total(uid_t uid, enum limit_kind kind, int64_t n, char **err)
{
	return (limit_charge_bounds(uid, kind, n, 0, err));
}

void
limit_force(uid_t uid, enum limit_kind kind, int64_t n)
{
	limit_add(uid, limit_find(uid), kind, n);
}

void
limit_release(uid_t uid, enum limit_kind kind, int64_t n)
{
	struct limit_user	*u = limit_find(uid);
	int			 i;

	if (n == 0)
		return;		/* nothing held is nothing to give back */
	if (u == NULL || u->used[kind] < n)
		fatalx("uid %ld releases %lld %s it does not hold", (long)uid,
		    (long long)n, limit_defs[kind].what);
	u->used[kind] -= n;
	limit_all[kind] -= n;
	for (i = 0; i < LIMIT_KINDS; i++) {
		if (u->used[i] != 0)
			return;
	}
	TAILQ_REMOVE(&limit_users, u, entry);
	free(u);
}

int64_t
limit_room(uid_t uid, enum limit_kind kind)
{
	int64_t	uid_room, all_room;

	uid_room = limit_conf(limit_defs[kind].uid_offset) -
	    limit_used(uid, kind);
	all_room = limit_total(kind) - limit_all[kind];
	uid_room = uid_room < all_room ? uid_room : all_room;
	return (uid_room > 0 ? uid_room : 0);
}

int64_t
limit_used(uid_t uid, enum limit_kind kind)
{
	struct limit_user	*u = limit_find(uid);

	return (u != NULL ? u->used[kind] : 0);
}

/* One object: each kind's usage and bounds. */
static json_t *
limit_usage(const int64_t *used, int per_uid)
{
	json_t	*o = json_object();
	int	 i;

	for (i = 0; i < LIMIT_KINDS; i++) {
		json_object_set_new(o, per_uid ? limit_defs[i].uid_key :
		    limit_defs[i].total_key, json_pack("{s:I,s:I}", "used",
		    (json_int_t)used[i], "max", (json_int_t)(per_uid ?
		    limit_conf(limit_defs[i].uid_offset) :
		    limit_total((enum limit_kind)i))));
	}
	return (o);
}

json_t *
limit_status(uid_t uid)
{
	json_t			*users = json_array();
	struct limit_user	*u;
	static const int64_t	 none[LIMIT_KINDS];
	int			 seen = 0;

	TAILQ_FOREACH(u, &limit_users, entry) {
		if (uid != 0 && u->uid != uid)
			continue;
		seen = 1;
		json_array_append_new(users, json_pack("{s:I,s:o}", "uid",
		    (json_int_t)u->uid, "limits", limit_usage(u->used, 1)));
	}
	if (!seen && uid != 0)
		json_array_append_new(users, json_pack("{s:I,s:o}", "uid",
		    (json_int_t)uid, "limits", limit_usage(none, 1)));
	return (json_pack("{s:o,s:o}", "users", users, "total",
	    limit_usage(limit_all, 0)));
}
