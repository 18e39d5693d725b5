#include <pwd.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "emberd.h"
#include "jobenv.h"
#include "userdb.h"
#include "xmalloc.h"

extern char **environ;

/* The variables emberd sets itself, each with a space either side:
 * workers.env cannot bring emberd's. */
static const char jobenv_own[] = " PATH HOME USER LOGNAME SHELL ";

/* Is name one of the variables emberd sets itself? */
static int
jobenv_is_own(const char *name, size_t len)
{
	const char	*p;

	for (p = strstr(jobenv_own, " "); p != NULL; p = strchr(p + 1, ' ')) {
		if (strncmp(p + 1, name, len) == 0 && p[1 + len] == ' ')
			return (1);
	}
	return (0);
}

/* Is name (len bytes) named in workers.env? */
static int
jobenv_allowed(const char *name, size_t len)
{
	const char	*s = ember_conf.workers_env, *sep = " \t,";
	size_t		 n;

	for (s += strspn(s, sep); *s != '\0'; s += strspn(s, sep)) {
		n = strcspn(s, sep);
		if (n == len && strncmp(s, name, len) == 0)
			return (!jobenv_is_own(name, len));
		s += n;
	}
	return (0);
}

/* Add an entry ("name=value", taken) to env, of *n entries and room for
 * *max. */
static void
jobenv_push(char ***env, size_t *n, size_t *max, char *entry)
{
	if (*n + 2 > *max) {
		*max = *max * 2 + 8;
		*env = xreallocarray(*env, *max, sizeof **env);
	}
	(*env)[(*n)++] = entry;
	(*env)[*n] = NULL;
}

/* Add "name=value" to env; name ends with its "=". */
static void
jobenv_add(char ***env, size_t *n, size_t *max, const char *name,
    const char *value)
{
	char	*entry;

	xasprintf(&entry, "%s%s", name, value);
	jobenv_push(env, n, max, entry);
}

char **
jobenv_build(uid_t uid)
{
	const struct userdb_user	 *pw;
	char				**env = NULL, uidtext[32], *eq;
	const char			 *home = "/", *shell = "/bin/sh", *name;
	size_t				  n = 0, max = 0, i;

	/* A uid without an entry: its number for a name, / for a home. */
	snprintf(uidtext, sizeof uidtext, "%lu", (unsigned long)uid);
	name = uidtext;
	/* Cached: the pool's user was looked up before its fork-server. */
	if ((pw = userdb_uid_now(uid)) != NULL) {
		name = pw->name;
		if (pw->dir[0] == '/')
			home = pw->dir;
		if (pw->shell[0] == '/')
			shell = pw->shell;
	}
	jobenv_add(&env, &n, &max, "PATH=", ember_conf.workers_path);
	jobenv_add(&env, &n, &max, "HOME=", home);
	jobenv_add(&env, &n, &max, "USER=", name);
	jobenv_add(&env, &n, &max, "LOGNAME=", name);
	jobenv_add(&env, &n, &max, "SHELL=", shell);
	for (i = 0; environ[i] != NULL; i++) {
		if ((eq = strchr(environ[i], '=')) == NULL ||
		    !jobenv_allowed(environ[i], (size_t)(eq - environ[i])))
			continue;
		jobenv_push(&env, &n, &max, xstrdup(environ[i]));
	}
	return (env);
}

void
jobenv_free(char **env)
{
	size_t	i;

	for (i = 0; env != NULL && env[i] != NULL; i++)
		free(env[i]);
	free(env);
}
