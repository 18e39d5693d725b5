#include <sys/prctl.h>

#include <stdarg.h>
#include <stdio.h>
#include <string.h>

#include "proctitle.h"

/* The bytes of argv's strings, where the title goes. */
static char	*proctitle_area;
static size_t	 proctitle_len;

/* Remember argv's extent, if its strings lie end to end as exec left them. */
void
proctitle_init(int argc, char **argv)
{
	char	*end;
	int	 i;

	if (argc < 1 || argv[0] == NULL)
		return;
	end = argv[0] + strlen(argv[0]) + 1;
	for (i = 1; i < argc; i++) {
		if (argv[i] != end)
			return;
		end = argv[i] + strlen(argv[i]) + 1;
	}
	proctitle_area = argv[0];
	proctitle_len = (size_t)(end - argv[0]);
}

/* Write the title over argv; the rest is zeroed, so /proc/PID/cmdline
 * ends with it. */
void
proctitle_set(const char *name, const char *fmt, ...)
{
	va_list	ap;

	if (proctitle_area == NULL || proctitle_len < 2)
		return;
	memset(proctitle_area, 0, proctitle_len);
	/* A title without conversions (a new worker's) is copied: printf's
	 * code, tables and frame are pages a child just forked would fault
	 * in for it. */
	if (strchr(fmt, '%') == NULL)
		strncpy(proctitle_area, fmt, proctitle_len - 1);
	else {
		va_start(ap, fmt);
		vsnprintf(proctitle_area, proctitle_len, fmt, ap);
		va_end(ap);
	}
	prctl(PR_SET_NAME, name, 0, 0, 0);
}
