#include <sys/wait.h>

#include <errno.h>
#include <signal.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <syslog.h>
#include <time.h>
#include <unistd.h>

#include <unistr.h>

#include "log.h"
#include "utf8.h"

static const char	*log_name = "ember";
static enum log_level	 log_level = LOG_LEVEL_INFO;
static enum log_format	 log_format = LOG_FORMAT_TEXT;
static int		 log_syslog;
static int		 log_copy_fd = -1;
static const struct log_context *log_context;

static const char *const log_level_names[] = { "error", "warn", "info", "debug" };

/* Open the log; with syslog set, lines go to syslog instead of stderr. */
void
log_open(const char *name, enum log_level level, enum log_format format,
    int use_syslog)
{
	log_name = name;
	log_level = level;
	log_format = format;
	log_syslog = use_syslog;
	if (use_syslog)
		openlog(name, LOG_PID | LOG_NDELAY, LOG_DAEMON);
}

void
log_context_fill(struct log_context *c, const char *session,
    const char *operation, int partition, long worker)
{
	snprintf(c->session, sizeof c->session, "%s",
	    session != NULL ? session : "");
	snprintf(c->operation, sizeof c->operation, "%s",
	    operation != NULL ? operation : "");
	c->partition = partition;
	c->worker = worker;
}

const struct log_context *
log_set_context(const struct log_context *c)
{
	const struct log_context	*prev = log_context;

	log_context = c;
	return (prev);
}

/* Also write each error, as a line "E message", to fd (-1: stop): a
 * detached emberd's start-up errors reach the process that waits for it. */
void
log_copy_errors(int fd)
{
	log_copy_fd = fd;
}

void
log_set_level(enum log_level level)
{
	log_level = level;
}

int
log_enabled(enum log_level level)
{
	return (level <= log_level);
}

int
log_level_from_string(const char *s, enum log_level *out)
{
	size_t	i;

	for (i = 0; i < sizeof log_level_names / sizeof *log_level_names; i++) {
		if (strcmp(s, log_level_names[i]) == 0) {
			*out = (enum log_level)i;
			return (0);
		}
	}
	return (-1);
}

int
log_format_from_string(const char *s, enum log_format *out)
{
	if (strcmp(s, "text") == 0)
		*out = LOG_FORMAT_TEXT;
	else if (strcmp(s, "json") == 0)
		*out = LOG_FORMAT_JSON;
	else
		return (-1);
	return (0);
}

/* Write a string as a JSON string body. */
static void	log_json_escape(FILE *, const char *);

/* Write the context's known fields as JSON members, each after a comma. */
static void
log_json_context(FILE *f)
{
	const struct log_context	*c = log_context;

	if (c == NULL)
		return;
	if (c->session[0] != '\0') {
		fputs(",\"session\":\"", f);
		log_json_escape(f, c->session);
		fputc('"', f);
	}
	if (c->operation[0] != '\0') {
		fputs(",\"operation\":\"", f);
		log_json_escape(f, c->operation);
		fputc('"', f);
	}
	if (c->partition >= 0)
		fprintf(f, ",\"partition\":%d", c->partition);
	if (c->worker > 0)
		fprintf(f, ",\"worker\":%ld", c->worker);
}

static void
log_json_escape(FILE *f, const char *s)
{
	char	*clean, *p;

	/* A message may quote bytes that are not UTF-8: JSON must be.
	 * Controls are escaped, C1's (0xc2 0x80 to 0xc2 0x9f) as C0's: a
	 * reader that prints the message (jq -r) sends no CSI to a terminal. */
	clean = utf8_clean(s, strlen(s), strlen(s) * 3 + 1);
	for (p = clean; *p != '\0'; p++) {
		unsigned char c = (unsigned char)*p;

		if (c == '"' || c == '\\')
			fprintf(f, "\\%c", c);
		else if (c < 0x20 || c == 0x7f)
			fprintf(f, "\\u%04x", c);
		else if (c == 0xc2 && (unsigned char)p[1] >= 0x80 &&
		    (unsigned char)p[1] < 0xa0)
			fprintf(f, "\\u%04x", (unsigned char)*++p);
		else
			fputc(c, f);
	}
	free(clean);
}

/*
 * Copy s into out (size at least 4 * strlen(s) + 1), as vis(3) would for a
 * line of text: a control character (C0, DEL, C1) or a byte that starts
 * no UTF-8 character becomes \n, \r, \t or \ooo, so that a message
 * quoting a client's or a job's bytes can neither start a line of its own
 * nor reach the operator's terminal as an escape sequence.  Other
 * characters, and backslashes, stay as they are, so that a line escaped
 * once reads the same when escaped again (a job's, when emberd logs it).
 */
static void
log_escape(const char *s, char *out)
{
	const uint8_t	*p = (const uint8_t *)s, *end = p + strlen(s);
	ucs4_t		 uc;
	int		 n, i;

	while (p < end) {
		n = u8_mbtoucr(&uc, p, (size_t)(end - p));
		if (n > 0 && uc >= 0x20 && uc != 0x7f &&
		    (uc < 0x80 || uc >= 0xa0)) {
			memcpy(out, p, (size_t)n);
			out += n;
			p += n;
			continue;
		}
		for (i = 0; i < (n > 0 ? n : 1); i++, p++) {
			if (*p == '\n' || *p == '\r' || *p == '\t') {
				*out++ = '\\';
				*out++ = *p == '\n' ? 'n' : *p == '\r' ? 'r' : 't';
			} else
				out += sprintf(out, "\\%03o", *p);
		}
	}
	*out = '\0';
}

static void __attribute__((format(printf, 2, 0)))
log_vwrite(enum log_level level, const char *fmt, va_list ap, const char *suffix)
{
	static const int syslog_prio[] = { LOG_ERR, LOG_WARNING, LOG_INFO, LOG_DEBUG };
	char		 msg[2048], text[sizeof msg * 4];
	struct timespec	 ts;
	struct tm	 tm;
	char		 when[32];
	int		 saved = errno;

	if (!log_enabled(level))
		return;
	vsnprintf(msg, sizeof msg, fmt, ap);
	if (suffix != NULL) {
		size_t used = strlen(msg);
		snprintf(msg + used, sizeof msg - used, ": %s", suffix);
	}
	log_escape(msg, text);
	if (level == LOG_LEVEL_ERROR && log_copy_fd != -1)
		dprintf(log_copy_fd, "E%s\n", text);
	if (log_syslog) {
		syslog(syslog_prio[level], "%s", text);
		errno = saved;
		return;
	}
	clock_gettime(CLOCK_REALTIME, &ts);
	gmtime_r(&ts.tv_sec, &tm);
	strftime(when, sizeof when, "%Y-%m-%dT%H:%M:%S", &tm);
	if (log_format == LOG_FORMAT_JSON) {
		fprintf(stderr, "{\"time\":\"%s.%03ldZ\",\"level\":\"%s\","
		    "\"process\":\"%s\",\"pid\":%ld", when,
		    ts.tv_nsec / 1000000, log_level_names[level], log_name,
		    (long)getpid());
		log_json_context(stderr);
		fputs(",\"message\":\"", stderr);
		log_json_escape(stderr, msg);
		fputs("\"}\n", stderr);
	} else if (log_format == LOG_FORMAT_RELAYED) {
		fprintf(stderr, "%s[%ld] %s: %s\n", log_name, (long)getpid(),
		    log_level_names[level], text);
	} else {
		fprintf(stderr, "%s.%03ldZ %s[%ld] %s: %s\n", when,
		    ts.tv_nsec / 1000000, log_name, (long)getpid(),
		    log_level_names[level], text);
	}
	errno = saved;
}

/* The level is checked before log_vwrite's 10 kB frame is entered: each
 * page of stack it reaches is a page fault, a copy, in a process just
 * forked (the fork-server, a new worker), for a message not written. */
#define LOG_FUNCTION(name, level)			\
void							\
name(const char *fmt, ...)				\
{							\
	va_list ap;					\
	if (!log_enabled(level))			\
		return;					\
	va_start(ap, fmt);				\
	log_vwrite(level, fmt, ap, NULL);		\
	va_end(ap);					\
}
LOG_FUNCTION(log_error, LOG_LEVEL_ERROR)
LOG_FUNCTION(log_warn, LOG_LEVEL_WARN)
LOG_FUNCTION(log_info, LOG_LEVEL_INFO)
LOG_FUNCTION(log_debug, LOG_LEVEL_DEBUG)

void
fatal(const char *fmt, ...)
{
	va_list	ap;
	char	err[256];

	snprintf(err, sizeof err, "%s", strerror(errno));
	va_start(ap, fmt);
	log_vwrite(LOG_LEVEL_ERROR, fmt, ap, err);
	va_end(ap);
	exit(1);
}

void
fatalx(const char *fmt, ...)
{
	va_list	ap;

	va_start(ap, fmt);
	log_vwrite(LOG_LEVEL_ERROR, fmt, ap, NULL);
	va_end(ap);
	exit(1);
}

/* Describe a wait status. */
void
log_describe_wait(int status, char *buf, size_t len)
{
	const char	*name;

	if (WIFSIGNALED(status)) {
		if ((name = sigabbrev_np(WTERMSIG(status))) != NULL)
			snprintf(buf, len, "killed by signal %d (SIG%s)",
			    WTERMSIG(status), name);
		else
			snprintf(buf, len, "killed by signal %d",
			    WTERMSIG(status));
	} else if (WIFEXITED(status))
		snprintf(buf, len, "exited with status %d", WEXITSTATUS(status));
	else
		snprintf(buf, len, "ended with wait status %d", status);
}
