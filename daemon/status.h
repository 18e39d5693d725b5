/* The status reply: workers, pools, sessions, operations and counters, as
 * seen by one uid (root sees everything). */
#ifndef EMBER_STATUS_H
#define EMBER_STATUS_H

#include <sys/types.h>

#include <jansson.h>

json_t	*status_build(uid_t);

#endif
