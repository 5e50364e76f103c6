/* cudasnap_plugin.so: CRIU's GPU plugin on libcudasnap. Dropped into CRIU's
 * plugin directory, every 'criu dump' and 'criu restore' of a tree with CUDA
 * processes checkpoints and restores them all as one transaction. */
#include "plugin.h"
#include "util.h"

#include <dirent.h>
#include <dlfcn.h>
#include <errno.h>
#include <fcntl.h>
#include <limits.h>
#include <link.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

plugin_state cs_plugin;

void plog(unsigned level, const char *fmt, ...)
{
	char line[1536];
	va_list ap;
	va_start(ap, fmt);
	vsnprintf(line, sizeof(line), fmt, ap);
	va_end(ap);
	cs_criu_print_fn print = (cs_criu_print_fn)dlsym(RTLD_DEFAULT, "print_on_level");
	if (print)
		print(level, "cudasnap: %s\n", line);
	else
		fprintf(stderr, "cudasnap: %s\n", line);
}

/* CRIU's own arguments, from /proc/self/cmdline: the option structure that
 * holds them is internal to CRIU and changes between versions. */
static size_t criu_args(char *buf, size_t size)
{
	ssize_t n = cs_read_at(AT_FDCWD, "/proc/self/cmdline", buf, size);
	return n > 0 ? (size_t)n : 0;
}

unsigned criu_timeout_s(void)
{
	char buf[8192];
	size_t n = criu_args(buf, sizeof(buf));
	long v;
	for (const char *p = buf, *end = buf + n; p < end; p += strlen(p) + 1) {
		const char *val = NULL;
		if (strcmp(p, "--timeout") == 0 && p + strlen(p) + 1 < end)
			val = p + strlen(p) + 1;
		else if (strncmp(p, "--timeout=", 10) == 0)
			val = p + 10;
		if (val && cs_parse_long(val, 0, INT_MAX / 1000, &v) == 0)
			return (unsigned)v;
	}
	return 10;
}

bool criu_leave_running(void)
{
	char buf[8192];
	size_t n = criu_args(buf, sizeof(buf));
	for (const char *p = buf, *end = buf + n; p < end; p += strlen(p) + 1)
		if (strcmp(p, "-R") == 0 || strcmp(p, "--leave-running") == 0)
			return true;
	return false;
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

/* Where this plugin was loaded from: CRIU loads every plugin of that directory. */
static bool own_dir(char *dir, size_t size)
{
	Dl_info info;
	if (!dladdr((void *)&cs_plugin, &info) || !info.dli_fname)
		return false;
	snprintf(dir, size, "%s", info.dli_fname);
	char *slash = strrchr(dir, '/');
	if (!slash)
		return false;
	*slash = '\0';
	return true;
}

int check_coexistence(bool loaded_only)
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

plugin_task *find_task(pid_t pid)
{
	for (size_t i = 0; i < cs_plugin.ntasks; i++)
		if (cs_plugin.tasks[i].pid == pid)
			return &cs_plugin.tasks[i];
	return NULL;
}

plugin_task *add_task(pid_t pid, pid_t tid)
{
	plugin_task *t = find_task(pid);
	if (t)
		return t;
	if (cs_grow(&cs_plugin.tasks, &cs_plugin.cap, cs_plugin.ntasks + 1, sizeof(*t)) < 0)
		return NULL;
	t = &cs_plugin.tasks[cs_plugin.ntasks++];
	*t = (plugin_task){ .pid = pid, .tid = tid, .initial_state = CS_STATE_UNKNOWN };
	return t;
}

/* Enabled when the driver library loads with the checkpoint API. */
static bool open_driver(void)
{
	cs_error err = { 0 };
	if (cs_driver_open(&cs_plugin.d, &err) < 0) {
		plog(CS_CRIU_LOG_INFO, "disabled: %s", err.message);
		return false;
	}
	return true;
}

static int plugin_init(int stage)
{
	cs_plugin = (plugin_state){ .stage = stage };
	if (stage == CS_CRIU_STAGE_PRE_DUMP)
		return 0; /* GPU memory is not in pre-dumps */
	if (check_coexistence(false) < 0)
		return -1;
	if (stage == CS_CRIU_STAGE_RESTORE)
		return restore_init();
	if (!open_driver())
		return 0;
	/* The cgroup freezer would freeze the restore threads with the rest. */
	cs_criu_set_interrupt_only_fn interrupt_only =
		(cs_criu_set_interrupt_only_fn)dlsym(RTLD_DEFAULT, "set_compel_interrupt_only_mode");
	if (interrupt_only)
		interrupt_only();
	else
		plog(CS_CRIU_LOG_WARN,
		     "this CRIU cannot seize with ptrace interrupts only; do not use "
		     "--freeze-cgroup with GPU processes");
	cs_plugin.enabled = true;
	plog(CS_CRIU_LOG_INFO, "enabled for the dump (driver %d, lock timeout %u s)", cs_driver_version(cs_plugin.d),
	     criu_timeout_s());
	return 0;
}

static void plugin_exit(int stage, int ret)
{
	if (cs_plugin.enabled && stage == CS_CRIU_STAGE_DUMP)
		dump_exit(ret);
	free(cs_plugin.tasks);
	cs_driver_free(cs_plugin.d);
	cs_plugin = (plugin_state){ 0 };
}

static int hook_pause(int pid)
{
	return cs_plugin.enabled ? dump_pause(pid) : -ENOTSUP;
}
static int hook_checkpoint(int pid)
{
	return cs_plugin.enabled ? dump_checkpoint(pid) : -ENOTSUP;
}
static int hook_resume_late(int pid)
{
	return cs_plugin.enabled ? restore_resume(pid) : -ENOTSUP;
}

__attribute__((visibility("default"))) cs_criu_plugin_desc CR_PLUGIN_DESC = {
	.name = CS_PLUGIN_NAME,
	.init = plugin_init,
	.exit = plugin_exit,
	.version = CS_CRIU_PLUGIN_VERSION,
	.max_hooks = CS_CRIU_HOOK_MAX,
	.hooks = {
		[CS_CRIU_HOOK_RESUME_DEVICES_LATE] = (void *)hook_resume_late,
		[CS_CRIU_HOOK_PAUSE_DEVICES] = (void *)hook_pause,
		[CS_CRIU_HOOK_CHECKPOINT_DEVICES] = (void *)hook_checkpoint,
	},
};
