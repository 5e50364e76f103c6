/* What cs_sanitize promises about its output, stated independently of it:
 * well-formed UTF-8 (RFC 3629: no overlong forms, no surrogates, nothing
 * above U+10FFFF) and no C0 control byte or DEL. */
#ifndef CS_UTF8CHECK_H
#define CS_UTF8CHECK_H

#include <stdbool.h>
#include <stddef.h>

/* Well-formed UTF-8; with controls false, no C0 control byte or DEL either. */
static inline bool cs_check_utf8(const char *str, size_t len, bool controls)
{
	const unsigned char *s = (const unsigned char *)str;
	for (size_t i = 0; i < len;) {
		unsigned c = s[i];
		if (c < 0x80) {
			if (!controls && (c < 0x20 || c == 0x7f))
				return false;
			i++;
			continue;
		}
		size_t n;
		unsigned lo = 0x80, hi = 0xbf;
		if (c >= 0xc2 && c <= 0xdf) {
			n = 2;
		} else if (c >= 0xe0 && c <= 0xef) {
			n = 3;
			if (c == 0xe0)
				lo = 0xa0;
			else if (c == 0xed)
				hi = 0x9f;
		} else if (c >= 0xf0 && c <= 0xf4) {
			n = 4;
			if (c == 0xf0)
				lo = 0x90;
			else if (c == 0xf4)
				hi = 0x8f;
		} else {
			return false;
		}
		if (n > len - i)
			return false;
		if (s[i + 1] < lo || s[i + 1] > hi)
			return false;
		for (size_t k = 2; k < n; k++)
			if ((s[i + k] & 0xc0) != 0x80)
				return false;
		i += n;
	}
	return true;
}

static inline bool cs_check_utf8_clean(const char *str, size_t len)
{
	return cs_check_utf8(str, len, false);
}

#endif
