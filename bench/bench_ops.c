/*
 * bench_ops: the worker's own work on a text file, in this process, by CPU
 * time: the word count (flat_map split " ", count_by_value) or the regex
 * filter of bench_wordcount.sh, every partition one after another through
 * run_execute, as a worker runs them, its output thrown away.  No daemon,
 * no scheduling: the CPU seconds it prints move far less on a busy
 * machine than a wall-clock figure, and perf or callgrind can run it
 * alone.
 *
 * usage: bench_ops [--partitions N] [--runs N] wordcount | regex FILE
 */

#include <sys/resource.h>
#include <sys/stat.h>

#include <err.h>
#include <fcntl.h>
#include <getopt.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include <jansson.h>

#include "output.h"
#include "plan.h"
#include "protocol.h"
#include "run.h"

static __attribute__((noreturn)) void	usage(void);

/* Print the usage and fail. */
static void
usage(void)
{
	fprintf(stderr, "usage: bench_ops [--partitions N] [--runs N] "
	    "wordcount | regex FILE\n");
	exit(2);
}

/* CPU seconds (user and system) this process has used. */
static double
cpu_now(void)
{
	struct rusage	ru;

	getrusage(RUSAGE_SELF, &ru);
	return ((double)ru.ru_utime.tv_sec + (double)ru.ru_utime.tv_usec / 1e6 +
	    (double)ru.ru_stime.tv_sec + (double)ru.ru_stime.tv_usec / 1e6);
}

/* Compare two doubles for qsort. */
static int
cmp_double(const void *a, const void *b)
{
	double	x = *(const double *)a, y = *(const double *)b;

	return ((x > y) - (x < y));
}

int
main(int argc, char **argv)
{
	static const struct option longopts[] = {
		{ "partitions",	required_argument, NULL, 'p' },
		{ "runs",	required_argument, NULL, 'r' },
		{ NULL, 0, NULL, 0 }
	};
	struct run	 t;
	struct plan	*plan;
	struct output	*out;
	struct stat	 st;
	json_t		*j;
	int64_t		 metrics[EMBER_METRIC_COUNT], in, n;
	double		*secs, t0;
	char		*text, *error = NULL;
	const char	*ops;
	int		 ch, fd, p, partitions = 8, runs = 5, i, wc;

	while ((ch = getopt_long(argc, argv, "", longopts, NULL)) != -1) {
		switch (ch) {
		case 'p':
			if ((partitions = atoi(optarg)) < 1)
				usage();
			break;
		case 'r':
			if ((runs = atoi(optarg)) < 1)
				usage();
			break;
		default:
			usage();
		}
	}
	if (argc - optind != 2)
		usage();
	if (strcmp(argv[optind], "wordcount") == 0)
		wc = 1;
	else if (strcmp(argv[optind], "regex") == 0)
		wc = 0;
	else
		usage();
	ops = wc ? "{\"flat_map\": {\"split\": \" \"}}" :
	    "{\"filter\": {\"regex\": \"\\\\bqu[a-z]+k\\\\b\"}}";
	if (asprintf(&text, "{\"source\": {\"text\": {\"paths\": [\"%s\"]}}, "
	    "\"partitions\": %d, \"ops\": [%s]}", argv[optind + 1], partitions,
	    ops) == -1)
		err(1, "asprintf");
	if ((j = json_loads(text, 0, NULL)) == NULL)
		errx(1, "the plan is not JSON: %s", text);
	if (plan_parse(j, &plan, &error) == -1)
		errx(1, "plan: %s", error);
	json_decref(j);
	free(text);
	if (stat(argv[optind + 1], &st) == -1)
		err(1, "%s", argv[optind + 1]);
	plan->files[0].size = st.st_size;
	if ((fd = open("/dev/null", O_WRONLY)) == -1)
		err(1, "/dev/null");
	out = output_create(fd);
	if ((secs = calloc((size_t)runs, sizeof *secs)) == NULL)
		err(1, "calloc");

	memset(&t, 0, sizeof t);
	t.plan = plan;
	t.mode = wc ? MODE_COUNT_BY_VALUE : MODE_COUNT;
	for (i = 0; i < runs; i++) {
		in = n = 0;
		t0 = cpu_now();
		for (p = 0; p < partitions; p++) {
			t.partition = p;
			output_reset(out);
			if (run_execute(&t, out, metrics, &error) == -1)
				errx(1, "partition %d: %s", p, error);
			if (output_finish(out, metrics, EMBER_METRIC_COUNT, 0,
			    &error) == -1)
				errx(1, "%s", error);
			in += metrics[EMBER_METRIC_RECORDS_IN];
			n += metrics[EMBER_METRIC_RECORDS_OUT];
		}
		secs[i] = cpu_now() - t0;
		printf("%s run %d: %.3f CPU s, %.0f MB per CPU second; %lld "
		    "records in, %lld out\n", argv[optind], i + 1, secs[i],
		    (double)st.st_size / 1e6 / secs[i], (long long)in,
		    (long long)n);
	}
	qsort(secs, (size_t)runs, sizeof *secs, cmp_double);
	printf("result ops_%s_cpu_s %.3f\n", argv[optind], secs[runs / 2]);
	printf("result ops_%s_cpu_min_s %.3f\n", argv[optind], secs[0]);
	printf("result ops_%s_cpu_max_s %.3f\n", argv[optind],
	    secs[runs - 1]);
	output_free(out);
	close(fd);
	plan_free(plan);
	free(secs);
	return (0);
}
