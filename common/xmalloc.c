#include <errno.h>
#include <stdarg.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "log.h"
#include "xmalloc.h"

static void	(*xmalloc_nomem)(size_t);

void
xmalloc_on_nomem(void (*fn)(size_t))
{
	xmalloc_nomem = fn;
}

/* An allocation of size bytes failed: the hook's business, if ENOMEM. */
static void
xmalloc_failed(size_t size)
{
	if (errno == ENOMEM && xmalloc_nomem != NULL)
		xmalloc_nomem(size);
}

void *
xmalloc(size_t size)
{
	void	*p;

	if (size == 0)
		size = 1;
	if ((p = malloc(size)) == NULL) {
		xmalloc_failed(size);
		fatal("xmalloc %zu bytes", size);
	}
	return (p);
}

void *
xcalloc(size_t n, size_t size)
{
	void	*p;

	if (n == 0 || size == 0)
		n = size = 1;
	if ((p = calloc(n, size)) == NULL) {
		xmalloc_failed(n * size);
		fatal("xcalloc %zu x %zu bytes", n, size);
	}
	return (p);
}

void *
xrealloc(void *p, size_t size)
{
	return (xreallocarray(p, 1, size));
}

void *
xreallocarray(void *p, size_t n, size_t size)
{
	void	*q;

	if (n == 0 || size == 0)
		n = size = 1;
	if (size > SIZE_MAX / n)
		fatalx("xreallocarray %zu x %zu overflows", n, size);
	if ((q = realloc(p, n * size)) == NULL) {
		xmalloc_failed(n * size);
		fatal("xreallocarray %zu x %zu bytes", n, size);
	}
	return (q);
}

char *
xstrdup(const char *s)
{
	char	*p;

	if ((p = strdup(s)) == NULL)
		fatal("xstrdup");
	return (p);
}

char *
xstrndup(const char *s, size_t n)
{
	char	*p;

	if ((p = strndup(s, n)) == NULL)
		fatal("xstrndup");
	return (p);
}

int
xvasprintf(char **out, const char *fmt, va_list ap)
{
	int	n;

	if ((n = vasprintf(out, fmt, ap)) == -1)
		fatal("xvasprintf");
	return (n);
}

int
xasprintf(char **out, const char *fmt, ...)
{
	va_list	ap;
	int	n;

	va_start(ap, fmt);
	n = xvasprintf(out, fmt, ap);
	va_end(ap);
	return (n);
}
