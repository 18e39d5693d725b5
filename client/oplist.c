#include <inttypes.h>
#include <stdio.h>
#include <string.h>

#include "oplist.h"

/* Print a duration in milliseconds the short way: 850ms, 12s, 3m04s. */
static void
oplist_print_age(FILE *f, json_int_t ms)
{
	if (ms < 1000)
		fprintf(f, "%" JSON_INTEGER_FORMAT "ms", ms);
	else if (ms < 60000)
		fprintf(f, "%" JSON_INTEGER_FORMAT "s", ms / 1000);
	else
		fprintf(f, "%" JSON_INTEGER_FORMAT "m%02" JSON_INTEGER_FORMAT
		    "s", ms / 60000, ms / 1000 % 60);
}

/* An integer field, 0 when missing. */
static json_int_t
oplist_int(json_t *o, const char *key)
{
	return (json_integer_value(json_object_get(o, key)));
}

/* A string field, "-" when missing. */
static const char *
oplist_str(json_t *o, const char *key)
{
	const char	*s = json_string_value(json_object_get(o, key));

	return (s != NULL ? s : "-");
}

void
oplist_print(FILE *f, json_t *status)
{
	json_t	*ops = json_object_get(status, "operations"), *o;
	size_t	 i;
	char	 done[48];

	if (json_array_size(ops) == 0) {
		fprintf(f, "no operations\n");
		return;
	}
	fprintf(f, "%-36s  %-14s  %-9s  %-12s  %7s  %10s  %s\n", "OPERATION",
	    "ACTION", "STATE", "PARTITIONS", "RUNNING", "RECORDS", "AGE");
	json_array_foreach(ops, i, o) {
		snprintf(done, sizeof done, "%" JSON_INTEGER_FORMAT "/%"
		    JSON_INTEGER_FORMAT, oplist_int(o, "done"),
		    oplist_int(o, "partitions"));
		fprintf(f, "%-36s  %-14s  %-9s  %-12s  %7" JSON_INTEGER_FORMAT
		    "  %10" JSON_INTEGER_FORMAT "  ", oplist_str(o, "id"),
		    oplist_str(o, "action"), oplist_str(o, "state"), done,
		    oplist_int(o, "running"), oplist_int(o, "records_sent"));
		oplist_print_age(f, oplist_int(o, "age_ms"));
		fputc('\n', f);
	}
}

json_t *
oplist_find(json_t *status, const char *id, const char **why)
{
	json_t		*ops = json_object_get(status, "operations"), *o;
	json_t		*found = NULL;
	const char	*oid;
	size_t		 i, len = strlen(id);

	*why = "no such operation (ember ops lists yours)";
	if (len == 0)
		return (NULL);
	json_array_foreach(ops, i, o) {
		if ((oid = json_string_value(json_object_get(o, "id"))) ==
		    NULL || strncmp(oid, id, len) != 0)
			continue;
		if (oid[len] == '\0')
			return (o);	/* the whole id: no doubt */
		if (found != NULL) {
			*why = "several operations start with that";
			return (NULL);
		}
		found = o;
	}
	return (found);
}
