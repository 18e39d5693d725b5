/*
 * Logging to stderr (text or JSON lines, for journald) or syslog once
 * detached.  fatal() appends strerror(errno); fatalx() does not.
 */
#ifndef EMBER_LOG_H
#define EMBER_LOG_H

#include <stddef.h>

enum log_level { LOG_LEVEL_ERROR, LOG_LEVEL_WARN, LOG_LEVEL_INFO, LOG_LEVEL_DEBUG };
enum log_format { LOG_FORMAT_TEXT, LOG_FORMAT_JSON };

void	log_open(const char *name, enum log_level, enum log_format, int syslog);
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
