/*
 * Bounds per user: each user's fork-server, and so every worker and
 * command it starts, in a cgroup v2 of that user's under emberd's own
 * (pids.max, memory.max, cpu.weight from workers.max_pids_per_user,
 * workers.max_memory_per_user and workers.cpu_weight).  Where emberd's
 * cgroup cannot be written (not root, not delegated, controllers
 * missing), the fork-server holds what rlimits can: RLIMIT_NPROC of the
 * user, and each worker's RLIMIT_AS.
 */
#ifndef EMBER_CGROUP_H
#define EMBER_CGROUP_H

#include <sys/types.h>

#include <jansson.h>

/* Take emberd's cgroup for the users' if it can be: emberd moves into a
 * leaf of its own, and the controllers are enabled below.  Logs which
 * bounds hold, and why not cgroups.  Never fails: the rlimits remain. */
void		 cgroup_init(void);
/* Take the cgroup at path as cgroup_init takes emberd's own (there, a
 * delegated one that is not the root): 0, or -1 with status saying why.
 * For tests, on a directory that stands for a cgroup. */
int		 cgroup_init_at(const char *path);
/* Remove the users' cgroups that are empty by now, and close the
 * handles. */
void		 cgroup_free(void);
/* Whether the users' cgroups hold the bounds (else the rlimits do). */
int		 cgroup_active(void);
/* Move pid, a fork-server of uid's that has forked nothing yet, into
 * uid's cgroup, made (with its limits) through emberd's handle on its
 * own cgroup: 0, or -1 (logged) if it could not be, and the fork-server
 * must not run unbounded.  0 at once when cgroups are not used. */
int		 cgroup_enter(uid_t, pid_t);
/* What status shows: by (cgroup or rlimit), the bounds, what holds
 * them, and why not cgroups. */
json_t		*cgroup_status(void);

#endif
