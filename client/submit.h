/*
 * ember submit: a plan run on a Spark cluster by spark-submit, printing
 * what ember run prints (docs/spark.md).
 */
#ifndef EMBER_CLIENT_SUBMIT_H
#define EMBER_CLIENT_SUBMIT_H

/* Run "submit" with its arguments (argv[0] is the command); the exit
 * status: spark-submit's, or 2 for a usage error. */
int	cmd_submit(int argc, char **argv);

#endif
