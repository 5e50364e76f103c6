/* Reads of the environment, all through secure_getenv(3), which returns
 * NULL when the process runs with elevated privileges (AT_SECURE); see
 * env.h for why. This is the only file of lib/ and src/ allowed to read the
 * environment (tests/lint/env_reads.py checks it). */
#include "env.h"
#include "util.h"

#include <stdlib.h>
#include <string.h>
#include <sys/auxv.h>

/* Every variable cudasnap reads, as documented in cudasnap(1)'s ENVIRONMENT. */
static const char *const documented[] = {
	"CUDASNAP_LIBCUDA",    "CUDASNAP_LIBNVML", "CUDASNAP_DEV_DIR",     "CUDASNAP_PROC_DIR",
	"CUDASNAP_STATE_DIR",  "CUDASNAP_ROOT",    "CUDASNAP_HOOK_STRICT", "GVISOR_SAVE_RESTORE_AUTO_EXEC_MODE",
	"CUDASNAP_DEVICE_MAP",
};
_Static_assert(CS_ARRAY_SIZE(documented) == CS_ENV_COUNT, "CS_ENV_COUNT is the length of the list");

static bool is_documented(const char *name)
{
	for (size_t i = 0; i < CS_ARRAY_SIZE(documented); i++)
		if (strcmp(documented[i], name) == 0)
			return true;
	return false;
}

const char *cs_env(const char *name)
{
	if (!name || !is_documented(name))
		return NULL;
	const char *v = secure_getenv(name);
	return v && *v ? v : NULL;
}

bool cs_env_secure(void)
{
	return getauxval(AT_SECURE) != 0;
}

/* Whether the caller set it. The plain getenv only tells that: its value
 * is never used, so it cannot matter under AT_SECURE either. */
static bool is_set(const char *name)
{
	const char *v = getenv(name);
	return v && *v;
}

size_t cs_env_overrides(const char **names, size_t max)
{
	size_t n = 0;
	for (size_t i = 0; i < CS_ARRAY_SIZE(documented); i++) {
		if (!is_set(documented[i]))
			continue;
		if (n < max)
			names[n] = documented[i];
		n++;
	}
	return n;
}

size_t cs_env_ignored(const char **names, size_t max)
{
	return cs_env_secure() ? cs_env_overrides(names, max) : 0;
}

bool cs_env_is_ignored(const char *name)
{
	return name && cs_env_secure() && is_documented(name) && is_set(name);
}
