/* The CRIU that loaded the plugin: its log, its options, its images and its
 * inventory, through what the criu binary exports (it is linked -rdynamic),
 * looked up with dlsym since internal names change between versions. */
#ifndef CS_CRIU_HOST_H
#define CS_CRIU_HOST_H

#include "criu_abi.h"

#include <stdbool.h>

/* CRIU's log (print_on_level), or stderr where CRIU does not export it;
 * each line starts "cudasnap: ". Safe from several threads. */
void plog(unsigned level, const char *fmt, ...) __attribute__((format(printf, 2, 3)));
/* Called with each error line plog writes (under its lock): the plugin
 * keeps the first as the operation's error. */
extern void (*plog_on_error)(const char *line);

/* How CRIU leaves the tree after a successful dump. */
typedef enum criu_final {
	CRIU_FINAL_DEAD, /* the default: the tree is killed */
	CRIU_FINAL_ALIVE, /* --leave-running, RPC leave_running */
	CRIU_FINAL_STOPPED, /* --leave-stopped, RPC leave_stopped */
} criu_final;

/* What CRIU was asked, however it was asked: its command line, its RPC
 * request (criu swrk, as runc, crun and Podman drive it) or its
 * configuration files all end in CRIU's own options, which the plugin reads
 * where this CRIU's layout of them is confirmed; else from the command line
 * alone, with a warning. Read once, at init. */
typedef struct criu_options {
	criu_final final;
	unsigned timeout_s; /* --timeout, RPC timeout: CRIU's default is 10 */
	bool from_options; /* read from CRIU's options, not its command line */
} criu_options;

void criu_read_options(criu_options *out);
/* Whether CRIU, restoring, waits for the restored tree to end before the
 * plugins' exit hooks: `criu restore` without -d (--restore-detached) or
 * --exec-cmd. A restore over RPC (criu swrk, criu service, which then call
 * themselves "restore --rpc") is always detached. Read from CRIU's options
 * where their layout is confirmed (whatever set them: the command line, a
 * configuration file, RPC), else guessed from its command line. */
bool criu_restore_waits(void);

/* The images directory (an fd of CRIU's), or -1. */
int criu_images_dir(void);
/* Records the plugin in the images' inventory, so that a restore without it
 * fails ("Missing required plugin"). */
int criu_require_plugin(void);
/* Whether the images' inventory names the plugin. */
bool criu_images_need_plugin(void);
/* Seize with ptrace interrupts, not the cgroup freezer, which would freeze
 * the driver's restore threads too. */
void criu_interrupt_only(void);

/* Refuses to run beside CRIU's own CUDA plugin: both would act on the same
 * processes. Returns -1 (logged) when it is loaded, or (unless loaded_only)
 * lies in this plugin's directory. */
int criu_check_coexistence(bool loaded_only);

#endif
