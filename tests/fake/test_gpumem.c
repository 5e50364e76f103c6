/* GPU memory: NVML's total, used and free memory of each GPU, and restores
 * judged by the same figures. A restore without room answers 2 and destroys
 * the checkpointed state (304 for ever after), as driver 580.159.04 did on
 * the H200. Two GPUs of 64 MiB each, 1 MiB of context per process. */
#include <dlfcn.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#include "gpus.h"
#include "test_util.h"

#define MIB (1ull << 20)
#define TOTAL_MIB 64ull
#define NVML_VALUE_NOT_AVAILABLE (~0ull)

struct mem_test {
	const struct env *e;
	const struct drv *d;
	const struct nvml *n;
	char uuid[2][48];
	nvmlDevice_t dev[2];
};

/* used and free of GPU i, in MiB; ~0 on a failed call */
static unsigned long long used_mib(const struct mem_test *t, int i)
{
	nvmlMemory_v2_t m = { .version = nvmlMemory_v2 };
	return t->n->memory_v2(t->dev[i], &m) == NVML_SUCCESS ? m.used / MIB : ~0ull;
}

static unsigned long long free_mib(const struct mem_test *t, int i)
{
	nvmlMemory_v2_t m = { .version = nvmlMemory_v2 };
	return t->n->memory_v2(t->dev[i], &m) == NVML_SUCCESS ? m.free / MIB : ~0ull;
}

/* A process with mib MiB of device memory on GPU gpu (0: it sees both GPUs,
 * 1: CUDA_VISIBLE_DEVICES=1). */
static pid_t start_on(const struct mem_test *t, unsigned int mib, int gpu)
{
	char mem[16];
	struct ready r;
	snprintf(mem, sizeof(mem), "%u", mib);
	const char *args[] = { "--mem", mem, NULL };
	const char *env[] = { gpu ? "CUDA_VISIBLE_DEVICES=1" : NULL, NULL };
	return app_start_ready(t->e, args, env, &r);
}

static pid_t checkpointed_on(const struct mem_test *t, unsigned int mib, int gpu)
{
	pid_t pid = start_on(t, mib, gpu);
	CUresult lock = t->d->lock(pid, NULL), ckpt = t->d->checkpoint(pid, NULL);
	check(pid > 0 && lock == 0 && ckpt == 0, "a %u MiB process on GPU %d checkpointed (%d, %d)",
	      mib, gpu, lock, ckpt);
	return pid;
}

static CUresult timed_restore(const struct drv *d, pid_t pid, unsigned long long *ms)
{
	uint64_t t0 = now_ms();
	CUresult rc = d->restore(pid, NULL);
	*ms = now_ms() - t0;
	return rc;
}

/* Both GPUs mapped (a process must map every GPU it sees), swapped. */
static CUresult restore_swapped(const struct mem_test *t, pid_t pid)
{
	CUcheckpointGpuPair pairs[2];
	CUcheckpointRestoreArgs ra;
	memset(&ra, 0, sizeof(ra));
	for (int i = 0; i < 2; i++) {
		fc_uuid_parse(t->uuid[i], &pairs[i].oldUuid);
		fc_uuid_parse(t->uuid[1 - i], &pairs[i].newUuid);
	}
	ra.gpuPairs = pairs;
	ra.gpuPairsCount = 2;
	return t->d->restore(pid, &ra);
}

/* The verify line of a 16 MiB process whose memory is on GPU i. */
static int verified_on(const struct mem_test *t, const char *line, int i)
{
	char want[96];
	snprintf(want, sizeof(want), "ok bytes=16777216 gpu=%s", t->uuid[i]);
	return strcmp(line, want) == 0;
}

/* A caller of its own (test-fake-driver --restore LIB PID, a fresh process
 * with nothing of this one's memory): its result, or -1. */
static CUresult restore_elsewhere(const struct mem_test *t, pid_t pid)
{
	char arg[16], out[32] = "";
	int fds[2];
	if (pipe(fds) != 0)
		return -1;
	snprintf(arg, sizeof(arg), "%d", (int)pid);
	fflush(stdout);
	pid_t kid = fork();
	if (kid == 0) {
		dup2(fds[1], 1);
		execl("/proc/self/exe", "test-fake-driver", "--restore", t->e->lib, arg,
		      (char *)NULL);
		_exit(127);
	}
	close(fds[1]);
	ssize_t n = kid > 0 ? read(fds[0], out, sizeof(out) - 1) : -1;
	close(fds[0]);
	if (kid > 0)
		waitpid(kid, NULL, 0);
	return n > 0 ? atoi(out) : -1;
}

static void check_used_settings(const struct mem_test *t)
{
	setenv("FAKECUDA_OTHER_USED_MIB", "20", 1);
	check(used_mib(t, 0) == 29 && used_mib(t, 1) == 30 && free_mib(t, 0) == 35,
	      "FAKECUDA_OTHER_USED_MIB=20 is added on every GPU: %llu, %llu MiB used",
	      used_mib(t, 0), used_mib(t, 1));
	setenv("FAKECUDA_GPU_USED_MIB", "40", 1);
	check(used_mib(t, 0) == 40 && used_mib(t, 1) == 40 && free_mib(t, 1) == 24,
	      "FAKECUDA_GPU_USED_MIB=40 replaces the processes and the others: %llu MiB used",
	      used_mib(t, 0));
	setenv("FAKECUDA_GPU_USED_MIB", "100", 1);
	check(used_mib(t, 0) == TOTAL_MIB && free_mib(t, 0) == 0,
	      "more used than the total: used = total, free 0 (%llu, %llu)", used_mib(t, 0),
	      free_mib(t, 0));
	unsetenv("FAKECUDA_GPU_USED_MIB");
	unsetenv("FAKECUDA_OTHER_USED_MIB");
}

static void check_totals(const struct mem_test *t)
{
	nvmlMemory_v2_t m0 = { .version = nvmlMemory_v2 }, m1 = { .version = nvmlMemory_v2 };
	nvmlMemory_t v1 = { 0, 0, 0 };
	setenv("FAKECUDA_GPU_TOTAL_MIB", "64,32", 1);
	int ok = t->n->memory_v2(t->dev[0], &m0) == 0 && t->n->memory_v2(t->dev[1], &m1) == 0 &&
		 t->n->memory(t->dev[1], &v1) == 0;
	check(ok && m0.total == 64 * MIB && m1.total == 32 * MIB && m1.free == 22 * MIB &&
		      v1.total == m1.total && v1.used == m1.used && v1.free == m1.free,
	      "FAKECUDA_GPU_TOTAL_MIB=64,32: totals %llu and %llu MiB, the second 22 MiB free "
	      "(GetMemoryInfo and _v2 alike)",
	      m0.total / MIB, m1.total / MIB);
	setenv("FAKECUDA_GPU_TOTAL_MIB", "64", 1);
}

static unsigned long long listed_bytes(const struct mem_test *t, pid_t pid)
{
	nvmlProcessInfo_t v[8];
	unsigned int c = 8;
	if (t->n->procs(t->dev[0], &c, v) != NVML_SUCCESS)
		return 0;
	for (unsigned int i = 0; i < c; i++)
		if (v[i].pid == (unsigned int)pid)
			return v[i].usedGpuMemory;
	return 0;
}

static void check_not_available(const struct mem_test *t, pid_t a)
{
	check(listed_bytes(t, a) == 9 * MIB, "NVML lists the 8 MiB process with 9 MiB");
	setenv("FAKECUDA_NVML_PROC_NA", "1", 1);
	unsigned long long b = listed_bytes(t, a);
	check(b == NVML_VALUE_NOT_AVAILABLE && used_mib(t, 0) == 9,
	      "FAKECUDA_NVML_PROC_NA=1: listed with NVML_VALUE_NOT_AVAILABLE (0x%llx), the GPU "
	      "still 9 MiB used",
	      b);
	unsetenv("FAKECUDA_NVML_PROC_NA");
}

/* 8 MiB on the first GPU; 3 MiB on the second, and 5 MiB of a process that
 * moves itself there (CUDA_VISIBLE_DEVICES set before cuInit). */
static void check_figures(const struct mem_test *t)
{
	static const char *const c_args[] = { "--mem", "5", "--set-visible", "1", NULL };
	struct ready r;
	pid_t a = start_on(t, 8, 0), b = start_on(t, 3, 1);
	pid_t c = app_start_ready(t->e, c_args, NULL, &r);
	if (a > 0 && b > 0 && c > 0) {
		check(used_mib(t, 0) == 9 && free_mib(t, 0) == TOTAL_MIB - 9,
		      "first GPU: 64 MiB total, 9 used, 55 free (%llu, %llu)", used_mib(t, 0),
		      free_mib(t, 0));
		check(used_mib(t, 1) == 10 && free_mib(t, 1) == TOTAL_MIB - 10,
		      "second GPU: 10 MiB used (4 + 6), 54 free (%llu, %llu)", used_mib(t, 1),
		      free_mib(t, 1));
		check_used_settings(t);
		check_totals(t);
		check_not_available(t, a);
	}
	app_stop(a);
	app_stop(b);
	app_stop(c);
}

/* After the failed restore, nothing brings the state back. */
static void check_gone_for_good(const struct mem_test *t, pid_t p)
{
	char line[256];
	unsigned long long ms;
	CUprocessState st = CU_PROCESS_STATE_RUNNING;
	check(free_mib(t, 0) == TOTAL_MIB, "the filler gone: 64 MiB free");
	CUresult r1 = timed_restore(t->d, p, &ms), r2 = restore_swapped(t, p);
	check(r1 == 304 && ms < 1000 && r2 == 304,
	      "then restore -> %d at once (%llu ms), with a GPU map -> %d", r1, ms, r2);
	CUresult r3 = restore_elsewhere(t, p);
	check(r3 == 304, "a restore from another caller process -> %d", r3);
	check(t->d->get_state(p, &st) == 0 && st == CU_PROCESS_STATE_CHECKPOINTED &&
		      t->d->unlock(p, NULL) == 401 && t->d->lock(p, NULL) == 401,
	      "still CHECKPOINTED: unlock and lock -> 401");
	check(used_mib(t, 0) == 0, "it holds no device memory (%llu MiB used)", used_mib(t, 0));
	ask_verify(t->e, p, line, sizeof(line), 150);
	check(line[0] == '\0', "its device memory stays out of reach (a verify waits)");
}

/* 16 MiB checkpointed (17 with its context), then 48 MiB of another process
 * leave 16 MiB free. */
static void check_destroyed(const struct mem_test *t)
{
	unsigned long long ms;
	CUprocessState st = CU_PROCESS_STATE_RUNNING;
	pid_t p = checkpointed_on(t, 16, 0);
	pid_t f = start_on(t, 47, 0);
	if (p > 0 && f > 0) {
		check(free_mib(t, 0) == 16, "a filler leaves 16 MiB free (%llu)", free_mib(t, 0));
		CUresult rc = timed_restore(t->d, p, &ms);
		check(rc == 2 && ms < 1000, "restore needing 17 MiB -> %d in %llu ms", rc, ms);
		check(t->d->get_state(p, &st) == 0 && st == CU_PROCESS_STATE_CHECKPOINTED &&
			      t->d->unlock(p, NULL) == 401,
		      "state CHECKPOINTED, unlock -> 401");
		check(used_mib(t, 0) == 48, "the failed restore took nothing: %llu MiB used",
		      used_mib(t, 0));
		app_stop(f);
		check_gone_for_good(t, p);
	}
	check(app_stop(p) == 0, "the destroyed process exits cleanly");
}

/* Only an attempt while the GPU is full destroys the state; the check is
 * need <= free, to the byte. */
static void check_fits(const struct mem_test *t)
{
	char line[256];
	pid_t q = checkpointed_on(t, 16, 0);
	check(app_stop(start_on(t, 47, 0)) == 0, "a filler came and went, no restore tried");
	pid_t f = start_on(t, 46, 0);
	check(free_mib(t, 0) == 17, "another filler leaves exactly 17 MiB free");
	check(t->d->restore(q, NULL) == 0 && t->d->unlock(q, NULL) == 0,
	      "restore needing exactly the free 17 MiB -> 0, unlock");
	ask_verify(t->e, q, line, sizeof(line), 3000);
	check(verified_on(t, line, 0), "its memory is back: '%s'", line);
	check(t->d->lock(q, NULL) == 0 && t->d->checkpoint(q, NULL) == 0,
	      "checkpointed again: 17 MiB free");
	setenv("FAKECUDA_RESTORE_EXTRA_MIB", "1", 1);
	CUresult r1 = t->d->restore(q, NULL);
	unsetenv("FAKECUDA_RESTORE_EXTRA_MIB");
	CUresult r2 = t->d->restore(q, NULL);
	check(r1 == 2 && r2 == 304,
	      "FAKECUDA_RESTORE_EXTRA_MIB=1 in the caller: restore -> %d, then -> %d", r1, r2);
	app_stop(f);
	app_stop(q);
}

/* Memory that no process of the caller's /proc shows counts too. */
static void check_others(const struct mem_test *t)
{
	pid_t p = checkpointed_on(t, 16, 0), q = checkpointed_on(t, 16, 0);
	setenv("FAKECUDA_OTHER_USED_MIB", "48", 1);
	CUresult r1 = t->d->restore(p, NULL);
	check(r1 == 2, "FAKECUDA_OTHER_USED_MIB=48 (16 MiB free): restore -> %d", r1);
	setenv("FAKECUDA_GPU_USED_MIB", "47", 1);
	CUresult r2 = t->d->restore(q, NULL);
	check(r2 == 0, "FAKECUDA_GPU_USED_MIB=47 replaces the others (17 MiB free): restore -> %d",
	      r2);
	unsetenv("FAKECUDA_GPU_USED_MIB");
	unsetenv("FAKECUDA_OTHER_USED_MIB");
	check(t->d->restore(p, NULL) == 304 && t->d->unlock(q, NULL) == 0,
	      "the first stays destroyed, the second unlocks");
	app_stop(p);
	app_stop(q);
}

/* error=CUDA_ERROR_OUT_OF_MEMORY fails a call; oom runs out of memory. */
static void check_oom_fault(const struct mem_test *t)
{
	char text[128];
	pid_t p = start_on(t, 1, 0);
	snprintf(text, sizeof(text), "%d restore error=CUDA_ERROR_OUT_OF_MEMORY 1\n", (int)p);
	write_faults(t->e, text);
	check(t->d->lock(p, NULL) == 0 && t->d->checkpoint(p, NULL) == 0, "lock, checkpoint");
	CUresult r1 = t->d->restore(p, NULL), r2 = t->d->restore(p, NULL);
	check(r1 == 2 && r2 == 0 && t->d->unlock(p, NULL) == 0,
	      "restore error=CUDA_ERROR_OUT_OF_MEMORY: -> %d, and the next restore -> %d", r1, r2);
	snprintf(text, sizeof(text), "%d restore oom\n", (int)p);
	write_faults(t->e, text);
	CUresult r3 = t->d->restore(p, NULL);
	check(r3 == 401, "restore oom on a RUNNING process -> %d", r3);
	check(t->d->lock(p, NULL) == 0 && t->d->checkpoint(p, NULL) == 0, "lock, checkpoint");
	CUresult r4 = t->d->restore(p, NULL);
	write_faults(t->e, "");
	CUresult r5 = t->d->restore(p, NULL);
	check(r4 == 2 && r5 == 304 && state_of(t->d, p) == CU_PROCESS_STATE_CHECKPOINTED,
	      "restore oom, the GPU empty -> %d; without the fault -> %d, CHECKPOINTED", r4, r5);
	app_stop(p);
}

/* A restore onto another GPU needs room there, not on the GPU it left. */
static void check_other_gpu(const struct mem_test *t)
{
	char line[256];
	pid_t p = checkpointed_on(t, 16, 0), fb = start_on(t, 47, 1);
	CUresult r1 = restore_swapped(t, p);
	check(r1 == 2 && free_mib(t, 0) == TOTAL_MIB,
	      "second GPU full, first empty: restore onto the second -> %d", r1);
	app_stop(fb);
	pid_t q = checkpointed_on(t, 16, 0), fa = start_on(t, 47, 0);
	CUresult r2 = restore_swapped(t, q);
	check(r2 == 0 && free_mib(t, 1) == TOTAL_MIB - 17 && t->d->unlock(q, NULL) == 0,
	      "first GPU full, second empty: restore onto the second -> %d", r2);
	ask_verify(t->e, q, line, sizeof(line), 3000);
	check(verified_on(t, line, 1), "... and its memory is on the second GPU: '%s'", line);
	app_stop(fa);
	app_stop(p);
	app_stop(q);
}

/* GPUs of this run only, so that fake processes of other tests running
 * outside a pid namespace of their own are not counted. */
static void set_up(struct mem_test *t, char *gpus, size_t len)
{
	char ns[32];
	struct stat st;
	unsigned int tag = (unsigned int)getpid() ^ (unsigned int)now_ms() ^ 0x6d656du;
	for (int i = 0; i < 2; i++)
		snprintf(t->uuid[i], sizeof(t->uuid[i]), "GPU-%08x-0000-4000-8000-00000000000%d",
			 tag, i + 1);
	snprintf(gpus, len, "%s,%s", t->uuid[0], t->uuid[1]);
	snprintf(ns, sizeof(ns), "%lu",
		 stat("/proc/self/ns/pid", &st) == 0 ? (unsigned long)st.st_ino : 0ul);
	setenv("FAKECUDA_GPUS", gpus, 1);
	setenv("FAKECUDA_GPU_TOTAL_MIB", "64", 1);
	setenv("FAKECUDA_CONTEXT_MIB", "1", 1);
	setenv("FAKECUDA_HOST_PIDNS", ns, 1);
}

static void tear_down(void)
{
	unsetenv("FAKECUDA_GPUS");
	unsetenv("FAKECUDA_GPU_TOTAL_MIB");
	unsetenv("FAKECUDA_CONTEXT_MIB");
	unsetenv("FAKECUDA_HOST_PIDNS");
}

void test_gpu_memory(const struct env *e, const struct drv *d)
{
	char gpus[128];
	struct nvml n;
	struct mem_test t = { e, d, &n, { "", "" }, { NULL, NULL } };
	set_up(&t, gpus, sizeof(gpus));
	void *h = nvml_open(e, &n);
	if (h != NULL && n.init() == NVML_SUCCESS && n.by_index(0, &t.dev[0]) == NVML_SUCCESS &&
	    n.by_index(1, &t.dev[1]) == NVML_SUCCESS) {
		check(used_mib(&t, 0) == 0 && free_mib(&t, 1) == TOTAL_MIB,
		      "FAKECUDA_GPU_TOTAL_MIB=64: two empty GPUs of 64 MiB");
		check_figures(&t);
		check_destroyed(&t);
		check_fits(&t);
		check_others(&t);
		check_oom_fault(&t);
		check_other_gpu(&t);
		n.shutdown();
	} else {
		check(0, "NVML with two GPUs of 64 MiB");
	}
	if (h != NULL)
		dlclose(h);
	tear_down();
}
