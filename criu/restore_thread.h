/* The driver's restore thread of a task that CRIU holds stopped: every
 * driver call but GetRestoreThreadId is answered by that thread, so while
 * CRIU holds the tree it must run alone: every other signal blocked, no
 * ptrace options that would stop it on a system call, and stopped again
 * (with its mask and options as CRIU set them) before CRIU goes on. Only
 * CRIU's process, the tracer, can do this: never a helper process. */
#ifndef CS_CRIU_RESTORE_THREAD_H
#define CS_CRIU_RESTORE_THREAD_H

#include "helper.h"
#include "tasks.h"

/* helper_run while the restore threads of the tasks for which which(t)
 * holds run; which NULL: CRIU has let the tree go, none needs us. */
int helper_run_resumed(bool (*which)(const plugin_task *t), const char *what, helper_fn fn, void *ctx, double seconds,
		       void **reply, size_t *len);

#endif
