/* Allocation that never returns NULL: running out of memory is fatal. */
#ifndef EMBER_XMALLOC_H
#define EMBER_XMALLOC_H

#include <stdarg.h>
#include <stddef.h>

void	*xmalloc(size_t);
void	*xcalloc(size_t, size_t);
void	*xrealloc(void *, size_t);
void	*xreallocarray(void *, size_t, size_t);
/* Call fn (which must not return) instead of fatal when an allocation of
 * size bytes fails for want of memory. */
void	 xmalloc_on_nomem(void (*fn)(size_t));
char	*xstrdup(const char *);
char	*xstrndup(const char *, size_t);
int	 xvasprintf(char **, const char *, va_list)
	    __attribute__((format(printf, 2, 0)));
int	 xasprintf(char **, const char *, ...)
	     __attribute__((format(printf, 2, 3)));

#endif
