#include <dlfcn.h>
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "cuapp.h"

/* How the CUDA runtime reaches the driver: one dlsym, of
 * cuGetProcAddress_v2; everything else through it, by base name. */

#define CUDA_VERSION 12080

static int resolve(cu_get_proc_fn get, const char *name, void *slot)
{
	CUdriverProcAddressQueryResult status = CU_GET_PROC_ADDRESS_SYMBOL_NOT_FOUND;
	void *f = NULL;
	CUresult rc = get(name, &f, CUDA_VERSION, CU_GET_PROC_ADDRESS_DEFAULT, &status);
	if (rc != CU_OK || f == NULL || status != CU_GET_PROC_ADDRESS_SUCCESS) {
		fprintf(stderr, "fakecuda-cuapp: cuGetProcAddress(%s) -> %d (status %d)\n", name,
			rc, (int)status);
		return -1;
	}
	memcpy(slot, &f, sizeof(f));
	return 0;
}

/* By name, as the runtime loads it; then from this program's directory,
 * for a build whose dlopen does not see this program's run path (the
 * sanitizers' dlopen interceptor calls it from their own library). */
static void *open_driver(void)
{
	char path[4096];
	void *lib = dlopen("libcuda.so.1", RTLD_NOW | RTLD_LOCAL);
	ssize_t n = lib == NULL ? readlink("/proc/self/exe", path, sizeof(path) - 16) : -1;
	if (n <= 0)
		return lib;
	path[n] = '\0';
	char *slash = strrchr(path, '/');
	if (slash == NULL)
		return NULL;
	strcpy(slash + 1, "libcuda.so.1");
	return dlopen(path, RTLD_NOW | RTLD_LOCAL);
}

int cuapp_load(struct cu *cu)
{
	void *lib = open_driver();
	cu_get_proc_fn get = NULL;
	if (lib != NULL)
		*(void **)&get = dlsym(lib, "cuGetProcAddress_v2");
	if (get == NULL) {
		fprintf(stderr, "fakecuda-cuapp: no cuGetProcAddress_v2 in libcuda.so.1: %s\n",
			dlerror());
		return -1;
	}
	return resolve(get, "cuInit", &cu->init) | resolve(get, "cuDeviceGet", &cu->device_get) |
		resolve(get, "cuDevicePrimaryCtxRetain", &cu->retain) |
		resolve(get, "cuCtxSetCurrent", &cu->ctx_set) |
		resolve(get, "cuCtxSynchronize", &cu->sync) |
		resolve(get, "cuMemAlloc", &cu->alloc) |
		resolve(get, "cuMemGetAddressRange", &cu->range) |
		resolve(get, "cuMemcpyHtoD", &cu->htod) | resolve(get, "cuMemcpyDtoH", &cu->dtoh) |
		resolve(get, "cuMemGetAllocationGranularity", &cu->granularity) |
		resolve(get, "cuMemAddressReserve", &cu->reserve) |
		resolve(get, "cuMemCreate", &cu->create) | resolve(get, "cuMemMap", &cu->map) |
		resolve(get, "cuMemSetAccess", &cu->access) |
		resolve(get, "cuLaunchKernel", &cu->launch) |
		resolve(get, "cuIpcGetMemHandle", &cu->ipc_get) |
		resolve(get, "cuIpcOpenMemHandle", &cu->ipc_open) |
		resolve(get, "cuGetErrorName", &cu->error_name);
}

int cuapp_failed(const struct cu *cu, CUresult rc, const char *what)
{
	const char *name = NULL;
	if (rc == CU_OK)
		return 0;
	if (cu->error_name == NULL || cu->error_name(rc, &name) != CU_OK || name == NULL)
		name = "?";
	fprintf(stderr, "fakecuda-cuapp: %s -> %d (%s)\n", what, rc, name);
	return -1;
}

/* The handle of the first allocation, as 128 hex digits: a temporary file
 * renamed into place, so that a reader never sees half of it. */
int cuapp_ipc_export(struct cuapp *app)
{
	CUipcMemHandle h;
	char tmp[4200];
	if (app->n == 0 || app->a[0].kind != KIND_LEGACY) {
		fprintf(stderr, "fakecuda-cuapp: --ipc-export needs an --alloc-mib allocation\n");
		return -1;
	}
	if (cuapp_failed(&app->cu, app->cu.ipc_get(&h, app->a[0].ptr), "cuIpcGetMemHandle"))
		return -1;
	snprintf(tmp, sizeof(tmp), "%s.tmp", app->ipc_export);
	FILE *f = fopen(tmp, "we");
	if (f == NULL)
		return -1;
	for (size_t i = 0; i < sizeof(h.reserved); i++)
		fprintf(f, "%02x", (unsigned char)h.reserved[i]);
	fprintf(f, "\n");
	if (fclose(f) != 0 || rename(tmp, app->ipc_export) != 0) {
		fprintf(stderr, "fakecuda-cuapp: cannot write %s: %s\n", app->ipc_export,
			strerror(errno));
		return -1;
	}
	return 0;
}

/* Waits up to 30 s for the file. */
static int read_handle(const char *path, CUipcMemHandle *h)
{
	char hex[2 * CU_IPC_HANDLE_SIZE + 2];
	for (int tries = 0; tries < 3000; tries++) {
		FILE *f = fopen(path, "re");
		if (f == NULL) {
			usleep(10000);
			continue;
		}
		int ok =
			fgets(hex, sizeof(hex), f) != NULL && strlen(hex) >= 2 * CU_IPC_HANDLE_SIZE;
		fclose(f);
		for (size_t i = 0; ok && i < CU_IPC_HANDLE_SIZE; i++) {
			unsigned int byte;
			ok = sscanf(hex + 2 * i, "%2x", &byte) == 1;
			h->reserved[i] = (char)byte;
		}
		return ok ? 0 : -1;
	}
	return -1;
}

/* The exporter's first allocation, pattern index 0 of --peer-seed. */
int cuapp_ipc_import(struct cuapp *app)
{
	CUipcMemHandle h;
	struct cuapp_alloc *a = &app->a[app->n];
	if (read_handle(app->ipc_import, &h) != 0) {
		fprintf(stderr, "fakecuda-cuapp: no handle in %s\n", app->ipc_import);
		return -1;
	}
	CUdeviceptr base;
	if (cuapp_failed(&app->cu, app->cu.ipc_open(&a->ptr, h, 1), "cuIpcOpenMemHandle") ||
	    cuapp_failed(&app->cu, app->cu.range(&base, &a->bytes, a->ptr), "cuMemGetAddressRange"))
		return -1;
	a->kind = KIND_IMPORTED;
	a->seed = app->peer_seed;
	a->index = 0;
	app->n++;
	return 0;
}
