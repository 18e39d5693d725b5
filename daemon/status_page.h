/* The status page (daemon/status_page.html), built into the program. */
#ifndef EMBER_STATUS_PAGE_H
#define EMBER_STATUS_PAGE_H

#include <stddef.h>

extern const char	status_page[];
extern const size_t	status_page_len;

#endif
