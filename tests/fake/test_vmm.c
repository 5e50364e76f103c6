/* The calls of one process: contexts, VMM, legacy memory, copies, pinned
 * host memory, kernels and cuGetProcAddress. */
#include <dirent.h>
#include <dlfcn.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "test_vmm.h"

/* Our own VMM memfds (the ones NVML counts), from /proc/self/fd. */
static int vmm_fds(void)
{
	char path[300], target[256];
	int n = 0;
	DIR *d = opendir("/proc/self/fd");
	struct dirent *de;
	while (d != NULL && (de = readdir(d)) != NULL) {
		snprintf(path, sizeof(path), "/proc/self/fd/%s", de->d_name);
		ssize_t len = readlink(path, target, sizeof(target) - 1);
		target[len > 0 ? len : 0] = '\0';
		n += strstr(target, "fakecuda-devmem:") != NULL && strstr(target, ":vmm") != NULL;
	}
	if (d != NULL)
		closedir(d);
	return n;
}

static void check_contexts(const struct cuv *c)
{
	CUdeviceptr p;
	CUcontext ctx = (CUcontext)1, cur = NULL;
	CUdevice dev = -1;
	int can = 1;
	check(c->init(0) == 0 && c->ctx_get(&ctx) == 0 && ctx == NULL,
	      "no current context after cuInit");
	check(c->alloc(&p, 4096) == 201 && c->ctx_device(&dev) == 201 && c->sync() == 201,
	      "without a current context: cuMemAlloc, cuCtxGetDevice, cuCtxSynchronize -> 201");
	check(c->retain(&ctx, 0) == 0 && c->ctx_set(ctx) == 0 && c->ctx_get(&cur) == 0 &&
		      cur == ctx && c->ctx_device(&dev) == 0 && dev == 0,
	      "primary context of device 0 retained and current");
	check(c->retain(&ctx, 7) == CUDA_ERROR_INVALID_DEVICE,
	      "no primary context of device 7 (101)");
	check(c->can_peer(&can, 0, 0) == 0 && can == 0, "cuDeviceCanAccessPeer -> 0");
}

static void check_vmm_basics(const struct cuv *c)
{
	CUmemAllocationProp prop = { .type = CU_MEM_ALLOCATION_TYPE_PINNED,
				     .location = { CU_MEM_LOCATION_TYPE_DEVICE, 0 } };
	CUmemAccessDesc rw = { { CU_MEM_LOCATION_TYPE_DEVICE, 0 },
			       CU_MEM_ACCESS_FLAGS_PROT_READWRITE };
	CUmemGenericAllocationHandle h, h2;
	CUdeviceptr va = 0;
	size_t gmin = 0, grec = 0;
	unsigned int word = 0;
	/* out-parameters are read after the calls, not among check's arguments */
	int ok = c->granularity(&gmin, &prop, CU_MEM_ALLOC_GRANULARITY_MINIMUM) == 0 &&
		c->granularity(&grec, &prop, CU_MEM_ALLOC_GRANULARITY_RECOMMENDED) == 0;
	check(ok && gmin == 2 * MIB && grec == 2 * MIB, "granularity 2 MiB (%zu, %zu)", gmin, grec);
	check(c->create(&h, 3 * MIB, &prop, 0) == 1, "cuMemCreate of 3 MiB -> 1");
	check(c->reserve(&va, 8 * MIB, 0, 0, 0) == 0 && va != 0 &&
		      c->create(&h, 4 * MIB, &prop, 0) == 0 && vmm_fds() == 1,
	      "8 MiB reserved, 4 MiB created: one memfd");
	check(c->map(va, 4 * MIB, 0, h, 0) == 0 && c->set32(va, 7, 1) == 1 &&
		      c->dtoh(&word, va, 4) == 1,
	      "mapped, no access set yet: copies -> 1");
	check(c->map(va + 2 * MIB, 4 * MIB, 0, h, 0) == 1, "a mapping over a mapped range -> 1");
	check(c->access(va, 4 * MIB, &rw, 1) == 0 && c->set32(va, 0x5a5a5a5a, MIB) == 0 &&
		      cuv_all(c, va, 4 * MIB, 0x5a5a5a5a) && c->set8(va + 4 * MIB, 1, 1) == 1,
	      "access set: 4 MiB set and read back; beyond the mapping -> 1");
	check(c->unmap(va, 2 * MIB) == 1 && c->unmap(va, 4 * MIB) == 0 &&
		      c->dtoh(&word, va, 4) == 1,
	      "a part of a mapping is not unmapped (1); the whole is, and then copies fail (1)");
	check(vmm_fds() == 1 && c->map(va + 4 * MIB, 4 * MIB, 0, h, 0) == 0 &&
		      c->access(va + 4 * MIB, 4 * MIB, &rw, 1) == 0 &&
		      cuv_all(c, va + 4 * MIB, 4 * MIB, 0x5a5a5a5a),
	      "an unreleased handle keeps its memory: mapped again elsewhere, same data");
	check(c->release(h) == 0 && c->release(h) == 1 && vmm_fds() == 1 &&
		      cuv_all(c, va + 4 * MIB, 4 * MIB, 0x5a5a5a5a),
	      "released while mapped: still there (a second release -> 1)");
	check(c->addr_free(va, 8 * MIB) == 1, "a reservation with a mapping in it is not freed");
	check(c->unmap(va + 4 * MIB, 4 * MIB) == 0 && vmm_fds() == 0 &&
		      c->map(va, 2 * MIB, 0, h, 0) == 1,
	      "released and unmapped: gone, its handle no longer maps");
	check(c->addr_free(va, 8 * MIB) == 0 && c->addr_free(va, 8 * MIB) == 1,
	      "reservation freed once");
	CUdeviceptr again = 0, other = 0;
	ok = c->reserve(&again, 4 * MIB, 0, va + 2 * MIB, 0) == 0;
	check(ok && again == va + 2 * MIB, "a free address hint is honoured (0x%llx for 0x%llx)",
	      again, va + 2 * MIB);
	ok = c->reserve(&other, 4 * MIB, 0, va + 2 * MIB, 0) == 0;
	check(ok && other != 0 && (other >= again + 4 * MIB || other + 4 * MIB <= again),
	      "a taken hint gives another, free address (0x%llx)", other);
	check(c->create(&h2, 2 * MIB, &prop, 0) == 0 && c->map(other, 2 * MIB, 0, h2, 0) == 0 &&
		      c->ipc_get(&(CUipcMemHandle){ { 0 } }, other) == 1,
	      "cuIpcGetMemHandle on VMM memory -> 1");
	c->unmap(other, 2 * MIB);
	c->release(h2);
	c->addr_free(again, 4 * MIB);
	c->addr_free(other, 4 * MIB);
}

static void check_legacy(const struct cuv *c)
{
	CUdeviceptr a = 0, b = 0, v = 0, base = 0;
	CUmemGenericAllocationHandle h;
	size_t size = 0;
	int ok = c->alloc(&a, 2 * MIB) == 0 && c->alloc(&b, 1 * MIB) == 0 &&
		c->set32(a, 0x01020304, MIB / 2) == 0 && c->range(&base, &size, a + 100) == 0;
	check(ok && base == a && size == 2 * MIB,
	      "cuMemAlloc, cuMemGetAddressRange gives the allocation (0x%llx, %zu)", base, size);
	check(cuv_vmm(c, 2 * MIB, 0, &v, &h) == 0 && c->dtod(v, a, 2 * MIB) == 0 &&
		      cuv_all(c, v, 2 * MIB, 0x01020304),
	      "cuMemcpyDtoD from legacy to VMM memory");
	check(c->range(&base, &size, v + 5) == 0 && base == v && size == 2 * MIB,
	      "the range of a VMM mapping");
	check(c->free(a + 256) == 1 && c->free(v) == 1 && c->free(a) == 0 &&
		      c->set8(a, 0, 1) == 1 && c->range(&base, &size, a) == CUDA_ERROR_NOT_FOUND,
	      "cuMemFree: not inside an allocation nor on VMM memory (1); the freed memory is gone");
	CUdeviceptr again = 0;
	ok = c->alloc(&again, 2 * MIB) == 0;
	check(ok && again == a && c->free(again) == 0 && c->free(b) == 0,
	      "freed room is used again (0x%llx)", again);
	c->unmap(v, 2 * MIB);
	c->release(h);
	c->addr_free(v, 2 * MIB);
}

static void check_host(const struct cuv *c)
{
	static char buf[8192];
	void *p = NULL;
	check(c->host_register(buf, 4096, 0) == 0 && c->host_register(buf + 100, 10, 0) == 712 &&
		      c->host_unregister(buf + 1) == 713 && c->host_unregister(buf) == 0 &&
		      c->host_unregister(buf) == 713,
	      "cuMemHostRegister twice -> 712, unregister of an unknown pointer -> 713");
	check(c->host_alloc(&p, 10000, 0) == 0 && p != NULL && ((uintptr_t)p & 4095) == 0 &&
		      c->free_host(p) == 0 && c->free_host(buf) == 1,
	      "cuMemHostAlloc (page-aligned) and cuMemFreeHost");
}

static void check_kernel(const struct cuv *c)
{
	unsigned int ms = 200;
	void *params[] = { &ms };
	uint64_t t0 = now_ms();
	CUresult rc = c->launch(NULL, 1, 1, 1, 1, 1, 1, 0, NULL, params, NULL);
	uint64_t t1 = now_ms();
	CUresult sync = c->sync();
	uint64_t t2 = now_ms();
	check(rc == 0 && t1 - t0 < 100 && sync == 0 && t2 - t0 >= 190,
	      "cuLaunchKernel of 200 ms returns at once (%llu ms), cuCtxSynchronize waits for it (%llu ms)",
	      (unsigned long long)(t1 - t0), (unsigned long long)(t2 - t0));
}

static void check_proc_address(const struct cuv *c)
{
	static const char *const pairs[][2] = {
		{ "cuMemAlloc", "cuMemAlloc_v2" },
		{ "cuMemcpyHtoD", "cuMemcpyHtoD_v2" },
		{ "cuIpcOpenMemHandle", "cuIpcOpenMemHandle_v2" },
		{ "cuGetProcAddress", "cuGetProcAddress_v2" },
		{ "cuMemHostRegister", "cuMemHostRegister_v2" },
		{ "cuDevicePrimaryCtxRelease", "cuDevicePrimaryCtxRelease_v2" },
		{ "cuMemGetAddressRange", "cuMemGetAddressRange_v2" },
		{ "cuMemFree", "cuMemFree_v2" },
		{ "cuMemCreate", "cuMemCreate" },
		{ "cuCtxSynchronize", "cuCtxSynchronize" },
	};
	for (size_t i = 0; i < sizeof(pairs) / sizeof(pairs[0]); i++) {
		void *f = NULL;
		CUdriverProcAddressQueryResult st = CU_GET_PROC_ADDRESS_SYMBOL_NOT_FOUND;
		CUresult rc = c->get_proc(pairs[i][0], &f, 12080, CU_GET_PROC_ADDRESS_DEFAULT, &st);
		check(rc == 0 && st == CU_GET_PROC_ADDRESS_SUCCESS && f != NULL &&
			      f == dlsym(c->handle, pairs[i][1]),
		      "cuGetProcAddress(%s) = %s", pairs[i][0], pairs[i][1]);
	}
	void *f = (void *)1, *g = NULL;
	CUdriverProcAddressQueryResult st = CU_GET_PROC_ADDRESS_SUCCESS;
	CUresult rc = c->get_proc("cuNoSuchCall", &f, 12080, 0, &st);
	check(rc == 500 && f == NULL && st == CU_GET_PROC_ADDRESS_SYMBOL_NOT_FOUND,
	      "an unknown symbol -> 500, NULL, SYMBOL_NOT_FOUND (%d)", rc);
	check(c->get_proc_v1("cuMemcpyDtoH", &g, 12080,
			     CU_GET_PROC_ADDRESS_PER_THREAD_DEFAULT_STREAM) == 0 &&
		      g == dlsym(c->handle, "cuMemcpyDtoH_v2"),
	      "cuGetProcAddress (v1), per-thread stream flag: the same function");
}

int peer_basics(const struct cuv *c, int sock, const char *arg)
{
	check_contexts(c);
	check_vmm_basics(c);
	check_legacy(c);
	check_host(c);
	check_kernel(c);
	check_proc_address(c);
	return 0;
}

int test_vmm_peer(const char *role, const char *lib, int sock, const char *arg)
{
	struct cuv c;
	if (cuv_load(&c, lib) != 0) {
		check(0, "peer %s loads %s with every call", role, lib);
		return 1;
	}
	if (strcmp(role, "basics") == 0)
		peer_basics(&c, sock, arg);
	else if (strcmp(role, "exporter") == 0)
		peer_exporter(&c, sock, arg);
	else if (strcmp(role, "importer") == 0)
		peer_importer(&c, sock, arg);
	else if (strcmp(role, "ipc") == 0)
		peer_ipc(&c, sock, arg);
	else if (strcmp(role, "event") == 0)
		peer_event(&c, sock, arg);
	else
		check(0, "known peer role %s", role);
	return t_failures ? 1 : 0;
}

void test_vmm(const struct env *e, const struct drv *d)
{
	struct peer p;
	if (peer_start(e, &p, "basics", NULL) == 0)
		check(peer_end(&p) == 0,
		      "VMM, legacy memory, host memory, kernels, cuGetProcAddress in one process");
}
