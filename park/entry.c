/* How the program reaches the driver, and how the interposer stands in the
 * way: the CUDA runtime (PyTorch, cuBLAS, NCCL...) binds cuGetProcAddress
 * by dlsym on libcuda.so.1 and obtains every other entry point through it;
 * other code (Triton, driver-API programs) binds entry points by dlsym or
 * by name at link time. All three paths hand out gated stubs, and the few
 * functions that parking depends on (allocation, IPC) get wrappers. The
 * control socket starts with the first memory the interposer carries. */
#include <dlfcn.h>
#include <link.h>
#include <string.h>

#include "park.h"

/* The allocation and import wrappers, which start the control socket once
 * there is something to park. */
static CUresult w_alloc(CUdeviceptr *dptr, size_t bytes)
{
	CUresult rc = park_alloc(dptr, bytes);
	if (rc == CU_OK && park_tab.n)
		park_control_start();
	return rc;
}

static CUresult w_ipc_open(CUdeviceptr *dptr, CUipcMemHandle h, unsigned flags)
{
	CUresult rc = park_ipc_open(dptr, h, flags);
	if (rc == CU_OK && park_ipc_imports())
		park_control_start();
	return rc;
}

/* cudasnap must be able to ask about an import that nothing can carry. */
static CUresult w_import(CUmemGenericAllocationHandle *h, void *os_handle, CUmemAllocationHandleType type)
{
	CUresult rc = park_w_import(h, os_handle, type);
	if (rc == CU_OK)
		park_control_start();
	return rc;
}

/* The interposer's own wrappers, by the names a program or cuGetProcAddress
 * knows them by (base name, and the exported versioned name). */
static CUresult w_get_proc(const char *symbol, void **pfn, int version, cuuint64_t flags,
			   CUdriverProcAddressQueryResult *status);
static CUresult w_get_proc_v1(const char *symbol, void **pfn, int version, cuuint64_t flags);

struct special {
	const char *base, *exported;
	int min_version; /* the ABI the wrapper implements, from this version on */
	void *fn;
};

static const struct special specials[] = {
	{ "cuGetProcAddress", "cuGetProcAddress_v2", 12000, (void *)w_get_proc },
	{ "cuMemAlloc", "cuMemAlloc_v2", 3020, (void *)w_alloc },
	{ "cuMemFree", "cuMemFree_v2", 3020, (void *)park_free },
	{ "cuIpcGetMemHandle", "cuIpcGetMemHandle", 0, (void *)park_ipc_get },
	{ "cuIpcOpenMemHandle", "cuIpcOpenMemHandle_v2", 11000, (void *)w_ipc_open },
	{ "cuIpcCloseMemHandle", "cuIpcCloseMemHandle", 0, (void *)park_ipc_close },
	{ "cuMemImportFromShareableHandle", "cuMemImportFromShareableHandle", 10020, (void *)w_import },
	{ "cuMemMap", "cuMemMap", 10020, (void *)park_w_map },
	{ "cuMemUnmap", "cuMemUnmap", 10020, (void *)park_w_unmap },
	{ "cuMemRelease", "cuMemRelease", 10020, (void *)park_w_release },
	{ "cuMemCreate", "cuMemCreate", 10020, (void *)park_w_create },
	{ "cuMemExportToShareableHandle", "cuMemExportToShareableHandle", 10020, (void *)park_w_export },
	{ "cuMemRetainAllocationHandle", "cuMemRetainAllocationHandle", 11000, (void *)park_w_retain },
	{ "cuMemGetAllocationPropertiesFromHandle", "cuMemGetAllocationPropertiesFromHandle", 10020,
	  (void *)park_w_props },
	{ "cuMemSetAccess", "cuMemSetAccess", 10020, (void *)park_w_access },
};

static const struct special *special_named(const char *name, bool base, int version)
{
	for (size_t i = 0; i < sizeof(specials) / sizeof(specials[0]); i++) {
		const struct special *s = &specials[i];
		if (strcmp(name, base ? s->base : s->exported) == 0)
			return version >= s->min_version ? s : NULL;
	}
	return NULL;
}

/* Whether fn lies in libcuda.so.1 (and not, say, in this library). */
static bool in_driver(void *fn)
{
	const struct park_real *r = park_real();
	Dl_info info;
	struct link_map *lm = NULL;
	if (r == NULL || dladdr(fn, &info) == 0 || dlinfo(r->lib, RTLD_DI_LINKMAP, &lm) != 0 || lm == NULL)
		return false;
	return info.dli_fbase == (void *)lm->l_addr || strcmp(info.dli_fname, lm->l_name) == 0;
}

static void *hand_out(const char *name, void *real, bool base, int version)
{
	if (real == NULL)
		return NULL;
	if (strcmp(name, "cuGetProcAddress") == 0 && !base)
		return (void *)w_get_proc_v1; /* the exported name of the old ABI */
	const struct special *s = special_named(name, base, version);
	if (s)
		return s->fn;
	return park_gate_wrap(real);
}

static CUresult w_get_proc(const char *symbol, void **pfn, int version, cuuint64_t flags,
			   CUdriverProcAddressQueryResult *status)
{
	const struct park_real *r = park_real();
	if (r == NULL || r->get_proc == NULL)
		return CU_ERR_NOT_INITIALIZED;
	CUresult rc = r->get_proc(symbol, pfn, version, flags, status);
	if (rc == CU_OK && pfn && *pfn && symbol) {
		if (strcmp(symbol, "cuGetProcAddress") == 0)
			*pfn = version >= 12000 ? (void *)w_get_proc : (void *)w_get_proc_v1;
		else
			*pfn = hand_out(symbol, *pfn, true, version);
	}
	return rc;
}

static CUresult w_get_proc_v1(const char *symbol, void **pfn, int version, cuuint64_t flags)
{
	const struct park_real *r = park_real();
	if (r == NULL || r->get_proc_v1 == NULL)
		return CU_ERR_NOT_INITIALIZED;
	CUresult rc = r->get_proc_v1(symbol, pfn, version, flags);
	if (rc == CU_OK && pfn && *pfn && symbol) {
		if (strcmp(symbol, "cuGetProcAddress") == 0)
			*pfn = version >= 12000 ? (void *)w_get_proc : (void *)w_get_proc_v1;
		else
			*pfn = hand_out(symbol, *pfn, true, version);
	}
	return rc;
}

PARK_EXPORT CUresult cuGetProcAddress_v2(const char *symbol, void **pfn, int version, cuuint64_t flags,
					 CUdriverProcAddressQueryResult *status)
{
	return w_get_proc(symbol, pfn, version, flags, status);
}

PARK_EXPORT CUresult cuGetProcAddress(const char *symbol, void **pfn, int version, cuuint64_t flags)
{
	return w_get_proc_v1(symbol, pfn, version, flags);
}

/* dlsym with a handle (dlsym_x86_64.S sends RTLD_NEXT and RTLD_DEFAULT
 * straight to the real one). */
void *park_dlsym_handle(void *handle, const char *name)
{
	void *fn = park_real_dlsym(handle, name);
	if (fn == NULL || name[0] != 'c' || name[1] != 'u' || name[2] < 'A' || name[2] > 'Z')
		return fn;
	if (!in_driver(fn))
		return fn; /* not the driver's (this library's own, or another cu*) */
	return hand_out(name, fn, false, 1 << 30);
}

/* Programs linked with -lcuda call these by name, and their other calls
 * (launches, copies) reach the driver without the gate: such a program's
 * work cannot be held, so its memory is left to the driver. */
PARK_EXPORT CUresult cuMemAlloc_v2(CUdeviceptr *dptr, size_t bytes)
{
	park_mark_unparkable("it calls the driver by name (linked with -lcuda), so its GPU work cannot be held");
	const struct park_real *r = park_real();
	return r && r->mem_alloc ? r->mem_alloc(dptr, bytes) : CU_ERR_NOT_INITIALIZED;
}

PARK_EXPORT CUresult cuMemFree_v2(CUdeviceptr dptr)
{
	return park_free(dptr);
}

PARK_EXPORT CUresult cuIpcGetMemHandle(CUipcMemHandle *h, CUdeviceptr dptr)
{
	return park_ipc_get(h, dptr);
}

PARK_EXPORT CUresult cuIpcOpenMemHandle_v2(CUdeviceptr *dptr, CUipcMemHandle h, unsigned flags)
{
	return w_ipc_open(dptr, h, flags);
}

PARK_EXPORT CUresult cuIpcCloseMemHandle(CUdeviceptr dptr)
{
	return park_ipc_close(dptr);
}

PARK_EXPORT CUresult cuMemImportFromShareableHandle(CUmemGenericAllocationHandle *h, void *os_handle,
						    CUmemAllocationHandleType type)
{
	return w_import(h, os_handle, type);
}
