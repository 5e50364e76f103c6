/* fakecuda-cuapp: a CUDA application on the driver API as the CUDA runtime
 * reaches it: libcuda.so.1 is dlopened, cuGetProcAddress_v2 is its one
 * dlsym, and every other call comes through cuGetProcAddress, so that an
 * LD_PRELOAD interposer sees its calls as it sees PyTorch's. */
#ifndef FAKECUDA_CUAPP_H
#define FAKECUDA_CUAPP_H

#include <stddef.h>
#include <stdint.h>

#include "../../park/cuda_vmm_abi.h"

#define CUAPP_MAX_ALLOCS 64

typedef CUresult (*cu_init_fn)(unsigned int flags);
typedef CUresult (*cu_device_get_fn)(CUdevice *dev, int ordinal);
typedef CUresult (*cu_retain_fn)(CUcontext *ctx, CUdevice dev);
typedef CUresult (*cu_launch_fn)(void *f, unsigned int gx, unsigned int gy, unsigned int gz, unsigned int bx,
				 unsigned int by, unsigned int bz, unsigned int shmem, CUstream s, void **params,
				 void **extra);
typedef CUresult (*cu_error_name_fn)(CUresult rc, const char **name);

struct cu {
	cu_get_proc_fn get;
	cu_init_fn init;
	cu_device_get_fn device_get;
	cu_retain_fn retain;
	cu_ctx_set_fn ctx_set;
	cu_ctx_sync_fn sync;
	cu_mem_alloc_fn alloc;
	cu_mem_range_fn range;
	cu_htod_fn htod;
	cu_dtoh_fn dtoh;
	cu_granularity_fn granularity;
	cu_addr_reserve_fn reserve;
	cu_mem_create_fn create;
	cu_mem_map_fn map;
	cu_mem_unmap_fn unmap;
	cu_mem_release_fn release;
	cu_set_access_fn access;
	cu_launch_fn launch;
	cu_ipc_get_fn ipc_get;
	cu_ipc_open_fn ipc_open;
	cu_error_name_fn error_name;
	/* events, resolved for --ipc-event only */
	CUresult (*event_create)(CUevent *ev, unsigned int flags);
	CUresult (*event_record)(CUevent ev, CUstream s);
	CUresult (*event_sync)(CUevent ev);
	CUresult (*event_query)(CUevent ev);
	CUresult (*stream_wait)(CUstream s, CUevent ev, unsigned int flags);
	CUresult (*ipc_event_get)(CUipcEventHandle *h, CUevent ev);
	CUresult (*ipc_event_open)(CUevent *ev, CUipcEventHandle h);
	/* --vmm-share, --vmm-import and --retain only */
	cu_export_fn export_fd;
	cu_import_fn import_fd;
	cu_mem_retain_fn retain_handle;
	CUcontext ctx;
};

enum cuapp_kind { KIND_LEGACY, KIND_VMM, KIND_IMPORTED };

/* One allocation and the pattern it holds: word k of it is
 * cuapp_word(seed, index, k). */
struct cuapp_alloc {
	CUdeviceptr ptr;
	size_t bytes;
	enum cuapp_kind kind;
	uint64_t seed;
	unsigned int index;
};

struct cuapp {
	/* options */
	size_t alloc_bytes[CUAPP_MAX_ALLOCS];
	int nalloc_opts;
	unsigned int allocs_each; /* --allocs */
	size_t vmm_bytes[CUAPP_MAX_ALLOCS];
	int nvmm_opts;
	size_t small_bytes;
	uint64_t seed;
	uint64_t peer_seed;
	unsigned int interval_ms;
	unsigned int kernel_ms;
	const char *ipc_export;
	const char *ipc_import;
	int ipc_event; /* --ipc-event */
	const char *vmm_share, *vmm_import;
	int retain; /* --retain */
	const char *retain_share; /* --retain-share */
	/* state */
	CUevent event; /* --ipc-event: created (exporter) or opened (importer) */
	CUmemGenericAllocationHandle vmm_first; /* the first --vmm-mib allocation's */
	CUmemGenericAllocationHandle vmm_imported; /* --vmm-import: the handle it keeps */
	struct cu cu;
	struct cuapp_alloc a[CUAPP_MAX_ALLOCS * 2 + 2];
	int n;
};

/* cuapp_drv.c: the CUDA version it asks cuGetProcAddress for (--cuda-version,
 * 12080) */
extern int cuapp_cuda_version;
/* 0, or -1 with the reason on stderr */
int cuapp_load(struct cu *cu);
/* One entry point by cuGetProcAddress into slot; 0, or -1 said on stderr. */
int cuapp_resolve(cu_get_proc_fn get, const char *name, void *slot);
/* rc != CUDA_SUCCESS: prints "<what> -> <name>" on stderr and returns -1 */
int cuapp_failed(const struct cu *cu, CUresult rc, const char *what);
int cuapp_ipc_export(struct cuapp *app);
int cuapp_ipc_import(struct cuapp *app);
/* Reads line `line` (0 first) of a handle file, waiting up to 30 s for it. */
int cuapp_read_handle(const char *path, int line, char out[CU_IPC_HANDLE_SIZE]);
int cuapp_write_handle(FILE *f, const char h[CU_IPC_HANDLE_SIZE]);

/* cuapp_event.c: --ipc-event, as PyTorch shares a CUDA tensor: the exporter
 * records an interprocess event after filling the memory and shares it
 * with the memory's handle; the importer waits on it before using the
 * memory, and keeps it. Each verify uses it again. */
int cuapp_event_export(struct cuapp *app, FILE *f);
int cuapp_event_import(struct cuapp *app);
int cuapp_event_verify(struct cuapp *app, char *why, size_t len);

/* cuapp_vmmipc.c: VMM memory shared as a POSIX file descriptor, which the
 * program passes itself (here the importer takes it with pidfd_getfd):
 * --vmm-share FILE exports the first --vmm-mib allocation and writes "PID
 * FD" to FILE; --vmm-import FILE imports it, maps it and checks it against
 * --peer-seed. */
int cuapp_vmm_share(struct cuapp *app);
int cuapp_vmm_import(struct cuapp *app);
/* --retain: the handle of the first --alloc-mib allocation's memory
 * (cuMemRetainAllocationHandle), kept; --retain-share FILE: that handle
 * exported as a POSIX fd and released again, and "PID FD" written to FILE,
 * as NCCL registers a user buffer for its peers. */
int cuapp_retain(struct cuapp *app);
/* The import mapped again with the handle the program kept (as a program
 * that remaps its imports does), then a scratch allocation made and
 * released; 0, or -1 with why. */
int cuapp_vmm_remap(struct cuapp *app, char *why, size_t len);

/* cuapp_mem.c */
uint64_t cuapp_word(uint64_t seed, unsigned int index, size_t k);
int cuapp_allocate(struct cuapp *app);
int cuapp_fill(struct cuapp *app, const struct cuapp_alloc *a);
/* Checks bytes at off of allocation a (whole words); 0, or -1 with where it
 * differs in why. */
int cuapp_check(struct cuapp *app, const struct cuapp_alloc *a, size_t off, size_t bytes, char *why, size_t len);

#endif
