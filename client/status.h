/*
 * ember status: emberd's status reply, printed for a person.
 */
#ifndef EMBER_STATUS_H
#define EMBER_STATUS_H

#include <stddef.h>

#include <jansson.h>

/* Print the status reply as tables that fit 80 columns; verbose adds the
 * limits, the counters and the columns for tuning. */
void	status_print(json_t *, int verbose);
/* Milliseconds as 812ms, 4.2s, 12s, 3m12s, 2h03m or 3d04h. */
void	status_format_age(json_int_t ms, char *buf, size_t len);

#endif
