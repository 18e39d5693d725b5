/*
 * Run one plan again and again through one libember handle, for
 * test_libember.py: in each directory named, chdir to it, then count the
 * plan with ember_count, with ember_execute's "count" and with a
 * "collect", and print the three counts on a line.  libember keeps the
 * last plan it sent; a plan with relative paths must still follow the
 * working directory, and a kept plan open a stream as a new one does.
 */
#include <err.h>
#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "ember.h"

/* The "count" of a count's reply text, or -1. */
static int64_t
reply_count(const char *reply)
{
	const char	*p = strstr(reply, "\"count\":");

	return (p == NULL ? -1 : strtoll(p + 8, NULL, 10));
}

/* The records a collect of plan gives. */
static int64_t
collect_count(struct ember *e, const char *plan)
{
	const void	*data;
	size_t		 len;
	int64_t		 n = 0;
	int		 rc;

	if (ember_execute(e, plan, "collect", NULL, NULL) == -1)
		errx(1, "collect: %s", ember_error(e));
	while ((rc = ember_next(e, &data, &len)) == 1)
		n++;
	if (rc == -1)
		errx(1, "collect: %s", ember_error(e));
	return (n);
}

int
main(int argc, char **argv)
{
	struct ember	*e;
	char		*errmsg, *reply;
	int64_t		 n;
	int		 i;

	if (argc < 4)
		errx(2, "usage: plan_again SOCKET PLAN DIR...");
	if ((e = ember_connect(argv[1], &errmsg)) == NULL)
		errx(1, "connect: %s", errmsg);
	for (i = 3; i < argc; i++) {
		if (chdir(argv[i]) == -1)
			err(1, "%s", argv[i]);
		if (ember_count(e, argv[2], &n) == -1)
			errx(1, "count: %s", ember_error(e));
		if (ember_execute(e, argv[2], "count", NULL, &reply) == -1)
			errx(1, "execute: %s", ember_error(e));
		printf("%" PRId64 " %" PRId64 " %" PRId64 "\n", n,
		    reply_count(reply), collect_count(e, argv[2]));
		free(reply);
	}
	ember_close(e);
	return (0);
}
