#include "restore_thread.h"
#include "helper.h"
#include "host.h"
#include "pool.h"
#include "proc.h"
#include "util.h"

#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <stdint.h>
#include <stdlib.h>
#include <signal.h>
#include <stdio.h>
#include <string.h>
#include <sys/ptrace.h>
#include <sys/wait.h>
#include <time.h>

/* CRIU seizes every thread with these options. */
#define CRIU_PTRACE_OPTIONS (PTRACE_O_SUSPEND_SECCOMP | PTRACE_O_TRACESYSGOOD)

/* A restore thread that runs for the length of a call, with what CRIU set. */
typedef struct held {
	pid_t pid, tid;
	uint64_t sigmask;
	bool resumed;
} held;

static int resume_restore_thread(held *t)
{
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
static int stop_steps(const held *t, const char **failed)
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

static int stop_restore_thread(held *t)
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

int run_call(void *ctx, const cs_engine_call *c, void **reply, size_t *len)
{
	(void)ctx;
	_cleanup_free_ held *h = calloc(c->nthreads + 1, sizeof(*h));
	if (!h)
		return -1;
	for (size_t i = 0; i < c->nthreads; i++) {
		h[i] = (held){ .pid = c->threads[i].pid, .tid = c->threads[i].tid };
		resume_restore_thread(&h[i]);
	}
	int rc = helper_run(c->what, c->fn, c->arg, c->seconds, reply, len);
	for (size_t i = 0; i < c->nthreads; i++)
		stop_restore_thread(&h[i]);
	return rc;
}

/* ---- after the restored processes were killed ---- */

/* Whether pid is gone, or a zombie whose threads are gone too (its parent
 * reaps it): a thread group's leader stays until every thread is reaped. */
static bool done_with(pid_t pid)
{
	char path[64], buf[512];
	snprintf(path, sizeof(path), "%s/%d/stat", cs_proc_dir(), (int)pid);
	cs_stat st;
	ssize_t n = cs_read_at(AT_FDCWD, path, buf, sizeof(buf) - 1);
	if (n <= 0 || cs_parse_stat(buf, (size_t)n, &st) < 0)
		return true;
	if (st.state != 'Z' && st.state != 'X')
		return false;
	snprintf(path, sizeof(path), "%s/%d/task", cs_proc_dir(), (int)pid);
	_cleanup_closedir_ DIR *d = opendir(path);
	size_t tasks = 0;
	for (struct dirent *e; d && (e = readdir(d));)
		tasks += e->d_name[0] != '.';
	return tasks <= 1;
}

/* CRIU's process traces every task (and thread) it restored: one killed
 * while CRIU holds it stays a zombie until its tracer waits for it, and so
 * does the tree's init, which waits for every task of its PID namespace
 * before it dies; CRIU would then wait for that init for ever. So the
 * tracer (this process, in the hook) waits for them, for a few seconds at
 * most. */
void reap_killed(void *ctx, const pid_t *pids, size_t n)
{
	(void)ctx;
	double until = cs_now() + 5;
	int idle = 0;
	while (cs_now() < until) {
		int status;
		pid_t r = waitpid(-1, &status, __WALL | WNOHANG);
		if (r < 0 && errno == ECHILD)
			return;
		if (r > 0) {
			idle = 0;
			continue;
		}
		bool all = true;
		for (size_t i = 0; i < n && all; i++)
			all = done_with(pids[i]);
		if (all && ++idle >= 3)
			return;
		nanosleep(&(struct timespec){ .tv_nsec = 10000000L }, NULL);
	}
}
