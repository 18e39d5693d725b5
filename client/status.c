/*
 * ember status for people: the status reply with ages as 3m12s, users by
 * name, ids cut to 8 characters, retirement causes as failed=6 idle=2,
 * every table within 80 columns (the last column cut to fit).  What a
 * person asks first shows by default; limits, counters and the columns
 * for tuning are -v's.  Keys this file does not know print as they come
 * (with -v), so a newer emberd's fields still show.
 */
#include <sys/types.h>

#include <pwd.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <jansson.h>

#include "conf.h"
#include "status.h"

/* Table headings shorter than the reply's keys. */
static const struct {
	const char	*key;
	const char	*heading;
} status_headings[] = {
	{ "crashes_in_a_row", "crashes" },
	{ "connections", "conns" },
	{ "operations", "ops" },
	{ "partitions", "parts" },
	{ "records_sent", "records" },
	{ "forkserver", "fs_pid" },
	{ "broadcasts", "bcasts" },
	{ "python_broadcasts", "py_bc" },
	{ "starting", "start" },
	{ "buffered_bytes", "buffered" },
};

#define STATUS_COLUMNS	80

/* Operation members of the operations table, or left to --json (the
 * state says attached or detached, the sessions table lists sessions):
 * -v's details table shows the others. */
static const char *const status_operation_shown[] = { "id", "session",
    "action", "state", "partitions", "done", "running", "attached",
    "records_sent", "age_ms", "what", NULL };

/* Members of the reply shown with -v. */
static const char *const status_verbose_only[] = { "counters", "limits",
    NULL };

/* Pool and worker members for tuning, shown with -v. */
static const char *const status_tuning[] = { "starting",
    "crashes_in_a_row", "forks", "reuses", "broadcasts", NULL };

/* Is key one of list? */
static int
status_listed(const char *const *list, const char *key)
{
	size_t	i;

	for (i = 0; list[i] != NULL; i++) {
		if (strcmp(key, list[i]) == 0)
			return (1);
	}
	return (0);
}

/* Retirement causes, shorter. */
static const struct {
	const char	*cause;
	const char	*shown;
} status_causes[] = {
	{ "idle_timeout", "idle" },
	{ "task_timeout", "timeout" },
	{ "forkserver_lost", "fs_lost" },
	{ "max_memory", "memory" },
	{ "max_tasks", "recycled" },
};

/* Format milliseconds as 812ms, 4.2s, 12s, 3m12s, 2h03m or 3d04h. */
void
status_format_age(json_int_t ms, char *buf, size_t len)
{
	json_int_t	s = ms / 1000;

	if (ms < 1000)
		snprintf(buf, len, "%lldms", (long long)ms);
	else if (ms < 10000)
		snprintf(buf, len, "%.1fs", (double)ms / 1000.0);
	else if (s < 60)
		snprintf(buf, len, "%llds", (long long)s);
	else if (s < 3600)
		snprintf(buf, len, "%lldm%02llds", (long long)(s / 60),
		    (long long)(s % 60));
	else if (s < 86400)
		snprintf(buf, len, "%lldh%02lldm", (long long)(s / 3600),
		    (long long)(s / 60 % 60));
	else
		snprintf(buf, len, "%lldd%02lldh", (long long)(s / 86400),
		    (long long)(s / 3600 % 24));
}

/* A uid as its user's name, or the number. */
static json_t *
status_user(json_t *uid)
{
	struct passwd	*pw;
	char		 buf[32];

	if (!json_is_integer(uid))
		return (json_incref(uid));
	if ((pw = getpwuid((uid_t)json_integer_value(uid))) != NULL)
		return (json_string(pw->pw_name));
	snprintf(buf, sizeof buf, "%lld", (long long)json_integer_value(uid));
	return (json_string(buf));
}

/* A 36-character id, cut to its first 8. */
static json_t *
status_short_id(json_t *id)
{
	const char	*s = json_string_value(id);

	if (s == NULL || strlen(s) != 36)
		return (json_incref(id));
	return (json_stringn(s, 8));
}

/* Retirement counts as "failed=6 idle=2", the zeros left out. */
static json_t *
status_causes_text(json_t *retired)
{
	const char	*cause, *shown;
	json_t		*n;
	char		 buf[512];
	size_t		 used = 0, i;

	buf[0] = '\0';
	json_object_foreach(retired, cause, n) {
		if (json_integer_value(n) == 0)
			continue;
		shown = cause;
		for (i = 0; i < sizeof status_causes / sizeof *status_causes;
		    i++) {
			if (strcmp(cause, status_causes[i].cause) == 0)
				shown = status_causes[i].shown;
		}
		used += (size_t)snprintf(buf + used, used < sizeof buf ?
		    sizeof buf - used : 0, "%s%s=%lld", used > 0 ? " " : "",
		    shown, (long long)json_integer_value(n));
		if (used >= sizeof buf)
			break;
	}
	return (json_string(used > 0 ? buf : "-"));
}

/* A worker's task as "06e2db47/p3 1.2s". */
static json_t *
status_task_text(json_t *task)
{
	const char	*op = json_string_value(json_object_get(task,
			    "operation"));
	char		 age[32], buf[96];

	if (op == NULL)
		return (json_incref(task));
	status_format_age(json_integer_value(json_object_get(task, "age_ms")),
	    age, sizeof age);
	snprintf(buf, sizeof buf, "%.8s/p%lld %s", op, (long long)
	    json_integer_value(json_object_get(task, "partition")), age);
	return (json_string(buf));
}

/* Rewrite one table row for people, without the keys of hide. */
static json_t *
status_row(json_t *row, const char *const *hide)
{
	json_t		*out = json_object(), *v;
	const char	*key;
	char		 buf[64], name[64];
	size_t		 n;

	json_object_foreach(row, key, v) {
		n = strlen(key);
		if (hide != NULL && status_listed(hide, key))
			continue;
		if (n > 3 && strcmp(key + n - 3, "_ms") == 0 &&
		    json_is_integer(v)) {
			status_format_age(json_integer_value(v), buf,
			    sizeof buf);
			snprintf(name, sizeof name, "%.*s", (int)(n - 3), key);
			json_object_set_new(out, name, json_string(buf));
		} else if (strcmp(key, "uid") == 0 ||
		    strcmp(key, "client") == 0)
			json_object_set_new(out, key, status_user(v));
		else if (strcmp(key, "gid") == 0)
			continue;
		else if (strcmp(key, "id") == 0 ||
		    strcmp(key, "session") == 0 ||
		    strcmp(key, "operation") == 0)
			json_object_set_new(out, key, status_short_id(v));
		else if (strcmp(key, "retired") == 0 && json_is_object(v))
			continue;	/* last, it is the widest */
		else if (strcmp(key, "task") == 0 && json_is_object(v))
			json_object_set_new(out, key, status_task_text(v));
		else if (strcmp(key, "rss_kb") == 0 && json_is_integer(v)) {
			if (json_integer_value(v) >= 10240)
				snprintf(buf, sizeof buf, "%lldM", (long long)
				    (json_integer_value(v) / 1024));
			else
				snprintf(buf, sizeof buf, "%lldk",
				    (long long)json_integer_value(v));
			json_object_set_new(out, "rss", json_string(buf));
		} else if (json_is_array(v))
			json_object_set_new(out, key,
			    json_integer((json_int_t)json_array_size(v)));
		else
			json_object_set(out, key, v);
	}
	if ((v = json_object_get(row, "retired")) != NULL && json_is_object(v))
		json_object_set_new(out, "retired", status_causes_text(v));
	return (out);
}

/* The busy workers running a task of operation id: its running tasks, as
 * the first lines count them (emberd's own count has its queued ones). */
static json_int_t
status_operation_running(json_t *workers, const char *id)
{
	json_t		*w;
	const char	*op;
	size_t		 i;
	json_int_t	 n = 0;

	json_array_foreach(workers, i, w) {
		op = json_string_value(json_object_get(json_object_get(w,
		    "task"), "operation"));
		if (op != NULL && id != NULL && strcmp(op, id) == 0)
			n++;
	}
	return (n);
}

/* An operation's row: its progress as done/partitions, the tasks running
 * and left, and what it does. */
static json_t *
status_operation_row(json_t *op, json_t *workers)
{
	json_t		*out = json_object(), *what, *stages;
	json_int_t	 parts, done, run, stage, count;
	char		 buf[64];

	parts = json_integer_value(json_object_get(op, "partitions"));
	done = json_integer_value(json_object_get(op, "done"));
	run = status_operation_running(workers, json_string_value(
	    json_object_get(op, "id")));
	json_object_set_new(out, "id", status_short_id(json_object_get(op,
	    "id")));
	json_object_set(out, "action", json_object_get(op, "action"));
	json_object_set(out, "state", json_object_get(op, "state"));
	snprintf(buf, sizeof buf, "%lld/%lld", (long long)done,
	    (long long)parts);
	/* In a map stage: that stage's tasks, after which stage. */
	stages = json_object_get(op, "stages");
	stage = json_integer_value(json_object_get(stages, "running"));
	count = json_integer_value(json_object_get(stages, "count"));
	if (stages != NULL && stage < count - 1)
		snprintf(buf, sizeof buf, "s%lld:%lld/%lld", (long long)stage,
		    (long long)json_integer_value(json_object_get(stages,
		    "done")), (long long)json_integer_value(
		    json_object_get(stages, "tasks")));
	json_object_set_new(out, "parts", json_string(buf));
	json_object_set_new(out, "run", json_integer(run));
	json_object_set_new(out, "left", json_integer(parts - done - run > 0 ?
	    parts - done - run : 0));
	json_object_set(out, "records", json_object_get(op, "records_sent"));
	status_format_age(json_integer_value(json_object_get(op, "age_ms")),
	    buf, sizeof buf);
	json_object_set_new(out, "age", json_string(buf));
	if ((what = json_object_get(op, "what")) != NULL)
		json_object_set(out, "what", what);
	return (out);
}

/* An operation's other members, for -v: NULL if it has none. */
static json_t *
status_operation_details(json_t *op)
{
	json_t	*rest = status_row(op, status_operation_shown), *out;

	if (json_object_size(rest) == 0) {
		json_decref(rest);
		return (NULL);
	}
	out = json_pack("{s:o}", "id", status_short_id(json_object_get(op,
	    "id")));
	json_object_update(out, rest);
	json_decref(rest);
	return (out);
}

/* The heading of a column. */
static const char *
status_heading(const char *key)
{
	size_t	i;

	for (i = 0; i < sizeof status_headings / sizeof *status_headings; i++) {
		if (strcmp(key, status_headings[i].key) == 0)
			return (status_headings[i].heading);
	}
	return (key);
}

/* Print a JSON value as a table cell or a line's value. */
static void
status_print_value(json_t *v)
{
	char	*s;

	switch (json_typeof(v)) {
	case JSON_STRING:
		fputs(json_string_value(v), stdout);
		break;
	case JSON_INTEGER:
		printf("%" JSON_INTEGER_FORMAT, json_integer_value(v));
		break;
	default:
		s = json_dumps(v, JSON_COMPACT | JSON_ENCODE_ANY);
		fputs(s != NULL ? s : "?", stdout);
		free(s);
		break;
	}
}

/* The width of a value as status_print_value prints it. */
static int
status_value_width(json_t *v)
{
	char	*s;
	int	 n;

	switch (json_typeof(v)) {
	case JSON_STRING:
		return ((int)strlen(json_string_value(v)));
	case JSON_INTEGER:
		return (snprintf(NULL, 0, "%" JSON_INTEGER_FORMAT,
		    json_integer_value(v)));
	default:
		s = json_dumps(v, JSON_COMPACT | JSON_ENCODE_ANY);
		n = s != NULL ? (int)strlen(s) : 1;
		free(s);
		return (n);
	}
}

/* Print a cell of at most width bytes, cut between characters. */
static void
status_print_cut(json_t *cell, int width)
{
	char	*s;
	size_t	 n;

	if (json_is_string(cell))
		s = strdup(json_string_value(cell));
	else
		s = json_dumps(cell, JSON_COMPACT | JSON_ENCODE_ANY);
	if (s == NULL)
		return;
	n = strlen(s);
	if (width >= 0 && n > (size_t)width) {
		n = (size_t)width;
		while (n > 0 && ((unsigned char)s[n] & 0xc0) == 0x80)
			n--;
	}
	fwrite(s, 1, n, stdout);
	free(s);
}

/*
 * Print an array of objects as a table: one column per key, in the order
 * the keys first appear; the last column's cells are cut to end within
 * STATUS_COLUMNS.
 */
static void
status_print_table(json_t *rows)
{
	json_t		*columns, *row, *v, *column;
	const char	*key;
	size_t		 i, j;
	int		*width, w, last = 0;

	columns = json_array();
	json_array_foreach(rows, i, row) {
		json_object_foreach(row, key, v) {
			json_array_foreach(columns, j, column) {
				if (strcmp(json_string_value(column), key) == 0)
					break;
			}
			if (j == json_array_size(columns))
				json_array_append_new(columns,
				    json_string(key));
		}
	}
	if (json_array_size(columns) == 0) {
		json_decref(columns);
		return;
	}
	if ((width = calloc(json_array_size(columns), sizeof *width)) == NULL) {
		json_decref(columns);
		return;
	}
	json_array_foreach(columns, j, v) {
		width[j] = (int)strlen(status_heading(json_string_value(v)));
		json_array_foreach(rows, i, row) {
			json_t *cell = json_object_get(row,
			    json_string_value(v));
			if (cell != NULL && (w = status_value_width(cell)) >
			    width[j])
				width[j] = w;
		}
	}

	json_array_foreach(columns, j, v) {
		const char *p;

		if (j + 1 < json_array_size(columns))
			last += width[j] + 1;
		if (j > 0)
			putchar(' ');
		for (p = status_heading(json_string_value(v)); *p != '\0';
		    p++)
			putchar(*p >= 'a' && *p <= 'z' ? *p - 'a' + 'A' : *p);
		if (j + 1 < json_array_size(columns))
			printf("%*s", width[j] - (int)strlen(
			    status_heading(json_string_value(v))), "");
	}
	putchar('\n');
	json_array_foreach(rows, i, row) {
		json_array_foreach(columns, j, v) {
			json_t *cell = json_object_get(row,
			    json_string_value(v));

			if (j > 0)
				putchar(' ');
			if (cell == NULL) {
				putchar('-');
				w = 1;
			} else if (j + 1 == json_array_size(columns)) {
				status_print_cut(cell, STATUS_COLUMNS - last);
				w = 0;
			} else {
				status_print_value(cell);
				w = status_value_width(cell);
			}
			if (j + 1 < json_array_size(columns))
				printf("%*s", width[j] - w, "");
		}
		putchar('\n');
	}
	free(width);
	json_decref(columns);
}

/* Print the counters, two to a line, the zeros too. */
static void
status_print_counters(json_t *counters)
{
	const char	*key;
	json_t		*v;
	int		 n = 0;

	printf("counters\n");
	json_object_foreach(counters, key, v) {
		printf("  %-24.24s %12lld", key,
		    (long long)json_integer_value(v));
		if (++n % 2 == 0)
			putchar('\n');
	}
	if (n % 2 != 0)
		putchar('\n');
}

/* The first line: who, since when, how busy. */
static void
status_print_summary(json_t *reply)
{
	json_t		*workers = json_object_get(reply, "workers"), *w;
	char		 age[32];
	size_t		 i;
	int		 busy = 0;

	json_array_foreach(workers, i, w) {
		const char *state = json_string_value(json_object_get(w,
		    "state"));

		if (state != NULL && strcmp(state, "busy") == 0)
			busy++;
	}
	status_format_age(json_integer_value(json_object_get(reply,
	    "uptime_ms")), age, sizeof age);
	printf("%s, pid %lld, up %s%s\n", json_string_value(json_object_get(
	    reply, "server")) != NULL ? json_string_value(json_object_get(
	    reply, "server")) : "emberd", (long long)json_integer_value(
	    json_object_get(reply, "pid")), age, json_is_true(json_object_get(
	    reply, "draining")) ? ", draining" : "");
	printf("tasks: %d running, %lld queued; workers: %zu of %lld\n", busy,
	    (long long)json_integer_value(json_object_get(reply,
	    "tasks_queued")), json_array_size(workers),
	    (long long)json_integer_value(json_object_get(reply,
	    "workers_max")));
}

/* The keys the summary line shows. */
static int
status_in_summary(const char *key)
{
	static const char *const keys[] = { "ok", "server", "pid",
	    "uptime_ms", "draining", "tasks_queued", "workers_max", NULL };
	int	i;

	for (i = 0; keys[i] != NULL; i++) {
		if (strcmp(key, keys[i]) == 0)
			return (1);
	}
	return (0);
}

/* A number of bytes as ember.conf writes sizes: 512, 15k, 1.5m, 64m. */
static void
status_format_size(json_int_t n, char *buf, size_t len)
{
	static const char	units[] = "kmg";
	json_int_t		unit = 1024;
	int			i;

	if (n < 1024) {
		snprintf(buf, len, "%lld", (long long)n);
		return;
	}
	for (i = 0; i < 2 && n >= unit * 1024; i++)
		unit *= 1024;
	if (n % unit == 0 || n / unit >= 100)
		snprintf(buf, len, "%lld%c", (long long)(n / unit), units[i]);
	else
		snprintf(buf, len, "%.1f%c", (double)n / (double)unit,
		    units[i]);
}

/* Print how shuffle files are bounded in one line: the kernel's bound
 * per user, or why there is none. */
static void
status_print_shuffle_bounds(json_t *b)
{
	const char	*by = json_string_value(json_object_get(b, "by"));
	const char	*why = json_string_value(json_object_get(b, "why"));
	char		 size[32], line[512];

	status_format_size(json_integer_value(json_object_get(b,
	    "max_per_uid")), size, sizeof size);
	if (by != NULL && strcmp(by, "tmpfs per user") == 0)
		snprintf(line, sizeof line, "shuffle files: a tmpfs of %s per "
		    "user, %lld mounted, %lld resizes pending", size,
		    (long long)json_integer_value(json_object_get(b, "mounts")),
		    (long long)json_integer_value(json_object_get(b,
		    "resize_pending")));
	else
		snprintf(line, sizeof line, "shuffle files: %s per user as "
		    "reported by map tasks: %s", size, why != NULL ? why : "");
	printf("\n%.*s\n", STATUS_COLUMNS, line);
}

/* Print limits as "key used of max", one a line, sizes with units. */
static void
status_print_limit_uses(const char *indent, json_t *limits)
{
	const char	*k;
	json_t		*use;
	json_int_t	 used, max;
	char		 u[32], m[32];

	json_object_foreach(limits, k, use) {
		used = json_integer_value(json_object_get(use, "used"));
		max = json_integer_value(json_object_get(use, "max"));
		if (conf_key_is_size(k)) {
			status_format_size(used, u, sizeof u);
			status_format_size(max, m, sizeof m);
		} else {
			snprintf(u, sizeof u, "%lld", (long long)used);
			snprintf(m, sizeof m, "%lld", (long long)max);
		}
		printf("%s%-36s %s of %s\n", indent, k, u, m);
	}
}

/* Print the limits member: each uid's use, then everyone's. */
static void
status_print_limits(json_t *limits)
{
	json_t	*user, *total;
	size_t	 i;

	printf("\nlimits\n");
	json_array_foreach(json_object_get(limits, "users"), i, user) {
		printf("  uid %lld\n", (long long)json_integer_value(
		    json_object_get(user, "uid")));
		status_print_limit_uses("    ", json_object_get(user, "limits"));
	}
	if (json_is_object(total = json_object_get(limits, "total"))) {
		printf("  all users\n");
		status_print_limit_uses("    ", total);
	}
}

/* Print the operations, and with verbose their other members. */
static void
status_print_operations(json_t *ops, json_t *workers, int verbose)
{
	json_t	*rows = json_array(), *details = json_array(), *row, *op;
	size_t	 i;

	printf("\noperations: %zu\n", json_array_size(ops));
	json_array_foreach(ops, i, op) {
		json_array_append_new(rows, status_operation_row(op, workers));
		if (verbose && (row = status_operation_details(op)) != NULL)
			json_array_append_new(details, row);
	}
	status_print_table(rows);
	if (json_array_size(details) > 0) {
		printf("\noperation details: %zu\n", json_array_size(details));
		status_print_table(details);
	}
	json_decref(rows);
	json_decref(details);
}

void
status_print(json_t *reply, int verbose)
{
	const char	*key, *k;
	json_t		*v, *item, *sub, *rows;
	size_t		 i;
	int		 tabular;

	status_print_summary(reply);
	json_object_foreach(reply, key, v) {
		if (status_in_summary(key))
			continue;
		if (!verbose && status_listed(status_verbose_only, key))
			continue;
		if (strcmp(key, "counters") == 0 && json_is_object(v)) {
			putchar('\n');
			status_print_counters(v);
			continue;
		}
		if (strcmp(key, "operations") == 0 && json_is_array(v)) {
			status_print_operations(v, json_object_get(reply,
			    "workers"), verbose);
			continue;
		}
		if (json_is_array(v)) {
			printf("\n%s: %zu\n", key, json_array_size(v));
			tabular = 1;
			json_array_foreach(v, i, item) {
				if (!json_is_object(item))
					tabular = 0;
			}
			if (!tabular) {
				json_array_foreach(v, i, item) {
					printf("  ");
					status_print_value(item);
					putchar('\n');
				}
				continue;
			}
			rows = json_array();
			json_array_foreach(v, i, item)
				json_array_append_new(rows, status_row(item,
				    verbose ? NULL : status_tuning));
			status_print_table(rows);
			json_decref(rows);
			continue;
		}
		if (strcmp(key, "limits") == 0 && json_is_object(v)) {
			status_print_limits(v);
			continue;
		}
		if (strcmp(key, "shuffle_bounds") == 0 && !verbose &&
		    json_is_object(v)) {
			status_print_shuffle_bounds(v);
			continue;
		}
		if (json_is_object(v)) {
			printf("\n%s\n", key);
			json_object_foreach(v, k, sub) {
				printf("  %-24s ", k);
				status_print_cut(sub, STATUS_COLUMNS - 27);
				putchar('\n');
			}
			continue;
		}
		printf("%-12s ", key);
		status_print_value(v);
		putchar('\n');
	}
}
