#include <stdlib.h>
#include <string.h>

#include <unistr.h>

#include "utf8.h"
#include "xmalloc.h"

#define UTF8_REPLACEMENT	"\xef\xbf\xbd"	/* U+FFFD */

size_t
utf8_cut(const char *s, size_t len, size_t max)
{
	if (len <= max)
		return (len);
	len = max;
	/* Step back over continuation bytes to a character boundary. */
	while (len > 0 && ((unsigned char)s[len] & 0xc0) == 0x80)
		len--;
	return (len);
}

int
utf8_valid(const char *s, size_t len)
{
	return (u8_check((const uint8_t *)s, len) == NULL);
}

char *
utf8_clean(const char *s, size_t len, size_t max)
{
	const uint8_t	*p = (const uint8_t *)s, *end = p + len, *bad;
	char		*out;
	size_t		 used = 0, n;

	out = xmalloc((len < max ? len : max) * 3 + 1);
	while (p < end && used < max) {
		if ((bad = u8_check(p, (size_t)(end - p))) == NULL)
			bad = end;
		n = utf8_cut((const char *)p, (size_t)(bad - p), max - used);
		memcpy(out + used, p, n);
		used += n;
		if (n < (size_t)(bad - p) || bad == end)
			break;
		if (max - used < sizeof UTF8_REPLACEMENT - 1)
			break;
		memcpy(out + used, UTF8_REPLACEMENT, sizeof UTF8_REPLACEMENT - 1);
		used += sizeof UTF8_REPLACEMENT - 1;
		p = bad + 1;
	}
	out[used] = '\0';
	return (out);
}
