/* Text that comes from processes (a comm, a path, a command line) is
 * printed only once it is well-formed and harmless to a terminal. */
#include "text.h"

#include <string.h>

/* Length of the well-formed UTF-8 sequence at s (RFC 3629: no overlong
 * forms, no surrogates, nothing above U+10FFFF), or 0. */
static int utf8_len(const unsigned char *s, size_t left)
{
	unsigned char c = s[0], lo = 0x80, hi = 0xbf;
	int n;
	if (c >= 0xc2 && c <= 0xdf)
		n = 2;
	else if (c >= 0xe0 && c <= 0xef)
		n = 3, lo = c == 0xe0 ? 0xa0 : 0x80, hi = c == 0xed ? 0x9f : 0xbf;
	else if (c >= 0xf0 && c <= 0xf4)
		n = 4, lo = c == 0xf0 ? 0x90 : 0x80, hi = c == 0xf4 ? 0x8f : 0xbf;
	else
		return 0;
	if ((size_t)n > left || s[1] < lo || s[1] > hi)
		return 0;
	for (int i = 2; i < n; i++)
		if ((s[i] & 0xc0) != 0x80)
			return 0;
	return n;
}

/* C1 controls (U+0080..U+009F) and bidirectional overrides (U+202A..U+202E,
 * U+2066..U+2069) can steer a terminal or hide text: never print them. */
static bool terminal_control(const unsigned char *s, int n)
{
	if (n == 2)
		return s[0] == 0xc2 && s[1] <= 0x9f;
	if (n == 3 && s[0] == 0xe2 && s[1] == 0x80)
		return s[2] >= 0xaa && s[2] <= 0xae;
	if (n == 3 && s[0] == 0xe2 && s[1] == 0x81)
		return s[2] >= 0xa6 && s[2] <= 0xa9;
	return false;
}

bool cs_utf8_valid(const char *s, size_t len)
{
	for (size_t i = 0; i < len;) {
		int n = (unsigned char)s[i] < 0x80 ? 1 : utf8_len((const unsigned char *)s + i, len - i);
		if (n == 0)
			return false;
		i += (size_t)n;
	}
	return true;
}

void cs_sanitize(char *dst, size_t dstsize, const char *s, size_t len)
{
	size_t o = 0;
	if (dstsize == 0)
		return;
	for (size_t i = 0; i < len && s[i] && o + 1 < dstsize;) {
		unsigned char c = (unsigned char)s[i];
		if (c >= 0x80) {
			int n = utf8_len((const unsigned char *)s + i, len - i);
			if (n > 0 && !terminal_control((const unsigned char *)s + i, n)) {
				if (o + (size_t)n >= dstsize)
					break; /* cut before a character that does not fit */
				memcpy(dst + o, s + i, (size_t)n);
				o += (size_t)n;
				i += (size_t)n;
				continue;
			}
			dst[o++] = '?';
			i += n > 0 ? (size_t)n : 1;
			continue;
		}
		dst[o++] = (char)((c < 0x20 || c == 0x7f) ? '?' : c);
		i++;
	}
	dst[o] = '\0';
}

/* The quoted form: '...' with each ' written '\''. */
static size_t quoted(const char *s, char *out, size_t size)
{
	size_t o = 0;
	out[o++] = '\'';
	for (const char *p = s; *p; p++) {
		size_t n = *p == '\'' ? 4 : 1;
		if (o + n + 2 > size)
			return 0;
		memcpy(out + o, *p == '\'' ? "'\\''" : p, n);
		o += n;
	}
	out[o++] = '\'';
	out[o] = 0;
	return o;
}

bool cs_shell_word(const char *s, char *out, size_t size)
{
	size_t len = strlen(s);
	bool plain = len && strspn(s, "abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ0123456789/._-+:@,") == len;
	if (size < 3 || (plain && len >= size)) {
		if (size)
			out[0] = 0;
		return false;
	}
	if (plain) {
		memcpy(out, s, len + 1);
		return true;
	}
	if (quoted(s, out, size) == 0) {
		out[0] = 0;
		return false;
	}
	return true;
}
