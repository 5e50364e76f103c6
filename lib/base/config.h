/* The settings file, for callers that cannot pass an environment: container
 * engines start CRIU (and so cudasnap_plugin.so) without the caller's
 * environment, and a systemd unit or the gVisor hook may not want one.
 *
 * /etc/cudasnap/cudasnap.conf (or $CUDASNAP_CONFIG) holds lines NAME=VALUE,
 * NAME being one of the documented CUDASNAP_* variables; blank lines and
 * lines starting with '#' are skipped; whitespace around NAME and VALUE is
 * dropped; the last line of a name wins. A variable set in the environment
 * wins over the file. Since the file names libraries cudasnap loads, it is
 * read only through cs_config_open(), which refuses it unless nobody but
 * root and the caller can have chosen what it says. */
#ifndef CS_CONFIG_H
#define CS_CONFIG_H

#include <stdbool.h>
#include <stddef.h>
#include <sys/stat.h>

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

/* Opens the settings file at path for reading, refusing it unless it and
 * every directory on its path, from / down, is owned by root or the
 * caller (the effective uid), not writable by group or others (a
 * world-writable directory is refused even with the sticky bit: anyone may
 * create the next name in it) and not a symbolic link; the file must also
 * be a regular file of at most CS_CONFIG_MAX bytes. Each component is
 * opened with O_NOFOLLOW relative to the directory above it and checked on
 * the descriptor then held, so that none can be swapped between the check
 * and the open. A relative path is taken from the current directory's
 * absolute path (getcwd(3)); "." and ".." are resolved by name, which is
 * what they mean when no component is a symbolic link.
 *
 * Returns the descriptor (O_CLOEXEC) and fills *st with the file's status;
 * else -errno, with why[] saying why the file was refused ("/etc/cudasnap
 * is writable by group or others"), or why[] = "" when the file or a
 * directory above it does not exist (even a directory that would be
 * refused: nothing is read either way), which is no problem. */
int cs_config_open(const char *path, struct stat *st, char *why, size_t size);

#endif
