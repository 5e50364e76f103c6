#include <stdio.h>
#include <string.h>

#include "cuda_vmm_api.h"
#include "fakecuda.h"
#include "gpumem.h"
#include "internal.h"
#include "settings.h"

/* What the driver says of a device's memory without NVML: its total, and
 * from a current context the free memory, NVML's figure (gpumem.c) less the
 * asking context's own FAKECUDA_CONTEXT_MIB, which a real context takes as
 * soon as it exists (about 0.5 GiB on an H200) while the double's process
 * holds no device memory until it allocates. */

/* The place in FAKECUDA_GPUS of the GPU the process's device dev is. */
static int gpu_of(CUdevice dev, struct fc_gpus *g)
{
	pthread_mutex_lock(&fc_tgt.mu);
	int ok = (fc_tgt.levels & FC_LEVEL_CUDA) && dev >= 0 && dev < fc_tgt.ndev;
	int gpu = ok ? fc_tgt.map[dev] : -1;
	*g = fc_tgt.gpus;
	pthread_mutex_unlock(&fc_tgt.mu);
	return gpu;
}

CUresult cuDeviceTotalMem_v2(size_t *bytes, CUdevice dev)
{
	struct fc_gpus g;
	struct fc_gpu_memory m[FC_MAX_GPUS];
	if (bytes == NULL)
		return CUDA_ERROR_INVALID_VALUE;
	int gpu = gpu_of(dev, &g);
	if (gpu < 0)
		return fc_tgt.levels & FC_LEVEL_CUDA ? CUDA_ERROR_INVALID_DEVICE : CUDA_ERROR_NOT_INITIALIZED;
	fc_gpu_memory(&g, m);
	*bytes = m[gpu].total;
	return CUDA_SUCCESS;
}

CUresult cuDeviceGetName(char *name, int len, CUdevice dev)
{
	struct fc_gpus g;
	if (name == NULL || len <= 0)
		return CUDA_ERROR_INVALID_VALUE;
	if (gpu_of(dev, &g) < 0)
		return fc_tgt.levels & FC_LEVEL_CUDA ? CUDA_ERROR_INVALID_DEVICE : CUDA_ERROR_NOT_INITIALIZED;
	snprintf(name, (size_t)len, "%s", fc_mig_mode() ? "NVIDIA H200 MIG 1g.18gb" : "NVIDIA H200");
	return CUDA_SUCCESS;
}

CUresult cuMemGetInfo_v2(size_t *free, size_t *total)
{
	int dev;
	struct fc_gpus g;
	struct fc_gpu_memory m[FC_MAX_GPUS];
	if (free == NULL || total == NULL)
		return CUDA_ERROR_INVALID_VALUE;
	CUresult rc = fc_ctx_check(&dev);
	if (rc != CUDA_SUCCESS)
		return rc;
	int gpu = gpu_of(dev, &g);
	if (gpu < 0)
		return CUDA_ERROR_INVALID_CONTEXT;
	fc_gpu_memory(&g, m);
	unsigned long long own = fc_mib_setting("FAKECUDA_CONTEXT_MIB");
	*total = m[gpu].total;
	*free = m[gpu].free > own ? m[gpu].free - own : 0;
	return CUDA_SUCCESS;
}
