#include <unistd.h>

#include "broadcast.h"
#include "emberd.h"
#include "operation.h"
#include "pool.h"
#include "scheduler.h"
#include "session.h"
#include "status.h"
#include "worker.h"

#define COUNTER(name) json_object_set_new(c, #name, \
	json_integer((json_int_t)ember_counters.name))

static json_t *
status_counters(void)
{
	json_t	*c = json_object();

	COUNTER(connections);
	COUNTER(connections_refused);
	COUNTER(requests);
	COUNTER(request_errors);
	COUNTER(operations);
	COUNTER(operations_completed);
	COUNTER(operations_failed);
	COUNTER(operations_interrupted);
	COUNTER(tasks);
	COUNTER(tasks_completed);
	COUNTER(tasks_failed);
	COUNTER(records_sent);
	COUNTER(bytes_sent);
	COUNTER(workers_forked);
	COUNTER(workers_exited);
	COUNTER(workers_killed);
	COUNTER(workers_crashed);
	COUNTER(worker_reuses);
	COUNTER(forkserver_restarts);
	COUNTER(broadcasts);
	COUNTER(broadcasts_sent);
	COUNTER(broadcast_bytes_sent);
	COUNTER(broadcasts_removed);
	return (c);
}

json_t *
status_build(uid_t uid)
{
	return (json_pack("{s:s,s:I,s:I,s:b,s:i,s:I,s:o,s:o,s:o,s:o,s:o,s:o}",
	    "server", "emberd " PACKAGE_VERSION,
	    "pid", (json_int_t)getpid(),
	    "uptime_ms", (json_int_t)(ember_now_ms() - ember_started_ms),
	    "draining", ember_draining,
	    "workers_max", ember_workers_max(),
	    "tasks_queued", (json_int_t)scheduler_queued(),
	    "workers", worker_status_all(),
	    "pools", pool_status(uid),
	    "sessions", session_status(uid),
	    "operations", operation_status(uid),
	    "broadcasts", broadcast_status(uid),
	    "counters", status_counters()));
}
