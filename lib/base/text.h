/* Text from processes, made safe to print (lib/base/text.c). */
#ifndef CS_TEXT_H
#define CS_TEXT_H

#include <stdbool.h>
#include <stddef.h>

/* Whether s is well-formed UTF-8 (RFC 3629: no overlong forms, no
 * surrogates, nothing above U+10FFFF); control bytes allowed. */
bool cs_utf8_valid(const char *s, size_t len);
/* Copies s into dst, replacing control bytes and invalid UTF-8 with '?'. */
void cs_sanitize(char *dst, size_t dstsize, const char *s, size_t len);

/* s as one word of a POSIX shell's, quoted where it must be, for a command
 * a message tells the user to run. false (out "") when it does not fit: a
 * command cut short would name something else. */
bool cs_shell_word(const char *s, char *out, size_t size);

#endif
