/* How the program reaches the driver, and how the interposer stands in the
 * way: the CUDA runtime (PyTorch, cuBLAS, NCCL...) binds cuGetProcAddress
 * by dlsym on libcuda.so.1 and obtains every other entry point through it;
 * other code (Triton's launchers, programs linked with -lcuda) binds the
 * driver's names at link time, or by dlsym. Every path hands out a gated
 * stub (gate.c) or, for the functions parking depends on (allocation,
 * IPC, contexts, what the program may ask of its memory), a wrapper of the
 * interposer, exported under the driver's names as park_sp_NAME. */
#include <limits.h>
#include <string.h>

#include "park.h"

/* The control socket starts with the first memory the interposer carries,
 * unless the program has forbidden itself system calls since it started:
 * a seccomp filter may kill it for socket(2). */
static void control_start(void)
{
	if (park_syscalls_changed())
		park_mark_unparkable("it installed a seccomp filter, and the interposer makes no system call it "
				     "might forbid (no control socket)");
	else
		park_control_start();
}

static CUresult w_alloc(CUdeviceptr *dptr, size_t bytes)
{
	CUresult rc = park_alloc(dptr, bytes);
	if (rc == CU_OK && park_tab.n)
		control_start();
	return rc;
}

static CUresult w_ipc_open(CUdeviceptr *dptr, CUipcMemHandle h, unsigned flags)
{
	CUresult rc = park_ipc_open(dptr, h, flags);
	if (rc == CU_OK && park_ipc_imports())
		control_start();
	return rc;
}

/* cudasnap must be able to ask about an import that nothing can carry. */
static CUresult w_import(CUmemGenericAllocationHandle *h, void *os_handle, CUmemAllocationHandleType type)
{
	CUresult rc = park_w_import(h, os_handle, type);
	if (rc == CU_OK)
		control_start();
	return rc;
}

static CUresult w_export(void *shareable, CUmemGenericAllocationHandle h, CUmemAllocationHandleType type,
			 unsigned long long flags)
{
	bool marked = false;
	CUresult rc = park_w_export(shareable, h, type, flags, &marked);
	if (marked) /* its importers will ask for it again */
		control_start();
	return rc;
}

static CUresult w_pool_import(CUmemoryPool *pool, void *handle, CUmemAllocationHandleType type,
			      unsigned long long flags)
{
	CUresult rc = park_pool_import(pool, handle, type, flags);
	if (rc == CU_OK)
		control_start();
	return rc;
}

static CUresult w_get_proc(const char *symbol, void **pfn, int version, cuuint64_t flags,
			   CUdriverProcAddressQueryResult *status);
static CUresult w_get_proc_v1(const char *symbol, void **pfn, int version, cuuint64_t flags);

/* A wrapper, by the name a program or cuGetProcAddress knows it by: the
 * base name at CUDA versions [from, to), and the exported name of that
 * version of the function (the same ABI). */
struct special {
	const char *base, *exported;
	int from, to;
	void *fn;
};

#define ALWAYS 0, INT_MAX
static const struct special specials[] = {
	{ "cuGetProcAddress", "cuGetProcAddress", 0, 12000, (void *)w_get_proc_v1 },
	{ "cuGetProcAddress", "cuGetProcAddress_v2", 12000, INT_MAX, (void *)w_get_proc },
	{ "cuMemAlloc", "cuMemAlloc_v2", 3020, INT_MAX, (void *)w_alloc },
	{ "cuMemFree", "cuMemFree_v2", 3020, INT_MAX, (void *)park_free },
	{ "cuMemGetAddressRange", "cuMemGetAddressRange_v2", 3020, INT_MAX, (void *)park_w_range },
	{ "cuIpcGetMemHandle", "cuIpcGetMemHandle", ALWAYS, (void *)park_ipc_get },
	/* the first version takes the same arguments */
	{ "cuIpcOpenMemHandle", "cuIpcOpenMemHandle", 0, 11000, (void *)w_ipc_open },
	{ "cuIpcOpenMemHandle", "cuIpcOpenMemHandle_v2", 11000, INT_MAX, (void *)w_ipc_open },
	{ "cuIpcCloseMemHandle", "cuIpcCloseMemHandle", ALWAYS, (void *)park_ipc_close },
	{ "cuMemImportFromShareableHandle", "cuMemImportFromShareableHandle", ALWAYS, (void *)w_import },
	{ "cuMemMap", "cuMemMap", ALWAYS, (void *)park_w_map },
	{ "cuMemUnmap", "cuMemUnmap", ALWAYS, (void *)park_w_unmap },
	{ "cuMemRelease", "cuMemRelease", ALWAYS, (void *)park_w_release },
	{ "cuMemCreate", "cuMemCreate", ALWAYS, (void *)park_w_create },
	{ "cuMemExportToShareableHandle", "cuMemExportToShareableHandle", ALWAYS, (void *)w_export },
	{ "cuMemRetainAllocationHandle", "cuMemRetainAllocationHandle", ALWAYS, (void *)park_w_retain },
	{ "cuMemGetAllocationPropertiesFromHandle", "cuMemGetAllocationPropertiesFromHandle", ALWAYS,
	  (void *)park_w_props },
	{ "cuMemSetAccess", "cuMemSetAccess", ALWAYS, (void *)park_w_access },
	{ "cuPointerGetAttribute", "cuPointerGetAttribute", ALWAYS, (void *)park_w_ptr_attr },
	{ "cuPointerGetAttributes", "cuPointerGetAttributes", ALWAYS, (void *)park_w_ptr_attrs },
	{ "cuMemPoolImportFromShareableHandle", "cuMemPoolImportFromShareableHandle", ALWAYS, (void *)w_pool_import },
	{ "cuMemPoolDestroy", "cuMemPoolDestroy", ALWAYS, (void *)park_pool_destroy },
	{ "cuCtxCreate", "cuCtxCreate", 0, 3020, (void *)park_ctx_create },
	{ "cuCtxCreate", "cuCtxCreate_v2", 3020, 11040, (void *)park_ctx_create },
	{ "cuCtxCreate", "cuCtxCreate_v3", 11040, 12050, (void *)park_ctx_create_v3 },
	{ "cuCtxCreate", "cuCtxCreate_v4", 12050, INT_MAX, (void *)park_ctx_create_v4 },
	{ "cuCtxDestroy", "cuCtxDestroy", 0, 4000, (void *)park_ctx_destroy },
	{ "cuCtxDestroy", "cuCtxDestroy_v2", 4000, INT_MAX, (void *)park_ctx_destroy },
	{ "cuGreenCtxCreate", "cuGreenCtxCreate", ALWAYS, (void *)park_green_create },
	{ "cuGreenCtxDestroy", "cuGreenCtxDestroy", ALWAYS, (void *)park_green_destroy },
};

static const struct special *special_named(const char *name, bool base, int version)
{
	for (size_t i = 0; i < sizeof(specials) / sizeof(specials[0]); i++) {
		const struct special *s = &specials[i];
		if (base ? strcmp(name, s->base) == 0 && version >= s->from && version < s->to :
			   strcmp(name, s->exported) == 0)
			return s;
	}
	return NULL;
}

void *park_hand_out(const char *name, void *real, bool base, int version)
{
	if (real == NULL || park_passthrough)
		return real;
	const struct special *s = special_named(name, base, version);
	/* a version past the drivers driver_api.inc knows may take other
	 * arguments: all the trampoline may copy */
	return s ? s->fn : park_gate_wrap(real, base && version > PARK_API_KNOWN ? NULL : name, base);
}

static CUresult w_get_proc(const char *symbol, void **pfn, int version, cuuint64_t flags,
			   CUdriverProcAddressQueryResult *status)
{
	const struct park_real *r = park_real();
	if (r == NULL || r->get_proc == NULL)
		return CU_ERR_NOT_INITIALIZED;
	CUresult rc = r->get_proc(symbol, pfn, version, flags, status);
	if (rc == CU_OK && pfn && *pfn && symbol)
		*pfn = park_hand_out(symbol, *pfn, true, version);
	return rc;
}

static CUresult w_get_proc_v1(const char *symbol, void **pfn, int version, cuuint64_t flags)
{
	const struct park_real *r = park_real();
	if (r == NULL || r->get_proc_v1 == NULL)
		return CU_ERR_NOT_INITIALIZED;
	CUresult rc = r->get_proc_v1(symbol, pfn, version, flags);
	if (rc == CU_OK && pfn && *pfn && symbol)
		*pfn = park_hand_out(symbol, *pfn, true, version);
	return rc;
}

/* The exported names of the wrappers (gate_x86_64.S resolves the driver's
 * names to them). */
#define SP(name, fn) __typeof__(fn) park_sp_##name __attribute__((alias(#fn)))

SP(cuGetProcAddress, w_get_proc_v1);
SP(cuGetProcAddress_v2, w_get_proc);
SP(cuMemAlloc_v2, w_alloc);
SP(cuIpcOpenMemHandle, w_ipc_open);
SP(cuIpcOpenMemHandle_v2, w_ipc_open);
SP(cuMemImportFromShareableHandle, w_import);
SP(cuMemExportToShareableHandle, w_export);
SP(cuMemPoolImportFromShareableHandle, w_pool_import);

/* The others live beside what they wrap. */
CUresult park_sp_cuMemFree_v2(CUdeviceptr dptr)
{
	return park_free(dptr);
}

CUresult park_sp_cuMemGetAddressRange_v2(CUdeviceptr *base, size_t *size, CUdeviceptr dptr)
{
	return park_w_range(base, size, dptr);
}

CUresult park_sp_cuIpcGetMemHandle(CUipcMemHandle *h, CUdeviceptr dptr)
{
	return park_ipc_get(h, dptr);
}

CUresult park_sp_cuIpcCloseMemHandle(CUdeviceptr dptr)
{
	return park_ipc_close(dptr);
}

CUresult park_sp_cuMemMap(CUdeviceptr va, size_t size, size_t offset, CUmemGenericAllocationHandle h,
			  unsigned long long flags)
{
	return park_w_map(va, size, offset, h, flags);
}

CUresult park_sp_cuMemUnmap(CUdeviceptr va, size_t size)
{
	return park_w_unmap(va, size);
}

CUresult park_sp_cuMemRelease(CUmemGenericAllocationHandle h)
{
	return park_w_release(h);
}

CUresult park_sp_cuMemCreate(CUmemGenericAllocationHandle *h, size_t size, const CUmemAllocationProp *prop,
			     unsigned long long flags)
{
	return park_w_create(h, size, prop, flags);
}

CUresult park_sp_cuMemRetainAllocationHandle(CUmemGenericAllocationHandle *h, void *addr)
{
	return park_w_retain(h, addr);
}

CUresult park_sp_cuMemGetAllocationPropertiesFromHandle(CUmemAllocationProp *prop, CUmemGenericAllocationHandle h)
{
	return park_w_props(prop, h);
}

CUresult park_sp_cuMemSetAccess(CUdeviceptr va, size_t size, const CUmemAccessDesc *desc, size_t count)
{
	return park_w_access(va, size, desc, count);
}

CUresult park_sp_cuPointerGetAttribute(void *data, int attr, CUdeviceptr ptr)
{
	return park_w_ptr_attr(data, attr, ptr);
}

CUresult park_sp_cuPointerGetAttributes(unsigned n, int *attrs, void **data, CUdeviceptr ptr)
{
	return park_w_ptr_attrs(n, attrs, data, ptr);
}

CUresult park_sp_cuMemPoolDestroy(CUmemoryPool pool)
{
	return park_pool_destroy(pool);
}

CUresult park_sp_cuCtxCreate(CUcontext *ctx, unsigned flags, CUdevice dev)
{
	return park_ctx_create(ctx, flags, dev);
}

CUresult park_sp_cuCtxCreate_v2(CUcontext *ctx, unsigned flags, CUdevice dev)
{
	return park_ctx_create(ctx, flags, dev);
}

CUresult park_sp_cuCtxCreate_v3(CUcontext *ctx, void *params, int n, unsigned flags, CUdevice dev)
{
	return park_ctx_create_v3(ctx, params, n, flags, dev);
}

CUresult park_sp_cuCtxCreate_v4(CUcontext *ctx, void *params, unsigned flags, CUdevice dev)
{
	return park_ctx_create_v4(ctx, params, flags, dev);
}

CUresult park_sp_cuCtxDestroy(CUcontext ctx)
{
	return park_ctx_destroy(ctx);
}

CUresult park_sp_cuCtxDestroy_v2(CUcontext ctx)
{
	return park_ctx_destroy(ctx);
}

CUresult park_sp_cuGreenCtxCreate(CUgreenCtx *g, void *desc, CUdevice dev, unsigned flags)
{
	return park_green_create(g, desc, dev, flags);
}

CUresult park_sp_cuGreenCtxDestroy(CUgreenCtx g)
{
	return park_green_destroy(g);
}
