/* The driver API that the parking interposer calls, as the double exports
 * it: contexts, device memory, copies, pinned host memory, VMM, legacy IPC,
 * kernel launches and cuGetProcAddress, under their real versioned names
 * and signatures (the types are those of park/cuda_vmm_abi.h). */
#ifndef FAKECUDA_CUDA_VMM_API_H
#define FAKECUDA_CUDA_VMM_API_H

#include "cuda_api.h"
#include "../../park/cuda_vmm_abi.h"

enum {
	CUDA_ERROR_INVALID_CONTEXT = 201,
	CUDA_ERROR_HOST_MEMORY_ALREADY_REGISTERED = 712,
	CUDA_ERROR_HOST_MEMORY_NOT_REGISTERED = 713,
};

typedef struct CUfunc_st *CUfunction;

/* ctx.c */
FC_EXPORT CUresult cuDevicePrimaryCtxRetain(CUcontext *ctx, CUdevice dev);
FC_EXPORT CUresult cuDevicePrimaryCtxRelease_v2(CUdevice dev);
FC_EXPORT CUresult cuCtxGetCurrent(CUcontext *ctx);
FC_EXPORT CUresult cuCtxSetCurrent(CUcontext ctx);
FC_EXPORT CUresult cuCtxCreate_v2(CUcontext *ctx, unsigned int flags, CUdevice dev);
FC_EXPORT CUresult cuCtxDestroy_v2(CUcontext ctx);
FC_EXPORT CUresult cuCtxGetDevice(CUdevice *dev);
FC_EXPORT CUresult cuCtxSynchronize(void);
FC_EXPORT CUresult cuDeviceCanAccessPeer(int *can, CUdevice dev, CUdevice peer);
FC_EXPORT CUresult cuDevicePrimaryCtxGetState(CUdevice dev, unsigned int *flags, int *active);
FC_EXPORT CUresult cuLaunchKernel(CUfunction f, unsigned int gx, unsigned int gy, unsigned int gz, unsigned int bx,
				  unsigned int by, unsigned int bz, unsigned int shmem, CUstream stream, void **params,
				  void **extra);

/* memlegacy.c */
FC_EXPORT CUresult cuMemAlloc_v2(CUdeviceptr *dptr, size_t bytes);
FC_EXPORT CUresult cuMemFree_v2(CUdeviceptr dptr);
FC_EXPORT CUresult cuMemGetAddressRange_v2(CUdeviceptr *base, size_t *size, CUdeviceptr dptr);
FC_EXPORT CUresult cuIpcGetMemHandle(CUipcMemHandle *handle, CUdeviceptr dptr);
FC_EXPORT CUresult cuIpcOpenMemHandle_v2(CUdeviceptr *dptr, CUipcMemHandle handle, unsigned int flags);
FC_EXPORT CUresult cuIpcOpenMemHandle(CUdeviceptr *dptr, CUipcMemHandle handle, unsigned int flags);
FC_EXPORT CUresult cuIpcCloseMemHandle(CUdeviceptr dptr);

/* copy.c */
FC_EXPORT CUresult cuMemcpyHtoD_v2(CUdeviceptr dst, const void *src, size_t bytes);
FC_EXPORT CUresult cuMemcpyDtoH_v2(void *dst, CUdeviceptr src, size_t bytes);
FC_EXPORT CUresult cuMemcpyHtoD_v9(CUdeviceptr dst, const void *src, size_t bytes);
FC_EXPORT CUresult cuMemcpyDtoD_v2(CUdeviceptr dst, CUdeviceptr src, size_t bytes);
FC_EXPORT CUresult cuMemsetD8_v2(CUdeviceptr dst, unsigned char value, size_t count);
FC_EXPORT CUresult cuMemsetD32_v2(CUdeviceptr dst, unsigned int value, size_t count);

/* hostmem.c */
FC_EXPORT CUresult cuMemHostRegister_v2(void *p, size_t bytes, unsigned int flags);
FC_EXPORT CUresult cuMemHostUnregister(void *p);
FC_EXPORT CUresult cuMemHostAlloc(void **pp, size_t bytes, unsigned int flags);
FC_EXPORT CUresult cuMemFreeHost(void *p);

/* vmm_va.c */
FC_EXPORT CUresult cuMemGetAllocationGranularity(size_t *gran, const CUmemAllocationProp *prop,
						 CUmemAllocationGranularity_flags option);
FC_EXPORT CUresult cuMemAddressReserve(CUdeviceptr *ptr, size_t size, size_t align, CUdeviceptr addr,
				       unsigned long long flags);
FC_EXPORT CUresult cuMemAddressFree(CUdeviceptr ptr, size_t size);
FC_EXPORT CUresult cuMemMap(CUdeviceptr ptr, size_t size, size_t offset, CUmemGenericAllocationHandle h,
			    unsigned long long flags);
FC_EXPORT CUresult cuMemUnmap(CUdeviceptr ptr, size_t size);
FC_EXPORT CUresult cuMemSetAccess(CUdeviceptr ptr, size_t size, const CUmemAccessDesc *desc, size_t count);
FC_EXPORT CUresult cuMemRetainAllocationHandle(CUmemGenericAllocationHandle *h, void *addr);

/* vmm_phys.c */
FC_EXPORT CUresult cuMemCreate(CUmemGenericAllocationHandle *h, size_t size, const CUmemAllocationProp *prop,
			       unsigned long long flags);
FC_EXPORT CUresult cuMemRelease(CUmemGenericAllocationHandle h);
FC_EXPORT CUresult cuMemExportToShareableHandle(void *shareable, CUmemGenericAllocationHandle h,
						CUmemAllocationHandleType type, unsigned long long flags);
FC_EXPORT CUresult cuMemImportFromShareableHandle(CUmemGenericAllocationHandle *h, void *os_handle,
						  CUmemAllocationHandleType type);

/* event.c */
FC_EXPORT CUresult cuEventCreate(CUevent *ev, unsigned int flags);
FC_EXPORT CUresult cuEventDestroy_v2(CUevent ev);
FC_EXPORT CUresult cuEventRecord(CUevent ev, CUstream stream);
FC_EXPORT CUresult cuEventQuery(CUevent ev);
FC_EXPORT CUresult cuEventSynchronize(CUevent ev);
FC_EXPORT CUresult cuStreamWaitEvent(CUstream stream, CUevent ev, unsigned int flags);
FC_EXPORT CUresult cuIpcGetEventHandle(CUipcEventHandle *handle, CUevent ev);
FC_EXPORT CUresult cuIpcOpenEventHandle(CUevent *ev, CUipcEventHandle handle);

/* stream.c */
FC_EXPORT CUresult cuStreamWaitValue32_v2(CUstream stream, CUdeviceptr addr, uint32_t value, unsigned int flags);

/* attrs.c */
FC_EXPORT CUresult cuDeviceGetAttribute(int *pi, int attr, CUdevice dev);
FC_EXPORT CUresult cuPointerGetAttribute(void *data, int attr, CUdeviceptr ptr);
FC_EXPORT CUresult cuPointerGetAttributes(unsigned int n, int *attrs, void **data, CUdeviceptr ptr);

/* pool.c */
FC_EXPORT CUresult cuMemPoolCreate(CUmemoryPool *pool, const void *props);
FC_EXPORT CUresult cuMemPoolDestroy(CUmemoryPool pool);
FC_EXPORT CUresult cuMemPoolExportToShareableHandle(void *handle, CUmemoryPool pool, CUmemAllocationHandleType type,
						    unsigned long long flags);
FC_EXPORT CUresult cuMemPoolImportFromShareableHandle(CUmemoryPool *pool, void *handle,
						      CUmemAllocationHandleType type, unsigned long long flags);

/* procaddr.c */
FC_EXPORT CUresult cuGetProcAddress_v2(const char *symbol, void **pfn, int cuda_version, cuuint64_t flags,
				       CUdriverProcAddressQueryResult *status);
FC_EXPORT CUresult cuGetProcAddress(const char *symbol, void **pfn, int cuda_version, cuuint64_t flags);

#endif
