/*
 * A process title in place of the command line, as ps and
 * /proc/PID/cmdline show it: the fork-server's workers and helpers, and
 * emberd's keeper, say what they are.
 */
#ifndef EMBER_PROCTITLE_H
#define EMBER_PROCTITLE_H

/* Remember where argv's strings lie.  The title overwrites them: set one
 * only where nothing reads argv any more. */
void	proctitle_init(int argc, char **argv);

/* Show the title, cut to the command line's length; name is the short
 * name (PR_SET_NAME) that ps -o comm and top show. */
void	proctitle_set(const char *name, const char *fmt, ...)
	    __attribute__((format(printf, 2, 3)));

#endif
