/*
 * ember submit: run a plan on a Spark cluster instead of emberd.  The work
 * is spark_job.py's, run by spark-submit (docs/spark.md); this file finds
 * the programs, hands the plan over and keeps standard output for the
 * records alone.
 */
#include <sys/stat.h>
#include <sys/wait.h>

#include <errno.h>
#include <fcntl.h>
#include <getopt.h>
#include <libgen.h>
#include <limits.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include <jansson.h>

#include "submit.h"

#ifndef EMBER_PKGDATADIR
#define EMBER_PKGDATADIR "/usr/local/share/ember"
#endif
#ifndef EMBER_LIBEXECDIR
#define EMBER_LIBEXECDIR "/usr/local/libexec"
#endif

#define SUBMIT_EXIT_USAGE	2
#define SUBMIT_MAX_ARGS		128

/* The directory this program runs from, or NULL. */
static char *
submit_self_dir(void)
{
	char	 self[PATH_MAX];
	ssize_t	 n;

	n = readlink("/proc/self/exe", self, sizeof self - 1);
	if (n <= 0)
		return (NULL);
	self[n] = '\0';
	return (strdup(dirname(self)));
}

/*
 * A file the submit needs: the environment's choice, else the build
 * tree's (beside this program, as emberd finds ember-worker), else the
 * installed one.
 */
static char *
submit_find(const char *env, const char *in_tree, const char *installed)
{
	const char	*v = getenv(env);
	char		*dir, *path = NULL;

	if (v != NULL && *v != '\0')
		return (strdup(v));
	if ((dir = submit_self_dir()) != NULL &&
	    asprintf(&path, "%s/%s", dir, in_tree) != -1 &&
	    access(path, R_OK) == 0) {
		free(dir);
		return (path);
	}
	free(dir);
	free(path);
	return (strdup(installed));
}

/* spark-submit: $SPARK_HOME's, else the one on PATH. */
static char *
submit_find_spark_submit(void)
{
	const char	*home = getenv("SPARK_HOME");
	char		*path;

	if (home != NULL && *home != '\0' &&
	    asprintf(&path, "%s/bin/spark-submit", home) != -1)
		return (path);
	return (strdup("spark-submit"));
}

/* Copy the plan (a file, or - for standard input) into dir/plan.json,
 * checking it is a JSON object on the way. */
static char *
submit_copy_plan(const char *path, const char *dir)
{
	json_error_t	 jerr;
	json_t		*plan;
	char		*copy;
	const char	*name = strcmp(path, "-") == 0 ? "<stdin>" : path;

	if (strcmp(path, "-") == 0)
		plan = json_loadf(stdin, JSON_ALLOW_NUL, &jerr);
	else
		plan = json_load_file(path, JSON_ALLOW_NUL, &jerr);
	if (plan == NULL) {
		fprintf(stderr, "ember: %s:%d:%d: %s\n", name, jerr.line,
		    jerr.column, jerr.text);
		return (NULL);
	}
	if (!json_is_object(plan)) {
		fprintf(stderr, "ember: %s: the plan must be a JSON object "
		    "({\"source\": ...})\n", name);
		json_decref(plan);
		return (NULL);
	}
	if (asprintf(&copy, "%s/plan.json", dir) == -1 ||
	    json_dump_file(plan, copy, JSON_COMPACT) == -1) {
		fprintf(stderr, "ember: submit: cannot write the plan in %s\n",
		    dir);
		json_decref(plan);
		return (NULL);
	}
	json_decref(plan);
	return (copy);
}

/* Copy what the driver said on its standard error to ours. */
static void
submit_relay_stderr(const char *path)
{
	char	 buf[8192];
	size_t	 n;
	FILE	*f;

	if ((f = fopen(path, "re")) == NULL)
		return;
	while ((n = fread(buf, 1, sizeof buf, f)) > 0)
		fwrite(buf, 1, n, stderr);
	fclose(f);
}

/* Run spark-submit with argv, and answer its exit status. */
static int
submit_spawn(char **argv)
{
	pid_t	pid;
	int	status;

	fflush(NULL);
	if ((pid = fork()) == -1) {
		fprintf(stderr, "ember: submit: fork: %s\n", strerror(errno));
		return (1);
	}
	if (pid == 0) {
		execvp(argv[0], argv);
		fprintf(stderr, "ember: submit: %s: %s (install PySpark, or "
		    "set SPARK_HOME or --spark-submit)\n", argv[0],
		    strerror(errno));
		_exit(127);
	}
	while (waitpid(pid, &status, 0) == -1)
		if (errno != EINTR)
			return (1);
	if (WIFEXITED(status))
		return (WEXITSTATUS(status));
	return (128 + WTERMSIG(status));
}

/* Print the synopsis of submit. */
static void
submit_usage(FILE *f)
{
	fprintf(f,
	    "usage: ember submit --master URL [--collect | --count | "
	    "--action ACTION]\n"
	    "                    [--option KEY=VALUE ...] [--conf KEY=VALUE "
	    "...]\n"
	    "                    [--broadcast ID=FILE ...] "
	    "[--spark-submit PATH]\n"
	    "                    [--worker PATH] [--ship] PLAN.json\n"
	    "Runs the plan on Spark with spark-submit and prints what "
	    "ember run prints\n"
	    "(docs/spark.md).  --conf goes to spark-submit; --broadcast "
	    "gives the plan's\n"
	    "broadcast ID the bytes of FILE; --worker is ember-worker's "
	    "path on the\n"
	    "executors, or with --ship the one spark-submit copies to "
	    "them.\n");
}

/* Add an argument, or fail when there are too many. */
static int
submit_arg(char **argv, int *argc, char *arg)
{
	if (*argc >= SUBMIT_MAX_ARGS - 1) {
		fprintf(stderr, "ember: submit: too many arguments\n");
		return (-1);
	}
	argv[(*argc)++] = arg;
	argv[*argc] = NULL;
	return (0);
}

/*
 * "ID=FILE" of --broadcast with FILE made absolute (the driver reads it),
 * or NULL when it is not one, said on standard error.
 */
static char *
submit_broadcast(const char *arg)
{
	const char	*eq = strchr(arg, '=');
	char		*path, *out = NULL;
	size_t		 n;

	n = eq != NULL ? (size_t)(eq - arg) : 0;
	if (n == 0 || strspn(arg, "0123456789") != n || eq[1] == '\0') {
		fprintf(stderr, "ember: submit: --broadcast %s: expected "
		    "ID=FILE\n", arg);
		return (NULL);
	}
	if ((path = realpath(eq + 1, NULL)) == NULL) {
		fprintf(stderr, "ember: submit: --broadcast %s: %s\n", arg,
		    strerror(errno));
		return (NULL);
	}
	if (asprintf(&out, "%.*s=%s", (int)n, arg, path) == -1)
		out = NULL;
	free(path);
	return (out);
}

/* Build spark-submit's command line, run it and clean up. */
static int
submit_run(const char *master, char **confs, int nconfs, char **bcasts,
    int nbcasts, const char *action, const char *options,
    const char *plan_path, const char *spark_submit, const char *worker,
    int ship)
{
	char	 dir[] = "/tmp/ember-submit.XXXXXX", *argv[SUBMIT_MAX_ARGS];
	char	*plan = NULL, *job, *errfile = NULL, *ss, *wk;
	int	 argc = 0, i, fd, rc = 1;

	if (mkdtemp(dir) == NULL) {
		fprintf(stderr, "ember: submit: mkdtemp: %s\n",
		    strerror(errno));
		return (1);
	}
	job = submit_find("EMBER_SPARK_JOB", "python/ember/spark_job.py",
	    EMBER_PKGDATADIR "/spark_job.py");
	ss = spark_submit != NULL ? strdup(spark_submit) :
	    submit_find_spark_submit();
	wk = worker != NULL ? strdup(worker) : submit_find("EMBER_WORKER",
	    "ember-worker", EMBER_LIBEXECDIR "/ember-worker");
	if ((plan = submit_copy_plan(plan_path, dir)) == NULL ||
	    asprintf(&errfile, "%s/stderr", dir) == -1 ||
	    (fd = open(errfile, O_WRONLY | O_CREAT | O_EXCL | O_CLOEXEC,
	    0600)) == -1)
		goto out;
	close(fd);
	if (submit_arg(argv, &argc, ss) == -1 ||
	    submit_arg(argv, &argc, "--master") == -1 ||
	    submit_arg(argv, &argc, (char *)master) == -1 ||
	    submit_arg(argv, &argc, "--conf") == -1 ||
	    submit_arg(argv, &argc, "spark.log.level=WARN") == -1)
		goto out;
	for (i = 0; i < nconfs; i++)
		if (submit_arg(argv, &argc, "--conf") == -1 ||
		    submit_arg(argv, &argc, confs[i]) == -1)
			goto out;
	/* Shipped: Spark copies ember-worker to each executor. */
	if (ship && (submit_arg(argv, &argc, "--files") == -1 ||
	    submit_arg(argv, &argc, wk) == -1))
		goto out;
	if (submit_arg(argv, &argc, job) == -1 ||
	    submit_arg(argv, &argc, "--worker") == -1 ||
	    submit_arg(argv, &argc, wk) == -1 ||
	    submit_arg(argv, &argc, "--plan-file") == -1 ||
	    submit_arg(argv, &argc, plan) == -1 ||
	    submit_arg(argv, &argc, "--action") == -1 ||
	    submit_arg(argv, &argc, (char *)action) == -1 ||
	    submit_arg(argv, &argc, "--options") == -1 ||
	    submit_arg(argv, &argc, (char *)options) == -1 ||
	    submit_arg(argv, &argc, "--stderr-file") == -1 ||
	    submit_arg(argv, &argc, errfile) == -1 ||
	    (ship && submit_arg(argv, &argc, "--shipped") == -1))
		goto out;
	for (i = 0; i < nbcasts; i++)
		if (submit_arg(argv, &argc, "--broadcast") == -1 ||
		    submit_arg(argv, &argc, bcasts[i]) == -1)
			goto out;
	rc = submit_spawn(argv);
	submit_relay_stderr(errfile);
out:
	if (errfile != NULL)
		unlink(errfile);
	if (plan != NULL)
		unlink(plan);
	rmdir(dir);
	free(errfile);
	free(plan);
	free(job);
	free(ss);
	free(wk);
	return (rc);
}

/* ember submit: parse the arguments and run the plan on Spark. */
int
cmd_submit(int argc, char **argv)
{
	static const struct option longopts[] = {
		{ "action",		required_argument,	NULL, 'a' },
		{ "collect",		no_argument,		NULL, 'C' },
		{ "count",		no_argument,		NULL, 'n' },
		{ "option",		required_argument,	NULL, 'o' },
		{ "master",		required_argument,	NULL, 'm' },
		{ "conf",		required_argument,	NULL, 'c' },
		{ "spark-submit",	required_argument,	NULL, 's' },
		{ "worker",		required_argument,	NULL, 'w' },
		{ "ship",		no_argument,		NULL, 'p' },
		{ "broadcast",		required_argument,	NULL, 'b' },
		{ "help",		no_argument,		NULL, 'h' },
		{ NULL,			0,			NULL, 0 }
	};
	const char	*action = NULL, *master = NULL, *spark_submit = NULL;
	const char	*worker = NULL;
	char		*confs[SUBMIT_MAX_ARGS / 2], *opts;
	char		*bcasts[SUBMIT_MAX_ARGS / 4];
	json_t		*options = json_object();
	int		 ch, nconfs = 0, nbcasts = 0, ship = 0;
	int		 i, rc = SUBMIT_EXIT_USAGE;

	optind = 0;
	while ((ch = getopt_long(argc, argv, "h", longopts, NULL)) != -1) {
		switch (ch) {
		case 'a':
		case 'C':
		case 'n':
			if (action != NULL) {
				fprintf(stderr, "ember: submit: give one "
				    "action (--action, --collect or "
				    "--count)\n");
				goto out;
			}
			action = ch == 'a' ? optarg : ch == 'C' ? "collect" :
			    "count";
			break;
		case 'o':
			if (cli_option(options, "submit", optarg) == -1)
				goto out;
			break;
		case 'm':
			master = optarg;
			break;
		case 'c':
			if (nconfs == SUBMIT_MAX_ARGS / 4) {
				fprintf(stderr, "ember: submit: too many "
				    "--conf\n");
				goto out;
			}
			confs[nconfs++] = optarg;
			break;
		case 's':
			spark_submit = optarg;
			break;
		case 'w':
			worker = optarg;
			break;
		case 'p':
			ship = 1;
			break;
		case 'b':
			if (nbcasts == SUBMIT_MAX_ARGS / 4) {
				fprintf(stderr, "ember: submit: too many "
				    "--broadcast\n");
				goto out;
			}
			if ((bcasts[nbcasts] = submit_broadcast(optarg)) ==
			    NULL)
				goto out;
			nbcasts++;
			break;
		case 'h':
			submit_usage(stdout);
			rc = 0;
			goto out;
		default:
			submit_usage(stderr);
			goto out;
		}
	}
	if (master == NULL || argc - optind != 1) {
		fprintf(stderr, "ember: submit: %s\n", master == NULL ?
		    "missing --master URL (spark://HOST:PORT, local[N], ...)" :
		    "give one plan: a file of JSON, or - for standard input");
		submit_usage(stderr);
		goto out;
	}
	opts = json_dumps(options, JSON_COMPACT);
	rc = submit_run(master, confs, nconfs, bcasts, nbcasts,
	    action != NULL ? action : "iterate", opts, argv[optind],
	    spark_submit, worker, ship);
	free(opts);
out:
	for (i = 0; i < nbcasts; i++)
		free(bcasts[i]);
	json_decref(options);
	return (rc);
}
