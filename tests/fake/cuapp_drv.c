#include <dlfcn.h>
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "cuapp.h"

/* How the CUDA runtime reaches the driver: one dlsym, of
 * cuGetProcAddress_v2; everything else through it, by base name. */

int cuapp_cuda_version = 12080;

int cuapp_resolve(cu_get_proc_fn get, const char *name, void *slot)
{
	CUdriverProcAddressQueryResult status = CU_GET_PROC_ADDRESS_SYMBOL_NOT_FOUND;
	void *f = NULL;
	CUresult rc = get(name, &f, cuapp_cuda_version, CU_GET_PROC_ADDRESS_DEFAULT, &status);
	if (rc != CU_OK || f == NULL || status != CU_GET_PROC_ADDRESS_SUCCESS) {
		fprintf(stderr, "fakecuda-cuapp: cuGetProcAddress(%s) -> %d (status %d)\n", name, rc, (int)status);
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
		fprintf(stderr, "fakecuda-cuapp: no cuGetProcAddress_v2 in libcuda.so.1: %s\n", dlerror());
		return -1;
	}
	cu->get = get;
	return cuapp_resolve(get, "cuInit", &cu->init) | cuapp_resolve(get, "cuDeviceGet", &cu->device_get) |
		cuapp_resolve(get, "cuDevicePrimaryCtxRetain", &cu->retain) |
		cuapp_resolve(get, "cuCtxSetCurrent", &cu->ctx_set) |
		cuapp_resolve(get, "cuCtxSynchronize", &cu->sync) | cuapp_resolve(get, "cuMemAlloc", &cu->alloc) |
		cuapp_resolve(get, "cuMemGetAddressRange", &cu->range) | cuapp_resolve(get, "cuMemcpyHtoD", &cu->htod) |
		cuapp_resolve(get, "cuMemcpyDtoH", &cu->dtoh) |
		cuapp_resolve(get, "cuMemGetAllocationGranularity", &cu->granularity) |
		cuapp_resolve(get, "cuMemAddressReserve", &cu->reserve) |
		cuapp_resolve(get, "cuMemCreate", &cu->create) | cuapp_resolve(get, "cuMemMap", &cu->map) |
		cuapp_resolve(get, "cuMemUnmap", &cu->unmap) | cuapp_resolve(get, "cuMemRelease", &cu->release) |
		cuapp_resolve(get, "cuMemSetAccess", &cu->access) | cuapp_resolve(get, "cuLaunchKernel", &cu->launch) |
		cuapp_resolve(get, "cuIpcGetMemHandle", &cu->ipc_get) |
		cuapp_resolve(get, "cuIpcOpenMemHandle", &cu->ipc_open) |
		cuapp_resolve(get, "cuGetErrorName", &cu->error_name);
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
	int rc = cuapp_write_handle(f, h.reserved);
	if (rc == 0 && app->ipc_event)
		rc = cuapp_event_export(app, f);
	if (fclose(f) != 0 || rc != 0 || rename(tmp, app->ipc_export) != 0) {
		fprintf(stderr, "fakecuda-cuapp: cannot write %s: %s\n", app->ipc_export, strerror(errno));
		return -1;
	}
	return 0;
}

int cuapp_write_handle(FILE *f, const char h[CU_IPC_HANDLE_SIZE])
{
	for (size_t i = 0; i < CU_IPC_HANDLE_SIZE; i++)
		fprintf(f, "%02x", (unsigned char)h[i]);
	return fprintf(f, "\n") == 1 ? 0 : -1;
}

int cuapp_read_handle(const char *path, int line, char out[CU_IPC_HANDLE_SIZE])
{
	char hex[2 * CU_IPC_HANDLE_SIZE + 2];
	for (int tries = 0; tries < 3000; tries++) {
		FILE *f = fopen(path, "re");
		if (f == NULL) {
			usleep(10000);
			continue;
		}
		int ok = 1;
		for (int l = 0; ok && l <= line; l++)
			ok = fgets(hex, sizeof(hex), f) != NULL && strlen(hex) >= 2 * CU_IPC_HANDLE_SIZE;
		fclose(f);
		for (size_t i = 0; ok && i < CU_IPC_HANDLE_SIZE; i++) {
			unsigned int byte;
			ok = sscanf(hex + 2 * i, "%2x", &byte) == 1;
			out[i] = (char)byte;
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
	if (cuapp_read_handle(app->ipc_import, 0, h.reserved) != 0) {
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
	return app->ipc_event ? cuapp_event_import(app) : 0;
}
