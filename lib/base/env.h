/* The one place cudasnap reads its environment.
 *
 * Every variable cudasnap honours is an override of a path it loads code
 * from or trusts (the driver library, NVML, /proc, /dev, the state
 * directory, the root the doctor inspects) or a setting of the gVisor hook.
 * When cudasnap runs with elevated privileges (setuid, setgid, or file
 * capabilities such as 'setcap cap_sys_ptrace+ep': the kernel then sets
 * AT_SECURE), whoever started it chose that environment, so none of them is
 * honoured: otherwise any user could make the capable process dlopen a
 * library of theirs. Ordinary callers keep every override. */
#ifndef CS_ENV_H
#define CS_ENV_H

#include <limits.h>
#include <stdbool.h>
#include <stddef.h>

/* How many variables cudasnap documents (the list in env.c). */
#define CS_ENV_COUNT 23

/* The value of a documented variable, or NULL when it is unset, empty, or
 * ignored because of AT_SECURE; a CUDASNAP_* variable the environment does
 * not give comes from the settings file when that sets it. A name that is not in the list is never
 * read and yields NULL, so that every variable cudasnap honours is one that
 * cs_env_overrides() can report. The string belongs to the environment: do
 * not free it or keep it across setenv. */
const char *cs_env(const char *name);

/* The settings file (config.h) that cs_env() falls back to: its path
 * ($CUDASNAP_CONFIG, else /etc/cudasnap/cudasnap.conf), the settings it
 * gives (names as in cs_env_overrides; the environment still wins over
 * each), and the value it gives one of them (NULL when it gives none; the
 * string stays valid for the life of the process). */
const char *cs_config_path(void);
size_t cs_config_settings(const char **names, size_t max);
const char *cs_config_value(const char *name);

/* How many skipped lines are remembered with their reasons: a file of
 * CS_CONFIG_MAX bytes may have tens of thousands of them. */
#define CS_CONFIG_SKIPS_KEPT 16

typedef struct cs_config_skip {
	unsigned line;
	char why[96]; /* "not NAME=VALUE", "PATH is not a setting of the file" */
} cs_config_skip;

/* What reading the settings file met. */
typedef struct cs_config_status {
	char path[PATH_MAX];
	bool read; /* false when absent or ignored */
	char ignored[PATH_MAX + 160]; /* why the whole file was ignored; "" when not */
	size_t nskipped; /* lines skipped, every one */
	cs_config_skip skipped[CS_CONFIG_SKIPS_KEPT]; /* the first of them */
} cs_config_status;

/* Copies what reading the settings file met into *out. Never fails. */
void cs_config_status_get(cs_config_status *out);
/* Reads the file again at the next lookup (after it, or CUDASNAP_CONFIG,
 * changed). Values handed out before stay valid. */
void cs_config_forget(void);

/* Whether the kernel marked this process as running with elevated
 * privileges (getauxval(AT_SECURE) != 0). */
bool cs_env_secure(void);

/* Stores in names[0..max) the documented variables set to a non-empty value,
 * in the order of the list, and returns how many there are (possibly more
 * than max). They are honoured unless cs_env_secure(). The names are static
 * strings. Never fails. */
size_t cs_env_overrides(const char **names, size_t max);

/* The same, but only when they are ignored: 0 without AT_SECURE. */
size_t cs_env_ignored(const char **names, size_t max);

/* Whether name is one of the documented variables, set to a non-empty value
 * and ignored because of AT_SECURE: lets a caller say why a setting it
 * looked for is missing. */
bool cs_env_is_ignored(const char *name);

/* Whether the environment itself gives name (non-empty) and it is honoured:
 * it then wins over the settings file. */
bool cs_env_is_given(const char *name);

/* A switch from the environment or the settings file: whether cs_env(name)
 * is "1". For callers that cannot pass options (the CRIU plugin, the gVisor
 * hook, the drop-in). */
bool cs_env_on(const char *name);
/* LD_PRELOAD as cudasnap run found it (NULL with elevated privileges), to
 * keep behind the interposer. */
const char *cs_env_preload(void);
/* ASAN_OPTIONS as cudasnap run found it (NULL with elevated privileges). */
const char *cs_env_asan_options(void);

#endif
