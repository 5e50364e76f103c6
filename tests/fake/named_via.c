#include <dlfcn.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "cuda_vmm_api.h"
#include "named.h"

/* The ways a program reaches a driver function other than the runtime's. */

static int by_name(struct named_fns *f)
{
	f->htod = cuMemcpyHtoD_v2;
	f->dtoh = cuMemcpyDtoH_v2;
	f->launch = (named_launch_fn)cuLaunchKernel;
	f->sync = cuCtxSynchronize;
	f->ctx_get = cuCtxGetCurrent;
	return 0;
}

static int by_dlsym(struct named_fns *f, void *handle)
{
	*(void **)&f->htod = dlsym(handle, "cuMemcpyHtoD_v2");
	*(void **)&f->dtoh = dlsym(handle, "cuMemcpyDtoH_v2");
	*(void **)&f->launch = dlsym(handle, "cuLaunchKernel");
	*(void **)&f->sync = dlsym(handle, "cuCtxSynchronize");
	*(void **)&f->ctx_get = dlsym(handle, "cuCtxGetCurrent");
	return 0;
}

static int by_procaddr(struct named_fns *f, cu_get_proc_fn get, void *handle, int version, int v1)
{
	cu_get_proc_v1_fn get1 = NULL;
	if (v1)
		*(void **)&get1 = dlsym(handle, "cuGetProcAddress");
	const char *names[] = { "cuMemcpyHtoD", "cuMemcpyDtoH", "cuLaunchKernel", "cuCtxSynchronize",
				"cuCtxGetCurrent" };
	void **slots[] = { (void **)&f->htod, (void **)&f->dtoh, (void **)&f->launch, (void **)&f->sync,
			   (void **)&f->ctx_get };
	for (size_t i = 0; i < sizeof(names) / sizeof(names[0]); i++) {
		CUresult rc = v1 ? (get1 ? get1(names[i], slots[i], version, 0) : CU_ERR_NOT_FOUND) :
				   get(names[i], slots[i], version, 0, NULL);
		if (rc != CU_OK) {
			fprintf(stderr, "fakecuda-named: cuGetProcAddress(%s, %d) -> %d\n", names[i], version, rc);
			return -1;
		}
	}
	return 0;
}

/* A library linked with the driver, loaded with flags, whose functions call
 * the driver by name (lib), or that looks the driver's copy up past itself
 * (libnext: dlsym RTLD_NEXT) or in its own scope (libdefault); unlisted:
 * its copy is a driver function the interposer does not know (the probe
 * library built so, beside the other). */
static int from_lib(struct named_fns *f, const char *probe_path, const char *how)
{
	char path[4200];
	const char *probe = probe_path;
	if (strstr(how, "unlisted")) {
		snprintf(path, sizeof(path), "%s", probe_path);
		char *dot = strstr(path, ".so");
		if (dot)
			snprintf(dot, sizeof(path) - (size_t)(dot - path), "-new.so");
		probe = path;
	}
	int flags = RTLD_NOW;
	if (strstr(how, "lazy"))
		flags = RTLD_LAZY;
	if (strstr(how, "deepbind"))
		flags |= RTLD_DEEPBIND;
	void *lib = dlopen(probe, flags | RTLD_LOCAL);
	if (lib == NULL) {
		fprintf(stderr, "fakecuda-named: %s: %s\n", probe, dlerror());
		return -1;
	}
	int (*fill)(struct named_fns *, const char *) = NULL;
	*(void **)&fill = dlsym(lib, "probe_fill");
	return fill ? fill(f, how) : -1;
}

int named_via(const char *via, void *handle, cu_get_proc_fn get, const char *probe, struct named_fns *f)
{
	memset(f, 0, sizeof(*f));
	int rc = -1;
	if (strcmp(via, "name") == 0)
		rc = by_name(f);
	else if (strcmp(via, "dlsym") == 0)
		rc = by_dlsym(f, handle);
	else if (strcmp(via, "default") == 0)
		rc = by_dlsym(f, RTLD_DEFAULT);
	else if (strcmp(via, "next") == 0)
		rc = by_dlsym(f, RTLD_NEXT);
	else if (strncmp(via, "procaddr:", 9) == 0)
		rc = by_procaddr(f, get, handle, atoi(via + 9), 0);
	else if (strncmp(via, "procaddr1:", 10) == 0)
		rc = by_procaddr(f, get, handle, atoi(via + 10), 1);
	else if (strncmp(via, "lib", 3) == 0)
		rc = from_lib(f, probe, via);
	else
		fprintf(stderr, "fakecuda-named: unknown --via %s\n", via);
	if (rc == 0 && (!f->htod || !f->dtoh || !f->launch || !f->sync || !f->ctx_get)) {
		fprintf(stderr, "fakecuda-named: --via %s found no driver function\n", via);
		rc = -1;
	}
	return rc;
}
