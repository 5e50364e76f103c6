/* Reads of the environment, all through secure_getenv(3), which returns
 * NULL when the process runs with elevated privileges (AT_SECURE); see
 * env.h for why. This is the only file of lib/ and src/ allowed to read the
 * environment (tests/lint/env_reads.py checks it). Settings missing from the
 * environment come from the settings file (config.h). */
#include "env.h"
#include "config.h"
#include "text.h"
#include "util.h"

#include <fcntl.h>
#include <pthread.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/auxv.h>
#include <sys/stat.h>
#include <unistd.h>

/* Every variable cudasnap reads, as documented in cudasnap(1)'s ENVIRONMENT. */
static const char *const documented[] = {
	"CUDASNAP_LIBCUDA",
	"CUDASNAP_LIBNVML",
	"CUDASNAP_DEV_DIR",
	"CUDASNAP_PROC_DIR",
	"CUDASNAP_STATE_DIR",
	"CUDASNAP_GPU_BOOK",
	"CUDASNAP_ROOT",
	"CUDASNAP_HOOK_STRICT",
	"GVISOR_SAVE_RESTORE_AUTO_EXEC_MODE",
	"CUDASNAP_DEVICE_MAP",
	"CUDASNAP_CONFIG",
	"CUDASNAP_IGNORE_MEMORY",
	"CUDASNAP_ALLOW_UNRESTORABLE",
	"CUDASNAP_WAIT_MEMORY",
	"CUDASNAP_IGNORE_GPU_MEMORY",
	"CUDASNAP_KEEP_FAILED_RESTORE",
	"CUDASNAP_LIBARCHIVE",
	"CUDASNAP_NO_PARK",
	"CUDASNAP_PARK_TO",
	"CUDASNAP_PARK_FILES",
	"CUDASNAP_PARK_PIN",
	"CUDASNAP_PARK_LIB",
	"CUDASNAP_CRIU_PLUGIN_DIR",
};
_Static_assert(CS_ARRAY_SIZE(documented) == CS_ENV_COUNT, "CS_ENV_COUNT is the length of the list");

static int documented_index(const char *name, size_t len)
{
	for (size_t i = 0; i < CS_ARRAY_SIZE(documented); i++)
		if (strlen(documented[i]) == len && memcmp(documented[i], name, len) == 0)
			return (int)i;
	return -1;
}

static bool is_documented(const char *name)
{
	return documented_index(name, strlen(name)) >= 0;
}

/* What the settings file may set: cudasnap's own variables, but not the
 * name of the file itself. */
static bool file_may_set(int i)
{
	return i >= 0 && strncmp(documented[i], "CUDASNAP_", 9) == 0 && strcmp(documented[i], "CUDASNAP_CONFIG") != 0;
}

/* The settings file, read once. Its values and problems live as long as
 * the process. */
static struct {
	pthread_mutex_t mu;
	bool loaded;
	char *value[CS_ARRAY_SIZE(documented)];
	char **retired; /* values of an earlier reading (cs_config_forget) */
	size_t nretired, nretired_cap;
	cs_config_status status;
} file = { .mu = PTHREAD_MUTEX_INITIALIZER };

/* Keeps a skipped line's reason while there is room, and counts every one:
 * doctor lists them. */
__attribute__((format(printf, 2, 3))) static void note_skip(unsigned line, const char *fmt, ...)
{
	cs_config_status *s = &file.status;
	if (s->nskipped < CS_ARRAY_SIZE(s->skipped)) {
		cs_config_skip *k = &s->skipped[s->nskipped];
		k->line = line;
		va_list ap;
		va_start(ap, fmt);
		vsnprintf(k->why, sizeof(k->why), fmt, ap);
		va_end(ap);
	}
	s->nskipped++;
}

static void take_setting(void *ctx, const char *name, size_t nlen, const char *value, size_t vlen, unsigned line)
{
	(void)ctx;
	int i = documented_index(name, nlen);
	if (!file_may_set(i)) {
		char n[49];
		cs_sanitize(n, sizeof(n), name, nlen);
		note_skip(line, "%s%s is not a setting of the file", n, nlen >= sizeof(n) ? "..." : "");
		return;
	}
	char *v = strndup(value, vlen);
	if (!v) {
		note_skip(line, "out of memory");
		return;
	}
	free(file.value[i]);
	file.value[i] = v;
}

static void bad_line(void *ctx, unsigned line)
{
	(void)ctx;
	note_skip(line, "not NAME=VALUE");
}

static void load_file(void)
{
	cs_config_status *s = &file.status;
	const char *env = secure_getenv("CUDASNAP_CONFIG");
	const char *path = env && *env ? env : CS_CONFIG_DEFAULT;
	/* A shortened path would name another file. */
	if ((size_t)snprintf(s->path, sizeof(s->path), "%s", path) >= sizeof(s->path)) {
		snprintf(s->ignored, sizeof(s->ignored), "its path is longer than %zu bytes", sizeof(s->path) - 1);
		return;
	}
	struct stat st;
	_cleanup_close_ int fd = cs_config_open(path, &st, s->ignored, sizeof(s->ignored));
	if (fd < 0)
		return; /* ignored says why, or is "" when there is no file */
	_cleanup_free_ char *text = malloc((size_t)st.st_size + 1);
	ssize_t n = text ? pread(fd, text, (size_t)st.st_size, 0) : -1;
	if (n < 0) {
		snprintf(s->ignored, sizeof(s->ignored), "it cannot be read: %s",
			 text ? strerror(errno) : "out of memory");
		return;
	}
	s->read = true;
	cs_config_parse(text, (size_t)n, take_setting, bad_line, NULL);
}

static void load_once(void)
{
	pthread_mutex_lock(&file.mu);
	if (!file.loaded) {
		load_file();
		file.loaded = true;
	}
	pthread_mutex_unlock(&file.mu);
}

static const char *file_value(size_t i)
{
	load_once();
	pthread_mutex_lock(&file.mu);
	const char *v = file_may_set((int)i) ? file.value[i] : NULL;
	pthread_mutex_unlock(&file.mu);
	return v && *v ? v : NULL;
}

const char *cs_env(const char *name)
{
	int i = name ? documented_index(name, strlen(name)) : -1;
	if (i < 0)
		return NULL;
	const char *v = secure_getenv(name);
	return v && *v ? v : file_value((size_t)i);
}

void cs_config_forget(void)
{
	pthread_mutex_lock(&file.mu);
	/* The old values may still be in use: they are kept, not freed. */
	for (size_t i = 0; i < CS_ARRAY_SIZE(file.value); i++)
		if (file.value[i] && cs_grow(&file.retired, &file.nretired_cap, file.nretired + 1, sizeof(char *)) == 0)
			file.retired[file.nretired++] = file.value[i];
	memset(file.value, 0, sizeof(file.value));
	memset(&file.status, 0, sizeof(file.status));
	file.loaded = false;
	pthread_mutex_unlock(&file.mu);
}

const char *cs_config_path(void)
{
	load_once();
	return file.status.path;
}

void cs_config_status_get(cs_config_status *out)
{
	load_once();
	pthread_mutex_lock(&file.mu);
	*out = file.status;
	pthread_mutex_unlock(&file.mu);
}

const char *cs_config_value(const char *name)
{
	int i = name ? documented_index(name, strlen(name)) : -1;
	return i < 0 ? NULL : file_value((size_t)i);
}

size_t cs_config_settings(const char **names, size_t max)
{
	size_t n = 0;
	for (size_t i = 0; i < CS_ARRAY_SIZE(documented); i++) {
		if (!file_value(i))
			continue;
		if (n < max)
			names[n] = documented[i];
		n++;
	}
	return n;
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

bool cs_env_is_given(const char *name)
{
	return name && !cs_env_secure() && is_documented(name) && is_set(name);
}

const char *cs_env_preload(void)
{
	return secure_getenv("LD_PRELOAD");
}

const char *cs_env_asan_options(void)
{
	return secure_getenv("ASAN_OPTIONS");
}

bool cs_env_on(const char *name)
{
	const char *v = cs_env(name);
	return v && strcmp(v, "1") == 0;
}

const char *cs_dev_dir(void)
{
	const char *e = cs_env("CUDASNAP_DEV_DIR");
	return e ? e : "/dev";
}

const char *cs_proc_dir(void)
{
	const char *e = cs_env("CUDASNAP_PROC_DIR");
	return e ? e : "/proc";
}
