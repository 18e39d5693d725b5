/*
 * What the status listener shows, to anyone who can connect to it: the
 * status reply with every user's operations, sessions, broadcasts and
 * failures taken out but those of the users status.users names ("*": all
 * of them).  What every local user can see anyway stays: the workers
 * (ps shows them), the pools (whose uid their fork-server runs as), the
 * counters and the totals.
 */
#ifndef EMBER_STATUS_WEB_H
#define EMBER_STATUS_WEB_H

#include <sys/types.h>

#include <jansson.h>

/* Read status.users again if it changed: 0, or -1 (logged) if it names
 * a user that does not exist. */
int	 status_web_check_users(void);
/* Does status.users show uid's operations? */
int	 status_web_allows(uid_t);
/* The status reply as the listener shows it. */
json_t	*status_web_build(void);

#endif
