#include <stdlib.h>
#include <string.h>

#include "cuda_vmm_api.h"
#include "settings.h"
#include "vmm.h"

/* What a program asks of a device and of a pointer, for the attributes the
 * double models; any other valid attribute answers CUDA_ERROR_NOT_SUPPORTED
 * (the real driver answers them all). GPUDirect RDMA: $FAKECUDA_GDR, "1"
 * (an H200: cuMemAlloc memory, and VMM memory created with
 * allocFlags.gpuDirectRDMACapable, can be registered with a NIC), "legacy"
 * (cuMemAlloc memory only) or "0" (neither). */

enum {
	ATTR_COMPUTE_MAJOR = 75,
	ATTR_COMPUTE_MINOR = 76,
	ATTR_UNIFIED_ADDRESSING = 41,
	ATTR_VMM = 102,
	ATTR_GDR_VMM = 110,
	ATTR_GDR = 116,
};

enum {
	PTR_MEMORY_TYPE = 2,
	PTR_DEVICE_ORDINAL = 9,
	PTR_RANGE_START = 11,
	PTR_RANGE_SIZE = 12,
	PTR_GDR = 15,
	MEMORYTYPE_DEVICE = 2,
};

static const char *gdr(void)
{
	static char buf[16];
	const char *v = fc_setting("FAKECUDA_GDR", buf, sizeof(buf));
	return v ? v : "1";
}

int fc_gdr_legacy(void)
{
	return strcmp(gdr(), "0") != 0;
}

int fc_gdr_vmm(void)
{
	return strcmp(gdr(), "1") == 0;
}

CUresult cuDeviceGetAttribute(int *pi, int attr, CUdevice dev)
{
	int count = 0;
	CUresult rc = pi == NULL ? CUDA_ERROR_INVALID_VALUE : cuDeviceGetCount(&count);
	if (rc == CUDA_SUCCESS && (dev < 0 || dev >= count))
		rc = CUDA_ERROR_INVALID_DEVICE;
	if (rc != CUDA_SUCCESS)
		return rc;
	switch (attr) {
	case ATTR_COMPUTE_MAJOR: *pi = 9; break;
	case ATTR_COMPUTE_MINOR: *pi = 0; break;
	case ATTR_UNIFIED_ADDRESSING: *pi = 1; break;
	case ATTR_VMM: *pi = 1; break;
	case ATTR_GDR_VMM: *pi = fc_gdr_vmm(); break;
	case ATTR_GDR: *pi = fc_gdr_legacy(); break;
	default: return attr > 0 && attr < 150 ? CUDA_ERROR_NOT_SUPPORTED : CUDA_ERROR_INVALID_VALUE;
	}
	return CUDA_SUCCESS;
}

/* The allocation that holds ptr: legacy memory (device 0) or a VMM mapping;
 * -1 when none does. */
static int find(CUdeviceptr ptr, uint64_t *base, size_t *size, int *dev, int *rdma)
{
	int imported = 0, rc = 0;
	pthread_rwlock_rdlock(&fc_mem_rw);
	if (fc_devmem_range(ptr, base, size, &imported) == 0) {
		*dev = 0;
		*rdma = fc_gdr_legacy();
	} else if (fc_vmm_range(ptr, base, size) == 0) {
		const struct fc_phys *p = fc_vmm_phys_at(ptr);
		*dev = p && p->ordinal >= 0 ? p->ordinal : 0;
		*rdma = p && p->rdma;
	} else {
		rc = -1;
	}
	pthread_rwlock_unlock(&fc_mem_rw);
	return rc;
}

static CUresult attr_of(void *data, int attr, CUdeviceptr ptr, size_t *len)
{
	uint64_t base = 0;
	size_t size = 0;
	int dev = 0, rdma = 0, v;
	*len = attr == PTR_RANGE_START || attr == PTR_RANGE_SIZE ? 8 : 4;
	if (attr != PTR_MEMORY_TYPE && attr != PTR_DEVICE_ORDINAL && attr != PTR_RANGE_START &&
	    attr != PTR_RANGE_SIZE && attr != PTR_GDR)
		return attr > 0 && attr < 32 ? CUDA_ERROR_NOT_SUPPORTED : CUDA_ERROR_INVALID_VALUE;
	if (find(ptr, &base, &size, &dev, &rdma) != 0)
		return CUDA_ERROR_INVALID_VALUE;
	if (attr == PTR_RANGE_START)
		memcpy(data, &base, 8);
	else if (attr == PTR_RANGE_SIZE)
		memcpy(data, &size, 8);
	else {
		v = attr == PTR_MEMORY_TYPE ? MEMORYTYPE_DEVICE : attr == PTR_DEVICE_ORDINAL ? dev : rdma;
		memcpy(data, &v, 4);
	}
	return CUDA_SUCCESS;
}

CUresult cuPointerGetAttribute(void *data, int attr, CUdeviceptr ptr)
{
	size_t len;
	int ignored = 0;
	CUresult rc = fc_ctx_check(&ignored);
	if (rc != CUDA_SUCCESS)
		return rc;
	return data == NULL ? CUDA_ERROR_INVALID_VALUE : attr_of(data, attr, ptr, &len);
}

/* A pointer of no allocation gets zeros, not an error. */
CUresult cuPointerGetAttributes(unsigned int n, int *attrs, void **data, CUdeviceptr ptr)
{
	int ignored = 0;
	CUresult rc = fc_ctx_check(&ignored);
	if (rc != CUDA_SUCCESS)
		return rc;
	if (n == 0 || attrs == NULL || data == NULL)
		return CUDA_ERROR_INVALID_VALUE;
	for (unsigned int i = 0; i < n; i++) {
		size_t len;
		if (data[i] == NULL)
			continue;
		rc = attr_of(data[i], attrs[i], ptr, &len);
		if (rc == CUDA_ERROR_INVALID_VALUE && attrs[i] > 0 && attrs[i] < 32)
			memset(data[i], 0, len);
		else if (rc != CUDA_SUCCESS)
			return rc;
	}
	return CUDA_SUCCESS;
}
