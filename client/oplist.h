/*
 * ember ops and ember cancel: the caller's operations from emberd's
 * status, one line each, and finding the one to cancel.
 */
#ifndef EMBER_OPLIST_H
#define EMBER_OPLIST_H

#include <stdio.h>

#include <jansson.h>

/* Print status's operations as a table (a line saying there is none when
 * there is none). */
void		 oplist_print(FILE *, json_t *status);
/* The operation of status whose id is id or starts with it: NULL, with
 * *why set, when none or several do. */
json_t		*oplist_find(json_t *status, const char *id, const char **why);

#endif
