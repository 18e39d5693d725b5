/*
 * Send one request with ember_request_counts, for test_libember.py:
 * counts_request SOCKET ORDER REQUEST, ORDER a number as the enum.
 * Prints the counts ("COUNT RECORD" lines), or "error CLASS", and then
 * whether the connection still takes a request ("status ok").
 * counts_request SOCKET count PLAN runs ember_count instead, its stack
 * filled with garbage first, so that a reply pointer left unset shows.
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "ember.h"

/* Leave the stack below main full of a pattern. */
static void __attribute__((noinline))
stack_dirty(void)
{
	volatile char	junk[8192];
	size_t		i;

	for (i = 0; i < sizeof junk; i++)
		junk[i] = 0x41;
}

int
main(int argc, char **argv)
{
	struct ember		*e;
	struct ember_counts	*c;
	const void		*data;
	char			*err, *status;
	size_t			 i, len;
	int64_t			 n;

	if (argc != 4) {
		fprintf(stderr, "usage: counts_request socket order request\n");
		return (2);
	}
	if ((e = ember_connect(argv[1], &err)) == NULL) {
		fprintf(stderr, "connect: %s\n", err);
		return (1);
	}
	if (strcmp(argv[2], "count") == 0) {
		int64_t	count;

		stack_dirty();
		if (ember_count(e, argv[3], &count) == -1)
			printf("error %s\n", ember_error_class(e));
		else
			printf("count %lld\n", (long long)count);
	} else if (ember_request_counts(e, argv[3],
	    (enum ember_counts_order)atoi(argv[2]), &c) == -1) {
		printf("error %s%s\n", ember_error_class(e),
		    c == NULL ? "" : " (counts left)");
	} else {
		for (i = 0; i < ember_counts_size(c); i++) {
			n = ember_counts_get(c, i, &data, &len);
			printf("%lld %.*s\n", (long long)n, (int)len,
			    (const char *)data);
		}
		ember_counts_free(c);
	}
	if ((status = ember_status(e)) != NULL) {
		puts("status ok");
		free(status);
	} else
		printf("status error %s\n", ember_error_class(e));
	ember_close(e);
	return (0);
}
