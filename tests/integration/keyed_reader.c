/*
 * Read a stream of pairs and groups with libember, for test_pyshuffle.py:
 * ember_next for every record, and ember_next_item for each one it
 * refuses.  Prints one line per call's result.  The plan is argv[2], or
 * one the scripted peer ignores.
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "ember.h"

/* Print bytes, a NUL as \0, a null as (null), a long run as its size. */
static void
print_bytes(const void *data, size_t len)
{
	const unsigned char	*p = data;
	size_t			 i;

	if (data == NULL) {
		fputs("(null)", stdout);
		return;
	}
	if (len > 1000) {
		printf("<%zu bytes of %c>", len, p[0]);
		return;
	}
	for (i = 0; i < len; i++) {
		if (p[i] == '\0')
			fputs("\\0", stdout);
		else
			putchar(p[i]);
	}
}

/* Print what ember_next_item read. */
static void
print_item(const struct ember_item *it)
{
	size_t	i;

	switch (it->kind) {
	case EMBER_KIND_RECORD:
		fputs("record ", stdout);
		print_bytes(it->key.data, it->key.len);
		break;
	case EMBER_KIND_PAIR:
		fputs("pair ", stdout);
		print_bytes(it->key.data, it->key.len);
		putchar(' ');
		print_bytes(it->value.data, it->value.len);
		break;
	case EMBER_KIND_GROUP:
		fputs("group ", stdout);
		print_bytes(it->key.data, it->key.len);
		printf(" %zu:", it->nvalues);
		for (i = 0; i < it->nvalues; i++) {
			putchar(' ');
			print_bytes(it->values[i].data, it->values[i].len);
		}
		break;
	}
	putchar('\n');
}

int
main(int argc, char **argv)
{
	struct ember		*e;
	struct ember_item	 it;
	const void		*data;
	size_t			 len;
	char			*err;
	int			 rc;

	const char		*plan = "{\"source\": {\"range\": "
				    "{\"start\": 0, \"end\": 1}}}";

	if (argc == 3)
		plan = argv[2];
	if (argc < 2 || argc > 3 ||
	    (e = ember_connect(argv[1], &err)) == NULL) {
		fprintf(stderr, "usage: keyed_reader SOCKET [PLAN]\n");
		return (2);
	}
	if (ember_execute(e, plan, "iterate", NULL, NULL) == -1)
		goto fail;
	for (;;) {
		if ((rc = ember_next(e, &data, &len)) == 1) {
			fputs("record ", stdout);
			print_bytes(data, len);
			putchar('\n');
			continue;
		}
		if (rc == 0)
			break;
		if (strcmp(ember_error_class(e), "KEYED_RECORD") != 0)
			goto fail;
		printf("refused %s\n", ember_error_class(e));
		if (ember_next_item(e, &it) != 1)
			goto fail;
		print_item(&it);
	}
	puts("end");
	ember_close(e);
	return (0);
fail:
	fprintf(stderr, "%s: %s\n", ember_error_class(e), ember_error(e));
	ember_close(e);
	return (1);
}
