/* What the plugin knows between CRIU's hooks: the tasks of the tree, what
 * it did to each, and the claims it holds on them. Lives in CRIU's process
 * (the parent of every helper process). */
#ifndef CS_CRIU_TASKS_H
#define CS_CRIU_TASKS_H

#include "claim.h"
#include "host.h"
#include "manifest.h"

#include <stdbool.h>
#include <stdint.h>
#include <sys/types.h>

typedef struct plugin_task {
	pid_t pid; /* as CRIU names it (its PID namespace) */
	pid_t nspid; /* inside its own PID namespace: what survives a restore */
	pid_t tid; /* the driver's restore thread, as CRIU names it; 0 unknown */
	char comm[64];
	int result; /* what CHECKPOINT_DEVICES / RESUME_DEVICES_LATE return for it */
	bool locked; /* locked by the plugin at PAUSE_DEVICES */
	bool checkpointed; /* left checkpointed by the dump's transaction */
	bool resumed; /* its restore thread runs under our ptrace */
	uint64_t sigmask; /* the restore thread's mask while CRIU holds it */
	size_t entry; /* restore: its entry in the record */
} plugin_task;

/* dump: what the first task that maps the driver or NVML found; until
 * then the plugin has touched neither the driver nor the state directory. */
typedef enum dump_gpu {
	DUMP_GPU_UNASKED,
	DUMP_GPU_READY, /* the driver can checkpoint and the state directory takes claims */
	DUMP_GPU_NO_DRIVER, /* no driver here can checkpoint: only device files matter */
	DUMP_GPU_FAILED, /* the state directory cannot be used: the dump fails */
} dump_gpu;

typedef struct plugin_state {
	bool enabled;
	int stage;
	criu_options criu;
	plugin_task *tasks;
	size_t ntasks, cap;
	pid_t *tree; /* every task CRIU paused: the dump's scope */
	size_t ntree, treecap;
	int state_fd;
	dump_gpu gpu;
	char no_driver[256]; /* dump: why the driver cannot checkpoint (DUMP_GPU_NO_DRIVER) */
	cs_claims claims; /* dump: held from PAUSE_DEVICES until the exit hook */
	bool dumped; /* the first CHECKPOINT_DEVICES ran the transaction */
	bool restored; /* the restore's transaction ran */
	bool coexistence_checked;
	cs_manifest record; /* restore: what the dump recorded */
	pid_t root; /* restore: the first task RESUME_DEVICES_LATE named, the tree's root */
	size_t matched; /* restore: entries of the record met among the restored tasks */
} plugin_state;

extern plugin_state cs_plugin;

void plugin_state_reset(int stage);
void plugin_state_free(void);

plugin_task *find_task(pid_t pid);
plugin_task *add_task(pid_t pid);
int note_tree_task(pid_t pid);

/* The pids of the tasks for which which(t) holds; *n of them. */
pid_t *task_pids(bool (*which)(const plugin_task *t), size_t *n);

/* Its pid inside its own PID namespace and its command name, from /proc. */
int task_identity(pid_t pid, pid_t *nspid, char *comm, size_t size);

#endif
