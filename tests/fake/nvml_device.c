#include <stdlib.h>
#include <string.h>

#include "fakecuda.h"
#include "nvml_api.h"
#include "nvml_internal.h"
#include "settings.h"

#define TOTAL (141ull * 1024ull * 1024ull * 1024ull)

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

/* FAKECUDA_GPU_USED_MIB when set, else what the processes use. */
static unsigned long long used_bytes(nvmlDevice_t device)
{
	char buf[32];
	const char *env = fc_setting("FAKECUDA_GPU_USED_MIB", buf, sizeof(buf));
	unsigned long long used = env ? strtoull(env, NULL, 10) * 1024ull * 1024ull
				      : fc_nvml_used(device);
	return used < TOTAL ? used : TOTAL;
}

static nvmlReturn_t device_arg(nvmlDevice_t device, const void *out)
{
	if (!fc_nvml_initialized())
		return NVML_ERROR_UNINITIALIZED;
	return device == NULL || out == NULL ? NVML_ERROR_INVALID_ARGUMENT : NVML_SUCCESS;
}

/* The N of /dev/nvidiaN: the GPU's place in FAKECUDA_GPUS, so that the first
 * GPU is /dev/nvidia0, the one device file the double opens. */
nvmlReturn_t nvmlDeviceGetMinorNumber(nvmlDevice_t device, unsigned int *minor)
{
	nvmlReturn_t rc = device_arg(device, minor);
	if (rc == NVML_SUCCESS)
		*minor = (unsigned int)device->index;
	return rc;
}

nvmlReturn_t nvmlDeviceGetMemoryInfo(nvmlDevice_t device, nvmlMemory_t *memory)
{
	nvmlReturn_t rc = device_arg(device, memory);
	if (rc != NVML_SUCCESS)
		return rc;
	memory->total = TOTAL;
	memory->used = used_bytes(device);
	memory->free = TOTAL - memory->used;
	return NVML_SUCCESS;
}

nvmlReturn_t nvmlDeviceGetMemoryInfo_v2(nvmlDevice_t device, nvmlMemory_v2_t *memory)
{
	nvmlReturn_t rc = device_arg(device, memory);
	if (rc != NVML_SUCCESS)
		return rc;
	if (memory->version != nvmlMemory_v2)
		return NVML_ERROR_ARGUMENT_VERSION_MISMATCH;
	memory->total = TOTAL;
	memory->reserved = 0;
	memory->used = used_bytes(device);
	memory->free = TOTAL - memory->used;
	return NVML_SUCCESS;
}

nvmlReturn_t nvmlDeviceGetMigMode(nvmlDevice_t device, unsigned int *current, unsigned int *pending)
{
	char buf[32];
	const char *env = fc_setting("FAKECUDA_MIG", buf, sizeof(buf));
	nvmlReturn_t rc = device_arg(device, current);
	if (rc != NVML_SUCCESS || pending == NULL)
		return rc != NVML_SUCCESS ? rc : NVML_ERROR_INVALID_ARGUMENT;
	*current = *pending = env && atoi(env) != 0;
	return NVML_SUCCESS;
}
