/* The settings file, for callers that cannot pass an environment: container
 * engines start CRIU (and so cudasnap_plugin.so) without the caller's
 * environment, and a systemd unit or the gVisor hook may not want one.
 *
 * /etc/cudasnap/cudasnap.conf (or $CUDASNAP_CONFIG) holds lines NAME=VALUE,
 * NAME being one of the documented CUDASNAP_* variables; blank lines and
 * lines starting with '#' are skipped; whitespace around NAME and VALUE is
 * dropped; the last line of a name wins. A variable set in the environment
 * wins over the file. The file is read only when it is a regular file of at
 * most CS_CONFIG_MAX bytes, owned by root or the caller and not writable by
 * group or others, since it names libraries cudasnap loads. */
#ifndef CS_CONFIG_H
#define CS_CONFIG_H

#include <stdbool.h>
#include <stddef.h>

#define CS_CONFIG_DEFAULT "/etc/cudasnap/cudasnap.conf"
#define CS_CONFIG_MAX (64u << 10)

/* One NAME=VALUE line, as found (not NUL-terminated), with its line number. */
typedef void (*cs_config_fn)(void *ctx, const char *name, size_t nlen, const char *value, size_t vlen, unsigned line);
/* Calls bad(ctx, line) for a line that is neither blank, a comment nor
 * NAME=VALUE with a name of letters, digits and '_'. */
typedef void (*cs_config_bad_fn)(void *ctx, unsigned line);

/* Parses untrusted text of len bytes (NUL bytes end nothing: they make a
 * line bad). Never fails. */
void cs_config_parse(const char *text, size_t len, cs_config_fn fn, cs_config_bad_fn bad, void *ctx);

#endif
