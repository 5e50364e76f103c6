#include <dlfcn.h>
#include <string.h>

#include "cuda_vmm_api.h"
#include "named.h"

/* libfakecuda-probe.so: a library linked with the driver, as a Triton
 * launcher is, that fakecuda-named loads (--via lib...). Its functions call
 * the driver by name, through its own PLT; or it hands out what dlsym
 * answers it, with RTLD_NEXT (the definition after this library: the
 * driver's, past an interposer loaded before it) or RTLD_DEFAULT (from its
 * own scope); or what the C library's own dlsym, looked up with RTLD_NEXT
 * (past an interposer's export of dlsym), answers with the driver's
 * handle. */

FC_EXPORT int probe_fill(struct named_fns *f, const char *how);

/* PROBE_UNLISTED (libfakecuda-probe-new.so): its copy is a function of a
 * newer driver, which no interposer built before it knows. */
static CUresult htod(CUdeviceptr dst, const void *src, size_t n)
{
#ifdef PROBE_UNLISTED
	return cuMemcpyHtoD_v9(dst, src, n);
#else
	return cuMemcpyHtoD_v2(dst, src, n);
#endif
}

static CUresult dtoh(void *dst, CUdeviceptr src, size_t n)
{
	return cuMemcpyDtoH_v2(dst, src, n);
}

static CUresult launch(void *f, unsigned gx, unsigned gy, unsigned gz, unsigned bx, unsigned by, unsigned bz,
		       unsigned shmem, CUstream s, void **params, void **extra)
{
	return cuLaunchKernel(f, gx, gy, gz, bx, by, bz, shmem, s, params, extra);
}

static CUresult sync_ctx(void)
{
	return cuCtxSynchronize();
}

static CUresult ctx_get(CUcontext *ctx)
{
	return cuCtxGetCurrent(ctx);
}

static void lookup(struct named_fns *f, void *(*look)(void *, const char *), void *handle)
{
	*(void **)&f->htod = look(handle, "cuMemcpyHtoD_v2");
	*(void **)&f->dtoh = look(handle, "cuMemcpyDtoH_v2");
	*(void **)&f->launch = look(handle, "cuLaunchKernel");
	*(void **)&f->sync = look(handle, "cuCtxSynchronize");
	*(void **)&f->ctx_get = look(handle, "cuCtxGetCurrent");
}

int probe_fill(struct named_fns *f, const char *how)
{
	if (strstr(how, "nextdlsym")) {
		void *(*look)(void *, const char *) = NULL;
		*(void **)&look = dlsym(RTLD_NEXT, "dlsym");
		if (look == NULL)
			return -1;
		lookup(f, look, dlopen("libcuda.so.1", RTLD_NOW | RTLD_NOLOAD));
	} else if (strstr(how, "next")) {
		lookup(f, dlsym, RTLD_NEXT);
	} else if (strstr(how, "default")) {
		lookup(f, dlsym, RTLD_DEFAULT);
	} else {
		f->htod = htod;
		f->dtoh = dtoh;
		f->launch = launch;
		f->sync = sync_ctx;
		f->ctx_get = ctx_get;
	}
	return 0;
}
