#include <dlfcn.h>
#include <libgen.h>
#include <sched.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#include "gpus.h"
#include "test_util.h"

#define MIB (1ull << 20)

static int nvml_load(void *h, struct nvml *n)
{
	*(void **)&n->init = dlsym(h, "nvmlInit_v2");
	*(void **)&n->shutdown = dlsym(h, "nvmlShutdown");
	*(void **)&n->driver_version = dlsym(h, "nvmlSystemGetDriverVersion");
	*(void **)&n->count = dlsym(h, "nvmlDeviceGetCount_v2");
	*(void **)&n->by_index = dlsym(h, "nvmlDeviceGetHandleByIndex_v2");
	*(void **)&n->uuid = dlsym(h, "nvmlDeviceGetUUID");
	*(void **)&n->memory = dlsym(h, "nvmlDeviceGetMemoryInfo");
	*(void **)&n->memory_v2 = dlsym(h, "nvmlDeviceGetMemoryInfo_v2");
	*(void **)&n->minor = dlsym(h, "nvmlDeviceGetMinorNumber");
	*(void **)&n->procs = dlsym(h, "nvmlDeviceGetComputeRunningProcesses_v3");
	return n->init && n->shutdown && n->driver_version && n->count && n->by_index &&
			       n->uuid && n->memory && n->memory_v2 && n->minor && n->procs
		       ? 0
		       : -1;
}

void *nvml_open(const struct env *e, struct nvml *n)
{
	char path[PATH_MAX], dir[PATH_MAX];
	snprintf(dir, sizeof(dir), "%s", e->lib);
	snprintf(path, sizeof(path), "%s/libnvidia-ml.so.1", dirname(dir));
	void *h = dlopen(path, RTLD_NOW | RTLD_LOCAL);
	if (h == NULL || nvml_load(h, n) == 0)
		return h;
	dlclose(h);
	return NULL;
}

static unsigned long long used(const struct nvml *n, nvmlDevice_t dev)
{
	nvmlMemory_v2_t mem = { .version = nvmlMemory_v2 };
	return n->memory_v2(dev, &mem) == NVML_SUCCESS ? mem.used : ~0ull;
}

static void check_device(const struct nvml *n)
{
	char uuid[96];
	nvmlDevice_t dev = NULL;
	nvmlMemory_v2_t mem = { .version = nvmlMemory_v2 };
	check(n->by_index(0, &dev) == NVML_SUCCESS && n->uuid(dev, uuid, sizeof(uuid)) == 0 &&
		      strcmp(uuid, FC_DEFAULT_GPU) == 0,
	      "NVML: device 0 is %s", FC_DEFAULT_GPU);
	check(n->memory_v2(dev, &mem) == NVML_SUCCESS && mem.total == 141ull << 30 && mem.used == 0,
	      "NVML: 141 GiB total, none used (no CUDA process runs)");
	unsigned int minor = 9;
	nvmlReturn_t rc = n->minor(dev, &minor);
	check(rc == NVML_SUCCESS && minor == 0, "NVML: device 0 is /dev/nvidia0 (minor %u)", minor);
}

static unsigned long pidns_ino(void)
{
	struct stat st;
	return stat("/proc/self/ns/pid", &st) == 0 ? (unsigned long)st.st_ino : 0;
}

/* The bytes NVML lists for pid among n entries; 0 when it is not listed. */
static unsigned long long listed(const nvmlProcessInfo_t *v, unsigned int n, pid_t pid)
{
	for (unsigned int i = 0; i < n; i++)
		if (v[i].pid == (unsigned int)pid && v[i].gpuInstanceId == 0xFFFFFFFFu &&
		    v[i].computeInstanceId == 0xFFFFFFFFu)
			return v[i].usedGpuMemory;
	return 0;
}

struct procs {
	pid_t a, b, c; /* 8 MiB and 3 MiB on the first GPU, 2 MiB on the second */
	pid_t nvml;    /* an NVML-only process: no context, never listed */
};

static void check_two_calls(const struct nvml *n, nvmlDevice_t dev, const struct procs *p)
{
	nvmlProcessInfo_t v[8];
	unsigned int c0 = 0, c1 = 1, c8 = 8, bad = 3;
	nvmlReturn_t r0 = n->procs(dev, &c0, NULL);
	nvmlReturn_t r1 = n->procs(dev, &c1, v);
	check(r0 == NVML_ERROR_INSUFFICIENT_SIZE && c0 == 2 && r1 == NVML_ERROR_INSUFFICIENT_SIZE &&
		      c1 == 2,
	      "NVML processes: a count of 0 or 1 -> INSUFFICIENT_SIZE and 2 needed (%d %u, %d %u)",
	      r0, c0, r1, c1);
	nvmlReturn_t r8 = n->procs(dev, &c8, v);
	check(r8 == NVML_SUCCESS && c8 == 2 && listed(v, c8, p->a) == 13 * MIB &&
		      listed(v, c8, p->b) == 8 * MIB,
	      "NVML processes: the second call lists both with memory + 5 MiB of context (%d, %u: "
	      "%llu %llu)",
	      r8, c8, listed(v, c8, p->a), listed(v, c8, p->b));
	check(listed(v, c8, p->nvml) == 0 && listed(v, c8, getpid()) == 0,
	      "NVML processes: neither an NVML-only process nor the caller is listed");
	check(n->procs(dev, &bad, NULL) == NVML_ERROR_INVALID_ARGUMENT,
	      "NVML processes: no array for a nonzero count -> INVALID_ARGUMENT");
}

static void check_second_gpu(const struct nvml *n, nvmlDevice_t dev1, const struct procs *p)
{
	nvmlProcessInfo_t v[8];
	unsigned int c = 8;
	nvmlReturn_t rc = n->procs(dev1, &c, v);
	check(rc == NVML_SUCCESS && c == 1 && listed(v, c, p->c) == 7 * MIB,
	      "NVML processes: the second GPU lists the process that uses it (%d, %u)", rc, c);
	check(used(n, dev1) == 7 * MIB, "NVML: used memory of the second GPU = its process's");
}

static void check_used(const struct nvml *n, nvmlDevice_t dev)
{
	check(used(n, dev) == 21 * MIB, "NVML: used memory = 8 + 3 MiB + 2 contexts (%llu MiB)",
	      used(n, dev) / MIB);
	setenv("FAKECUDA_GPU_USED_MIB", "100", 1);
	check(used(n, dev) == 100 * MIB, "NVML: FAKECUDA_GPU_USED_MIB wins");
	unsetenv("FAKECUDA_GPU_USED_MIB");
}

/* Stopped or checkpointed processes never make NVML wait; a checkpointed
 * one holds no device memory. */
static void check_stopped_checkpointed(const struct nvml *n, const struct drv *d,
				       nvmlDevice_t dev, const struct procs *p)
{
	nvmlProcessInfo_t v[8];
	unsigned int c = 8;
	kill(p->b, SIGSTOP);
	uint64_t t0 = now_ms();
	nvmlReturn_t rc = n->procs(dev, &c, v);
	check(rc == NVML_SUCCESS && listed(v, c, p->b) == 8 * MIB && now_ms() - t0 < 1000,
	      "NVML processes: a stopped process is listed at once");
	kill(p->b, SIGCONT);
	c = 8;
	int ok = d->lock(p->a, NULL) == 0 && d->checkpoint(p->a, NULL) == 0;
	rc = n->procs(dev, &c, v);
	check(ok && rc == NVML_SUCCESS && c == 1 && listed(v, c, p->a) == 0 && used(n, dev) == 8 * MIB,
	      "NVML: a checkpointed process is not listed and uses nothing (%u listed)", c);
	c = 8;
	ok = d->restore(p->a, NULL) == 0 && d->unlock(p->a, NULL) == 0;
	rc = n->procs(dev, &c, v);
	check(ok && rc == NVML_SUCCESS && c == 2 && listed(v, c, p->a) == 13 * MIB,
	      "NVML: listed again after restore");
}

/* The double cannot know host pids from a child pid namespace. */
static int procs_in_child_pidns(const struct nvml *n, nvmlDevice_t dev)
{
	fflush(stdout);
	pid_t pid = fork();
	if (pid == 0) {
		int st;
		if (unshare(CLONE_NEWPID) != 0)
			_exit(77);
		pid_t kid = fork();
		if (kid == 0) {
			unsigned int c = 0;
			_exit(n->procs(dev, &c, NULL));
		}
		_exit(kid > 0 && waitpid(kid, &st, 0) == kid && WIFEXITED(st) ? WEXITSTATUS(st) : 99);
	}
	int st = -1;
	if (pid < 0 || waitpid(pid, &st, 0) != pid || !WIFEXITED(st))
		return -1;
	return WEXITSTATUS(st);
}

static void check_namespaces(const struct nvml *n, nvmlDevice_t dev)
{
	unsigned int c = 0;
	int rc = procs_in_child_pidns(n, dev);
	if (rc == 77)
		printf("# skipped: NVML from a child pid namespace (unshare not allowed)\n");
	else
		check(rc == NVML_ERROR_NOT_SUPPORTED,
		      "NVML processes from a child pid namespace -> NOT_SUPPORTED (%d)", rc);
	unsetenv("FAKECUDA_HOST_PIDNS");
	int host = pidns_ino() == 0xEFFFFFFCul;
	nvmlReturn_t r = n->procs(dev, &c, NULL);
	check(host ? r != NVML_ERROR_NOT_SUPPORTED : r == NVML_ERROR_NOT_SUPPORTED,
	      "NVML processes in %s pid namespace, FAKECUDA_HOST_PIDNS unset -> %d",
	      host ? "the initial" : "a child", r);
}

/* gpus: FAKECUDA_GPUS=<two UUIDs> */
static int start_procs(const struct env *e, const char *gpus, struct procs *p)
{
	static const char *const a[] = { "--mem", "8", NULL }, *const b[] = { "--mem", "3", NULL };
	static const char *const c[] = { "--mem", "2", NULL }, *const nv[] = { "--nvml-only", NULL };
	const char *const env[] = { gpus, NULL };
	const char *const env2[] = { gpus, "CUDA_VISIBLE_DEVICES=1", NULL };
	struct ready r;
	p->a = app_start_ready(e, a, env, &r);
	p->b = app_start_ready(e, b, env, &r);
	p->c = app_start_ready(e, c, env2, &r);
	p->nvml = app_start_ready(e, nv, env, &r);
	return p->a > 0 && p->b > 0 && p->c > 0 && p->nvml > 0 ? 0 : -1;
}

/* NVML as on the machine (the test's own pid namespace stands for the
 * initial one) with two GPUs and 5 MiB of context per process. The GPUs are
 * this run's own: run outside a pid namespace of its own, the test sees
 * the fake processes of other tests too. */
static void check_processes(const struct env *e, const struct drv *d, const struct nvml *n)
{
	char ns[32], gpus[128];
	struct procs p;
	nvmlDevice_t dev0 = NULL, dev1 = NULL;
	unsigned int tag = (unsigned int)getpid() ^ (unsigned int)now_ms();
	snprintf(gpus, sizeof(gpus),
		 "FAKECUDA_GPUS=GPU-%08x-0000-4000-8000-000000000001,GPU-%08x-0000-4000-8000-000000000002",
		 tag, tag);
	snprintf(ns, sizeof(ns), "%lu", pidns_ino());
	setenv("FAKECUDA_HOST_PIDNS", ns, 1);
	setenv("FAKECUDA_CONTEXT_MIB", "5", 1);
	setenv("FAKECUDA_GPUS", strchr(gpus, '=') + 1, 1);
	if (start_procs(e, gpus, &p) == 0 && n->init() == NVML_SUCCESS &&
	    n->by_index(0, &dev0) == NVML_SUCCESS && n->by_index(1, &dev1) == NVML_SUCCESS) {
		check_two_calls(n, dev0, &p);
		check_second_gpu(n, dev1, &p);
		check_used(n, dev0);
		check_stopped_checkpointed(n, d, dev0, &p);
		check_namespaces(n, dev0);
		n->shutdown();
	} else {
		check(0, "NVML with two GPUs and four processes");
	}
	unsetenv("FAKECUDA_HOST_PIDNS");
	unsetenv("FAKECUDA_CONTEXT_MIB");
	unsetenv("FAKECUDA_GPUS");
	app_stop(p.a);
	app_stop(p.b);
	app_stop(p.c);
	app_stop(p.nvml);
}

/* The NVML double sits next to the driver double it loads. */
void test_nvml(const struct env *e, const struct drv *d)
{
	char version[96];
	unsigned int count = 0;
	struct nvml n;
	void *h = nvml_open(e, &n);
	if (h == NULL) {
		const char *why = dlerror();
		check(0, "NVML double loads: %s", why ? why : "a symbol is missing");
		return;
	}
	check(n.driver_version(version, sizeof(version)) == NVML_ERROR_UNINITIALIZED,
	      "NVML: calls before nvmlInit_v2 -> NVML_ERROR_UNINITIALIZED");
	check(n.init() == NVML_SUCCESS && n.driver_version(version, sizeof(version)) == 0 &&
		      strcmp(version, "580.159.04") == 0 && n.count(&count) == 0 && count == 1,
	      "NVML: driver 580.159.04, 1 GPU");
	check_device(&n);
	check(n.shutdown() == NVML_SUCCESS, "NVML: shutdown");
	check_processes(e, d, &n);
	dlclose(h);
}
