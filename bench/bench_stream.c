/*
 * bench_stream: how fast a result stream reaches a libember client, beside a
 * raw socketpair relay measured in the same run.
 *
 * - ember: a text file of 100-byte lines (plus newline) is written once and
 *   listed several times in a text source, one partition per path; the
 *   client iterates the result with ember_execute("iterate") and ember_next,
 *   counting records and bytes.  Every total is checked, against the file
 *   and against emberd's records_sent counter.
 * - baseline: producer -> relay -> consumer, three processes and two
 *   socketpairs.  The producer writes the same number of 104-byte frames in
 *   64 KiB writes, the relay forwards 256 KiB at a time as emberd does, the
 *   consumer reads 1 MiB at a time (as libember) and counts bytes.
 *
 * GB/s is 10^9 bytes of record frames (length + record, 104 bytes per
 * record) per second on both sides, so the ratio is a ratio of times.  The
 * two alternate, and the figure is the median of the runs' ratios (each
 * ember run against the relay run just before it), with the least and the
 * greatest: a machine that gets busier between pairs moves both sides.
 */

#include <sys/types.h>
#include <sys/resource.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/wait.h>

#include <err.h>
#include <errno.h>
#include <fcntl.h>
#include <getopt.h>
#include <inttypes.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include <jansson.h>

#include "ember.h"
#include "frame.h"
#include "bench_util.h"

#define RECORD_SIZE		100
#define FRAME_SIZE		(4 + RECORD_SIZE)
#define LINE_SIZE		(RECORD_SIZE + 1)
#define PRODUCER_WRITE		(64 * 1024)
#define RELAY_READ		(256 * 1024)
#define CONSUMER_READ		(1024 * 1024)

#define DEFAULT_MB		100
#define DEFAULT_COPIES		10
#define DEFAULT_RUNS		5

static const char	*socket_path;
static char		*data_path;	/* the text file, removed at exit */

static void __attribute__((noreturn))
usage(void)
{
	fprintf(stderr, "usage: bench_stream --socket PATH [--dir DIR] "
	    "[--mb N] [--copies N] [--runs N] [--prefetch N]\n"
	    "       [--only ember | raw]\n");
	exit(2);
}

/* Return the CPU time (user + system) in seconds of this process
 * (RUSAGE_SELF) or of its reaped children (RUSAGE_CHILDREN). */
static double
cpu_of(int who)
{
	struct rusage	ru;

	if (getrusage(who, &ru) == -1)
		err(1, "getrusage");
	return ((double)ru.ru_utime.tv_sec + ru.ru_utime.tv_usec / 1e6 +
	    (double)ru.ru_stime.tv_sec + ru.ru_stime.tv_usec / 1e6);
}

/* Remove the text file, on every way out of the parent. */
static void
remove_file(void)
{
	if (data_path != NULL && unlink(data_path) == -1)
		warn("unlink %s", data_path);
	free(data_path);
	data_path = NULL;
}

/* Fill one line: a line number, filler and a newline; LINE_SIZE bytes. */
static void
make_line(char *p, int64_t n)
{
	int	i, k;

	k = snprintf(p, LINE_SIZE, "%012" PRId64 " ", n);
	for (i = k; i < RECORD_SIZE; i++)
		p[i] = 'a' + (char)((n + i) % 26);
	p[RECORD_SIZE] = '\n';
}

/* Write a text file of that many 100-byte lines into dir; its path. */
static char *
make_file(const char *dir, int64_t lines)
{
	char	*path, *buf;
	size_t	 per = CONSUMER_READ / LINE_SIZE, k;
	int64_t	 n;
	int	 fd;

	if (asprintf(&path, "%s/ember-bench-XXXXXX", dir) == -1)
		err(1, "asprintf");
	if ((fd = mkstemp(path)) == -1)
		err(1, "mkstemp %s", path);
	/* Workers may run as another user (emberd as root): let them read. */
	if (fchmod(fd, 0644) == -1)
		err(1, "fchmod %s", path);
	data_path = path;
	atexit(remove_file);
	if ((buf = malloc(per * LINE_SIZE)) == NULL)
		err(1, "malloc");
	for (n = 0; n < lines; n += (int64_t)k) {
		for (k = 0; k < per && n + (int64_t)k < lines; k++)
			make_line(buf + k * LINE_SIZE, n + (int64_t)k);
		if (fd_write_full(fd, buf, k * LINE_SIZE) == -1)
			err(1, "write %s", path);
	}
	if (close(fd) == -1)
		err(1, "close %s", path);
	free(buf);
	return (path);
}

/* Build the plan: the same file copies times, one partition each. */
static char *
make_plan(const char *path, int copies)
{
	json_t	*plan, *paths;
	char	*text;
	int	 i;

	if ((paths = json_array()) == NULL)
		err(1, "json_array");
	for (i = 0; i < copies; i++)
		json_array_append_new(paths, json_string(path));
	plan = json_pack("{s:{s:{s:o}},s:i}", "source", "text", "paths",
	    paths, "partitions", copies);
	if (plan == NULL || (text = json_dumps(plan, JSON_COMPACT)) == NULL)
		errx(1, "cannot build the plan");
	json_decref(plan);
	return (text);
}

/*
 * Iterate the plan once and check every record; seconds it took, and in
 * *cpu the client's own CPU seconds.  A record must be RECORD_SIZE bytes
 * with the last filler letter of its line.
 */
static double
ember_once(const char *plan, const char *options, int copies, int64_t lines,
    double *cpu)
{
	struct ember	*e;
	const void	*data;
	const char	*r;
	size_t		 len;
	uint64_t	 t0, t1;
	int64_t		 records = 0, bytes = 0, bad = 0, sent0, sent1;
	int64_t		 expect = (int64_t)copies * lines;
	int		 rc;

	e = connect_or_die(socket_path);
	sent0 = status_counter(e, "records_sent");

	*cpu = cpu_of(RUSAGE_SELF);
	t0 = now_ns();
	if (ember_execute(e, plan, "iterate", options, NULL) == -1)
		errx(1, "iterate: %s: %s", ember_error_class(e),
		    ember_error(e));
	while ((rc = ember_next(e, &data, &len)) == 1) {
		r = data;
		if (len != RECORD_SIZE || r == NULL ||
		    r[RECORD_SIZE - 1] != 'a' + (char)((records % lines +
		    RECORD_SIZE - 1) % 26))
			bad++;
		records++;
		bytes += (int64_t)len;
	}
	t1 = now_ns();
	*cpu = cpu_of(RUSAGE_SELF) - *cpu;
	if (rc == -1)
		errx(1, "iterate: after %" PRId64 " records: %s: %s", records,
		    ember_error_class(e), ember_error(e));

	sent1 = status_counter(e, "records_sent");
	ember_close(e);
	if (records != expect || bytes != expect * RECORD_SIZE || bad != 0)
		errx(1, "iterate: expected %" PRId64 " records of %d bytes, "
		    "got %" PRId64 " records, %" PRId64 " bytes, %" PRId64
		    " wrong", expect, RECORD_SIZE, records, bytes, bad);
	if (sent1 - sent0 != expect)
		errx(1, "iterate: emberd sent %" PRId64 " records, expected %"
		    PRId64, sent1 - sent0, expect);
	return ((double)(t1 - t0) / 1e9);
}

/* Write total bytes of back-to-back frames to fd in PRODUCER_WRITE writes. */
static void __attribute__((noreturn))
producer(int fd, int64_t total)
{
	unsigned char	*buf;
	size_t		 size = PRODUCER_WRITE + FRAME_SIZE, i, off;
	int64_t		 done, k;

	if ((buf = malloc(size)) == NULL)
		_exit(1);
	for (i = 0; i < size; i += FRAME_SIZE) {
		k = (int64_t)(i / FRAME_SIZE);
		be32_put(buf + i, RECORD_SIZE);
		if (i + FRAME_SIZE <= size)
			make_line((char *)buf + i + 4, k);
		else
			memset(buf + i + 4, 'x', size - i - 4);
	}
	for (done = 0; done < total; done += k) {
		off = (size_t)(done % FRAME_SIZE);
		k = total - done < PRODUCER_WRITE ? total - done :
		    PRODUCER_WRITE;
		if (fd_write_full(fd, buf + off, (size_t)k) == -1)
			_exit(1);
	}
	_exit(0);
}

/* Forward everything from in to out, RELAY_READ bytes at a time. */
static void __attribute__((noreturn))
relay(int in, int out)
{
	unsigned char	*buf;
	ssize_t		 n;

	if ((buf = malloc(RELAY_READ)) == NULL)
		_exit(1);
	for (;;) {
		n = read(in, buf, RELAY_READ);
		if (n == -1 && errno == EINTR)
			continue;
		if (n == -1)
			_exit(1);
		if (n == 0)
			_exit(0);
		if (fd_write_full(out, buf, (size_t)n) == -1)
			_exit(1);
	}
}

/* Wait for a child and insist it exited cleanly. */
static void
reap(pid_t pid, const char *what)
{
	int	status;

	while (waitpid(pid, &status, 0) == -1) {
		if (errno != EINTR)
			err(1, "waitpid %s", what);
	}
	if (!WIFEXITED(status) || WEXITSTATUS(status) != 0)
		errx(1, "%s failed (status %#x)", what, status);
}

/* Run the raw relay once over total bytes; seconds it took, in *cpu
 * the consumer's CPU seconds and in *kids the producer's and the relay's. */
static double
relay_once(int64_t total, double *cpu, double *kids)
{
	unsigned char	*buf;
	uint64_t	 t0, t1;
	ssize_t		 n;
	int64_t		 got = 0;
	pid_t		 p1, p2;
	int		 a[2], b[2];

	if ((buf = malloc(CONSUMER_READ)) == NULL)
		err(1, "malloc");
	if (socketpair(AF_UNIX, SOCK_STREAM, 0, a) == -1 ||
	    socketpair(AF_UNIX, SOCK_STREAM, 0, b) == -1)
		err(1, "socketpair");

	*cpu = cpu_of(RUSAGE_SELF);
	t0 = now_ns();
	switch (p1 = fork()) {
	case -1:
		err(1, "fork");
	case 0:
		close(a[0]);
		close(b[0]);
		close(b[1]);
		producer(a[1], total);
	}
	switch (p2 = fork()) {
	case -1:
		err(1, "fork");
	case 0:
		close(a[1]);
		close(b[0]);
		relay(a[0], b[1]);
	}
	close(a[0]);
	close(a[1]);
	close(b[1]);
	for (;;) {
		n = read(b[0], buf, CONSUMER_READ);
		if (n == -1 && errno == EINTR)
			continue;
		if (n == -1)
			err(1, "relay: read");
		if (n == 0)
			break;
		got += n;
	}
	t1 = now_ns();
	*cpu = cpu_of(RUSAGE_SELF) - *cpu;
	close(b[0]);
	free(buf);
	*kids = cpu_of(RUSAGE_CHILDREN);
	reap(p1, "producer");
	reap(p2, "relay");
	*kids = cpu_of(RUSAGE_CHILDREN) - *kids;
	if (got != total)
		errx(1, "relay: expected %" PRId64 " bytes, got %" PRId64,
		    total, got);
	return ((double)(t1 - t0) / 1e9);
}

int
main(int argc, char **argv)
{
	static const struct option longopts[] = {
		{ "socket",	required_argument, NULL, 's' },
		{ "dir",	required_argument, NULL, 'd' },
		{ "mb",		required_argument, NULL, 'm' },
		{ "copies",	required_argument, NULL, 'c' },
		{ "runs",	required_argument, NULL, 'r' },
		{ "prefetch",	required_argument, NULL, 'p' },
		{ "only",	required_argument, NULL, 'o' },
		{ NULL,		0,		   NULL, 0 }
	};
	const char	*dir;
	char		*path, *plan, options[64] = "";
	double		 t, cpu, kids, gb, egbs, rgbs;
	double		*et, *rt, *ratio;
	long		 mb = DEFAULT_MB, copies = DEFAULT_COPIES;
	long		 runs = DEFAULT_RUNS, prefetch = -1, i;
	int64_t		 lines, records, wire;
	int		 ch, do_ember = 1, do_raw = 1;

	if ((dir = getenv("TMPDIR")) == NULL || *dir == '\0')
		dir = "/tmp";
	while ((ch = getopt_long(argc, argv, "", longopts, NULL)) != -1) {
		switch (ch) {
		case 's':
			socket_path = optarg;
			break;
		case 'd':
			dir = optarg;
			break;
		case 'm':
			mb = parse_count(optarg, "--mb", 1);
			break;
		case 'c':
			copies = parse_count(optarg, "--copies", 1);
			break;
		case 'r':
			runs = parse_count(optarg, "--runs", 1);
			break;
		case 'p':
			prefetch = parse_count(optarg, "--prefetch", 0);
			break;
		case 'o':
			if (strcmp(optarg, "ember") == 0)
				do_raw = 0;
			else if (strcmp(optarg, "raw") == 0)
				do_ember = 0;
			else
				usage();
			break;
		default:
			usage();
		}
	}
	if (optind != argc || (do_ember && socket_path == NULL))
		usage();
	setvbuf(stdout, NULL, _IOLBF, 0);
	if (prefetch >= 0)
		snprintf(options, sizeof options, "{\"prefetch\":%ld}",
		    prefetch);

	lines = (int64_t)mb * 1000000 / RECORD_SIZE;
	records = lines * copies;
	wire = records * FRAME_SIZE;
	gb = (double)wire / 1e9;
	path = make_file(dir, lines);
	plan = make_plan(path, (int)copies);
	printf("stream: %" PRId64 " records of %d bytes (%ld x %s, %.1f MB), "
	    "%.3f GB of frames\n", records, RECORD_SIZE, copies, path,
	    (double)lines * LINE_SIZE / 1e6, gb);

	if ((et = calloc(3 * (size_t)runs, sizeof *et)) == NULL)
		err(1, "calloc");
	rt = et + runs;
	ratio = rt + runs;

	/* Alternate the two so neither gets a quieter machine. */
	for (i = 0; i < runs; i++) {
		if (do_raw) {
			t = rt[i] = relay_once(wire, &cpu, &kids);
			printf("  raw relay run %ld: %.3f s, %.3f GB/s "
			    "(consumer CPU %.2f s, producer and relay %.2f s)\n",
			    i + 1, t, gb / t, cpu, kids);
		}
		if (do_ember) {
			t = et[i] = ember_once(plan, *options != '\0' ?
			    options : NULL, (int)copies, lines, &cpu);
			printf("  ember run %ld:     %.3f s, %.3f GB/s, %.2f "
			    "Mrec/s (client CPU %.2f s; all %" PRId64
			    " records checked)\n", i + 1, t, gb / t,
			    (double)records / t / 1e6, cpu, records);
		}
		if (do_ember && do_raw) {
			ratio[i] = rt[i] / et[i];
			printf("  ember/raw run %ld: %.3f\n", i + 1, ratio[i]);
		}
	}
	remove_file();
	free(plan);

	/* Figures for bench/run.sh, one per line: medians of the runs. */
	qsort(et, (size_t)runs, sizeof *et, cmp_double);
	qsort(rt, (size_t)runs, sizeof *rt, cmp_double);
	qsort(ratio, (size_t)runs, sizeof *ratio, cmp_double);
	if (do_ember) {
		egbs = gb / et[runs / 2];
		printf("median of %ld: ember %.3f GB/s (%.2f Mrec/s; min %.3f, "
		    "max %.3f GB/s)\n", runs, egbs, (double)records /
		    et[runs / 2] / 1e6, gb / et[runs - 1], gb / et[0]);
		printf("result stream_gbs %.3f\n", egbs);
		printf("result stream_mrecs %.2f\n", (double)records /
		    et[runs / 2] / 1e6);
	}
	if (do_raw) {
		rgbs = gb / rt[runs / 2];
		printf("median of %ld: raw relay %.3f GB/s (min %.3f, max "
		    "%.3f)\n", runs, rgbs, gb / rt[runs - 1], gb / rt[0]);
		printf("result relay_gbs %.3f\n", rgbs);
	}
	if (do_ember && do_raw) {
		printf("ember/raw, median of %ld runs %.3f (min %.3f, max "
		    "%.3f; target >= 0.8)\n", runs, ratio[runs / 2],
		    ratio[0], ratio[runs - 1]);
		printf("result stream_ratio %.3f\n", ratio[runs / 2]);
		printf("result stream_ratio_min %.3f\n", ratio[0]);
		printf("result stream_ratio_max %.3f\n", ratio[runs - 1]);
	}
	free(et);
	return (0);
}
