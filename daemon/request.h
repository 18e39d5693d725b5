/*
 * A client's control request, from the bytes of its frame to a JSON object
 * with a string "op": the part of reading a connection that needs no
 * socket, so that tests and fuzzers can call it alone.
 */
#ifndef EMBER_REQUEST_H
#define EMBER_REQUEST_H

#include <stddef.h>

#include <jansson.h>

/*
 * Parse the len bytes of a control frame (NULs allowed in strings,
 * duplicate keys refused).  NULL and *err (the REQUEST_INVALID message) if
 * they are not a JSON object with a string "op".
 */
json_t	*request_parse(const void *data, size_t len, char **err);

#endif
