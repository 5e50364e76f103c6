/* The real driver, as the interposer itself calls it: libcuda.so.1 loaded
 * once, its functions found with the real dlsym. */
#include <dlfcn.h>
#include <link.h>
#include <stdatomic.h>
#include <stdlib.h>
#include <string.h>

#include "park.h"

struct park_real_all {
	struct park_real r;
	bool vmm; /* every VMM function is there */
};

/* Published once loaded. No lock is held while loading: dlopen takes the
 * loader's lock, and a thread that holds that one (dlopen of a library
 * whose constructor calls the driver) may be the next to ask for the
 * driver; behind a once-lock each would wait for the other. Threads that
 * find nothing published load a copy each; the first copy published is
 * kept, the others let go. */
static _Atomic(struct park_real_all *) real_pub;
typedef void *(*dlsym_fn)(void *, const char *);
/* read by dlsym_x86_64.S */
dlsym_fn park_dlsym_real __attribute__((visibility("hidden")));

dlsym_fn park_dlsym_init(void)
{
	dlsym_fn f = __atomic_load_n(&park_dlsym_real, __ATOMIC_ACQUIRE);
	if (f == NULL) {
		f = (dlsym_fn)dlvsym(RTLD_NEXT, "dlsym", "GLIBC_2.34");
		if (f == NULL)
			f = (dlsym_fn)dlvsym(RTLD_NEXT, "dlsym", "GLIBC_2.2.5");
		__atomic_store_n(&park_dlsym_real, f, __ATOMIC_RELEASE);
	}
	return f;
}

void *park_real_dlsym(void *handle, const char *name)
{
	dlsym_fn f = park_dlsym_init();
	return f ? f(handle, name) : NULL;
}

#define GET(field, name) (*(void **)&r->field = park_real_dlsym(r->lib, name))

static void load(struct park_real_all *all)
{
	struct park_real *r = &all->r;
	r->lib = dlopen("libcuda.so.1", RTLD_NOW | RTLD_NOLOAD);
	if (r->lib == NULL)
		r->lib = dlopen("libcuda.so.1", RTLD_NOW);
	if (r->lib == NULL)
		return;
	GET(get_proc, "cuGetProcAddress_v2");
	GET(get_proc_v1, "cuGetProcAddress");
	GET(mem_alloc, "cuMemAlloc_v2");
	GET(mem_free, "cuMemFree_v2");
	GET(mem_range, "cuMemGetAddressRange_v2");
	GET(ipc_get, "cuIpcGetMemHandle");
	GET(ipc_open, "cuIpcOpenMemHandle_v2");
	GET(ipc_close, "cuIpcCloseMemHandle");
	GET(retain, "cuMemRetainAllocationHandle");
	GET(props, "cuMemGetAllocationPropertiesFromHandle");
	void **vmm[] = {
		(void **)&r->addr_reserve,  (void **)&r->addr_free,
		(void **)&r->mem_create,    (void **)&r->mem_release,
		(void **)&r->mem_map,       (void **)&r->mem_unmap,
		(void **)&r->set_access,    (void **)&r->granularity,
		(void **)&r->export_handle, (void **)&r->import_handle,
		(void **)&r->dtoh,          (void **)&r->htod,
		(void **)&r->host_register, (void **)&r->host_unregister,
		(void **)&r->ctx_sync,      (void **)&r->ctx_get,
		(void **)&r->ctx_set,       (void **)&r->ctx_device,
		(void **)&r->can_peer,      (void **)&r->device_count,
	};
	static const char *const names[] = {
		"cuMemAddressReserve",
		"cuMemAddressFree",
		"cuMemCreate",
		"cuMemRelease",
		"cuMemMap",
		"cuMemUnmap",
		"cuMemSetAccess",
		"cuMemGetAllocationGranularity",
		"cuMemExportToShareableHandle",
		"cuMemImportFromShareableHandle",
		"cuMemcpyDtoH_v2",
		"cuMemcpyHtoD_v2",
		"cuMemHostRegister_v2",
		"cuMemHostUnregister",
		"cuCtxSynchronize",
		"cuCtxGetCurrent",
		"cuCtxSetCurrent",
		"cuCtxGetDevice",
		"cuDeviceCanAccessPeer",
		"cuDeviceGetCount",
	};
	_Static_assert(sizeof(vmm) / sizeof(vmm[0]) == sizeof(names) / sizeof(names[0]), "one name per function");
	all->vmm = r->mem_alloc && r->mem_free;
	for (size_t i = 0; i < sizeof(names) / sizeof(names[0]); i++) {
		*vmm[i] = park_real_dlsym(r->lib, names[i]);
		all->vmm &= *vmm[i] != NULL;
	}
}

static const struct park_real_all *real_get(void)
{
	struct park_real_all *cur = atomic_load_explicit(&real_pub, memory_order_acquire);
	if (cur)
		return cur;
	struct park_real_all *mine = calloc(1, sizeof(*mine));
	if (mine == NULL)
		return NULL; /* asked again next time */
	load(mine);
	if (atomic_compare_exchange_strong_explicit(&real_pub, &cur, mine, memory_order_acq_rel,
						    memory_order_acquire)) {
		if (mine->r.lib && !mine->vmm)
			park_mark_unparkable("the driver has no virtual memory management");
		return mine;
	}
	if (mine->r.lib)
		dlclose(mine->r.lib);
	free(mine);
	return cur;
}

const struct park_real *park_real(void)
{
	const struct park_real_all *all = real_get();
	return all && all->r.lib ? &all->r : NULL;
}

bool park_vmm(void)
{
	const struct park_real_all *all = real_get();
	return all && all->r.lib && all->vmm;
}
