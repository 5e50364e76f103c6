#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "gpus.h"
#include "test_util.h"

static void check_wrong_states(const struct drv *d, int pid)
{
	check(d->checkpoint(pid, NULL) == 401 && d->unlock(pid, NULL) == 401 &&
		      d->restore(pid, NULL) == 401 && state_of(d, pid) == CU_PROCESS_STATE_RUNNING,
	      "RUNNING: checkpoint, unlock, restore -> 401, still RUNNING");
}

static void check_forked(const struct env *e, const struct drv *d, int parent)
{
	struct ready kid;
	CUprocessState st;
	int tid = 0;
	if (find_ready(e, parent, "forked", &kid, 1) != 1) {
		check(0, "forked-after-init child is ready");
		return;
	}
	check(d->get_state(kid.pid, &st) == 3 && d->lock(kid.pid, NULL) == 3 &&
		      d->get_tid(kid.pid, &tid) == 3,
	      "child forked after cuInit: state, lock, restore thread id -> 3");
}

/* lock (through another thread of the process) -> checkpoint */
static void lock_and_checkpoint(const struct env *e, const struct drv *d, const struct ready *r,
				int fds0, int maps0)
{
	int other = other_thread(r->pid, r->tid);
	long rss0 = rss_kib(r->pid);
	check(other > 0 && d->lock(other, NULL) == 0 &&
		      state_of(d, r->pid) == CU_PROCESS_STATE_LOCKED,
	      "lock given another thread's id (%d) locks the process", other);
	check(d->lock(r->pid, NULL) == 401 && d->restore(r->pid, NULL) == 401 &&
		      state_of(d, r->pid) == CU_PROCESS_STATE_LOCKED,
	      "LOCKED: lock, restore -> 401, still LOCKED");
	check(d->checkpoint(r->pid, NULL) == 0 &&
		      state_of(d, r->tid) == CU_PROCESS_STATE_CHECKPOINTED,
	      "checkpoint -> CHECKPOINTED (asked through the restore thread's id)");
	check(dev_fds(e, r->pid) == 0 && dev_maps(e, r->pid) == 0,
	      "checkpointed: device fds %d -> %d, mappings %d -> %d", fds0, dev_fds(e, r->pid),
	      maps0, dev_maps(e, r->pid));
	long grown = rss_kib(r->pid) - rss0;
	check(grown >= 7 * 1024, "checkpointed: RSS grew by %ld KiB for 8 MiB of device memory",
	      grown);
	check(d->checkpoint(r->pid, NULL) == 401 && d->unlock(r->pid, NULL) == 401,
	      "CHECKPOINTED: checkpoint, unlock -> 401");
}

static void restore_and_unlock(const struct env *e, const struct drv *d, const struct ready *r,
			       int fds0, int maps0)
{
	char line[256];
	ask_verify(e, r->pid, line, sizeof(line), 150);
	check(line[0] == '\0', "a verify sent while checkpointed waits");
	check(d->restore(r->pid, NULL) == 0 && state_of(d, r->pid) == CU_PROCESS_STATE_LOCKED,
	      "restore -> LOCKED");
	check(dev_fds(e, r->pid) == fds0 && dev_maps(e, r->pid) == maps0,
	      "restored: device fds %d, mappings %d", dev_fds(e, r->pid), dev_maps(e, r->pid));
	check(d->unlock(r->pid, NULL) == 0 && state_of(d, r->pid) == CU_PROCESS_STATE_RUNNING,
	      "unlock -> RUNNING");
	wait_verify(e, r->pid, line, sizeof(line), 3000);
	check(strcmp(line, "ok bytes=8388608 gpu=" FC_DEFAULT_GPU) == 0,
	      "the waiting verify completes after unlock: '%s'", line);
}

void test_cycle(const struct env *e, const struct drv *d)
{
	static const char *const args[] = { "--mem", "8", "--fork-after-init", "1", NULL };
	struct ready r;
	int tid = 0;
	pid_t pid = app_start_ready(e, args, NULL, &r);
	if (pid < 0)
		return;
	CUresult rc = d->get_tid(pid, &tid);
	check(state_of(d, pid) == CU_PROCESS_STATE_RUNNING && rc == 0 && tid == r.tid && tid != pid,
	      "RUNNING, restore thread id %d matches the ready file", tid);
	check_forked(e, d, pid);
	check_wrong_states(d, pid);
	int fds0 = dev_fds(e, pid), maps0 = dev_maps(e, pid);
	check(fds0 > 0 && maps0 > 0, "CUDA process holds %d device fds, %d mappings", fds0, maps0);
	lock_and_checkpoint(e, d, &r, fds0, maps0);
	restore_and_unlock(e, d, &r, fds0, maps0);
	check(app_stop(pid) == 0, "fakecuda-app exits cleanly on SIGTERM (children too)");
}

/* The application needs a moment to queue work again after an unlock. */
static int kernels_resume(const struct drv *d, int pid, CUcheckpointLockArgs *la)
{
	for (int i = 0; i < 50; i++) {
		CUresult rc = d->lock(pid, la);
		if (rc == 600)
			return 1;
		if (rc != 0 || d->unlock(pid, NULL) != 0)
			return 0;
		sleep_ms(10);
	}
	return 0;
}

void test_lock_timeout(const struct env *e, const struct drv *d)
{
	static const char *const args[] = { "--kernel-loop", "500", NULL };
	CUcheckpointLockArgs la = { .timeoutMs = 100 };
	struct ready r;
	pid_t pid = app_start_ready(e, args, NULL, &r);
	if (pid < 0)
		return;
	uint64_t t0 = now_ms();
	CUresult rc = d->lock(pid, &la);
	uint64_t took = now_ms() - t0;
	/* at least one whole kernel is always queued, so only the timing may vary */
	check(rc == 600 && took >= 95 && took < 450 && state_of(d, pid) == CU_PROCESS_STATE_RUNNING,
	      "lock timeoutMs=100 behind 500 ms kernels -> %d after %llu ms, still RUNNING", rc,
	      (unsigned long long)took);
	t0 = now_ms();
	rc = d->lock(pid, NULL);
	took = now_ms() - t0;
	check(rc == 0 && took <= 1200, "lock without timeout waits for the queue: %d after %llu ms",
	      rc, (unsigned long long)took);
	check(d->unlock(pid, NULL) == 0 && kernels_resume(d, pid, &la),
	      "after unlock the kernels run again (lock times out again)");
	check(app_stop(pid) == 0, "kernel-loop app exits cleanly");
}

static void cycle_to_checkpointed(const struct drv *d, int pid)
{
	CUresult lock = d->lock(pid, NULL);
	CUresult ckpt = d->checkpoint(pid, NULL);
	check(lock == 0 && ckpt == 0, "lock + checkpoint -> %d, %d", lock, ckpt);
}

void test_persistence(const struct env *e, const struct drv *d)
{
	static const char *const args[] = { NULL };
	struct ready r;
	pid_t pid = app_start_ready(e, args, NULL, &r);
	if (pid < 0)
		return;
	cycle_to_checkpointed(d, pid);
	setenv("FAKECUDA_PERSISTENCE", "0", 1);
	check(d->restore(pid, NULL) == 800 && state_of(d, pid) == CU_PROCESS_STATE_CHECKPOINTED,
	      "persistence off, no cuInit in the caller: restore -> 800, still CHECKPOINTED");
	check(d->init(0) == 0 && d->restore(pid, NULL) == 0,
	      "persistence off, after cuInit in the caller: restore succeeds");
	unsetenv("FAKECUDA_PERSISTENCE");
	check(d->unlock(pid, NULL) == 0, "unlock");
	check(app_stop(pid) == 0, "app exits cleanly");
}
