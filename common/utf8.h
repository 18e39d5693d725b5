/*
 * UTF-8 for messages: every error frame and reply is valid UTF-8, so a
 * client in any language decodes it.  Built on libunistring.
 */
#ifndef EMBER_UTF8_H
#define EMBER_UTF8_H

#include <stddef.h>

/* The length of the longest prefix of s (len bytes), at most max, that
 * does not end inside a character. */
size_t	 utf8_cut(const char *s, size_t len, size_t max);
/* Is s (len bytes) valid UTF-8 throughout? */
int	 utf8_valid(const char *s, size_t len);
/* A new NUL-terminated copy of s (len bytes) in at most max bytes of valid
 * UTF-8: each byte that starts no valid character becomes U+FFFD, and the
 * copy is cut between characters. */
char	*utf8_clean(const char *s, size_t len, size_t max);

#endif
