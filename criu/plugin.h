/* cudasnap's CRIU plugin: what its files share. */
#ifndef CS_CRIU_PLUGIN_H
#define CS_CRIU_PLUGIN_H

#include "criu_abi.h"
#include "cudasnap.h"

#include <stdbool.h>
#include <stdint.h>
#include <sys/types.h>

#define CS_PLUGIN_NAME "cudasnap"
/* The plugin's record of the processes, in CRIU's images directory. */
#define CS_PLUGIN_RECORD "cudasnap-plugin.json"

typedef struct plugin_task {
	pid_t pid;
	pid_t tid; /* the driver's restore thread */
	int initial_state; /* cs_state when CRIU was about to stop it */
	int result; /* what CHECKPOINT_DEVICES returns for it */
	bool locked; /* locked by the plugin at PAUSE_DEVICES */
	bool checkpointed; /* left checkpointed by the dump's transaction */
	bool resumed; /* its restore thread runs under our ptrace */
	uint64_t sigmask; /* the restore thread's mask while CRIU holds it */
} plugin_task;

typedef struct plugin_state {
	bool enabled;
	int stage;
	cs_driver *d;
	plugin_task *tasks;
	size_t ntasks, cap;
	bool dumped; /* the first CHECKPOINT_DEVICES ran the transaction */
	bool restored; /* the first RESUME_DEVICES_LATE ran it */
	bool coexistence_checked;
} plugin_state;

extern plugin_state cs_plugin;

/* CRIU's log (print_on_level), or stderr where CRIU does not export it. */
void plog(unsigned level, const char *fmt, ...) __attribute__((format(printf, 2, 3)));

/* What CRIU's command line says: --timeout (seconds, default 10) and
 * whether the tree keeps running after the dump (-R). */
unsigned criu_timeout_s(void);
bool criu_leave_running(void);

/* Refuses to run beside CRIU's own CUDA plugin: both would act on the same
 * processes. Returns -1 (logged) when it is there. */
int check_coexistence(bool loaded_only);

/* The restore thread of a task that CRIU holds stopped: run it (all signals
 * blocked but SIGTRAP, as CRIU's CUDA plugin does) so that the driver can
 * reach the process, and stop it again afterwards. */
int resume_restore_thread(plugin_task *t);
int stop_restore_thread(plugin_task *t);
void resume_all(void);
void stop_all(void);

plugin_task *find_task(pid_t pid);
plugin_task *add_task(pid_t pid, pid_t tid);

/* A session over the tracked tasks (op, and whether to include a task). */
int run_session(cs_op op, bool (*include)(const plugin_task *t), cs_target **out, size_t *n, cs_txn_result *res,
		cs_error *err);

int dump_pause(int pid);
int dump_checkpoint(int pid);
void dump_exit(int ret);
int restore_init(void);
int restore_resume(int pid);

#endif
