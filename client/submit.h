/*
 * ember submit: a plan run on a Spark cluster by spark-submit, printing
 * what ember run prints (docs/spark.md).
 */
#ifndef EMBER_CLIENT_SUBMIT_H
#define EMBER_CLIENT_SUBMIT_H

#include <jansson.h>

/* Run "submit" with its arguments (argv[0] is the command); the exit
 * status: spark-submit's, or 2 for a usage error. */
int	cmd_submit(int argc, char **argv);

/* run's and submit's --option (in ember.c): add key=value to options, the
 * value as JSON if it parses, else text.  -1 after saying why on stderr,
 * as "ember: COMMAND: --option ...". */
int	cli_option(json_t *options, const char *command, const char *kv);

#endif
