/* A stopped target (SIGSTOP here; a ptrace stop or a frozen cgroup act the
 * same): the real driver answers GetRestoreThreadId at once and every other
 * call only once the target runs again, however short the lock timeout; a
 * caller killed in the middle of a call leaves the call to finish inside
 * the target. */
#include <fcntl.h>
#include <poll.h>
#include <signal.h>
#include <stdio.h>
#include <string.h>
#include <sys/wait.h>
#include <unistd.h>

#include "test_util.h"

enum call { C_STATE, C_LOCK_100MS, C_CHECKPOINT, C_RESTORE, C_UNLOCK };

static const char *const call_names[] = { "GetState", "Lock(timeoutMs=100)", "Checkpoint",
					  "Restore", "Unlock" };

/* A call made by a child process, so that one that never returns can be
 * killed, as a caller killed in the middle of a call is. */
struct pending {
	pid_t child;
	int fd; /* the child writes rc and value here */
	int rc;
	int value;
};

static CUresult make_call(const struct drv *d, enum call c, int pid, int *value)
{
	CUcheckpointLockArgs la = { .timeoutMs = 100 };
	CUprocessState st = CU_PROCESS_STATE_FAILED;
	CUresult rc = CUDA_ERROR_INVALID_VALUE;
	switch (c) {
	case C_STATE:
		rc = d->get_state(pid, &st);
		*value = (int)st;
		break;
	case C_LOCK_100MS:
		rc = d->lock(pid, &la);
		break;
	case C_CHECKPOINT:
		rc = d->checkpoint(pid, NULL);
		break;
	case C_RESTORE:
		rc = d->restore(pid, NULL);
		break;
	case C_UNLOCK:
		rc = d->unlock(pid, NULL);
		break;
	}
	return rc;
}

static int call_start(const struct drv *d, enum call c, int pid, struct pending *p)
{
	int fds[2];
	memset(p, 0, sizeof(*p));
	if (pipe2(fds, O_CLOEXEC) != 0)
		return -1;
	p->child = fork();
	if (p->child == 0) {
		int out[2] = { 0, -1 };
		out[0] = make_call(d, c, pid, &out[1]);
		_exit(write(fds[1], out, sizeof(out)) == (ssize_t)sizeof(out) ? 0 : 1);
	}
	close(fds[1]);
	p->fd = fds[0];
	return p->child > 0 ? 0 : -1;
}

/* 1 once the call has answered (p->rc, p->value), 0 while it still waits
 * after ms; a child that died without answering counts as rc -1. */
static int call_answered(struct pending *p, int ms)
{
	struct pollfd pfd = { .fd = p->fd, .events = POLLIN };
	if (poll(&pfd, 1, ms) <= 0)
		return 0;
	int in[2];
	p->rc = -1;
	if (read(p->fd, in, sizeof(in)) == (ssize_t)sizeof(in)) {
		p->rc = in[0];
		p->value = in[1];
	}
	return 1;
}

/* Kills the caller if it still waits; 1 if it was killed. */
static int call_end(struct pending *p)
{
	int status = 0;
	if (p->child <= 0)
		return 0;
	kill(p->child, SIGKILL);
	waitpid(p->child, &status, 0);
	close(p->fd);
	p->child = -1;
	return WIFSIGNALED(status) && WTERMSIG(status) == SIGKILL;
}

static char proc_state(pid_t pid)
{
	char path[64], buf[512];
	snprintf(path, sizeof(path), "/proc/%d/stat", pid);
	FILE *f = fopen(path, "re");
	size_t n = f ? fread(buf, 1, sizeof(buf) - 1, f) : 0;
	if (f)
		fclose(f);
	buf[n] = '\0';
	char *paren = strrchr(buf, ')');
	return paren && paren[1] == ' ' ? paren[2] : '?';
}

/* Blocked in the call: a caller does nothing else that sleeps. */
static int caller_blocked(pid_t child)
{
	for (int i = 0; i < 400; i++) {
		if (proc_state(child) == 'S')
			return 1;
		sleep_ms(5);
	}
	return 0;
}

/* SIGSTOP, and wait until every thread of the target has stopped. */
static int stop_target(pid_t pid)
{
	int status;
	kill(pid, SIGSTOP);
	for (int i = 0; i < 300; i++) {
		if (waitpid(pid, &status, WNOHANG | WUNTRACED) == pid && WIFSTOPPED(status))
			return 0;
		sleep_ms(10);
	}
	return -1;
}

static void check_restore_tid(const struct drv *d, pid_t pid, const struct ready *r)
{
	int tid = 0, via_other = 0;
	int other = other_thread(pid, r->tid);
	uint64_t t0 = now_ms();
	CUresult rc = d->get_tid(pid, &tid);
	uint64_t took = now_ms() - t0;
	check(rc == 0 && tid == r->tid && took < 200,
	      "stopped: GetRestoreThreadId -> %d, tid %d (ready file: %d) in %llu ms", rc, tid,
	      r->tid, (unsigned long long)took);
	check(other > 0 && d->get_tid(other, &via_other) == 0 && via_other == r->tid,
	      "stopped: GetRestoreThreadId given another thread's id (%d) -> %d", other, via_other);
}

/* Faults on get_restore_tid act in the caller: they answer while the target
 * is stopped, and count per caller process. */
static void check_restore_tid_faults(const struct env *e, const struct drv *d, pid_t pid)
{
	char text[128];
	int tid = 0;
	snprintf(text, sizeof(text), "%d get_restore_tid error=999 1\n", pid);
	write_faults(e, text);
	CUresult r1 = d->get_tid(pid, &tid), r2 = d->get_tid(pid, &tid);
	check(r1 == 999 && r2 == 0, "stopped: get_restore_tid error=999 1 -> %d, then %d", r1, r2);
	snprintf(text, sizeof(text), "%d get_restore_tid delay=150 1\n", pid);
	write_faults(e, text);
	uint64_t t0 = now_ms();
	CUresult rc = d->get_tid(pid, &tid);
	uint64_t took = now_ms() - t0;
	check(rc == 0 && took >= 150 && took < 1000,
	      "stopped: get_restore_tid delay=150 -> %d after %llu ms", rc,
	      (unsigned long long)took);
	write_faults(e, "");
}

/* GetState and a lock with a 100 ms timeout, both asked while stopped. */
static void check_state_and_lock(const struct drv *d, pid_t pid)
{
	struct pending gs, lk;
	if (call_start(d, C_STATE, pid, &gs) != 0 || call_start(d, C_LOCK_100MS, pid, &lk) != 0) {
		kill(pid, SIGCONT);
		check(0, "fork the callers");
		return;
	}
	int early = call_answered(&gs, 1000);
	early += call_answered(&lk, 0);
	check(early == 0 && proc_state(pid) == 'T',
	      "stopped: GetState and Lock(timeoutMs=100) still wait after 1 s");
	kill(pid, SIGCONT);
	int late = call_answered(&gs, 3000);
	late += call_answered(&lk, 3000);
	/* the two are served in the order they connected, which may be either */
	check(late == 2 && gs.rc == 0 &&
		      (gs.value == CU_PROCESS_STATE_RUNNING || gs.value == CU_PROCESS_STATE_LOCKED) &&
		      lk.rc == 0,
	      "after SIGCONT: GetState -> %d (state %d), Lock -> %d", gs.rc, gs.value, lk.rc);
	call_end(&gs);
	call_end(&lk);
	check(state_of(d, pid) == CU_PROCESS_STATE_LOCKED, "after both: LOCKED");
}

/* One call asked while stopped waits, then does its transition. */
static void check_waits(const struct drv *d, pid_t pid, enum call c, CUprocessState then)
{
	struct pending p;
	if (stop_target(pid) != 0 || call_start(d, c, pid, &p) != 0) {
		kill(pid, SIGCONT);
		check(0, "stop the target and fork the caller");
		return;
	}
	int early = call_answered(&p, 300);
	kill(pid, SIGCONT);
	int late = call_answered(&p, 3000);
	call_end(&p);
	check(!early && late && p.rc == 0 && state_of(d, pid) == then,
	      "stopped: %s waits 300 ms, after SIGCONT -> %d, state %d", call_names[c], p.rc,
	      state_of(d, pid));
}

static void check_stopped_calls(const struct env *e, const struct drv *d, pid_t pid,
				const struct ready *r)
{
	if (stop_target(pid) != 0) {
		check(0, "SIGSTOP stops the target");
		return;
	}
	check_restore_tid(d, pid, r);
	check_restore_tid_faults(e, d, pid);
	check_state_and_lock(d, pid);
	check_waits(d, pid, C_CHECKPOINT, CU_PROCESS_STATE_CHECKPOINTED);
	check_waits(d, pid, C_RESTORE, CU_PROCESS_STATE_LOCKED);
	check_waits(d, pid, C_UNLOCK, CU_PROCESS_STATE_RUNNING);
}

static int target_alive(pid_t pid)
{
	return waitpid(pid, NULL, WNOHANG) == 0 && kill(pid, 0) == 0;
}

/* The caller dies while the target is in the middle of a checkpoint (held
 * there by a delay fault): the checkpoint still completes. */
static void check_killed_mid_checkpoint(const struct env *e, const struct drv *d, pid_t pid)
{
	char text[128];
	struct pending p;
	snprintf(text, sizeof(text), "%d checkpoint delay=800 1\n", pid);
	write_faults(e, text);
	if (d->lock(pid, NULL) != 0 || call_start(d, C_CHECKPOINT, pid, &p) != 0) {
		check(0, "lock and fork the checkpoint caller");
		return;
	}
	int blocked = caller_blocked(p.child);
	sleep_ms(100);
	int answered = call_answered(&p, 0);
	int killed = call_end(&p);
	CUprocessState st = state_of(d, pid);
	check(blocked && !answered && killed && st == CU_PROCESS_STATE_CHECKPOINTED &&
		      target_alive(pid) && dev_fds(e, pid) == 0,
	      "caller killed during a checkpoint: the target lives on, CHECKPOINTED (%d)", st);
	write_faults(e, "");
}

/* The caller dies before the stopped target even read its request: the
 * request is still carried out once the target runs. */
static void check_killed_while_stopped(const struct drv *d, pid_t pid)
{
	struct pending p;
	if (stop_target(pid) != 0 || call_start(d, C_RESTORE, pid, &p) != 0) {
		kill(pid, SIGCONT);
		check(0, "stop the target and fork the restore caller");
		return;
	}
	int blocked = caller_blocked(p.child);
	int killed = call_end(&p);
	kill(pid, SIGCONT);
	CUprocessState st = state_of(d, pid);
	check(blocked && killed && st == CU_PROCESS_STATE_LOCKED && target_alive(pid),
	      "caller of a restore killed while the target was stopped: LOCKED after SIGCONT (%d)",
	      st);
}

/* No restore thread in a zombie, even though its /proc entry remains. */
static void check_zombie(const struct env *e, const struct drv *d)
{
	static const char *const args[] = { "--mem", "1", NULL };
	struct ready r;
	int tid = 0;
	pid_t pid = app_start_ready(e, args, NULL, &r);
	if (pid < 0)
		return;
	kill(pid, SIGKILL);
	/* the leader turns Z while its other threads may still be exiting */
	for (int i = 0; i < 300 && (proc_state(pid) != 'Z' || other_thread(pid, 0) > 0); i++)
		sleep_ms(10);
	char st = proc_state(pid);
	CUresult rc = d->get_tid(pid, &tid);
	check(st == 'Z' && rc == 3, "zombie: GetRestoreThreadId -> %d (state %c)", rc, st);
	waitpid(pid, NULL, 0);
}

/* exit on get_restore_tid: the call never reaches the target, so the caller
 * kills it and answers 304, as when a target dies during a call. */
static void check_tid_exit_fault(const struct env *e, const struct drv *d)
{
	static const char *const args[] = { "--mem", "1", NULL };
	char text[128];
	struct ready r;
	int tid = 0, status = 0;
	pid_t pid = app_start_ready(e, args, NULL, &r);
	if (pid < 0)
		return;
	snprintf(text, sizeof(text), "%d get_restore_tid exit\n", pid);
	write_faults(e, text);
	CUresult rc = d->get_tid(pid, &tid);
	write_faults(e, "");
	check(rc == 304 && waitpid(pid, &status, 0) == pid && WIFSIGNALED(status),
	      "get_restore_tid exit: -> %d, the target is gone", rc);
}

void test_stopped(const struct env *e, const struct drv *d)
{
	static const char *const args[] = { "--mem", "1", NULL };
	struct ready r;
	char line[256];
	pid_t pid = app_start_ready(e, args, NULL, &r);
	if (pid < 0)
		return;
	check_stopped_calls(e, d, pid, &r);
	check_killed_mid_checkpoint(e, d, pid);
	check_killed_while_stopped(d, pid);
	check(d->unlock(pid, NULL) == 0, "unlock");
	ask_verify(e, pid, line, sizeof(line), 3000);
	check(strncmp(line, "ok bytes=1048576 ", 17) == 0, "its memory verifies: '%s'", line);
	check(app_stop(pid) == 0, "the app exits cleanly");
	check_zombie(e, d);
	check_tid_exit_fault(e, d);
}
