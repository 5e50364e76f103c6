#include <string.h>
#include <unistd.h>

#include "cuda_vmm_api.h"
#include "fakecuda.h"
#include "ipc.h"
#include "vmm.h"

/* cuMemAlloc memory and its CUDA IPC, on the double's legacy device memory
 * (devmem.c, ipc.c). That memory is one memfd, named after device 0's GPU,
 * whatever the current context's device: the double allocates legacy
 * memory on device 0 only. */

static CUresult enter(void)
{
	CUresult rc = fc_ctx_check(NULL);
	return rc == CUDA_SUCCESS ? fc_gate_enter() : rc;
}

CUresult cuMemAlloc_v2(CUdeviceptr *dptr, size_t bytes)
{
	CUuuid gpu;
	uint64_t at;
	if (dptr == NULL || bytes == 0)
		return CUDA_ERROR_INVALID_VALUE;
	CUresult rc = enter();
	if (rc != CUDA_SUCCESS)
		return rc;
	pthread_rwlock_wrlock(&fc_mem_rw);
	rc = cuDeviceGetUuid_v2(&gpu, 0);
	if (rc == CUDA_SUCCESS)
		rc = fc_devmem_alloc(&at, bytes, &gpu);
	if (rc == CUDA_SUCCESS)
		*dptr = at;
	pthread_rwlock_unlock(&fc_mem_rw);
	fc_gate_leave();
	return rc;
}

CUresult cuMemFree_v2(CUdeviceptr dptr)
{
	if (dptr == 0)
		return CUDA_SUCCESS;
	CUresult rc = enter();
	if (rc != CUDA_SUCCESS)
		return rc;
	pthread_rwlock_wrlock(&fc_mem_rw);
	rc = fc_devmem_free(dptr, 1);
	pthread_rwlock_unlock(&fc_mem_rw);
	fc_gate_leave();
	return rc;
}

/* The allocation, legacy or imported, or the VMM mapping, that holds dptr. */
CUresult cuMemGetAddressRange_v2(CUdeviceptr *base, size_t *size, CUdeviceptr dptr)
{
	uint64_t b;
	size_t n;
	int imported;
	CUresult rc = enter();
	if (rc != CUDA_SUCCESS)
		return rc;
	pthread_rwlock_rdlock(&fc_mem_rw);
	if (fc_devmem_range(dptr, &b, &n, &imported) != 0 && fc_vmm_range(dptr, &b, &n) != 0)
		rc = CUDA_ERROR_NOT_FOUND;
	pthread_rwlock_unlock(&fc_mem_rw);
	fc_gate_leave();
	if (rc == CUDA_SUCCESS && base != NULL)
		*base = b;
	if (rc == CUDA_SUCCESS && size != NULL)
		*size = n;
	return rc;
}

/* The whole allocation that holds dptr, of our own legacy memory: the real
 * driver refuses VMM memory here, and so does the double. */
CUresult cuIpcGetMemHandle(CUipcMemHandle *handle, CUdeviceptr dptr)
{
	struct fc_ipc_handle h = { .magic = FC_IPC_MAGIC };
	uint64_t base = 0;
	size_t bytes = 0;
	int imported = 1;
	if (handle == NULL)
		return CUDA_ERROR_INVALID_VALUE;
	CUresult rc = enter();
	if (rc != CUDA_SUCCESS)
		return rc;
	pthread_rwlock_rdlock(&fc_mem_rw);
	int found = fc_devmem_range(dptr, &base, &bytes, &imported) == 0;
	pthread_rwlock_unlock(&fc_mem_rw);
	fc_gate_leave();
	if (!found || imported)
		return CUDA_ERROR_INVALID_VALUE;
	h.pid = (int32_t)getpid();
	h.dptr = base;
	h.bytes = bytes;
	rc = fc_ipc_export(h.dptr, h.bytes, &h.offset);
	if (rc == CUDA_SUCCESS)
		memcpy(handle->reserved, &h, sizeof(h));
	return rc;
}

/* The exporter is found by the pid in the handle, which is the pid it
 * sees itself by: importer and exporter share a pid namespace. */
/* Both exported names of the function; called directly, not through the
 * process's lookup (where an interposer's names stand first), as the real
 * driver's entry points call their implementation. */
static CUresult open_handle(CUdeviceptr *dptr, CUipcMemHandle handle, unsigned int flags)
{
	struct fc_ipc_handle h;
	struct fakecuda_ipc_mem mem;
	memcpy(&h, handle.reserved, sizeof(h));
	/* CU_IPC_MEM_LAZY_ENABLE_PEER_ACCESS is the one flag */
	if (dptr == NULL || (flags & ~1u) || h.magic != FC_IPC_MAGIC || h.bytes == 0)
		return CUDA_ERROR_INVALID_VALUE;
	CUresult rc = fc_ctx_check(NULL);
	if (rc != CUDA_SUCCESS)
		return rc;
	/* the real driver refuses a process's own handle */
	if (h.pid == (int32_t)getpid())
		return CUDA_ERROR_INVALID_CONTEXT;
	struct fc_ipc_record want = { FC_IPC_MAGIC, h.pid, h.offset, h.bytes };
	rc = fc_ipc_import(h.pid, &want, &mem);
	if (rc == CUDA_SUCCESS)
		*dptr = mem.dptr;
	return rc;
}

CUresult cuIpcOpenMemHandle_v2(CUdeviceptr *dptr, CUipcMemHandle handle, unsigned int flags)
{
	return open_handle(dptr, handle, flags);
}

/* CUDA 4.1-10.2's name: the same function */
CUresult cuIpcOpenMemHandle(CUdeviceptr *dptr, CUipcMemHandle handle, unsigned int flags)
{
	return open_handle(dptr, handle, flags);
}

CUresult cuIpcCloseMemHandle(CUdeviceptr dptr)
{
	CUresult rc = enter();
	if (rc != CUDA_SUCCESS)
		return rc;
	pthread_rwlock_wrlock(&fc_mem_rw);
	rc = fc_devmem_free(dptr, 0);
	pthread_rwlock_unlock(&fc_mem_rw);
	fc_gate_leave();
	return rc;
}
