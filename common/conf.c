#include <ctype.h>
#include <errno.h>
#include <fcntl.h>
#include <inttypes.h>
#include <limits.h>
#include <stddef.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include <ini.h>

#include "conf.h"
#include "log.h"
#include "xmalloc.h"

enum conf_type {
	CONF_STRING,
	CONF_INT,	/* non-negative integer */
	CONF_COUNT,	/* non-negative integer or "auto" (stored as 0) */
	CONF_MODE,	/* octal file mode */
	CONF_DURATION,	/* milliseconds */
	CONF_SIZE,	/* bytes */
	CONF_LOG_LEVEL,
	CONF_LOG_FORMAT,
	CONF_BOOL,	/* stored as 0 or 1 */
	CONF_NAMES,	/* environment variable names, spaces or commas
			   between */
};

struct conf_key {
	const char	*section;
	const char	*key;
	enum conf_type	 type;
	size_t		 offset;
	const char	*value;		/* the default */
	int64_t		 min;		/* smallest value for numbers */
};

#define KEY(s, k, t, field, def, min) \
	{ s, k, t, offsetof(struct conf, field), def, min }
static const struct conf_key conf_keys[] = {
	KEY("daemon", "socket", CONF_STRING, daemon_socket,
	    "/run/ember/emberd.sock", 0),
	KEY("daemon", "socket_mode", CONF_MODE, daemon_socket_mode, "0660", 0),
	KEY("daemon", "socket_group", CONF_STRING, daemon_socket_group, "", 0),
	KEY("daemon", "log_level", CONF_LOG_LEVEL, daemon_log_level, "info", 0),
	KEY("daemon", "log_format", CONF_LOG_FORMAT, daemon_log_format,
	    "text", 0),
	KEY("daemon", "worker_path", CONF_STRING, daemon_worker_path, "", 0),
	KEY("daemon", "max_frame", CONF_SIZE, daemon_max_frame, "16m", 1024),
	KEY("daemon", "max_frame_values", CONF_INT, daemon_max_frame_values,
	    "1048576", 1024),
	KEY("daemon", "max_connections_per_uid", CONF_INT,
	    daemon_max_connections_per_uid, "64", 1),
	KEY("daemon", "max_connections", CONF_COUNT, daemon_max_connections,
	    "auto", 0),
	KEY("daemon", "request_timeout", CONF_DURATION, daemon_request_timeout,
	    "30s", 1),
	KEY("daemon", "idle_timeout", CONF_DURATION, daemon_idle_timeout,
	    "10m", 0),
	KEY("daemon", "write_timeout", CONF_DURATION, daemon_write_timeout,
	    "60s", 1),
	KEY("daemon", "max_input_per_uid", CONF_SIZE, daemon_max_input_per_uid,
	    "64m", 1024),
	KEY("daemon", "max_input", CONF_SIZE, daemon_max_input, "256m", 1024),
	KEY("daemon", "max_sessions_per_uid", CONF_INT,
	    daemon_max_sessions_per_uid, "256", 1),
	KEY("daemon", "max_sessions", CONF_INT, daemon_max_sessions,
	    "16384", 1),
	KEY("daemon", "max_operations_per_uid", CONF_INT,
	    daemon_max_operations_per_uid, "64", 1),
	KEY("daemon", "max_operations", CONF_INT, daemon_max_operations,
	    "1024", 1),
	KEY("daemon", "max_plan_bytes_per_uid", CONF_SIZE,
	    daemon_max_plan_bytes_per_uid, "256m", 1024),
	KEY("daemon", "max_plan_bytes", CONF_SIZE, daemon_max_plan_bytes,
	    "1g", 1024),
	KEY("daemon", "shutdown_grace", CONF_DURATION, daemon_shutdown_grace,
	    "10s", 0),
	KEY("daemon", "max_result", CONF_SIZE, daemon_max_result, "256m", 4096),
	KEY("daemon", "max_results_per_uid", CONF_SIZE,
	    daemon_max_results_per_uid, "512m", 4096),
	KEY("daemon", "max_results", CONF_SIZE, daemon_max_results, "1g", 4096),
	KEY("daemon", "max_broadcast", CONF_SIZE, daemon_max_broadcast, "1g", 0),
	KEY("daemon", "max_broadcasts_per_uid", CONF_INT,
	    daemon_max_broadcasts_per_uid, "64", 1),
	KEY("daemon", "max_broadcasts", CONF_INT, daemon_max_broadcasts,
	    "1024", 1),
	KEY("daemon", "max_broadcast_bytes_per_uid", CONF_SIZE,
	    daemon_max_broadcast_bytes_per_uid, "2g", 0),
	KEY("daemon", "max_broadcast_bytes", CONF_SIZE,
	    daemon_max_broadcast_bytes, "4g", 0),
	KEY("daemon", "max_helpers_per_uid", CONF_INT,
	    daemon_max_helpers_per_uid, "8", 1),
	KEY("daemon", "max_helpers", CONF_INT, daemon_max_helpers, "64", 1),
	KEY("daemon", "helper_timeout", CONF_DURATION, daemon_helper_timeout,
	    "60s", 10),
	KEY("daemon", "max_spool_per_uid", CONF_SIZE, daemon_max_spool_per_uid,
	    "256m", 0),
	KEY("daemon", "max_spool", CONF_SIZE, daemon_max_spool, "1g", 0),
	KEY("daemon", "max_checkpoints_per_uid", CONF_INT,
	    daemon_max_checkpoints_per_uid, "64", 1),
	KEY("daemon", "max_checkpoints", CONF_INT, daemon_max_checkpoints,
	    "1024", 1),
	KEY("daemon", "max_checkpoint_bytes_per_uid", CONF_SIZE,
	    daemon_max_checkpoint_bytes_per_uid, "16g", 0),
	KEY("daemon", "max_checkpoint_bytes", CONF_SIZE,
	    daemon_max_checkpoint_bytes, "64g", 0),
	KEY("daemon", "max_shuffle_per_uid", CONF_SIZE,
	    daemon_max_shuffle_per_uid, "16g", 0),
	KEY("daemon", "max_shuffle", CONF_SIZE, daemon_max_shuffle, "64g", 0),
	KEY("daemon", "shuffle_mounts", CONF_BOOL, daemon_shuffle_mounts, "yes",
	    0),
	KEY("daemon", "local_dir", CONF_STRING, daemon_local_dir, "", 0),
	KEY("daemon", "pidfile", CONF_STRING, daemon_pidfile, "", 0),
	KEY("workers", "max", CONF_COUNT, workers_max, "auto", 0),
	KEY("workers", "fork_backoff", CONF_DURATION, workers_fork_backoff,
	    "1s", 1),
	KEY("workers", "start_timeout", CONF_DURATION, workers_start_timeout,
	    "60s", 0),
	KEY("workers", "reuse", CONF_BOOL, workers_reuse, "yes", 0),
	KEY("workers", "idle_timeout", CONF_DURATION, workers_idle_timeout,
	    "60s", 0),
	KEY("workers", "min_idle", CONF_INT, workers_min_idle, "0", 0),
	KEY("workers", "max_tasks", CONF_INT, workers_max_tasks, "0", 0),
	KEY("workers", "max_memory", CONF_SIZE, workers_max_memory, "0", 0),
	KEY("workers", "shuffle_memory", CONF_SIZE, workers_shuffle_memory,
	    "256m", 0),
	KEY("workers", "task_timeout", CONF_DURATION, workers_task_timeout,
	    "0", 0),
	KEY("workers", "max_per_user", CONF_INT, workers_max_per_user, "0", 0),
	KEY("workers", "task_retries", CONF_INT, workers_task_retries, "3", 0),
	KEY("workers", "max_total", CONF_INT, workers_max_total, "0", 0),
	KEY("workers", "max_pids_per_user", CONF_INT,
	    workers_max_pids_per_user, "4096", 0),
	KEY("workers", "max_memory_per_user", CONF_SIZE,
	    workers_max_memory_per_user, "0", 0),
	KEY("workers", "cpu_weight", CONF_INT, workers_cpu_weight, "100", 1),
	KEY("workers", "preload", CONF_STRING, workers_preload, "", 0),
	KEY("workers", "path", CONF_STRING, workers_path,
	    "/usr/local/bin:/usr/bin:/bin", 0),
	KEY("workers", "env", CONF_NAMES, workers_env,
	    "LANG LC_ALL LC_CTYPE LC_COLLATE LC_MESSAGES LC_NUMERIC LC_TIME "
	    "LC_MONETARY", 0),
	KEY("workers", "root_user", CONF_STRING, workers_root_user, "nobody",
	    0),
	KEY("stream", "buffer", CONF_SIZE, stream_buffer, "1m", 4096),
	KEY("stream", "retry_buffer", CONF_SIZE, stream_retry_buffer, "1m", 0),
	KEY("stream", "max_duration", CONF_DURATION, stream_max_duration, "5m",
	    0),
	KEY("stream", "max_bytes", CONF_SIZE, stream_max_bytes, "1g", 0),
	KEY("stream", "stall_timeout", CONF_DURATION, stream_stall_timeout,
	    "2s", 0),
	KEY("operation", "detached_timeout", CONF_DURATION,
	    operation_detached_timeout, "5m", 0),
	KEY("operation", "maintenance_interval", CONF_DURATION,
	    operation_maintenance_interval, "30s", 10),
	KEY("operation", "tombstones", CONF_INT, operation_tombstones, "1024",
	    0),
	KEY("session", "timeout", CONF_DURATION, session_timeout, "5m", 0),
	KEY("status", "listen", CONF_STRING, status_listen, "", 0),
	KEY("status", "users", CONF_STRING, status_users, "", 0),
	KEY("status", "max_connections", CONF_INT, status_max_connections,
	    "16", 1),
	KEY("status", "max_connections_per_peer", CONF_INT,
	    status_max_connections_per_peer, "4", 1),
	KEY("status", "timeout", CONF_DURATION, status_timeout, "10s", 100),
	KEY("checkpoint", "dir", CONF_STRING, checkpoint_dir,
	    "/var/lib/ember/checkpoints", 0),
	KEY("checkpoint", "clean_interval", CONF_DURATION,
	    checkpoint_clean_interval, "60s", 10),
	KEY("python", "preload", CONF_STRING, python_preload, "", 0),
	KEY("python", "broadcast_preload", CONF_SIZE, python_broadcast_preload,
	    "1m", 0),
	KEY("python", "broadcast_preload_max", CONF_INT,
	    python_broadcast_preload_max, "4", 1),
	KEY("python", "broadcast_preload_timeout", CONF_DURATION,
	    python_broadcast_preload_timeout, "60s", 100),
};
#define NKEYS (sizeof conf_keys / sizeof conf_keys[0])

int
conf_parse_duration(const char *s, int64_t *ms)
{
	static const struct { const char *unit; int64_t ms; } units[] = {
		{ "ms", 1 }, { "s", 1000 }, { "m", 60000 }, { "h", 3600000 },
		{ "", 1000 },
	};
	char		*end;
	long long	 n;
	size_t		 i;

	if (!isdigit((unsigned char)*s))
		return (-1);
	errno = 0;
	n = strtoll(s, &end, 10);
	if (errno != 0)
		return (-1);
	for (i = 0; i < sizeof units / sizeof units[0]; i++) {
		if (strcmp(end, units[i].unit) == 0) {
			if (n > INT64_MAX / units[i].ms)
				return (-1);
			*ms = n * units[i].ms;
			return (0);
		}
	}
	return (-1);
}

int
conf_parse_size(const char *s, int64_t *bytes)
{
	char		*end;
	long long	 n;
	int64_t		 mult = 1;

	if (!isdigit((unsigned char)*s))
		return (-1);
	errno = 0;
	n = strtoll(s, &end, 10);
	if (errno != 0)
		return (-1);
	switch (tolower((unsigned char)*end)) {
	case '\0':
		break;
	case 'k':
		mult = 1LL << 10;
		break;
	case 'm':
		mult = 1LL << 20;
		break;
	case 'g':
		mult = 1LL << 30;
		break;
	default:
		return (-1);
	}
	if (*end != '\0' && end[1] != '\0' &&
	    !(tolower((unsigned char)end[1]) == 'b' && end[2] == '\0'))
		return (-1);
	if (n > INT64_MAX / mult)
		return (-1);
	*bytes = n * mult;
	return (0);
}

static int
conf_parse_int(const char *s, int64_t *out)
{
	char		*end;
	long long	 n;

	if (!isdigit((unsigned char)*s))
		return (-1);
	errno = 0;
	n = strtoll(s, &end, 10);
	if (errno != 0 || *end != '\0')
		return (-1);
	*out = n;
	return (0);
}

static const struct conf_key *
conf_find(const char *section, const char *key)
{
	size_t	i;

	for (i = 0; i < NKEYS; i++) {
		if (strcmp(conf_keys[i].section, section) == 0 &&
		    strcmp(conf_keys[i].key, key) == 0)
			return (&conf_keys[i]);
	}
	return (NULL);
}

/* Is name ("section.key") a key whose value is a number of bytes? */
int
conf_key_is_size(const char *name)
{
	const struct conf_key	*k;
	const char		*dot = strchr(name, '.');
	char			 section[64];

	if (dot == NULL || (size_t)(dot - name) >= sizeof section)
		return (0);
	memcpy(section, name, dot - name);
	section[dot - name] = '\0';
	k = conf_find(section, dot + 1);
	return (k != NULL && k->type == CONF_SIZE);
}

/* Is every word of s (spaces or commas between) an environment variable
 * name: a letter or _, then letters, digits and _? */
static int
conf_check_names(const char *s)
{
	const char	*sep = " \t,";
	size_t		 len, i;

	for (s += strspn(s, sep); *s != '\0'; s += strspn(s, sep)) {
		len = strcspn(s, sep);
		if (isdigit((unsigned char)*s))
			return (-1);
		for (i = 0; i < len; i++) {
			if (!isalnum((unsigned char)s[i]) && s[i] != '_')
				return (-1);
		}
		s += len;
	}
	return (0);
}

/* Parse value for k into its field; NULL, or what is wrong with it. */
static const char *
conf_apply(struct conf *conf, const struct conf_key *k, const char *value)
{
	void		*field = (char *)conf + k->offset;
	int64_t		 n = 0;
	enum log_level	 level;
	enum log_format	 format;
	char		*end;

	switch (k->type) {
	case CONF_LOG_LEVEL:
		if (log_level_from_string(value, &level) == -1)
			return ("expected error, warn, info or debug");
		/* FALLTHROUGH */
	case CONF_LOG_FORMAT:
		if (k->type == CONF_LOG_FORMAT &&
		    log_format_from_string(value, &format) == -1)
			return ("expected text or json");
		/* FALLTHROUGH */
	case CONF_NAMES:
		if (k->type == CONF_NAMES && conf_check_names(value) == -1)
			return ("expected names of environment variables "
			    "(letters, digits and _), spaces between");
		/* FALLTHROUGH */
	case CONF_STRING:
		free(*(char **)field);
		*(char **)field = xstrdup(value);
		return (NULL);
	case CONF_BOOL:
		if (strcmp(value, "yes") == 0 || strcmp(value, "true") == 0 ||
		    strcmp(value, "on") == 0 || strcmp(value, "1") == 0)
			n = 1;
		else if (strcmp(value, "no") == 0 ||
		    strcmp(value, "false") == 0 || strcmp(value, "off") == 0 ||
		    strcmp(value, "0") == 0)
			n = 0;
		else
			return ("expected yes or no");
		break;
	case CONF_INT:
		if (conf_parse_int(value, &n) == -1)
			return ("expected a whole number");
		break;
	case CONF_COUNT:
		if (strcmp(value, "auto") == 0)
			n = 0;
		else if (conf_parse_int(value, &n) == -1 || n == 0)
			return ("expected a positive whole number or auto");
		*(int64_t *)field = n;
		return (NULL);
	case CONF_MODE:
		errno = 0;
		n = strtoll(value, &end, 8);
		if (*value == '\0' || *end != '\0' || errno != 0 ||
		    n < 0 || n > 07777)
			return ("expected an octal mode such as 0660");
		break;
	case CONF_DURATION:
		if (conf_parse_duration(value, &n) == -1)
			return ("expected a duration such as 500ms, 30s or 5m");
		break;
	case CONF_SIZE:
		if (conf_parse_size(value, &n) == -1)
			return ("expected a size such as 4096, 64k, 16m or 1g");
		break;
	}
	if (n < k->min)
		return ("value too small");
	*(int64_t *)field = n;
	return (NULL);
}

void
conf_init(struct conf *conf)
{
	size_t		 i;
	const char	*why;

	memset(conf, 0, sizeof *conf);
	for (i = 0; i < NKEYS; i++) {
		if ((why = conf_apply(conf, &conf_keys[i], conf_keys[i].value))
		    != NULL)
			fatalx("default of %s.%s: %s", conf_keys[i].section,
			    conf_keys[i].key, why);
	}
}

void
conf_free(struct conf *conf)
{
	size_t	i;

	for (i = 0; i < NKEYS; i++) {
		if (conf_keys[i].type == CONF_STRING ||
		    conf_keys[i].type == CONF_NAMES ||
		    conf_keys[i].type == CONF_LOG_LEVEL ||
		    conf_keys[i].type == CONF_LOG_FORMAT) {
			char **field = (char **)((char *)conf +
			    conf_keys[i].offset);
			free(*field);
			*field = NULL;
		}
	}
}

int
conf_set_key(struct conf *conf, const char *section, const char *key,
    const char *value, char **err)
{
	const struct conf_key	*k;
	const char		*why;

	if ((k = conf_find(section, key)) == NULL) {
		xasprintf(err, "%s.%s: unknown key", section, key);
		return (-1);
	}
	if ((why = conf_apply(conf, k, value)) != NULL) {
		xasprintf(err, "%s.%s: %s: \"%s\"", section, key, why, value);
		return (-1);
	}
	return (0);
}

int
conf_set(struct conf *conf, const char *assignment, char **err)
{
	const char	*eq, *dot;
	char		*section, *key;
	int		 rc;

	eq = strchr(assignment, '=');
	dot = strchr(assignment, '.');
	if (eq == NULL || dot == NULL || dot > eq || dot == assignment ||
	    dot + 1 == eq) {
		xasprintf(err, "\"%s\": expected section.key=value",
		    assignment);
		return (-1);
	}
	section = xstrndup(assignment, (size_t)(dot - assignment));
	key = xstrndup(dot + 1, (size_t)(eq - dot - 1));
	rc = conf_set_key(conf, section, key, eq + 1, err);
	free(section);
	free(key);
	return (rc);
}

struct conf_load {
	struct conf	*conf;
	FILE		*f;
	int		 line;		/* of the last line read */
	int		 err_line;
	char		*err;
};

/*
 * Read one line for inih, counting lines as inih does, so that the
 * handler knows where it is.  After a refused key, read no more: that key
 * is the error reported unless a syntax error came before it.
 */
static char *
conf_ini_reader(char *str, int num, void *arg)
{
	struct conf_load	*load = arg;

	if (load->err != NULL)
		return (NULL);
	if (fgets(str, num, load->f) == NULL)
		return (NULL);
	load->line++;
	return (str);
}

/* Apply one key; 0 tells inih it was refused. */
static int
conf_ini_cb(void *arg, const char *section, const char *key,
    const char *value)
{
	struct conf_load	*load = arg;

	if (load->err != NULL)
		return (1);
	load->err_line = load->line;
	if (*section == '\0') {
		xasprintf(&load->err, "%s: key outside a [section]", key);
		return (0);
	}
	if (conf_set_key(load->conf, section, key, value, &load->err) == -1)
		return (0);
	return (1);
}

int
conf_load_file(struct conf *conf, const char *path, char **err)
{
	struct conf_load	 load;
	int			 rc, fd;

	memset(&load, 0, sizeof load);
	load.conf = conf;
	/* O_NOCTTY: a conf named as a terminal must not become emberd's. */
	if ((fd = open(path, O_RDONLY | O_CLOEXEC | O_NOCTTY)) == -1 ||
	    (load.f = fdopen(fd, "r")) == NULL) {
		xasprintf(err, "%s: %s", path, strerror(errno));
		if (fd != -1)
			close(fd);
		return (-1);
	}
	/* inih returns the line of its first error, of either kind. */
	rc = ini_parse_stream(conf_ini_reader, &load, conf_ini_cb, &load);
	if (ferror(load.f) && rc == 0 && load.err == NULL) {
		xasprintf(err, "%s: %s", path, strerror(errno));
		fclose(load.f);
		return (-1);
	}
	fclose(load.f);
	if (rc > 0 && (load.err == NULL || rc < load.err_line)) {
		free(load.err);
		xasprintf(err, "%s:%d: syntax error", path, rc);
		return (-1);
	}
	if (load.err != NULL) {
		xasprintf(err, "%s:%d: %s", path, load.err_line, load.err);
		free(load.err);
		return (-1);
	}
	if (rc != 0) {
		xasprintf(err, "%s: cannot read", path);
		return (-1);
	}
	return (0);
}

/* Print a size with the largest unit that divides it. */
static void
conf_dump_size(FILE *f, int64_t n)
{
	static const char	units[] = "kmg";
	int			i;
	int64_t			unit;

	for (i = 2; i >= 0; i--) {
		unit = (int64_t)1 << (10 * (i + 1));
		if (n != 0 && n % unit == 0) {
			fprintf(f, "%" PRId64 "%c", n / unit, units[i]);
			return;
		}
	}
	fprintf(f, "%" PRId64, n);
}

/* Print a duration with the largest unit that divides it. */
static void
conf_dump_duration(FILE *f, int64_t ms)
{
	if (ms != 0 && ms % 3600000 == 0)
		fprintf(f, "%" PRId64 "h", ms / 3600000);
	else if (ms != 0 && ms % 60000 == 0)
		fprintf(f, "%" PRId64 "m", ms / 60000);
	else if (ms % 1000 == 0)
		fprintf(f, "%" PRId64 "s", ms / 1000);
	else
		fprintf(f, "%" PRId64 "ms", ms);
}

void
conf_dump(const struct conf *conf, FILE *f, int64_t cpus, int64_t connections)
{
	const char	*section = "";
	size_t		 i;

	for (i = 0; i < NKEYS; i++) {
		const struct conf_key	*k = &conf_keys[i];
		const void		*field = (const char *)conf + k->offset;
		int64_t			 n = *(const int64_t *)field;

		if (strcmp(section, k->section) != 0) {
			fprintf(f, "%s[%s]\n", i == 0 ? "" : "\n", k->section);
			section = k->section;
		}
		fprintf(f, "%s = ", k->key);
		switch (k->type) {
		case CONF_STRING:
		case CONF_NAMES:
		case CONF_LOG_LEVEL:
		case CONF_LOG_FORMAT:
			fprintf(f, "%s", *(char *const *)field);
			break;
		case CONF_MODE:
			fprintf(f, "%04" PRIo64, n);
			break;
		case CONF_DURATION:
			conf_dump_duration(f, n);
			break;
		case CONF_BOOL:
			fprintf(f, "%s", n ? "yes" : "no");
			break;
		case CONF_COUNT:
			if (n == 0 && strcmp(k->key, "max_connections") == 0)
				fprintf(f, "auto ; %" PRId64 " here (from "
				    "RLIMIT_NOFILE)", connections);
			else if (n == 0)
				fprintf(f, "auto ; %" PRId64 " here (one per "
				    "CPU)", cpus);
			else
				fprintf(f, "%" PRId64, n);
			break;
		case CONF_INT:
			fprintf(f, "%" PRId64, n);
			break;
		case CONF_SIZE:
			conf_dump_size(f, n);
			break;
		}
		fputc('\n', f);
	}
}
