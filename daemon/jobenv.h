/*
 * The environment a user's jobs start with.  emberd passes it to the
 * user's fork-server, whose workers and their commands inherit it: PATH
 * from workers.path; HOME, USER, LOGNAME and SHELL of the user the jobs
 * run as; and, of emberd's own environment, only the variables that
 * workers.env names.  Nothing else of emberd's reaches a job.
 */
#ifndef EMBER_JOBENV_H
#define EMBER_JOBENV_H

#include <sys/types.h>

/* A NULL-terminated environment for jobs run as uid; jobenv_free frees
 * it. */
char	**jobenv_build(uid_t);
void	  jobenv_free(char **);

#endif
