#include "host.h"
#include "manifest.h"
#include "util.h"

#include <dlfcn.h>
#include <fcntl.h>
#include <limits.h>
#include <link.h>
#include <pthread.h>
#include <stdarg.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

static pthread_mutex_t log_mu = PTHREAD_MUTEX_INITIALIZER;

static void no_sink(const char *line)
{
	(void)line;
}
void (*plog_on_error)(const char *line) = no_sink;

void plog(unsigned level, const char *fmt, ...)
{
	char line[1536];
	va_list ap;
	va_start(ap, fmt);
	vsnprintf(line, sizeof(line), fmt, ap);
	va_end(ap);
	cs_criu_print_fn print = (cs_criu_print_fn)dlsym(RTLD_DEFAULT, "print_on_level");
	/* CRIU formats into one static buffer. */
	pthread_mutex_lock(&log_mu);
	if (level == CS_CRIU_LOG_ERROR)
		plog_on_error(line);
	if (print)
		print(level, "cudasnap: %s\n", line);
	else
		fprintf(stderr, "cudasnap: %s\n", line);
	pthread_mutex_unlock(&log_mu);
}

/* Where this plugin was loaded from: CRIU loads every plugin of that directory. */
static bool own_dir(char *dir, size_t size)
{
	Dl_info info;
	if (!dladdr((void *)&own_dir, &info) || !info.dli_fname)
		return false;
	snprintf(dir, size, "%s", info.dli_fname);
	char *slash = strrchr(dir, '/');
	if (!slash)
		return false;
	*slash = '\0';
	return true;
}

/* CRIU's struct cr_options, as CRIU 3.18 to 4.2 lay it out on LP64: the
 * final state is its first field, restore_detach an int at byte 12 (set by
 * -d, --daemon, a configuration file, and for every restore over RPC), the
 * plugin directory a pointer at byte 160, exec_cmd one at byte 216 and the
 * timeout at byte 352, whatever CRIU's build options. The layout counts as
 * confirmed when that pointer names the directory this plugin was loaded
 * from, which CRIU sets before it loads plugins. */
#define OPTS_FINAL_STATE 0
#define OPTS_RESTORE_DETACH 12
#define OPTS_LIBDIR 160
#define OPTS_EXEC_CMD 216
#define OPTS_TIMEOUT 352
enum { TASK_ALIVE = 1, TASK_DEAD = 2, TASK_STOPPED = 3 }; /* compel's task states */

static bool same_dir(const char *a, const char *b)
{
	char ra[PATH_MAX], rb[PATH_MAX];
	return realpath(a, ra) && realpath(b, rb) && strcmp(ra, rb) == 0;
}

/* CRIU's options where their layout is confirmed, else NULL. */
static const unsigned char *confirmed_opts(void)
{
	const unsigned char *opts = dlsym(RTLD_DEFAULT, "opts");
	char dir[PATH_MAX];
	if (!opts || sizeof(void *) != 8 || !own_dir(dir, sizeof(dir)))
		return NULL;
	const char *libdir;
	int final;
	memcpy(&libdir, opts + OPTS_LIBDIR, sizeof(libdir));
	memcpy(&final, opts + OPTS_FINAL_STATE, sizeof(final));
	return libdir && same_dir(libdir, dir) && final >= TASK_ALIVE && final <= TASK_STOPPED ? opts : NULL;
}

static bool read_opts(criu_options *o)
{
	const unsigned char *opts = confirmed_opts();
	if (!opts)
		return false;
	int final;
	unsigned timeout;
	memcpy(&final, opts + OPTS_FINAL_STATE, sizeof(final));
	memcpy(&timeout, opts + OPTS_TIMEOUT, sizeof(timeout));
	o->final = final == TASK_ALIVE ? CRIU_FINAL_ALIVE :
		final == TASK_STOPPED  ? CRIU_FINAL_STOPPED :
					 CRIU_FINAL_DEAD;
	/* the lock takes it in milliseconds, as the command line's is bounded */
	o->timeout_s = timeout < INT_MAX / 1000 ? timeout : INT_MAX / 1000;
	o->from_options = true;
	return true;
}

/* CRIU's command line, its words one after the other each ended by a NUL
 * (the last one too, however it was cut): its length. */
static size_t cmdline(char buf[static 8192])
{
	ssize_t got = cs_read_at(AT_FDCWD, "/proc/self/cmdline", buf, 8191);
	size_t n = got > 0 ? (size_t)got : 0;
	buf[n] = '\0';
	return n;
}

/* CRIU's command line: all there is to go on with another layout. */
static void read_cmdline(criu_options *o)
{
	char buf[8192];
	size_t n = cmdline(buf);
	for (const char *p = buf, *end = buf + n; p < end; p += strlen(p) + 1) {
		const char *next = p + strlen(p) + 1 < end ? p + strlen(p) + 1 : NULL, *val = NULL;
		long v;
		if (strcmp(p, "-R") == 0 || strcmp(p, "--leave-running") == 0)
			o->final = CRIU_FINAL_ALIVE;
		else if (strcmp(p, "-s") == 0 || strcmp(p, "--leave-stopped") == 0)
			o->final = CRIU_FINAL_STOPPED;
		if (strcmp(p, "--timeout") == 0)
			val = next;
		else if (strncmp(p, "--timeout=", 10) == 0)
			val = p + 10;
		if (val && cs_parse_long(val, 0, INT_MAX / 1000, &v) == 0)
			o->timeout_s = (unsigned)v;
	}
}

/* Whether a word of CRIU's command line asks for a detached restore: -d,
 * --restore-detached, or -d among short options that take no argument
 * ("-Sd"). */
static bool detached_word(const char *w)
{
	if (strcmp(w, "-d") == 0 || strcmp(w, "--restore-detached") == 0 || strncmp(w, "--exec-cmd", 10) == 0)
		return true;
	if (w[0] != '-' || w[1] == '-')
		return false;
	for (const char *c = w + 1; *c && strchr("dSsRhjl", *c); c++)
		if (*c == 'd')
			return true;
	return false;
}

/* From the command line, where CRIU's options cannot be read: a guess that
 * misses a detached restore asked for in a configuration file or by an
 * abbreviation, and takes one that -d asks for and --no-restore-detached
 * takes back for detached. */
static bool cmdline_restore_waits(void)
{
	char buf[8192];
	size_t n = cmdline(buf);
	bool restore = false;
	for (const char *p = buf, *end = buf + n; p < end; p += strlen(p) + 1) {
		if (strcmp(p, "swrk") == 0 || strcmp(p, "service") == 0 || strcmp(p, "--rpc") == 0 || detached_word(p))
			return false;
		restore |= strcmp(p, "restore") == 0;
	}
	return restore;
}

bool criu_restore_waits(void)
{
	const unsigned char *opts = confirmed_opts();
	if (!opts) {
		plog(CS_CRIU_LOG_WARN,
		     "this CRIU's options could not be read (a layout other than CRIU 3.18 to 4.2): "
		     "whether it restores detached is taken from its command line");
		return cmdline_restore_waits();
	}
	int detach;
	const void *exec_cmd;
	memcpy(&detach, opts + OPTS_RESTORE_DETACH, sizeof(detach));
	memcpy(&exec_cmd, opts + OPTS_EXEC_CMD, sizeof(exec_cmd));
	return !detach && !exec_cmd;
}

void criu_read_options(criu_options *o)
{
	*o = (criu_options){ .final = CRIU_FINAL_DEAD, .timeout_s = 10 };
	if (read_opts(o))
		return;
	read_cmdline(o);
	plog(CS_CRIU_LOG_WARN,
	     "this CRIU's options could not be read (a layout other than CRIU 3.18 to 4.2): --leave-running, "
	     "--leave-stopped and --timeout are taken from CRIU's command line, where a request over RPC (runc, "
	     "Podman, CRI-O, containerd) does not show them");
}

int criu_images_dir(void)
{
	cs_criu_get_image_dir_fn fn = (cs_criu_get_image_dir_fn)dlsym(RTLD_DEFAULT, "criu_get_image_dir");
	return fn ? fn() : -1;
}

int criu_require_plugin(void)
{
	cs_criu_add_inventory_plugin_fn add =
		(cs_criu_add_inventory_plugin_fn)dlsym(RTLD_DEFAULT, "add_inventory_plugin");
	if (!add || add(CS_PLUGIN_NAME) != 0) {
		plog(CS_CRIU_LOG_ERROR, "cannot record the plugin as required in the images' inventory%s",
		     add ? "" : " (this CRIU does not export add_inventory_plugin)");
		return -1;
	}
	return 0;
}

bool criu_images_need_plugin(void)
{
	cs_criu_check_and_remove_inventory_plugin_fn listed =
		(cs_criu_check_and_remove_inventory_plugin_fn)dlsym(RTLD_DEFAULT, "check_and_remove_inventory_plugin");
	/* A CRIU that cannot say: assume the record decides. */
	return !listed || listed(CS_PLUGIN_NAME, strlen(CS_PLUGIN_NAME));
}

void criu_interrupt_only(void)
{
	cs_criu_set_interrupt_only_fn fn =
		(cs_criu_set_interrupt_only_fn)dlsym(RTLD_DEFAULT, "set_compel_interrupt_only_mode");
	if (fn)
		fn();
	else
		plog(CS_CRIU_LOG_WARN,
		     "this CRIU cannot seize with ptrace interrupts only; do not use --freeze-cgroup with GPU "
		     "processes");
}

static int find_loaded(struct dl_phdr_info *info, size_t size, void *data)
{
	(void)size;
	const char *slash = info->dlpi_name ? strrchr(info->dlpi_name, '/') : NULL;
	if (slash && strcmp(slash + 1, "cuda_plugin.so") == 0) {
		snprintf(data, PATH_MAX, "%s", info->dlpi_name);
		return 1;
	}
	return 0;
}

int criu_check_coexistence(bool loaded_only)
{
	char path[PATH_MAX + 32] = "";
	char dir[PATH_MAX];
	if (!dl_iterate_phdr(find_loaded, path) && !loaded_only && own_dir(dir, sizeof(dir))) {
		snprintf(path, sizeof(path), "%s/cuda_plugin.so", dir);
		if (access(path, F_OK) != 0)
			path[0] = '\0';
	}
	if (!path[0])
		return 0;
	plog(CS_CRIU_LOG_ERROR,
	     "CRIU's CUDA plugin %s is loaded too: both would checkpoint the same processes. "
	     "Keep one of them in the plugin directory (cudasnap_plugin.so checkpoints the whole tree as one "
	     "transaction).",
	     path);
	return -1;
}
