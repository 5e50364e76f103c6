/* VMM memory shared between processes through POSIX fds, and legacy CUDA
 * IPC under the driver's own names: data seen by both sides, what NVML
 * counts for whom, and which importer can be restored. */
#include <dlfcn.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "test_vmm.h"

#define LONG_MS 10000

/* 4 MiB exportable: the first half 0x11111111; an importer writes
 * 0x22222222 into the last MiB, which the exporter then sees. */
int peer_exporter(const struct cuv *c, int sock, const char *arg)
{
	CUmemGenericAllocationHandle h, plain;
	CUdeviceptr va, va2;
	int fd = -1, fd2 = -1;
	if (cuv_start(c) != 0)
		return -1;
	int ok = cuv_vmm(c, 4 * MIB, CU_MEM_HANDLE_TYPE_POSIX_FILE_DESCRIPTOR, &va, &h) == 0 &&
		c->set32(va, 0x11111111, MIB / 2) == 0 &&
		c->export_fd(&fd, h, CU_MEM_HANDLE_TYPE_POSIX_FILE_DESCRIPTOR, 0) == 0;
	check(ok && fd >= 0,
	      "exporter: 4 MiB created with POSIX fd handles, filled, exported (fd %d)", fd);
	check(cuv_vmm(c, 2 * MIB, 0, &va2, &plain) == 0 &&
		      c->export_fd(&fd2, plain, CU_MEM_HANDLE_TYPE_POSIX_FILE_DESCRIPTOR, 0) == 1,
	      "exporter: an allocation without POSIX fd handles is not exported (1)");
	c->unmap(va2, 2 * MIB);
	c->release(plain);
	send_fd(sock, fd);
	close(fd);
	for (;;) {
		char line[64];
		hear(sock, line, sizeof(line), 60000);
		if (strcmp(line, "look") == 0) {
			say(sock, cuv_all(c, va + 3 * MIB, MIB, 0x22222222) ? "seen" : "not seen");
		} else if (strcmp(line, "release") == 0) {
			say(sock,
			    c->unmap(va, 4 * MIB) == 0 && c->release(h) == 0 ? "released" :
									       "not released");
		} else {
			break;
		}
	}
	return 0;
}

/* arg "hold": keeps the import mapped; "release": unmaps and releases it */
int peer_importer(const struct cuv *c, int sock, const char *arg)
{
	CUmemAccessDesc rw = { { CU_MEM_LOCATION_TYPE_DEVICE, 0 },
			       CU_MEM_ACCESS_FLAGS_PROT_READWRITE };
	CUmemGenericAllocationHandle h = 0;
	CUdeviceptr va = 0;
	if (cuv_start(c) != 0)
		return -1;
	int fd = recv_fd(sock, LONG_MS);
	CUresult rc =
		c->import_fd(&h, (void *)(intptr_t)fd, CU_MEM_HANDLE_TYPE_POSIX_FILE_DESCRIPTOR);
	/* the fd stays ours: closing it leaves the import */
	close(fd);
	int ok = rc == 0 && c->reserve(&va, 4 * MIB, 0, 0, 0) == 0 &&
		c->map(va, 4 * MIB, 0, h, 0) == 0 && c->access(va, 4 * MIB, &rw, 1) == 0;
	check(ok, "importer: imported (%d), fd closed, mapped", rc);
	check(ok && cuv_all(c, va, 2 * MIB, 0x11111111) &&
		      c->set32(va + 3 * MIB, 0x22222222, MIB / 4) == 0,
	      "importer: sees the exporter's data, writes its own");
	if (strcmp(arg, "release") == 0)
		check(c->unmap(va, 4 * MIB) == 0 && c->release(h) == 0 &&
			      c->addr_free(va, 4 * MIB) == 0,
		      "importer: unmapped and released its import");
	say(sock, "written");
	hear(sock, (char[8]){ 0 }, 8, 60000);
	return 0;
}

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

static void check_import_restore(const struct drv *d, pid_t pid, CUresult want, const char *what)
{
	CUresult l = d->lock(pid, NULL), k = d->checkpoint(pid, NULL);
	CUresult r1 = d->restore(pid, NULL), r2 = d->restore(pid, NULL);
	check(l == 0 && k == 0 && r1 == want && r2 == (want ? want : CUDA_ERROR_ILLEGAL_STATE),
	      "%s: lock %d, checkpoint %d, restore %d, again %d", what, l, k, r1, r2);
	if (want == 0)
		check(d->unlock(pid, NULL) == 0 && state_of(d, pid) == CU_PROCESS_STATE_RUNNING,
		      "%s: runs again", what);
	else
		check(state_of(d, pid) == CU_PROCESS_STATE_CHECKPOINTED &&
			      d->unlock(pid, NULL) == 401,
		      "%s: stays CHECKPOINTED", what);
}

static void share(const struct env *e, const struct drv *d, const struct nvml *n)
{
	struct peer x, hold, rel;
	if (peer_start(e, &x, "exporter", NULL) != 0)
		return;
	int fd = recv_fd(x.sock, LONG_MS);
	check(fd >= 0, "the exporter's fd came");
	send_fd(peer_start(e, &hold, "importer", "hold") == 0 ? hold.sock : -1, fd);
	check(expect(hold.sock, "written", LONG_MS), "the importer wrote");
	say(x.sock, "look");
	check(expect(x.sock, "seen", LONG_MS), "the exporter sees what its importer wrote");
	unsigned long long ex = listed(n, x.pid), im = listed(n, hold.pid);
	check(ex == 4 * MIB && im == 0,
	      "NVML counts the created 4 MiB for the exporter (%llu), nothing for the importer (%llu)",
	      ex, im);
	check_import_restore(d, hold.pid, CUDA_ERROR_NOT_SUPPORTED,
			     "an importer that holds its import");
	send_fd(peer_start(e, &rel, "importer", "release") == 0 ? rel.sock : -1, fd);
	close(fd);
	check(expect(rel.sock, "written", LONG_MS), "the second importer wrote and released");
	check_import_restore(d, rel.pid, 0, "an importer that released its import");
	say(x.sock, "release");
	int released = expect(x.sock, "released", LONG_MS);
	unsigned long long after = listed(n, x.pid);
	check(released && after == 0,
	      "released and unmapped by the exporter: NVML no longer counts it (%llu)", after);
	say(x.sock, "end");
	say(rel.sock, "end");
	check(peer_end(&x) == 0 && peer_end(&rel) == 0, "exporter and importer checks pass");
	kill(hold.pid, SIGKILL);
	peer_end(&hold);
}

/* Legacy IPC under the real names: cuMemAlloc memory, the handle through
 * the test; the importer sees the data. */
int peer_ipc(const struct cuv *c, int sock, const char *arg)
{
	CUipcMemHandle h;
	CUdeviceptr p = 0;
	char hex[2 * sizeof(h) + 1], line[256];
	if (cuv_start(c) != 0)
		return -1;
	if (strcmp(arg, "export") == 0) {
		check(c->alloc(&p, 2 * MIB) == 0 && c->set32(p, 0x33333333, MIB / 2) == 0 &&
			      c->ipc_get(&h, p) == 0,
		      "IPC exporter: cuMemAlloc, filled, cuIpcGetMemHandle");
		for (size_t i = 0; i < sizeof(h); i++)
			snprintf(hex + 2 * i, 3, "%02x", (unsigned char)h.reserved[i]);
		say(sock, hex);
	} else {
		hear(sock, line, sizeof(line), LONG_MS);
		for (size_t i = 0; i < sizeof(h) && strlen(line) == 2 * sizeof(h); i++) {
			unsigned int byte = 0;
			sscanf(line + 2 * i, "%2x", &byte);
			h.reserved[i] = (char)byte;
		}
		size_t size = 0;
		CUdeviceptr base = 0;
		CUresult rc = c->ipc_open(&p, h, 1);
		check(rc == 0 && c->range(&base, &size, p) == 0 && size == 2 * MIB &&
			      cuv_all(c, p, 2 * MIB, 0x33333333),
		      "IPC importer: cuIpcOpenMemHandle (%d) gives the 2 MiB with the exporter's data",
		      rc);
		check(c->ipc_close(p) == 0 && c->dtoh(line, p, 4) == 1 && c->ipc_close(p) == 1,
		      "IPC importer: closed, the memory is gone");
	}
	say(sock, "done");
	hear(sock, line, sizeof(line), 60000);
	return 0;
}

static void legacy_ipc(const struct env *e)
{
	struct peer x, y;
	char hex[256];
	if (peer_start(e, &x, "ipc", "export") != 0)
		return;
	hear(x.sock, hex, sizeof(hex), LONG_MS);
	if (peer_start(e, &y, "ipc", "import") == 0)
		say(y.sock, hex);
	check(expect(x.sock, "done", LONG_MS) && expect(y.sock, "done", LONG_MS),
	      "IPC: both sides done");
	say(x.sock, "end");
	say(y.sock, "end");
	check(peer_end(&x) == 0 && peer_end(&y) == 0, "legacy IPC under the driver's names");
}

void test_vmm_share(const struct env *e, const struct drv *d)
{
	struct nvml n;
	struct stat st;
	char ns[32], gpu[64];
	snprintf(gpu, sizeof(gpu), "GPU-%08x-0000-4000-8000-0000000000%02x", (unsigned int)getpid(),
		 0x5d);
	snprintf(ns, sizeof(ns), "%lu",
		 stat("/proc/self/ns/pid", &st) == 0 ? (unsigned long)st.st_ino : 0ul);
	setenv("FAKECUDA_GPUS", gpu, 1);
	setenv("FAKECUDA_HOST_PIDNS", ns, 1);
	void *h = nvml_open(e, &n);
	/* NVML reads FAKECUDA_GPUS at its first init: shut down after */
	if (h != NULL && n.init() == NVML_SUCCESS) {
		share(e, d, &n);
		n.shutdown();
	} else {
		check(0, "NVML loads and initializes");
	}
	legacy_ipc(e);
	unsetenv("FAKECUDA_GPUS");
	unsetenv("FAKECUDA_HOST_PIDNS");
}
