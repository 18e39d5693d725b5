/*
 * bench_reattach: what reattachable execution costs.
 *
 * - drops: an iterate of one huge range partition; the client reads a few
 *   hundred records, drops its connection, and times from the drop to the
 *   first record after reattaching (connect, hello with the session,
 *   reattach at the last record read, request, response, record).  The
 *   records must go on exactly after the last one read.  Median and p99
 *   over --drops drops.
 * - cuts: the same text stream (100-byte records) iterated with libember
 *   from an emberd with stream.max_bytes at 1m (--socket-cut: the stream is
 *   cut at every partition boundary past 1 MiB, and libember reattaches on
 *   the same connection) and from one without cuts (--socket), alternating,
 *   best of --runs each.
 */

#include <sys/types.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/un.h>

#include <err.h>
#include <fcntl.h>
#include <getopt.h>
#include <inttypes.h>
#include <stdarg.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include <jansson.h>

#include "ember.h"
#include "frame.h"
#include "protocol.h"
#include "bench_util.h"

#define RECORD_SIZE		100
#define LINE_SIZE		(RECORD_SIZE + 1)
#define DEFAULT_DROPS		1000
#define DEFAULT_READ		300
#define DEFAULT_MB		100
#define DEFAULT_COPIES		4
#define DEFAULT_PARTITIONS	400
#define DEFAULT_RUNS		2

static const char	*socket_path, *socket_cut;
static char		*data_path;

static void __attribute__((noreturn))
usage(void)
{
	fprintf(stderr, "usage: bench_reattach --socket PATH --socket-cut PATH "
	    "[--dir DIR] [--drops N]\n"
	    "       [--read N] [--mb N] [--copies N] [--partitions N] "
	    "[--runs N] [--only drops | cuts]\n");
	exit(2);
}

/* Connect a raw socket to emberd, or exit. */
static int
raw_dial(const char *path)
{
	struct sockaddr_un	sun;
	int			fd;

	memset(&sun, 0, sizeof sun);
	sun.sun_family = AF_UNIX;
	if (strlen(path) >= sizeof sun.sun_path)
		errx(1, "%s: path too long", path);
	strcpy(sun.sun_path, path);
	if ((fd = socket(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0)) == -1)
		err(1, "socket");
	if (connect(fd, (struct sockaddr *)&sun, sizeof sun) == -1)
		err(1, "connect %s", path);
	return (fd);
}

/* Send a request and read its reply; the reply, or exit if not ok. */
static json_t *
raw_call(int fd, const char *fmt, ...) __attribute__((format(printf, 2, 3)));

static json_t *
raw_call(int fd, const char *fmt, ...)
{
	va_list		 ap;
	char		*text, *buf;
	int32_t		 len;
	json_t		*reply;
	json_error_t	 jerr;

	va_start(ap, fmt);
	if (vasprintf(&text, fmt, ap) == -1)
		err(1, "vasprintf");
	va_end(ap);
	if (fd_write_int32(fd, (int32_t)strlen(text)) == -1 ||
	    fd_write_full(fd, text, strlen(text)) == -1)
		err(1, "write");
	if (fd_read_int32(fd, &len) == -1 || len < 0 || len > 1 << 24)
		errx(1, "reading the reply to %s", text);
	if ((buf = malloc((size_t)len + 1)) == NULL)
		err(1, "malloc");
	if (fd_read_full(fd, buf, (size_t)len) == -1)
		errx(1, "reading the reply to %s", text);
	if ((reply = json_loadb(buf, (size_t)len, 0, &jerr)) == NULL ||
	    !json_is_true(json_object_get(reply, "ok")))
		errx(1, "%s: %.*s", text, (int)len, buf);
	free(buf);
	free(text);
	return (reply);
}

/* Read one record; check it is the decimal text of want. */
static void
raw_record(int fd, int64_t want)
{
	char	buf[32], expect[32];
	int32_t	len;

	if (fd_read_int32(fd, &len) == -1 || len <= 0 ||
	    (size_t)len >= sizeof buf || fd_read_full(fd, buf, (size_t)len) == -1)
		errx(1, "record %" PRId64 ": bad frame", want);
	buf[len] = '\0';
	snprintf(expect, sizeof expect, "%" PRId64, want);
	if (strcmp(buf, expect) != 0)
		errx(1, "record %" PRId64 ": got \"%s\": not exactly after the "
		    "last one read", want, buf);
}

/* Read the response to a request; exit unless it is 1. */
static void
raw_partition(int fd)
{
	int32_t	resp;

	if (fd_write_int32(fd, EMBER_REQUEST_NEXT) == -1 ||
	    fd_read_int32(fd, &resp) == -1)
		errx(1, "request: connection lost");
	if (resp != EMBER_STREAM_PARTITION)
		errx(1, "request: response %d", resp);
}

/* Drop the connection of a stream repeatedly; the time from each drop to
 * the first record after reattaching, in microseconds. */
static void
bench_drops(int drops, int per)
{
	json_t		*r;
	char		 session[64], op[64];
	double		*us, sum = 0;
	uint64_t	 t0;
	int64_t		 next = 0;
	int		 fd, side, i, j;

	fd = raw_dial(socket_path);
	r = raw_call(fd, "{\"op\":\"hello\",\"version\":1}");
	snprintf(session, sizeof session, "%s",
	    json_string_value(json_object_get(r, "session")));
	json_decref(r);
	r = raw_call(fd, "{\"op\":\"execute\",\"action\":\"iterate\","
	    "\"plan\":{\"source\":{\"range\":{\"start\":0,\"end\":"
	    "4000000000}},\"partitions\":1}}");
	snprintf(op, sizeof op, "%s",
	    json_string_value(json_object_get(r, "operation")));
	json_decref(r);
	side = raw_dial(socket_path);
	json_decref(raw_call(side, "{\"op\":\"hello\",\"version\":1,"
	    "\"session\":\"%s\"}", session));
	raw_partition(fd);

	if ((us = calloc((size_t)drops, sizeof *us)) == NULL)
		err(1, "calloc");
	for (i = 0; i < drops; i++) {
		for (j = 0; j < per; j++)
			raw_record(fd, next++);
		/* Keep emberd's buffer small, as a client would. */
		json_decref(raw_call(side, "{\"op\":\"release\",\"operation\":"
		    "\"%s\",\"partition\":0,\"offset\":%" PRId64 "}", op, next));
		t0 = now_ns();
		close(fd);
		fd = raw_dial(socket_path);
		json_decref(raw_call(fd, "{\"op\":\"hello\",\"version\":1,"
		    "\"session\":\"%s\"}", session));
		json_decref(raw_call(fd, "{\"op\":\"reattach\",\"operation\":"
		    "\"%s\",\"partition\":0,\"offset\":%" PRId64 "}", op, next));
		raw_partition(fd);
		raw_record(fd, next++);
		us[i] = (double)(now_ns() - t0) / 1e3;
		sum += us[i];
	}
	json_decref(raw_call(side, "{\"op\":\"release\",\"operation\":\"%s\","
	    "\"all\":true}", op));
	close(fd);
	close(side);
	qsort(us, (size_t)drops, sizeof *us, cmp_double);
	printf("drops: %d, %d records read between drops, every record "
	    "checked\n", drops, per);
	printf("drop to first record: median %.0f us, p99 %.0f us, min %.0f, "
	    "max %.0f, mean %.0f\n", us[drops / 2], us[drops * 99 / 100],
	    us[0], us[drops - 1], sum / drops);
	printf("result reattach_median_us %.0f\n", us[drops / 2]);
	printf("result reattach_p99_us %.0f\n", us[drops * 99 / 100]);
	free(us);
}

/* Remove the text file, on every way out. */
static void
remove_file(void)
{
	if (data_path != NULL)
		unlink(data_path);
}

/* Write mb megabytes of 100-byte lines into dir; the number of lines. */
static int64_t
make_file(const char *dir, int mb)
{
	char	 line[LINE_SIZE];
	int64_t	 n, lines = (int64_t)mb * 1000000 / LINE_SIZE;
	FILE	*f;
	int	 fd, i;

	if (asprintf(&data_path, "%s/ember-reattach-XXXXXX", dir) == -1)
		err(1, "asprintf");
	if ((fd = mkstemp(data_path)) == -1)
		err(1, "mkstemp %s", data_path);
	atexit(remove_file);
	if (fchmod(fd, 0644) == -1 || (f = fdopen(fd, "w")) == NULL)
		err(1, "%s", data_path);
	for (n = 0; n < lines; n++) {
		for (i = 0; i < RECORD_SIZE; i++)
			line[i] = 'a' + (char)((n + i) % 26);
		line[RECORD_SIZE] = '\n';
		if (fwrite(line, 1, LINE_SIZE, f) != LINE_SIZE)
			err(1, "write %s", data_path);
	}
	if (fclose(f) == EOF)
		err(1, "close %s", data_path);
	return (lines);
}

/* Iterate the plan from the emberd at path; seconds, checking the total. */
static double
stream_once(const char *path, const char *plan, int64_t expect)
{
	struct ember	*e;
	const void	*data;
	size_t		 len;
	uint64_t	 t0;
	int64_t		 records = 0, bad = 0;
	double		 s;
	int		 rc;

	e = connect_or_die(path);
	t0 = now_ns();
	if (ember_execute(e, plan, "iterate", NULL, NULL) == -1)
		errx(1, "iterate: %s: %s", ember_error_class(e),
		    ember_error(e));
	while ((rc = ember_next(e, &data, &len)) == 1) {
		if (len != RECORD_SIZE)
			bad++;
		records++;
	}
	s = (double)(now_ns() - t0) / 1e9;
	if (rc == -1)
		errx(1, "iterate from %s: %s: %s", path, ember_error_class(e),
		    ember_error(e));
	ember_close(e);
	if (records != expect || bad != 0)
		errx(1, "iterate from %s: %" PRId64 " records (%" PRId64
		    " wrong), expected %" PRId64, path, records, bad, expect);
	return (s);
}

/* The stream with and without cuts, alternating; best of runs each. */
static void
bench_cuts(const char *dir, int mb, int copies, int partitions, int runs)
{
	json_t	*paths, *plan;
	char	*text;
	int64_t	 lines = make_file(dir, mb), expect = lines * copies;
	double	 best_on = 0, best_cut = 0, s, gb;
	int	 i;

	paths = json_array();
	for (i = 0; i < copies; i++)
		json_array_append_new(paths, json_string(data_path));
	plan = json_pack("{s:{s:{s:o}},s:i}", "source", "text", "paths",
	    paths, "partitions", partitions);
	if (plan == NULL || (text = json_dumps(plan, JSON_COMPACT)) == NULL)
		errx(1, "cannot build the plan");
	json_decref(plan);
	gb = (double)expect * (4 + RECORD_SIZE) / 1e9;
	printf("cuts: %" PRId64 " records of %d bytes in %d partitions of "
	    "about %.2f MB, %.3f GB of frames\n", expect, RECORD_SIZE,
	    partitions, gb * 1e3 / partitions, gb);
	stream_once(socket_path, text, expect);		/* warm-up */
	for (i = 0; i < runs; i++) {
		s = stream_once(socket_path, text, expect);
		if (best_on == 0 || s < best_on)
			best_on = s;
		s = stream_once(socket_cut, text, expect);
		if (best_cut == 0 || s < best_cut)
			best_cut = s;
	}
	printf("best of %d: unbroken %.3f GB/s, cut at every boundary past "
	    "1 MiB %.3f GB/s (about %d reattaches a run)\n", runs,
	    gb / best_on, gb / best_cut, partitions - 1);
	printf("result cut_unbroken_gbs %.3f\n", gb / best_on);
	printf("result cut_gbs %.3f\n", gb / best_cut);
	printf("result cut_ratio %.2f\n", best_on / best_cut);
	free(text);
}

int
main(int argc, char **argv)
{
	static const struct option longopts[] = {
		{ "socket",	required_argument,	NULL, 's' },
		{ "socket-cut",	required_argument,	NULL, 'c' },
		{ "dir",	required_argument,	NULL, 'd' },
		{ "drops",	required_argument,	NULL, 'n' },
		{ "read",	required_argument,	NULL, 'r' },
		{ "mb",		required_argument,	NULL, 'm' },
		{ "copies",	required_argument,	NULL, 'k' },
		{ "partitions",	required_argument,	NULL, 'p' },
		{ "runs",	required_argument,	NULL, 'R' },
		{ "only",	required_argument,	NULL, 'o' },
		{ NULL,		0,			NULL, 0 }
	};
	const char	*dir = "/tmp", *only = NULL;
	int		 ch, drops = DEFAULT_DROPS, per = DEFAULT_READ;
	int		 mb = DEFAULT_MB, copies = DEFAULT_COPIES;
	int		 partitions = DEFAULT_PARTITIONS, runs = DEFAULT_RUNS;

	while ((ch = getopt_long(argc, argv, "", longopts, NULL)) != -1) {
		switch (ch) {
		case 's':
			socket_path = optarg;
			break;
		case 'c':
			socket_cut = optarg;
			break;
		case 'd':
			dir = optarg;
			break;
		case 'n':
			drops = (int)parse_count(optarg, "--drops", 1);
			break;
		case 'r':
			per = (int)parse_count(optarg, "--read", 0);
			break;
		case 'm':
			mb = (int)parse_count(optarg, "--mb", 1);
			break;
		case 'k':
			copies = (int)parse_count(optarg, "--copies", 1);
			break;
		case 'p':
			partitions = (int)parse_count(optarg, "--partitions", 1);
			break;
		case 'R':
			runs = (int)parse_count(optarg, "--runs", 1);
			break;
		case 'o':
			only = optarg;
			break;
		default:
			usage();
		}
	}
	if (socket_path == NULL || (socket_cut == NULL && (only == NULL ||
	    strcmp(only, "drops") != 0)))
		usage();
	if (only != NULL && strcmp(only, "drops") != 0 &&
	    strcmp(only, "cuts") != 0)
		usage();
	if (only == NULL || strcmp(only, "drops") == 0)
		bench_drops(drops, per);
	if (only == NULL || strcmp(only, "cuts") == 0)
		bench_cuts(dir, mb, copies, partitions, runs);
	return (0);
}
