#include <dlfcn.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

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

/* The C library's own dlsym, reached past an interposer's export of it:
 * by dlvsym with its version (how 0) or by a handle of the C library (1). */
static int by_real_dlsym(struct named_fns *f, void *handle, int how)
{
	void *(*real)(void *, const char *) = NULL;
	if (how == 0)
		*(void **)&real = dlvsym(RTLD_DEFAULT, "dlsym", "GLIBC_2.34");
	else
		*(void **)&real = dlsym(dlopen("libc.so.6", RTLD_NOW | RTLD_NOLOAD), "dlsym");
	if (real == NULL)
		return fprintf(stderr, "fakecuda-named: no dlsym of the C library\n"), -1;
	*(void **)&f->htod = real(handle, "cuMemcpyHtoD_v2");
	*(void **)&f->dtoh = real(handle, "cuMemcpyDtoH_v2");
	*(void **)&f->launch = real(handle, "cuLaunchKernel");
	*(void **)&f->sync = real(handle, "cuCtxSynchronize");
	*(void **)&f->ctx_get = real(handle, "cuCtxGetCurrent");
	return 0;
}

/* path: name, in the directory of probe_path */
static void beside(char *path, size_t size, const char *probe_path, const char *name)
{
	const char *slash = strrchr(probe_path, '/');
	size_t dir = slash ? (size_t)(slash - probe_path) + 1 : 0;
	if (dir >= size)
		dir = 0;
	memcpy(path, probe_path, dir);
	snprintf(path + dir, size - dir, "%s", name);
}

/* libfakecuda-swapa.so, which binds no driver function, is loaded (and
 * said where), unloaded once the file go exists, and libfakecuda-swapb.so,
 * the same library but for binding a driver function the interposer does
 * not know, is loaded in its place (at its address, as the kernel maps
 * it); its function stands for the copy to the device. */
static int by_swap(struct named_fns *f, const char *probe_path, const char *go)
{
	char a_path[4200], b_path[4200];
	beside(a_path, sizeof(a_path), probe_path, "libfakecuda-swapa.so");
	beside(b_path, sizeof(b_path), probe_path, "libfakecuda-swapb.so");
	void *a = dlopen(a_path, RTLD_LAZY | RTLD_LOCAL);
	Dl_info ia;
	if (a == NULL || dladdr(dlsym(a, "swap_htod"), &ia) == 0)
		return fprintf(stderr, "fakecuda-named: %s: %s\n", a_path, dlerror()), -1;
	printf("swap a=%p\n", ia.dli_fbase);
	fflush(stdout);
	for (int i = 0; i < 2000 && access(go, F_OK) != 0; i++)
		usleep(10000);
	dlclose(a);
	void *b = dlopen(b_path, RTLD_LAZY | RTLD_LOCAL);
	Dl_info ib;
	if (b == NULL || dladdr(dlsym(b, "swap_htod"), &ib) == 0)
		return fprintf(stderr, "fakecuda-named: %s: %s\n", b_path, dlerror()), -1;
	*(void **)&f->htod = dlsym(b, "swap_htod");
	printf("swap b=%p\n", ib.dli_fbase);
	fflush(stdout);
	f->dtoh = cuMemcpyDtoH_v2;
	f->launch = (named_launch_fn)cuLaunchKernel;
	f->sync = cuCtxSynchronize;
	f->ctx_get = cuCtxGetCurrent;
	return 0;
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
	else if (strncmp(via, "swap:", 5) == 0)
		rc = by_swap(f, probe, via + 5);
	else if (strcmp(via, "realdlsym") == 0)
		rc = by_real_dlsym(f, handle, 0);
	else if (strcmp(via, "libcdlsym") == 0)
		rc = by_real_dlsym(f, handle, 1);
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
