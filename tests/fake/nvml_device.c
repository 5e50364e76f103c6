#include <stdlib.h>
#include <string.h>

#include "fakecuda.h"
#include "gpumem.h"
#include "nvml_api.h"
#include "nvml_internal.h"
#include "settings.h"

nvmlReturn_t nvmlDeviceGetCount_v2(unsigned int *count)
{
	if (!fc_nvml_initialized())
		return NVML_ERROR_UNINITIALIZED;
	if (count == NULL)
		return NVML_ERROR_INVALID_ARGUMENT;
	*count = (unsigned int)fc_nvml_count();
	return NVML_SUCCESS;
}

nvmlReturn_t nvmlDeviceGetHandleByIndex_v2(unsigned int index, nvmlDevice_t *device)
{
	if (!fc_nvml_initialized())
		return NVML_ERROR_UNINITIALIZED;
	if (device == NULL || index >= (unsigned int)fc_nvml_count())
		return NVML_ERROR_INVALID_ARGUMENT;
	*device = fc_nvml_device((int)index);
	return NVML_SUCCESS;
}

nvmlReturn_t nvmlDeviceGetUUID(nvmlDevice_t device, char *uuid, unsigned int length)
{
	if (device == NULL)
		return NVML_ERROR_INVALID_ARGUMENT;
	return fc_nvml_copy_out(device->uuid, uuid, length);
}

nvmlReturn_t nvmlDeviceGetName(nvmlDevice_t device, char *name, unsigned int length)
{
	if (device == NULL)
		return NVML_ERROR_INVALID_ARGUMENT;
	return fc_nvml_copy_out("NVIDIA H200", name, length);
}

nvmlReturn_t nvmlDeviceGetPersistenceMode(nvmlDevice_t device, int *mode)
{
	char buf[32];
	const char *env = fc_setting("FAKECUDA_PERSISTENCE", buf, sizeof(buf));
	if (!fc_nvml_initialized())
		return NVML_ERROR_UNINITIALIZED;
	if (device == NULL || mode == NULL)
		return NVML_ERROR_INVALID_ARGUMENT;
	*mode = env == NULL || atoi(env) != 0;
	return NVML_SUCCESS;
}

/* Total, used and free as gpumem.c counts them, the figures that the driver
 * judges a restore by. */
static struct fc_gpu_memory memory_of(nvmlDevice_t device)
{
	struct fc_gpu_memory m[FC_MAX_GPUS];
	fc_gpu_memory(fc_nvml_gpus(), m);
	return m[device->index];
}

static nvmlReturn_t device_arg(nvmlDevice_t device, const void *out)
{
	if (!fc_nvml_initialized())
		return NVML_ERROR_UNINITIALIZED;
	return device == NULL || out == NULL ? NVML_ERROR_INVALID_ARGUMENT : NVML_SUCCESS;
}

/* The N of /dev/nvidiaN: the GPU's place in FAKECUDA_GPUS, so that the first
 * GPU is /dev/nvidia0, the one device file the double opens. */
/* FAKECUDA_NVML_NO_MINOR=1: NOT_SUPPORTED, as NVML answers where it cannot
 * tell a GPU's device file. */
nvmlReturn_t nvmlDeviceGetMinorNumber(nvmlDevice_t device, unsigned int *minor)
{
	char buf[8];
	const char *env = fc_setting("FAKECUDA_NVML_NO_MINOR", buf, sizeof(buf));
	nvmlReturn_t rc = device_arg(device, minor);
	if (rc == NVML_SUCCESS && env && atoi(env) == 1)
		return NVML_ERROR_NOT_SUPPORTED;
	if (rc == NVML_SUCCESS)
		*minor = (unsigned int)device->index;
	return rc;
}

nvmlReturn_t nvmlDeviceGetMemoryInfo(nvmlDevice_t device, nvmlMemory_t *memory)
{
	nvmlReturn_t rc = device_arg(device, memory);
	if (rc != NVML_SUCCESS)
		return rc;
	struct fc_gpu_memory m = memory_of(device);
	memory->total = m.total;
	memory->used = m.used;
	memory->free = m.free;
	return NVML_SUCCESS;
}

nvmlReturn_t nvmlDeviceGetMemoryInfo_v2(nvmlDevice_t device, nvmlMemory_v2_t *memory)
{
	nvmlReturn_t rc = device_arg(device, memory);
	if (rc != NVML_SUCCESS)
		return rc;
	if (memory->version != nvmlMemory_v2)
		return NVML_ERROR_ARGUMENT_VERSION_MISMATCH;
	struct fc_gpu_memory m = memory_of(device);
	memory->total = m.total;
	memory->reserved = 0;
	memory->used = m.used;
	memory->free = m.free;
	return NVML_SUCCESS;
}

nvmlReturn_t nvmlDeviceGetMigMode(nvmlDevice_t device, unsigned int *current, unsigned int *pending)
{
	nvmlReturn_t rc = device_arg(device, current);
	if (rc != NVML_SUCCESS || pending == NULL)
		return rc != NVML_SUCCESS ? rc : NVML_ERROR_INVALID_ARGUMENT;
	*current = *pending = fc_mig_mode();
	return NVML_SUCCESS;
}
