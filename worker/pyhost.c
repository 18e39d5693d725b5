/*
 * The functions of ember-worker that python.c calls, inside its module:
 * each formats what it has to and hands it to ember-worker's own through
 * the host table (worker/pymodule.h).  Built with hidden visibility, so
 * they bind to python.c alone.
 */
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "held.h"
#include "keyed.h"
#include "log.h"
#include "ops.h"
#include "plan.h"
#include "pyhost.h"
#include "pymodule.h"
#include "xmalloc.h"

static const struct pymodule_host	*pyhost;

void
pyhost_set(const struct pymodule_host *host)
{
	pyhost = host;
}

/* Format a message as xvasprintf does: never NULL. */
static char * __attribute__((format(printf, 1, 0)))
pyhost_vformat(const char *fmt, va_list ap)
{
	char	*s;

	if (vasprintf(&s, fmt, ap) == -1)
		pyhost->fatalx("python: out of memory for a message");
	return (s);
}

/* Log a formatted message at level, if that level is on. */
static void __attribute__((format(printf, 2, 0)))
pyhost_vlog(enum log_level level, const char *fmt, va_list ap)
{
	char	*s;

	if (!pyhost->log_enabled(level))
		return;
	s = pyhost_vformat(fmt, ap);
	pyhost->log(level, s);
	free(s);
}

#define PYHOST_LOG(name, level)				\
void							\
name(const char *fmt, ...)				\
{							\
	va_list	ap;					\
	va_start(ap, fmt);				\
	pyhost_vlog(level, fmt, ap);			\
	va_end(ap);					\
}
PYHOST_LOG(log_error, LOG_LEVEL_ERROR)
PYHOST_LOG(log_warn, LOG_LEVEL_WARN)
PYHOST_LOG(log_info, LOG_LEVEL_INFO)
PYHOST_LOG(log_debug, LOG_LEVEL_DEBUG)

void
fatalx(const char *fmt, ...)
{
	va_list	 ap;
	char	*s;

	va_start(ap, fmt);
	s = pyhost_vformat(fmt, ap);
	va_end(ap);
	pyhost->fatalx(s);
}

void *
xcalloc(size_t n, size_t size)
{
	return (pyhost->xcalloc(n, size));
}

void *
xrealloc(void *p, size_t size)
{
	return (pyhost->xrealloc(p, size));
}

char *
xstrdup(const char *s)
{
	size_t	 len = strlen(s);

	return (memcpy(pyhost->xcalloc(1, len + 1), s, len));
}

int
xasprintf(char **out, const char *fmt, ...)
{
	va_list	ap;

	va_start(ap, fmt);
	*out = pyhost_vformat(fmt, ap);
	va_end(ap);
	return ((int)strlen(*out));
}

const void *
held_bytes(int64_t id, size_t *len)
{
	return (pyhost->held_bytes(id, len));
}

int
keyed_value_next(const char **p, const char *end, const char **v,
    size_t *vlen, int *vnull)
{
	return (pyhost->keyed_value_next(p, end, v, vlen, vnull));
}

int
op_fail(struct op *op, const char *fmt, ...)
{
	va_list	ap;
	char	*s;

	va_start(ap, fmt);
	s = pyhost_vformat(fmt, ap);
	va_end(ap);
	return (pyhost->op_fail_take(op, s));
}

const char *
plan_python_kind_name(enum plan_python_kind kind)
{
	return (pyhost->plan_python_kind_name(kind));
}
