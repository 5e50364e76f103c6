/* Checkpoint and restore of a process with VMM memory (fakecuda-cuapp):
 * data and addresses kept, copies blocked while locked, the host copy and
 * NVML's figures, and the GPU memory a restore needs. */
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "test_vmm.h"

static unsigned long long listed(const struct nvml *n, pid_t pid)
{
	nvmlProcessInfo_t v[16];
	nvmlDevice_t dev;
	unsigned int count = 16;
	if (n->by_index(0, &dev) != NVML_SUCCESS || n->procs(dev, &count, v) != NVML_SUCCESS)
		return ~0ull;
	for (unsigned int i = 0; i < count; i++)
		if (v[i].pid == (unsigned int)pid)
			return v[i].usedGpuMemory;
	return 0;
}

static void cycle(const struct drv *d, const struct nvml *n, struct cuapp_proc *app)
{
	char line[256];
	pid_t pid = app->pid;
	unsigned long long before = listed(n, pid);
	check(before == 6 * MIB, "NVML: 2 MiB legacy + 4 MiB VMM (%llu)", before);
	check(d->lock(pid, NULL) == 0, "locked");
	kill(pid, SIGUSR1);
	hear(app->out, line, sizeof(line), 300);
	check(line[0] == '\0', "while locked, copies block: no verify line ('%s')", line);
	long rss0 = rss_kib(pid);
	check(d->checkpoint(pid, NULL) == 0 && listed(n, pid) == 0,
	      "checkpointed: NVML lists nothing");
	long grown = rss_kib(pid) - rss0;
	check(grown >= 6 * 1024, "the checkpoint copied 6 MiB to the host (RSS +%ld KiB)", grown);
	check(d->restore(pid, NULL) == 0 && listed(n, pid) == 6 * MIB,
	      "restored: NVML counts 6 MiB again");
	check(d->unlock(pid, NULL) == 0, "unlocked");
	hear(app->out, line, sizeof(line), 5000);
	check(strcmp(line, "verify ok bytes=6291456") == 0, "the verify asked while locked: '%s'",
	      line);
	kill(pid, SIGUSR1);
	hear(app->out, line, sizeof(line), 5000);
	check(strcmp(line, "verify ok bytes=6291456") == 0,
	      "every byte at the same addresses: '%s'", line);
}

/* A GPU of 8 MiB: 4 MiB held by another process leaves room for 2 MiB of
 * VMM memory, not for 6. */
static void room(const struct env *e, const struct drv *d)
{
	static const char *const big[] = { "--vmm-mib", "6", "--interval-ms", "20", NULL };
	static const char *const small[] = { "--vmm-mib", "2", "--interval-ms", "20", NULL };
	static const char *const filler[] = { "--mem", "4", NULL };
	struct cuapp_proc b, s;
	struct ready r;
	setenv("FAKECUDA_GPU_TOTAL_MIB", "8", 1);
	if (cuapp_start(e, big, &b) == 0 && cuapp_start(e, small, &s) == 0) {
		check(d->lock(b.pid, NULL) == 0 && d->checkpoint(b.pid, NULL) == 0 &&
			      d->lock(s.pid, NULL) == 0 && d->checkpoint(s.pid, NULL) == 0,
		      "6 MiB and 2 MiB of VMM memory checkpointed");
		pid_t f = app_start_ready(e, filler, NULL, &r);
		CUresult rb = d->restore(b.pid, NULL), rs = d->restore(s.pid, NULL);
		check(rb == CUDA_ERROR_OUT_OF_MEMORY &&
			      state_of(d, b.pid) == CU_PROCESS_STATE_CHECKPOINTED,
		      "no room for the 6 MiB of VMM memory: restore -> 2 (%d)", rb);
		check(rs == 0 && d->unlock(s.pid, NULL) == 0, "room for 2 MiB: restored (%d)", rs);
		check(cuapp_stop(&s) == 0, "the restored process's checks all passed");
		app_stop(f);
	}
	if (b.pid > 0) {
		kill(b.pid, SIGKILL);
		cuapp_stop(&b);
	}
	unsetenv("FAKECUDA_GPU_TOTAL_MIB");
}

void test_vmm_cycle(const struct env *e, const struct drv *d)
{
	static const char *const args[] = { "--alloc-mib",   "2",  "--vmm-mib", "4", "--seed", "42",
					    "--interval-ms", "20", NULL };
	struct nvml n;
	struct stat st;
	struct cuapp_proc app;
	char ns[32], gpu[64];
	snprintf(gpu, sizeof(gpu), "GPU-%08x-0000-4000-8000-0000000000%02x", (unsigned int)getpid(),
		 0xcc);
	snprintf(ns, sizeof(ns), "%lu",
		 stat("/proc/self/ns/pid", &st) == 0 ? (unsigned long)st.st_ino : 0ul);
	setenv("FAKECUDA_GPUS", gpu, 1);
	setenv("FAKECUDA_HOST_PIDNS", ns, 1);
	void *h = nvml_open(e, &n);
	if (h == NULL || n.init() != NVML_SUCCESS) {
		check(0, "NVML loads and initializes");
	} else if (cuapp_start(e, args, &app) == 0) {
		cycle(d, &n, &app);
		check(cuapp_stop(&app) == 0,
		      "fakecuda-cuapp: every periodic check passed (exit 0)");
	}
	/* NVML reads FAKECUDA_GPUS at its first init */
	if (h != NULL)
		n.shutdown();
	room(e, d);
	unsetenv("FAKECUDA_GPUS");
	unsetenv("FAKECUDA_HOST_PIDNS");
}
