/*
 * Logging to stderr (text or JSON lines, for journald) or syslog once
 * detached.  fatal() appends strerror(errno); fatalx() does not.  Text
 * lines escape control characters and bytes that are not UTF-8 (as
 * vis(3)); JSON lines escape them as JSON does: either way one message is
 * one line.
 */
#ifndef EMBER_LOG_H
#define EMBER_LOG_H

#include <stddef.h>

enum log_level { LOG_LEVEL_ERROR, LOG_LEVEL_WARN, LOG_LEVEL_INFO, LOG_LEVEL_DEBUG };
/*
 * RELAYED is for the processes whose stderr emberd reads (a fork-server and
 * what it forks): "name[pid] level: message", without a time, as emberd
 * stamps each line it logs for them.
 */
enum log_format { LOG_FORMAT_TEXT, LOG_FORMAT_JSON, LOG_FORMAT_RELAYED };

/*
 * What the lines logged next are about, for JSON lines (text lines say it
 * in their message): empty strings, partition -1 and worker 0 when
 * unknown.  Copies, so that a line logged after the operation is gone
 * still reads them safely.
 */
struct log_context {
	char	session[64];
	char	operation[64];
	int	partition;
	long	worker;		/* pid */
};

void	log_open(const char *name, enum log_level, enum log_format, int syslog);
/* Fill c with what is known (NULL, -1, 0: not known). */
void	log_context_fill(struct log_context *c, const char *session,
	    const char *operation, int partition, long worker);
/* Log the next lines about c (NULL: nothing); return the context it
 * replaces, for the caller to put back. */
const struct log_context *log_set_context(const struct log_context *c);
void	log_copy_errors(int fd);
void	log_set_level(enum log_level);
int	log_level_from_string(const char *, enum log_level *);
int	log_format_from_string(const char *, enum log_format *);
int	log_enabled(enum log_level);

void	log_error(const char *, ...) __attribute__((format(printf, 1, 2)));
void	log_warn(const char *, ...) __attribute__((format(printf, 1, 2)));
void	log_info(const char *, ...) __attribute__((format(printf, 1, 2)));
void	log_debug(const char *, ...) __attribute__((format(printf, 1, 2)));
/* Describe a wait status: "killed by signal 9 (SIGKILL)", "exited with
 * status 1". */
void	log_describe_wait(int status, char *, size_t);

void	fatal(const char *, ...)
	    __attribute__((format(printf, 1, 2), noreturn));
void	fatalx(const char *, ...)
	    __attribute__((format(printf, 1, 2), noreturn));

#endif
