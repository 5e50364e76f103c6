/* The driver's restore thread of a task that CRIU holds stopped: every
 * driver call but GetRestoreThreadId is answered by that thread, so while
 * CRIU holds the tree it must run alone: every other signal blocked, no
 * ptrace options that would stop it on a system call, and stopped again
 * (with its mask and options as CRIU set them) before CRIU goes on. Only
 * CRIU's process, the tracer, can do this: never a helper process. */
#ifndef CS_CRIU_RESTORE_THREAD_H
#define CS_CRIU_RESTORE_THREAD_H

#include "engine.h"

/* The staged session's runner (cs_engine_opts.run): helper_run while the
 * restore threads the call names run. */
int run_call(void *ctx, const cs_engine_call *c, void **reply, size_t *len);

/* The staged session's reaper (cs_engine_opts.reap): CRIU's process traces
 * every task it restored, so those it killed are waited for here. */
void reap_killed(void *ctx, const pid_t *pids, size_t n);

#endif
