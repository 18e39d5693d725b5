#include <unistd.h>

#include "broadcast.h"
#include "cgroup.h"
#include "checkpoint.h"
#include "emberd.h"
#include "limit.h"
#include "operation.h"
#include "pool.h"
#include "scheduler.h"
#include "session.h"
#include "shufflefs.h"
#include "status.h"
#include "worker.h"

/* The counters, each under its name. */
static json_t *
status_counters(void)
{
	json_t	*c = json_object();

#define STATUS_COUNTER(name) json_object_set_new(c, #name, \
	json_integer((json_int_t)ember_counters.name));
	EMBER_COUNTERS(STATUS_COUNTER)
#undef STATUS_COUNTER
	return (c);
}

json_t *
status_build(uid_t uid)
{
	return (json_pack("{s:s,s:I,s:I,s:b,s:i,s:I,s:o,s:o,s:o,s:o,s:o,s:o,"
	    "s:o,s:o,s:o,s:o}",
	    "server", "emberd " PACKAGE_VERSION,
	    "pid", (json_int_t)getpid(),
	    "uptime_ms", (json_int_t)(ember_now_ms() - ember_started_ms),
	    "draining", ember_draining,
	    "workers_max", ember_workers_max(),
	    "tasks_queued", (json_int_t)scheduler_queued(),
	    "workers", worker_status_all(uid),
	    "pools", pool_status(uid),
	    "sessions", session_status(uid),
	    "operations", operation_status(uid),
	    "broadcasts", broadcast_status(uid),
	    "checkpoints", checkpoint_status(uid),
	    "limits", limit_status(uid),
	    "user_bounds", cgroup_status(),
	    "shuffle_bounds", shufflefs_status(),
	    "counters", status_counters()));
}
