/* The driver's restore thread of a task that CRIU holds stopped: every
 * driver call but GetRestoreThreadId is answered by that thread, so while
 * CRIU holds the tree it must run alone: every other signal blocked, no
 * ptrace options that would stop it on a system call, and stopped again
 * (with its mask and options as CRIU set them) before CRIU goes on. Only
 * CRIU's process, the tracer, can do this: never a helper process. */
#ifndef CS_CRIU_RESTORE_THREAD_H
#define CS_CRIU_RESTORE_THREAD_H

#include "tasks.h"

int resume_restore_thread(plugin_task *t);
int stop_restore_thread(plugin_task *t);
/* Those of the tasks for which which(t) holds (all: NULL). */
void resume_all(bool (*which)(const plugin_task *t));
void stop_all(void);

#endif
