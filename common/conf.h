/*
 * emberd's configuration: one table of keys (conf.c) with their types and
 * defaults, read from an INI file and overridden by --set section.key=value.
 * conf/ember.conf documents every key and must change with the table.
 */
#ifndef EMBER_CONF_H
#define EMBER_CONF_H

#include <stdint.h>
#include <stdio.h>

struct conf {
	char		*daemon_socket;
	int64_t		 daemon_socket_mode;
	char		*daemon_socket_group;
	char		*daemon_log_level;
	char		*daemon_log_format;
	char		*daemon_worker_path;
	int64_t		 daemon_max_frame;
	int64_t		 daemon_max_frame_values;
	int64_t		 daemon_max_connections_per_uid;
	int64_t		 daemon_max_connections; /* 0: from RLIMIT_NOFILE */
	int64_t		 daemon_request_timeout; /* ms to complete a frame */
	int64_t		 daemon_idle_timeout;	/* ms, 0: never */
	int64_t		 daemon_write_timeout;	/* ms a reply may wait unread */
	int64_t		 daemon_max_input_per_uid; /* bytes of frames read */
	int64_t		 daemon_max_input;
	int64_t		 daemon_max_sessions_per_uid; /* open sessions */
	int64_t		 daemon_max_sessions;
	int64_t		 daemon_max_operations_per_uid;
	int64_t		 daemon_max_operations;
	int64_t		 daemon_max_plan_bytes_per_uid; /* plans' text kept */
	int64_t		 daemon_max_plan_bytes;
	int64_t		 daemon_shutdown_grace;	/* ms */
	int64_t		 daemon_max_result;	/* bytes of a merged result */
	int64_t		 daemon_max_results_per_uid; /* bytes, all results */
	int64_t		 daemon_max_results;
	int64_t		 daemon_max_broadcast;	/* bytes */
	int64_t		 daemon_max_broadcasts_per_uid;
	int64_t		 daemon_max_broadcasts;
	int64_t		 daemon_max_broadcast_bytes_per_uid;
	int64_t		 daemon_max_broadcast_bytes;
	int64_t		 daemon_max_helpers_per_uid; /* helpers running */
	int64_t		 daemon_max_helpers;
	int64_t		 daemon_helper_timeout;	/* ms */
	int64_t		 daemon_max_spool_per_uid; /* bytes of stalled
						   streams' spools */
	int64_t		 daemon_max_spool;
	int64_t		 daemon_max_checkpoints_per_uid;
	int64_t		 daemon_max_checkpoints;
	int64_t		 daemon_max_checkpoint_bytes_per_uid;
	int64_t		 daemon_max_checkpoint_bytes;
	int64_t		 daemon_max_shuffle_per_uid;
	int64_t		 daemon_max_shuffle;
	int64_t		 daemon_shuffle_mounts;	/* 0 or 1: a tmpfs per uid */
	char		*daemon_local_dir;
	char		*daemon_pidfile;

	int64_t		 workers_max;		/* 0: one per CPU */
	int64_t		 workers_fork_backoff;	/* ms */
	int64_t		 workers_start_timeout;	/* ms, 0: none */
	int64_t		 workers_reuse;		/* 0 or 1 */
	int64_t		 workers_idle_timeout;	/* ms, 0: never */
	int64_t		 workers_min_idle;
	int64_t		 workers_max_tasks;	/* 0: no limit */
	int64_t		 workers_max_memory;
	int64_t		 workers_shuffle_memory;	/* bytes of RSS, 0: no limit */
	int64_t		 workers_task_timeout;	/* ms, 0: none */
	int64_t		 workers_max_per_user;	/* held at once, 0: no cap */
	int64_t		 workers_task_retries;	/* a lost task's reruns */
	int64_t		 workers_max_total;	/* past max for users holding
						   none, 0: twice max */
	int64_t		 workers_max_pids_per_user; /* tasks, 0: no bound */
	int64_t		 workers_max_memory_per_user; /* bytes, 0: none */
	int64_t		 workers_cpu_weight;	/* cgroup cpu.weight, 1-10000 */
	char		*workers_preload;	/* comma-separated paths */
	char		*workers_root_user;	/* runs root's jobs */
	char		*workers_path;		/* PATH of a job */
	char		*workers_env;		/* emberd's variables a job
						   gets, by name */

	int64_t		 stream_buffer;		/* bytes queued to a client */
	int64_t		 stream_retry_buffer;	/* bytes kept to resend */
	int64_t		 stream_max_duration;	/* ms, 0: no cut */
	int64_t		 stream_max_bytes;	/* bytes, 0: no cut */
	int64_t		 stream_stall_timeout;	/* ms a stream may block its
						   worker, 0: no limit */

	int64_t		 operation_detached_timeout;	/* ms, 0: never */
	int64_t		 operation_maintenance_interval; /* ms */
	int64_t		 operation_tombstones;	/* removed ids remembered */

	int64_t		 session_timeout;	/* ms without a connection */

	char		*status_listen;		/* "": no status listener */
	char		*status_users;		/* whose operations it shows */
	int64_t		 status_max_connections;
	int64_t		 status_max_connections_per_peer; /* one uid, or address */
	int64_t		 status_timeout;	/* ms to send a request */
	char		*checkpoint_dir;	/* reliable checkpoints */
	int64_t		 checkpoint_clean_interval; /* ms */
	char		*python_preload;	/* comma-separated modules */
	int64_t		 python_broadcast_preload; /* bytes from which the
						   fork-server unpickles a
						   Python broadcast; 0: never */
	int64_t		 python_broadcast_preload_max; /* loaded at once, per
						   fork-server */
	int64_t		 python_broadcast_preload_timeout; /* ms a retired
						   worker's exit may take */
};

void	 conf_init(struct conf *);
void	 conf_free(struct conf *);
/* Each returns 0, or -1 with *err allocated ("FILE:LINE: section.key: ..."). */
int	 conf_load_file(struct conf *, const char *path, char **err);
int	 conf_set(struct conf *, const char *assignment, char **err);
int	 conf_set_key(struct conf *, const char *section, const char *key,
	     const char *value, char **err);
/* Print every key with its value, as an INI file, sizes and durations
 * with units; after an "auto" count, what it is here (cpus, or for
 * daemon.max_connections connections) as an inline comment, so that the
 * dump still loads as it is. */
void	 conf_dump(const struct conf *, FILE *, int64_t cpus,
	     int64_t connections);

/* Is name ("section.key") a key whose value is a number of bytes?  For
 * printing a limit's figures as ember.conf writes sizes. */
int	 conf_key_is_size(const char *name);

/* Value parsers, shared with the tests: 0, or -1 on bad input. */
int	 conf_parse_duration(const char *, int64_t *ms);
int	 conf_parse_size(const char *, int64_t *bytes);

#endif
