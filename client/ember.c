/*
 * ember: the command line client.  The protocol lives in libember; this file
 * only reads arguments, prints records and shows status.
 */
#include <errno.h>
#include <getopt.h>
#include <inttypes.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include <jansson.h>
#include <uuid/uuid.h>

#include "cancel.h"
#include "ember.h"
#include "oplist.h"
#include "progress.h"
#include "status.h"
#include "submit.h"

#ifndef PACKAGE_VERSION
#define PACKAGE_VERSION "unknown"
#endif

#define EMBER_STDOUT_BUFFER	(1024 * 1024)

#define EXIT_USAGE		2

static const char	*socket_path;

/* Print the synopsis, and with full set what each command does. */
static void
usage(FILE *f, int full)
{
	fprintf(f,
	    "usage: ember [--socket PATH] run [--collect | --count | "
	    "--action ACTION]\n"
	    "                 [--option KEY=VALUE ...] PLAN.json\n"
	    "       ember [--socket PATH] ops [--json]\n"
	    "       ember [--socket PATH] cancel OPERATION\n"
	    "       ember [--socket PATH] checkpoint drop ID\n"
	    "       ember submit --master URL [run's action options] "
	    "PLAN.json\n"
	    "       ember [--socket PATH] status [-v | --json]\n"
	    "       ember --version | --help\n");
	if (!full)
		return;
	fprintf(f,
	    "\n"
	    "  run      execute the plan (PLAN.json, or - for standard input)\n"
	    "           and print one record per line; a null record prints\n"
	    "           as an empty line, a pair as key<TAB>value, a group\n"
	    "           as key<TAB>v1<TAB>v2..., as save writes them (a\n"
	    "           null value as an empty one).\n"
	    "           --collect has emberd push every partition instead of\n"
	    "           iterating; --count prints the number of records.\n"
	    "           --action takes any action: iterate, collect, count,\n"
	    "           count_by_value (prints\n"
	    "           count<TAB>record, largest first; null records as\n"
	    "           count<TAB>\\N), reduce (with\n"
	    "           --option fn=sum|min|max), save (with --option\n"
	    "           path=/abs/dir, and overwrite=true), checkpoint\n"
	    "           (prints the checkpoint's id, kept until dropped;\n"
	    "           eager=false writes it on first read; a plan reads it\n"
	    "           with {\"checkpoint\": ID} as its source).  --option\n"
	    "           prefetch=N: partitions iterate computes ahead of the\n"
	    "           one printed (by default one per worker, fewer when\n"
	    "           they would hold over 4 MiB in emberd; 0: none);\n"
	    "           limit=N: stop after N records in all (iterate,\n"
	    "           collect).  --option values are JSON when they parse\n"
	    "           as JSON, else text.  Options may also follow\n"
	    "           PLAN.json.  On a\n"
	    "           terminal, a progress line shows on standard error.\n"
	    "           Ctrl-C interrupts the operation: emberd stops its\n"
	    "           tasks at once.\n"
	    "  ops      list your operations: action, state, partitions done,\n"
	    "           tasks running, records sent, age; --json prints them\n"
	    "           as emberd's status has them.\n"
	    "  cancel OPERATION\n"
	    "           interrupt one of your operations (its id, or the\n"
	    "           start of it), whichever session it belongs to.\n"
	    "  checkpoint drop ID\n"
	    "           remove a checkpoint and its files.\n"
	    "  submit   run the plan on Spark (spark-submit --master URL)\n"
	    "           and print what run prints; ember submit --help\n"
	    "           says more, docs/spark.md all.\n"
	    "  status   show emberd's workers, pools, sessions and operations\n"
	    "           (what each does, its partitions done, running and\n"
	    "           left); -v adds the limits, the counters and more\n"
	    "           columns; --json prints the raw reply.\n"
	    "\n"
	    "The socket is --socket PATH, else $%s, else %s.\n",
	    EMBER_SOCKET_ENV, EMBER_DEFAULT_SOCKET);
}

/* Report a library error and exit. */
static void __attribute__((noreturn))
ember_die(struct ember *e)
{
	cancel_wait();
	fprintf(stderr, "ember: %s: %s\n", ember_error_class(e),
	    ember_error(e));
	ember_close(e);
	exit(1);
}

/* Connect or exit. */
static struct ember *
ember_open(void)
{
	struct ember	*e;
	char		*why;

	if ((e = ember_connect(socket_path, &why)) == NULL) {
		fprintf(stderr, "ember: %s\n", why);
		free(why);
		exit(1);
	}
	return (e);
}

/* Read a whole file (- for standard input) into a string, or exit. */
static char *
ember_read_file(const char *path)
{
	FILE	*f;
	char	*buf = NULL;
	size_t	 len = 0, size = 0, n;

	if (strcmp(path, "-") == 0)
		f = stdin;
	else if ((f = fopen(path, "re")) == NULL) {
		fprintf(stderr, "ember: %s: %s\n", path, strerror(errno));
		exit(1);
	}
	for (;;) {
		if (size - len < 4096) {
			size = size == 0 ? 65536 : size * 2;
			if ((buf = realloc(buf, size)) == NULL) {
				fprintf(stderr, "ember: %s: out of memory\n",
				    path);
				exit(1);
			}
		}
		n = fread(buf + len, 1, size - len - 1, f);
		len += n;
		if (n == 0)
			break;
	}
	if (ferror(f)) {
		fprintf(stderr, "ember: %s: %s\n", path, strerror(errno));
		exit(1);
	}
	if (f != stdin)
		fclose(f);
	buf[len] = '\0';
	return (buf);
}

/*
 * Records go to standard output through a buffer of our own rather than
 * stdio: one memcpy per record and one write per megabyte.
 */
struct output {
	char		*buf;
	size_t		 len;
	size_t		 size;
	struct progress	*progress;	/* erased while records go out */
};

/*
 * Handle a failed write to standard output; exits.  When the reader went
 * away (| head), end quietly: stop an iterate cleanly, which lets emberd
 * keep its workers; a collect cannot be stopped short of its end, so just
 * close it.
 */
static void __attribute__((noreturn))
output_failed(struct ember *e, int can_stop)
{
	int	saved = errno;

	if (saved == EPIPE) {
		if (can_stop)
			ember_stop(e);
		ember_close(e);
		exit(0);
	}
	fprintf(stderr, "ember: standard output: %s\n", strerror(saved));
	ember_close(e);
	exit(1);
}

/* Write len bytes to standard output in full, below the progress line
 * if it shares the terminal. */
static int
output_write(struct output *o, const char *p, size_t len)
{
	ssize_t	n;
	int	rc = 0;

	progress_hold(o->progress);
	while (len > 0) {
		n = write(STDOUT_FILENO, p, len);
		if (n == -1) {
			if (errno == EINTR)
				continue;
			rc = -1;
			break;
		}
		p += n;
		len -= (size_t)n;
	}
	progress_let_go(o->progress);
	return (rc);
}

/* Write out what is buffered. */
static int
output_flush(struct output *o)
{
	if (output_write(o, o->buf, o->len) == -1)
		return (-1);
	o->len = 0;
	return (0);
}

/* Add bytes. */
static int
output_add(struct output *o, const void *data, size_t len)
{
	if (o->size - o->len < len + 1) {
		if (output_flush(o) == -1)
			return (-1);
		if (len + 1 > o->size)
			return (output_write(o, data, len));
	}
	if (len > 0)
		memcpy(o->buf + o->len, data, len);
	o->len += len;
	return (0);
}

/* Add one byte: output_add always leaves room for it. */
static void
output_byte(struct output *o, char c)
{
	o->buf[o->len++] = c;
}

/* Add a tab and a value of a pair or a group, a null as an empty one, as
 * save writes it: right after output_add, which leaves room for the tab. */
static int
output_value(struct output *o, const struct ember_bytes *v)
{
	output_byte(o, '\t');
	return (output_add(o, v->data, v->len));
}

/*
 * Add a record and its newline: a plain one as it is (a null as an empty
 * line), a pair as key<TAB>value, a group as key<TAB>v1<TAB>v2...
 */
static int
output_record(struct output *o, const struct ember_item *it)
{
	size_t	i;

	if (output_add(o, it->key.data, it->key.len) == -1)
		return (-1);
	if (it->kind == EMBER_KIND_PAIR &&
	    output_value(o, &it->value) == -1)
		return (-1);
	for (i = 0; it->kind == EMBER_KIND_GROUP && i < it->nvalues; i++)
		if (output_value(o, &it->values[i]) == -1)
			return (-1);
	output_byte(o, '\n');
	return (0);
}

/*
 * Check the plan is a JSON object before sending it, so that an error
 * names the line and column in the file (or standard input) it came from.
 */
static int
run_check_plan(const char *path, const char *plan)
{
	json_error_t	 jerr;
	json_t		*j;
	const char	*name = strcmp(path, "-") == 0 ? "<stdin>" : path;

	if ((j = json_loads(plan, JSON_ALLOW_NUL, &jerr)) == NULL) {
		fprintf(stderr, "ember: %s:%d:%d: %s\n", name, jerr.line,
		    jerr.column, jerr.text);
		return (-1);
	}
	if (!json_is_object(j)) {
		fprintf(stderr, "ember: %s: the plan must be a JSON object "
		    "({\"source\": ...})\n", name);
		json_decref(j);
		return (-1);
	}
	json_decref(j);
	return (0);
}

int
cli_option(json_t *options, const char *command, const char *kv)
{
	const char	*eq = strchr(kv, '=');
	json_t		*v;
	char		*key;

	if (eq == NULL || eq == kv) {
		fprintf(stderr, "ember: %s: --option %s: expected key=value\n",
		    command, kv);
		return (-1);
	}
	if ((v = json_loads(eq + 1, JSON_DECODE_ANY, NULL)) == NULL)
		v = json_string(eq + 1);
	if (v == NULL) {
		fprintf(stderr, "ember: %s: --option %s: not UTF-8\n",
		    command, kv);
		return (-1);
	}
	key = strndup(kv, (size_t)(eq - kv));
	json_object_set_new(options, key, v);
	free(key);
	return (0);
}

/*
 * Refuse what the one-shot CLI cannot keep: a local checkpoint lives with
 * its session, and this command's session ends with it, so the next
 * ember run would get CHECKPOINT_NOT_FOUND.
 */
static int
run_check_action(const char *action, json_t *options)
{
	if (strcmp(action, "checkpoint") == 0 &&
	    json_is_true(json_object_get(options, "local"))) {
		fprintf(stderr, "ember: run: a local checkpoint is dropped "
		    "with its session, and this command's session ends with "
		    "it: write a reliable one (local=false, the default), "
		    "kept until ember checkpoint drop\n");
		return (-1);
	}
	return (0);
}

/*
 * The execute request's text, with an operation id of our own (in id): a
 * Ctrl-C interrupts it, and the progress line finds it, before the reply
 * comes.  NULL if the plan or the options are not JSON objects.
 */
static char *
run_request(const char *plan, const char *action, const char *options,
    char id[37])
{
	json_t	*request;
	char	*text;
	uuid_t	 u;

	uuid_generate(u);
	uuid_unparse_lower(u, id);
	request = json_pack("{s:s,s:o,s:s,s:o,s:s}", "op", "execute", "plan",
	    json_loads(plan, JSON_ALLOW_NUL, NULL), "action", action, "options",
	    options != NULL ? json_loads(options, JSON_ALLOW_NUL, NULL) :
	    json_object(),
	    "operation", id);
	if (request == NULL) {
		fprintf(stderr, "ember: run: the plan is not a JSON object\n");
		return (NULL);
	}
	text = json_dumps(request, JSON_COMPACT);
	json_decref(request);
	return (text);
}

/* Stream the records of iterate or collect to standard output. */
static int
run_stream(struct ember *e, const char *plan, const char *action,
    const char *options)
{
	struct output	 out;
	struct progress	*progress;
	json_t		*reply;
	char		*text, *request, id[37];
	struct ember_item it;
	int64_t		 records = 0;
	int		 rc, stop;

	signal(SIGPIPE, SIG_IGN);
	out.size = EMBER_STDOUT_BUFFER;
	out.len = 0;
	out.progress = NULL;
	if ((out.buf = malloc(out.size)) == NULL) {
		fprintf(stderr, "ember: out of memory\n");
		exit(1);
	}
	if ((request = run_request(plan, action, options, id)) == NULL)
		return (EXIT_USAGE);
	cancel_set(ember_session(e), id);
	rc = ember_request(e, request, &text);
	free(request);
	if (rc == -1)
		ember_die(e);
	reply = json_loads(text, 0, NULL);
	free(text);
	progress = progress_create(json_integer_value(json_object_get(reply,
	    "partitions")));
	out.progress = progress;
	json_decref(reply);
	stop = strcmp(action, "iterate") == 0;
	while ((rc = ember_next_item(e, &it)) == 1) {
		if (output_record(&out, &it) == -1)
			output_failed(e, stop);
		progress_stream(progress, ember_partition(e), ++records);
	}
	if (output_flush(&out) == -1)
		output_failed(e, stop);
	progress_free(progress);
	free(out.buf);
	if (rc == -1)
		ember_die(e);
	return (0);
}

/*
 * Print count_by_value's result as count<TAB>record lines, the largest
 * count first, then by record; the record's bytes as they are (NULs
 * included, as iterate prints them); the nulls' count last, as
 * count<TAB>\N.
 */
static void
run_print_counts(const struct ember_counts *counts)
{
	const void	*data;
	size_t		 n, i, len;
	int64_t		 count;

	n = ember_counts_size(counts);
	for (i = 0; i < n; i++) {
		count = ember_counts_get(counts, i, &data, &len);
		printf("%" PRId64 "\t", count);
		fwrite(data, 1, len, stdout);
		putchar('\n');
	}
	if (ember_counts_nulls(counts) > 0)
		printf("%" PRId64 "\t\\N\n", ember_counts_nulls(counts));
}

/* Print an action's reply: count, value, files. */
static void
run_print_reply(struct ember *e, const char *action, const char *reply_text)
{
	struct ember_reduced	 reduced;
	json_t			*reply;
	char			*text;

	if (strcmp(action, "reduce") == 0) {
		if (ember_reduced_parse(e, reply_text, &reduced) == -1)
			ember_die(e);
		if (reduced.type == EMBER_VALUE_INTEGER)
			printf("%" PRId64 "\n", reduced.integer);
		else if (reduced.type == EMBER_VALUE_REAL)
			printf("%.17g\n", reduced.real);
		else
			printf("null\n");
		return;
	}
	reply = json_loads(reply_text, JSON_ALLOW_NUL, NULL);
	if (strcmp(action, "count") == 0)
		printf("%" JSON_INTEGER_FORMAT "\n",
		    json_integer_value(json_object_get(reply, "count")));
	else if (strcmp(action, "checkpoint") == 0)
		printf("%s\n", json_string_value(json_object_get(reply,
		    "checkpoint")));
	else if (strcmp(action, "save") == 0)
		printf("%" JSON_INTEGER_FORMAT " records in %"
		    JSON_INTEGER_FORMAT " files\n",
		    json_integer_value(json_object_get(reply, "records")),
		    json_integer_value(json_object_get(reply, "files")));
	else {
		text = json_dumps(reply, JSON_COMPACT);
		printf("%s\n", text != NULL ? text : "{}");
		free(text);
	}
	json_decref(reply);
}

/* Run an action that answers with one reply, showing progress meanwhile. */
static int
run_reply(struct ember *e, const char *plan, const char *action,
    const char *options)
{
	struct progress		*progress;
	struct ember_counts	*counts = NULL;
	char			*text, *reply_text;
	char			 id[37];
	int			 rc;

	if ((text = run_request(plan, action, options, id)) == NULL)
		return (EXIT_USAGE);
	cancel_set(ember_session(e), id);
	progress = progress_create(0);
	progress_watch(progress, socket_path, id);
	if (strcmp(action, "count_by_value") == 0) {
		/* One parse and one sort, in the order printed. */
		rc = ember_request_counts(e, text, EMBER_COUNTS_BY_COUNT,
		    &counts);
		reply_text = NULL;
	} else
		rc = ember_request(e, text, &reply_text);
	progress_free(progress);
	free(text);
	if (rc == -1)
		ember_die(e);
	if (counts != NULL)
		run_print_counts(counts);
	else
		run_print_reply(e, action, reply_text);
	ember_counts_free(counts);
	free(reply_text);
	if (fflush(stdout) == EOF)
		output_failed(e, 0);
	return (0);
}

/* Run a plan and print its records or its result. */
static int
cmd_run(int argc, char **argv)
{
	static const struct option longopts[] = {
		{ "action",	required_argument,	NULL, 'a' },
		{ "collect",	no_argument,		NULL, 'C' },
		{ "count",	no_argument,		NULL, 'n' },
		{ "option",	required_argument,	NULL, 'o' },
		{ "socket",	required_argument,	NULL, 'S' },
		{ "help",	no_argument,		NULL, 'h' },
		{ NULL,		0,			NULL, 0 }
	};
	const char	*action = NULL;
	json_t		*options = json_object();
	struct ember	*e;
	char		*plan, *opts = NULL;
	int		 ch, rc;

	/* Options may follow the plan: ember run plan.json --count. */
	optind = 0;
	while ((ch = getopt_long(argc, argv, "h", longopts, NULL)) != -1) {
		switch (ch) {
		case 'a':
		case 'C':
		case 'n':
			if (action != NULL) {
				fprintf(stderr, "ember: run: give one action "
				    "(--action, --collect or --count)\n");
				goto usage_error;
			}
			action = ch == 'a' ? optarg : ch == 'C' ? "collect" :
			    "count";
			break;
		case 'o':
			if (cli_option(options, "run", optarg) == -1)
				goto usage_error;
			break;
		case 'S':
			socket_path = optarg;
			break;
		case 'h':
			usage(stdout, 1);
			json_decref(options);
			return (0);
		default:
			usage(stderr, 0);
			goto usage_error;
		}
	}
	if (argc - optind != 1) {
		if (argc - optind == 0)
			fprintf(stderr, "ember: run: missing the plan: a file "
			    "of JSON, or - for standard input\n");
		else
			fprintf(stderr, "ember: run: one plan only; what is "
			    "\"%s\"?\n", argv[optind + 1]);
		usage(stderr, 0);
		goto usage_error;
	}
	if (action == NULL)
		action = "iterate";
	if (run_check_action(action, options) == -1)
		goto usage_error;
	if (json_object_size(options) > 0)
		opts = json_dumps(options, JSON_COMPACT);
	json_decref(options);

	plan = ember_read_file(argv[optind]);
	if (run_check_plan(argv[optind], plan) == -1) {
		free(plan);
		free(opts);
		return (1);
	}
	cancel_arm(socket_path);
	e = ember_open();
	if (strcmp(action, "iterate") == 0 || strcmp(action, "collect") == 0)
		rc = run_stream(e, plan, action, opts);
	else
		rc = run_reply(e, plan, action, opts);
	free(plan);
	free(opts);
	ember_close(e);
	return (rc);

usage_error:
	json_decref(options);
	return (EXIT_USAGE);
}

/* Show emberd's status. */
static int
cmd_status(int argc, char **argv)
{
	static const struct option longopts[] = {
		{ "json",	no_argument,		NULL, 'j' },
		{ "socket",	required_argument,	NULL, 'S' },
		{ "verbose",	no_argument,		NULL, 'v' },
		{ "help",	no_argument,		NULL, 'h' },
		{ NULL,		0,			NULL, 0 }
	};
	struct ember	*e;
	json_t		*reply;
	json_error_t	 jerr;
	char		*text;
	int		 ch, raw = 0, verbose = 0;

	optind = 0;
	while ((ch = getopt_long(argc, argv, "+hv", longopts, NULL)) != -1) {
		switch (ch) {
		case 'j':
			raw = 1;
			break;
		case 'v':
			verbose = 1;
			break;
		case 'S':
			socket_path = optarg;
			break;
		case 'h':
			usage(stdout, 1);
			return (0);
		default:
			usage(stderr, 0);
			return (EXIT_USAGE);
		}
	}
	if (optind != argc) {
		fprintf(stderr, "ember: status: takes no argument; what is "
		    "\"%s\"?\n", argv[optind]);
		usage(stderr, 0);
		return (EXIT_USAGE);
	}

	e = ember_open();
	if ((text = ember_status(e)) == NULL)
		ember_die(e);
	ember_close(e);
	if (raw)
		printf("%s\n", text);
	else {
		if ((reply = json_loads(text, 0, &jerr)) == NULL) {
			fprintf(stderr, "ember: status: %s\n", jerr.text);
			free(text);
			return (1);
		}
		status_print(reply, verbose);
		json_decref(reply);
	}
	free(text);
	if (fflush(stdout) == EOF && errno != EPIPE) {
		fprintf(stderr, "ember: standard output: %s\n",
		    strerror(errno));
		return (1);
	}
	return (0);
}

/* Fetch emberd's status as JSON, or exit. */
static json_t *
ember_fetch_status(const char *what)
{
	struct ember	*e;
	json_t		*reply;
	json_error_t	 jerr;
	char		*text;

	e = ember_open();
	if ((text = ember_status(e)) == NULL)
		ember_die(e);
	ember_close(e);
	if ((reply = json_loads(text, 0, &jerr)) == NULL) {
		fprintf(stderr, "ember: %s: %s\n", what, jerr.text);
		free(text);
		exit(1);
	}
	free(text);
	return (reply);
}

/* ember ops: the caller's operations and their state. */
static int
cmd_ops(int argc, char **argv)
{
	json_t	*status;
	char	*text;
	int	 raw = 0;

	if (argc == 2 && (strcmp(argv[1], "-h") == 0 ||
	    strcmp(argv[1], "--help") == 0)) {
		usage(stdout, 1);
		return (0);
	}
	if (argc == 2 && strcmp(argv[1], "--json") == 0)
		raw = 1;
	else if (argc != 1) {
		fprintf(stderr, "ember: ops: takes only --json; what is "
		    "\"%s\"?\n", argv[1]);
		usage(stderr, 0);
		return (EXIT_USAGE);
	}
	status = ember_fetch_status("ops");
	if (raw) {
		text = json_dumps(json_object_get(status, "operations"),
		    JSON_COMPACT);
		printf("%s\n", text != NULL ? text : "[]");
		free(text);
	} else
		oplist_print(stdout, status);
	json_decref(status);
	if (fflush(stdout) == EOF && errno != EPIPE) {
		fprintf(stderr, "ember: standard output: %s\n",
		    strerror(errno));
		return (1);
	}
	return (0);
}

/* ember cancel OP: interrupt an operation of the caller's, in any of its
 * sessions. */
static int
cmd_cancel(int argc, char **argv)
{
	json_t		*status, *op;
	const char	*why;
	char		*err;
	int		 rc = 0;

	if (argc == 2 && (strcmp(argv[1], "-h") == 0 ||
	    strcmp(argv[1], "--help") == 0)) {
		usage(stdout, 1);
		return (0);
	}
	if (argc != 2) {
		fprintf(stderr, "ember: cancel: expected one operation id "
		    "(ember ops lists them)\n");
		usage(stderr, 0);
		return (EXIT_USAGE);
	}
	status = ember_fetch_status("cancel");
	if ((op = oplist_find(status, argv[1], &why)) == NULL) {
		fprintf(stderr, "ember: cancel: %s: %s\n", argv[1], why);
		json_decref(status);
		return (1);
	}
	if (ember_interrupt(socket_path, json_string_value(json_object_get(op,
	    "session")), json_string_value(json_object_get(op, "id")),
	    &err) == -1) {
		fprintf(stderr, "ember: cancel: %s\n", err != NULL ? err :
		    "out of memory");
		free(err);
		rc = 1;
	}
	json_decref(status);
	return (rc);
}

/* ember checkpoint drop ID. */
static int
cmd_checkpoint(int argc, char **argv)
{
	struct ember	*e;

	if (argc == 2 && (strcmp(argv[1], "-h") == 0 ||
	    strcmp(argv[1], "--help") == 0)) {
		usage(stdout, 1);
		return (0);
	}
	if (argc != 3 || strcmp(argv[1], "drop") != 0) {
		fprintf(stderr, "ember: checkpoint: expected \"drop ID\"\n");
		usage(stderr, 0);
		return (EXIT_USAGE);
	}
	e = ember_open();
	if (ember_checkpoint_drop(e, argv[2]) == -1)
		ember_die(e);
	ember_close(e);
	return (0);
}

/* Dispatch to a command. */
int
main(int argc, char **argv)
{
	static const struct option longopts[] = {
		{ "socket",	required_argument,	NULL, 'S' },
		{ "version",	no_argument,		NULL, 'V' },
		{ "help",	no_argument,		NULL, 'h' },
		{ NULL,		0,			NULL, 0 }
	};
	int	ch;

	while ((ch = getopt_long(argc, argv, "+hV", longopts, NULL)) != -1) {
		switch (ch) {
		case 'S':
			socket_path = optarg;
			break;
		case 'V':
			printf("ember %s\n", PACKAGE_VERSION);
			return (0);
		case 'h':
			usage(stdout, 1);
			return (0);
		default:
			usage(stderr, 0);
			return (EXIT_USAGE);
		}
	}
	argc -= optind;
	argv += optind;
	if (argc == 0) {
		fprintf(stderr, "ember: missing a command: run, ops, cancel, "
		    "checkpoint or status\n");
		usage(stderr, 0);
		return (EXIT_USAGE);
	}
	/* getopt names the command in its messages: "ember run: ...". */
	if (strcmp(argv[0], "run") == 0) {
		argv[0] = (char *)"ember run";
		return (cmd_run(argc, argv));
	}
	if (strcmp(argv[0], "status") == 0) {
		argv[0] = (char *)"ember status";
		return (cmd_status(argc, argv));
	}
	if (strcmp(argv[0], "checkpoint") == 0)
		return (cmd_checkpoint(argc, argv));
	if (strcmp(argv[0], "ops") == 0)
		return (cmd_ops(argc, argv));
	if (strcmp(argv[0], "cancel") == 0)
		return (cmd_cancel(argc, argv));
	if (strcmp(argv[0], "submit") == 0) {
		argv[0] = (char *)"ember submit";
		return (cmd_submit(argc, argv));
	}
	fprintf(stderr, "ember: unknown command \"%s\"\n", argv[0]);
	usage(stderr, 0);
	return (EXIT_USAGE);
}
