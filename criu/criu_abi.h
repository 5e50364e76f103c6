/* CRIU's plugin interface (criu-plugin.h, plugin ABI 0.2), declared here
 * from its documented layout so that the plugin builds without CRIU's
 * sources. A plugin exports CR_PLUGIN_DESC; CRIU reads max_hooks entries of
 * hooks[], so a descriptor with more hooks than CRIU knows still loads. */
#ifndef CS_CRIU_ABI_H
#define CS_CRIU_ABI_H

#include <stdbool.h>
#include <stddef.h>

#define CS_CRIU_PLUGIN_VERSION ((0u << 16) + (2u << 8) + 0u)

enum {
	CS_CRIU_HOOK_DUMP_UNIX_SK = 0,
	CS_CRIU_HOOK_RESTORE_UNIX_SK = 1,
	CS_CRIU_HOOK_DUMP_EXT_FILE = 2,
	CS_CRIU_HOOK_RESTORE_EXT_FILE = 3,
	CS_CRIU_HOOK_DUMP_EXT_MOUNT = 4,
	CS_CRIU_HOOK_RESTORE_EXT_MOUNT = 5,
	CS_CRIU_HOOK_DUMP_EXT_LINK = 6,
	CS_CRIU_HOOK_HANDLE_DEVICE_VMA = 7,
	CS_CRIU_HOOK_UPDATE_VMA_MAP = 8,
	CS_CRIU_HOOK_RESUME_DEVICES_LATE = 9, /* int (int pid); its result is ignored by CRIU */
	CS_CRIU_HOOK_PAUSE_DEVICES = 10, /* int (int pid); before CRIU stops the task */
	CS_CRIU_HOOK_CHECKPOINT_DEVICES = 11, /* int (int pid); every thread ptrace-stopped */
	CS_CRIU_HOOK_POST_FORKING = 12,
	CS_CRIU_HOOK_MAX = 13,
};

enum {
	CS_CRIU_STAGE_DUMP = 0,
	CS_CRIU_STAGE_PRE_DUMP = 1,
	CS_CRIU_STAGE_RESTORE = 2,
};

/* Log levels of print_on_level. */
enum { CS_CRIU_LOG_ERROR = 1, CS_CRIU_LOG_WARN = 2, CS_CRIU_LOG_INFO = 3, CS_CRIU_LOG_DEBUG = 4 };

typedef struct cs_criu_plugin_desc {
	const char *name;
	int (*init)(int stage);
	void (*exit)(int stage, int ret);
	unsigned int version;
	unsigned int max_hooks;
	void *hooks[CS_CRIU_HOOK_MAX];
} cs_criu_plugin_desc;

/* Functions of the criu binary (linked -rdynamic) that the plugin looks up
 * with dlsym, since internal ones may change between CRIU versions. */
typedef int (*cs_criu_get_image_dir_fn)(void);
typedef int (*cs_criu_add_inventory_plugin_fn)(const char *name);
typedef bool (*cs_criu_check_and_remove_inventory_plugin_fn)(const char *name, size_t len);
typedef void (*cs_criu_set_interrupt_only_fn)(void);
typedef void (*cs_criu_print_fn)(unsigned int level, const char *fmt, ...);

#endif
