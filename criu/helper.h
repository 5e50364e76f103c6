/* Driver work in a child process of CRIU's.
 *
 * CRIU enters the dumped tree's mount namespace with setns(CLONE_NEWNS),
 * which the kernel refuses to a process with more than one thread, and it
 * waits for its children with wait4(-1) at places. So CRIU's process must
 * be as the plugin found it whenever a hook returns: no thread, no driver
 * library, no child. Every driver call therefore runs in a child forked for
 * the hook (its worker threads, libcuda and all), which answers through a
 * pipe and is reaped before the hook returns; past its deadline it is
 * killed, and a call it left in flight completes inside its target, which
 * is how the driver treats a caller that dies. */
#ifndef CS_CRIU_HELPER_H
#define CS_CRIU_HELPER_H

#include <stddef.h>

/* Runs in the child: does the work and fills *out (malloc'd, *len bytes),
 * which the parent receives. Returns its result code (>= 0). */
typedef int (*helper_fn)(void *ctx, void **out, size_t *len);

/* Forks the child, runs fn there and waits for it at most seconds. what
 * names the work in log lines. Returns fn's result with its answer in
 * *reply (malloc'd; NULL when it gave none), or -1, logged, when the child
 * could not start, died, or ran out of time (then killed). */
int helper_run(const char *what, helper_fn fn, void *ctx, double seconds, void **reply, size_t *len);

#endif
