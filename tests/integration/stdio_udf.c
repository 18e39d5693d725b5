/*
 * A plugin that looks for what of emberd's a job holds, for
 * test_stdio.py.
 *
 * udf_stdio_report emits one record, whatever its input: where fds 0, 1
 * and 2 lead, the job's session, whether /dev/tty opens (a controlling
 * terminal), and what ioctl(0, TIOCSTI) did with args.inject, each
 * character of which it tries to push into fd 0's terminal input:
 *
 *	fd0=/dev/null fd1=pipe:[123] fd2=pipe:[123] sid=456 tty=ENXIO
 *	tiocsti=ENOTTY
 *
 * udf_stdio_forge writes args.line to its stderr as it is, then truncates
 * fd 2, and emits "ftruncate=0" or "ftruncate=EINVAL".
 *
 * udf_stdio_flood writes a line of args.long "a"s to its stderr, then
 * args.lines lines "0123456789abcdef", and emits "flooded".
 *
 * Preloaded (workers.preload) with STDIO_UDF_LAST_WORDS in the job's
 * environment (workers.env), it writes 100 lines of 1000 bytes, more than
 * a pipe holds, and then "stdio_udf: last words end" as the fork-server
 * exits, as a sanitizer's leak report would.
 *
 *	{"udf": {"library": ".../stdio_udf.so", "symbol": "udf_stdio_forge",
 *	    "args": {"line": "...Z emberd[1] error: forged\n"}}}
 */
#include <sys/ioctl.h>

#include <errno.h>
#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <termios.h>
#include <unistd.h>

#include <ember/udf.h>

EMBER_UDF_PLUGIN

EMBER_UDF_EXPORT int	udf_stdio_report(struct ember_udf *);
EMBER_UDF_EXPORT int	udf_stdio_forge(struct ember_udf *);
EMBER_UDF_EXPORT int	udf_stdio_flood(struct ember_udf *);

/* At exit, when asked to: more than the pipe holds, then a last line. */
static void __attribute__((destructor))
stdio_last_words(void)
{
	char	line[1001];
	int	i;

	if (getenv("STDIO_UDF_LAST_WORDS") == NULL)
		return;
	memset(line, 'w', sizeof line - 1);
	line[sizeof line - 1] = '\n';
	for (i = 0; i < 100; i++) {
		if (write(2, line, sizeof line) != (ssize_t)sizeof line)
			return;
	}
	dprintf(2, "stdio_udf: last words end\n");
}

/* Append "name=<where fd leads>" to out. */
static void
stdio_where(char *out, size_t size, const char *name, int fd)
{
	char	path[64], to[256];
	ssize_t	n;

	snprintf(path, sizeof path, "/proc/self/fd/%d", fd);
	if ((n = readlink(path, to, sizeof to - 1)) == -1)
		snprintf(to, sizeof to, "%s", strerrorname_np(errno));
	else
		to[n] = '\0';
	snprintf(out + strlen(out), size - strlen(out), "%s=%s ", name, to);
}

/* The errno name of a result: "0" for success. */
static const char *
stdio_result(int rc)
{
	return (rc == -1 ? strerrorname_np(errno) : "0");
}

/* Drain the input: this udf emits what it found, not its records. */
static void
stdio_drain(struct ember_udf *ctx)
{
	const char	*data;
	size_t		 len;

	while (ember_udf_next(ctx, &data, &len) == 1)
		;
}

int
udf_stdio_report(struct ember_udf *ctx)
{
	char		 out[1024] = "";
	const char	*inject = "", *p;
	size_t		 len = 0, i;
	int		 fd, rc = 0;

	stdio_drain(ctx);
	(void)ember_udf_arg_string(ctx, "inject", &inject, &len);
	stdio_where(out, sizeof out, "fd0", 0);
	stdio_where(out, sizeof out, "fd1", 1);
	stdio_where(out, sizeof out, "fd2", 2);
	snprintf(out + strlen(out), sizeof out - strlen(out), "sid=%ld ",
	    (long)getsid(0));
	fd = open("/dev/tty", O_RDWR);
	snprintf(out + strlen(out), sizeof out - strlen(out), "tty=%s ",
	    stdio_result(fd));
	if (fd != -1)
		close(fd);
	for (i = 0, p = inject; i < len && rc != -1; i++, p++)
		rc = ioctl(0, TIOCSTI, p);
	snprintf(out + strlen(out), sizeof out - strlen(out), "tiocsti=%s",
	    stdio_result(rc));
	return (ember_udf_emit(ctx, out, strlen(out)) == -1 ? -1 : 0);
}

int
udf_stdio_forge(struct ember_udf *ctx)
{
	char		 out[64];
	const char	*line;
	size_t		 len;
	int		 rc;

	stdio_drain(ctx);
	if (ember_udf_arg_string(ctx, "line", &line, &len) != 1)
		return (ember_udf_error(ctx, "args.line is required"));
	if (write(2, line, len) != (ssize_t)len)
		return (ember_udf_error(ctx, "write to stderr: %s",
		    strerror(errno)));
	rc = ftruncate(2, 0);
	snprintf(out, sizeof out, "ftruncate=%s", stdio_result(rc));
	return (ember_udf_emit(ctx, out, strlen(out)) == -1 ? -1 : 0);
}

int
udf_stdio_flood(struct ember_udf *ctx)
{
	FILE	*f;
	int64_t	 lines, len, i;

	stdio_drain(ctx);
	if (ember_udf_arg_int(ctx, "lines", &lines) != 1 ||
	    ember_udf_arg_int(ctx, "long", &len) != 1)
		return (ember_udf_error(ctx, "args.lines and args.long are "
		    "required"));
	if ((f = fdopen(dup(2), "w")) == NULL)
		return (ember_udf_error(ctx, "fdopen: %s", strerror(errno)));
	for (i = 0; i < len; i++)
		putc('a', f);
	putc('\n', f);
	for (i = 0; i < lines; i++)
		fputs("0123456789abcdef\n", f);
	if (fclose(f) == EOF)
		return (ember_udf_error(ctx, "stderr: %s", strerror(errno)));
	return (ember_udf_emit(ctx, "flooded", 7) == -1 ? -1 : 0);
}
