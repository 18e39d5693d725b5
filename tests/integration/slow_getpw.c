/*
 * An LD_PRELOAD library for test_isolation.py: a passwd database as slow
 * as LDAP or sssd can be.  Each lookup of a user other than root and
 * nobody (the ones emberd's start looks up) waits EMBER_SLOW_GETPW_MS
 * milliseconds before the real one runs.
 */
#include <sys/types.h>

#include <dlfcn.h>
#include <pwd.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

/* Wait the configured time. */
static void
slow_wait(void)
{
	const char	*ms = getenv("EMBER_SLOW_GETPW_MS");
	struct timespec	 ts;
	long		 n;

	if (ms == NULL || (n = atol(ms)) <= 0)
		return;
	ts.tv_sec = n / 1000;
	ts.tv_nsec = (n % 1000) * 1000000;
	while (nanosleep(&ts, &ts) == -1)
		;
}

/* Is this a lookup to slow down? */
static int
slow_name(const char *name)
{
	return (name != NULL && strcmp(name, "root") != 0 &&
	    strcmp(name, "nobody") != 0);
}

static int
slow_uid(uid_t uid)
{
	return (uid != 0 && uid != 65534);
}

struct passwd *
getpwuid(uid_t uid)
{
	struct passwd	*(*real)(uid_t) = dlsym(RTLD_NEXT, "getpwuid");

	if (slow_uid(uid))
		slow_wait();
	return (real(uid));
}

struct passwd *
getpwnam(const char *name)
{
	struct passwd	*(*real)(const char *) = dlsym(RTLD_NEXT, "getpwnam");

	if (slow_name(name))
		slow_wait();
	return (real(name));
}

int
getpwuid_r(uid_t uid, struct passwd *pw, char *buf, size_t len,
    struct passwd **out)
{
	int	(*real)(uid_t, struct passwd *, char *, size_t,
		    struct passwd **) = dlsym(RTLD_NEXT, "getpwuid_r");

	if (slow_uid(uid))
		slow_wait();
	return (real(uid, pw, buf, len, out));
}

int
getpwnam_r(const char *name, struct passwd *pw, char *buf, size_t len,
    struct passwd **out)
{
	int	(*real)(const char *, struct passwd *, char *, size_t,
		    struct passwd **) = dlsym(RTLD_NEXT, "getpwnam_r");

	if (slow_name(name))
		slow_wait();
	return (real(name, pw, buf, len, out));
}
