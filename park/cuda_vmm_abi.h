/* The slice of the CUDA driver ABI that the parking interposer uses (and the
 * driver double implements): device memory, virtual memory management
 * (VMM), legacy IPC, contexts and cuGetProcAddress. Declared from the
 * documented layouts of cuda.h (CUDA 12.x / 13.0) so that building needs no
 * CUDA toolkit. */
#ifndef CS_CUDA_VMM_ABI_H
#define CS_CUDA_VMM_ABI_H

#include <stddef.h>
#include <stdint.h>

typedef int CUresult;
typedef int CUdevice;
typedef unsigned long long CUdeviceptr;
typedef unsigned long long CUmemGenericAllocationHandle;
typedef struct CUctx_st *CUcontext;
typedef struct CUstream_st *CUstream;
typedef struct CUmemPoolHandle_st *CUmemoryPool;
typedef struct CUgreenCtx_st *CUgreenCtx;
typedef uint64_t cuuint64_t;

enum {
	CU_OK = 0,
	CU_ERR_INVALID_VALUE = 1,
	CU_ERR_OUT_OF_MEMORY = 2,
	CU_ERR_NOT_INITIALIZED = 3,
	CU_ERR_INVALID_CONTEXT = 201,
	CU_ERR_ALREADY_MAPPED = 208,
	CU_ERR_NOT_MAPPED = 211,
	CU_ERR_INVALID_HANDLE = 400,
	CU_ERR_ILLEGAL_STATE = 401,
	CU_ERR_NOT_FOUND = 500,
	CU_ERR_NOT_READY = 600,
	CU_ERR_NOT_PERMITTED = 800,
	CU_ERR_NOT_SUPPORTED = 801,
	CU_ERR_UNKNOWN = 999,
};

typedef enum {
	CU_MEM_HANDLE_TYPE_NONE = 0x0,
	CU_MEM_HANDLE_TYPE_POSIX_FILE_DESCRIPTOR = 0x1,
	CU_MEM_HANDLE_TYPE_WIN32 = 0x2,
	CU_MEM_HANDLE_TYPE_WIN32_KMT = 0x4,
	CU_MEM_HANDLE_TYPE_FABRIC = 0x8,
} CUmemAllocationHandleType;

typedef enum {
	CU_MEM_ACCESS_FLAGS_PROT_NONE = 0x0,
	CU_MEM_ACCESS_FLAGS_PROT_READ = 0x1,
	CU_MEM_ACCESS_FLAGS_PROT_READWRITE = 0x3,
} CUmemAccess_flags;

typedef enum {
	CU_MEM_LOCATION_TYPE_INVALID = 0x0,
	CU_MEM_LOCATION_TYPE_DEVICE = 0x1,
} CUmemLocationType;

typedef enum {
	CU_MEM_ALLOCATION_TYPE_INVALID = 0x0,
	CU_MEM_ALLOCATION_TYPE_PINNED = 0x1,
} CUmemAllocationType;

typedef enum {
	CU_MEM_ALLOC_GRANULARITY_MINIMUM = 0x0,
	CU_MEM_ALLOC_GRANULARITY_RECOMMENDED = 0x1,
} CUmemAllocationGranularity_flags;

typedef struct {
	CUmemLocationType type;
	int id;
} CUmemLocation;

typedef struct {
	CUmemAllocationType type;
	CUmemAllocationHandleType requestedHandleTypes;
	CUmemLocation location;
	void *win32HandleMetaData;
	struct {
		unsigned char compressionType;
		unsigned char gpuDirectRDMACapable;
		unsigned short usage;
		unsigned char reserved[4];
	} allocFlags;
} CUmemAllocationProp;

typedef struct {
	CUmemLocation location;
	CUmemAccess_flags flags;
} CUmemAccessDesc;

#define CU_IPC_HANDLE_SIZE 64
typedef struct {
	char reserved[CU_IPC_HANDLE_SIZE];
} CUipcMemHandle;

/* Events: CU_EVENT_INTERPROCESS ones can be shared (cuIpcGetEventHandle),
 * and must be created with CU_EVENT_DISABLE_TIMING. */
typedef struct CUevent_st *CUevent;
typedef struct {
	char reserved[CU_IPC_HANDLE_SIZE];
} CUipcEventHandle;
enum {
	CU_EVENT_BLOCKING_SYNC = 1,
	CU_EVENT_DISABLE_TIMING = 2,
	CU_EVENT_INTERPROCESS = 4,
};

/* cuPointerGetAttribute: the attributes the interposer answers itself */
enum {
	CU_POINTER_ATTRIBUTE_RANGE_START_ADDR = 11,
	CU_POINTER_ATTRIBUTE_RANGE_SIZE = 12,
};

/* cuDeviceGetAttribute */
enum {
	CU_DEVICE_ATTRIBUTE_GPU_DIRECT_RDMA_WITH_CUDA_VMM_SUPPORTED = 110,
	CU_DEVICE_ATTRIBUTE_GPU_DIRECT_RDMA_SUPPORTED = 116,
};

/* cuGetProcAddress: flags and the status it answers */
enum {
	CU_GET_PROC_ADDRESS_DEFAULT = 0,
	CU_GET_PROC_ADDRESS_LEGACY_STREAM = 1,
	CU_GET_PROC_ADDRESS_PER_THREAD_DEFAULT_STREAM = 2,
};
typedef enum {
	CU_GET_PROC_ADDRESS_SUCCESS = 0,
	CU_GET_PROC_ADDRESS_SYMBOL_NOT_FOUND = 1,
	CU_GET_PROC_ADDRESS_VERSION_NOT_SUFFICIENT = 2,
} CUdriverProcAddressQueryResult;

_Static_assert(sizeof(CUmemAllocationProp) == 32, "CUmemAllocationProp ABI");
_Static_assert(sizeof(CUmemAccessDesc) == 12, "CUmemAccessDesc ABI");
_Static_assert(sizeof(CUipcMemHandle) == 64, "CUipcMemHandle ABI");

/* The signatures, as function pointer types (the exported names carry
 * the suffixes given in the comments). */
typedef CUresult (*cu_get_proc_fn)(const char *symbol, void **pfn, int cuda_version, cuuint64_t flags,
				   CUdriverProcAddressQueryResult *status); /* cuGetProcAddress_v2 */
typedef CUresult (*cu_get_proc_v1_fn)(const char *symbol, void **pfn, int cuda_version,
				      cuuint64_t flags); /* cuGetProcAddress */
typedef CUresult (*cu_mem_alloc_fn)(CUdeviceptr *dptr, size_t bytes); /* cuMemAlloc_v2 */
typedef CUresult (*cu_mem_free_fn)(CUdeviceptr dptr); /* cuMemFree_v2 */
typedef CUresult (*cu_mem_range_fn)(CUdeviceptr *base, size_t *size, CUdeviceptr dptr); /* _v2 */
typedef CUresult (*cu_addr_reserve_fn)(CUdeviceptr *ptr, size_t size, size_t align, CUdeviceptr addr,
				       unsigned long long flags);
typedef CUresult (*cu_addr_free_fn)(CUdeviceptr ptr, size_t size);
typedef CUresult (*cu_mem_create_fn)(CUmemGenericAllocationHandle *h, size_t size, const CUmemAllocationProp *prop,
				     unsigned long long flags);
typedef CUresult (*cu_mem_release_fn)(CUmemGenericAllocationHandle h);
typedef CUresult (*cu_mem_map_fn)(CUdeviceptr ptr, size_t size, size_t offset, CUmemGenericAllocationHandle h,
				  unsigned long long flags);
typedef CUresult (*cu_mem_unmap_fn)(CUdeviceptr ptr, size_t size);
typedef CUresult (*cu_set_access_fn)(CUdeviceptr ptr, size_t size, const CUmemAccessDesc *desc, size_t count);
typedef CUresult (*cu_granularity_fn)(size_t *gran, const CUmemAllocationProp *prop,
				      CUmemAllocationGranularity_flags option);
typedef CUresult (*cu_export_fn)(void *shareable, CUmemGenericAllocationHandle h, CUmemAllocationHandleType type,
				 unsigned long long flags);
typedef CUresult (*cu_mem_retain_fn)(CUmemGenericAllocationHandle *h, void *addr);
typedef CUresult (*cu_props_fn)(CUmemAllocationProp *prop, CUmemGenericAllocationHandle h);
typedef CUresult (*cu_import_fn)(CUmemGenericAllocationHandle *h, void *os_handle, CUmemAllocationHandleType type);
typedef CUresult (*cu_ipc_get_fn)(CUipcMemHandle *handle, CUdeviceptr dptr);
typedef CUresult (*cu_ipc_open_fn)(CUdeviceptr *dptr, CUipcMemHandle handle, unsigned int flags); /* _v2 */
typedef CUresult (*cu_ipc_close_fn)(CUdeviceptr dptr);
typedef CUresult (*cu_dtoh_fn)(void *dst, CUdeviceptr src, size_t bytes); /* cuMemcpyDtoH_v2 */
typedef CUresult (*cu_htod_fn)(CUdeviceptr dst, const void *src, size_t bytes); /* cuMemcpyHtoD_v2 */
typedef CUresult (*cu_host_register_fn)(void *p, size_t bytes, unsigned int flags); /* _v2 */
typedef CUresult (*cu_host_unregister_fn)(void *p);
typedef CUresult (*cu_ctx_sync_fn)(void);
typedef CUresult (*cu_ctx_get_fn)(CUcontext *ctx);
typedef CUresult (*cu_ctx_set_fn)(CUcontext ctx);
typedef CUresult (*cu_ctx_device_fn)(CUdevice *dev);
typedef CUresult (*cu_can_peer_fn)(int *can, CUdevice dev, CUdevice peer);
typedef CUresult (*cu_device_count_fn)(int *count);
typedef CUresult (*cu_ptr_attr_fn)(void *data, int attr, CUdeviceptr ptr);
typedef CUresult (*cu_ptr_attrs_fn)(unsigned n, int *attrs, void **data, CUdeviceptr ptr);
typedef CUresult (*cu_dev_attr_fn)(int *value, int attr, CUdevice dev);
typedef CUresult (*cu_pool_import_fn)(CUmemoryPool *pool, void *handle, CUmemAllocationHandleType type,
				      unsigned long long flags);
typedef CUresult (*cu_pool_destroy_fn)(CUmemoryPool pool);
typedef CUresult (*cu_ctx_create_fn)(CUcontext *ctx, unsigned flags, CUdevice dev); /* and its first version */
typedef CUresult (*cu_ctx_create_v3_fn)(CUcontext *ctx, void *affinity, int n, unsigned flags, CUdevice dev);
typedef CUresult (*cu_ctx_create_v4_fn)(CUcontext *ctx, void *params, unsigned flags, CUdevice dev);
typedef CUresult (*cu_ctx_destroy_fn)(CUcontext ctx); /* _v2, and its first version */
typedef CUresult (*cu_green_create_fn)(CUgreenCtx *g, void *desc, CUdevice dev, unsigned flags);
typedef CUresult (*cu_green_destroy_fn)(CUgreenCtx g);
typedef CUresult (*cu_ctx_from_green_fn)(CUcontext *ctx, CUgreenCtx g);
typedef CUresult (*cu_primary_state_fn)(CUdevice dev, unsigned *flags, int *active);
typedef CUresult (*cu_primary_retain_fn)(CUcontext *ctx, CUdevice dev);
typedef CUresult (*cu_primary_release_fn)(CUdevice dev); /* _v2 */

#endif
