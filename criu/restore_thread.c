#include "restore_thread.h"
#include "pool.h"
#include "proc.h"
#include "util.h"

#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <limits.h>
#include <signal.h>
#include <stdio.h>
#include <string.h>
#include <sys/ptrace.h>
#include <sys/wait.h>
#include <time.h>

/* CRIU seizes every thread with these options. */
#define CRIU_PTRACE_OPTIONS (PTRACE_O_SUSPEND_SECCOMP | PTRACE_O_TRACESYSGOOD)

static int resume_restore_thread(plugin_task *t)
{
	if (t->resumed || t->tid <= 0)
		return 0;
	uint64_t run_mask = ~0ULL & ~(1ULL << (SIGTRAP - 1));
	if (ptrace(PTRACE_GETSIGMASK, t->tid, sizeof(t->sigmask), &t->sigmask) < 0 ||
	    ptrace(PTRACE_SETSIGMASK, t->tid, sizeof(run_mask), &run_mask) < 0 ||
	    ptrace(PTRACE_SETOPTIONS, t->tid, NULL, 0) < 0 || ptrace(PTRACE_CONT, t->tid, NULL, 0) < 0) {
		plog(CS_CRIU_LOG_ERROR, "cannot run the restore thread %d of process %d: %s", (int)t->tid, (int)t->pid,
		     strerror(errno));
		return -1;
	}
	t->resumed = true;
	return 0;
}

/* Waits (at most 10 s) for the thread to report its stop: 0, -ETIMEDOUT,
 * -ESRCH when it ended instead, or -errno of waitpid. */
static int wait_stopped(pid_t tid)
{
	double until = cs_now() + 10;
	for (;;) {
		int status;
		pid_t r = waitpid(tid, &status, __WALL | WNOHANG);
		if (r == tid && WIFSTOPPED(status))
			return 0;
		if (r < 0 && errno != EINTR)
			return -errno;
		if (r == tid && (WIFEXITED(status) || WIFSIGNALED(status)))
			return -ESRCH;
		if (cs_now() > until)
			return -ETIMEDOUT;
		struct timespec ts = { 0, 2000000 };
		nanosleep(&ts, NULL);
	}
}

static int ptrace_rc(long r)
{
	return r < 0 ? -errno : 0;
}

/* Each step of stopping the thread again, in order, with what the log says
 * of the one that failed: its own error, never an errno of another call. */
static int stop_steps(const plugin_task *t, const char **failed)
{
	int r;
	*failed = "interrupting it";
	if ((r = ptrace_rc(ptrace(PTRACE_INTERRUPT, t->tid, NULL, 0))) < 0)
		return r;
	*failed = "waiting for its stop";
	if ((r = wait_stopped(t->tid)) < 0)
		return r;
	*failed = "giving back CRIU's ptrace options";
	if ((r = ptrace_rc(ptrace(PTRACE_SETOPTIONS, t->tid, NULL, CRIU_PTRACE_OPTIONS))) < 0)
		return r;
	*failed = "giving back its signal mask";
	return ptrace_rc(ptrace(PTRACE_SETSIGMASK, t->tid, sizeof(t->sigmask), &t->sigmask));
}

static const char *stop_error(int r)
{
	if (r == -ETIMEDOUT)
		return "it did not stop within 10 s";
	return r == -ESRCH ? "the thread is gone" : strerror(-r);
}

static int stop_restore_thread(plugin_task *t)
{
	if (!t->resumed)
		return 0;
	t->resumed = false;
	const char *failed;
	int r = stop_steps(t, &failed);
	if (r < 0)
		plog(CS_CRIU_LOG_ERROR, "cannot stop the restore thread %d of process %d again: %s failed: %s",
		     (int)t->tid, (int)t->pid, failed, stop_error(r));
	return r < 0 ? -1 : 0;
}

static void resume_all(bool (*which)(const plugin_task *t))
{
	for (size_t i = 0; i < cs_plugin.ntasks; i++)
		if (which(&cs_plugin.tasks[i]))
			resume_restore_thread(&cs_plugin.tasks[i]);
}

static void stop_all(void)
{
	for (size_t i = 0; i < cs_plugin.ntasks; i++)
		stop_restore_thread(&cs_plugin.tasks[i]);
}

int helper_run_resumed(bool (*which)(const plugin_task *t), const char *what, helper_fn fn, void *ctx, double seconds,
		       void **reply, size_t *len)
{
	if (which)
		resume_all(which);
	int rc = helper_run(what, fn, ctx, seconds, reply, len);
	if (which)
		stop_all();
	return rc;
}
