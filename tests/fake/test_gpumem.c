/* GPU memory: NVML's total, used and free memory of each GPU. Two GPUs of
 * 64 MiB each, 1 MiB of context per process. */
#include <dlfcn.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
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
		n.shutdown();
	} else {
		check(0, "NVML with two GPUs of 64 MiB");
	}
	if (h != NULL)
		dlclose(h);
	tear_down();
}
