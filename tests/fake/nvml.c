#include <pthread.h>
#include <stdlib.h>
#include <string.h>

#include "gpus.h"
#include "nvml_internal.h"
#include "settings.h"

static pthread_mutex_t nvml_mu = PTHREAD_MUTEX_INITIALIZER;
static int init_count;
static struct fc_gpus gpus;
static struct fc_nvml_device devices[FC_MAX_GPUS];

/* On driver 580 libnvidia-ml loads libcuda, which turns an NVML-only process
 * into one the checkpoint API can lock: reproduced by attaching here. */
nvmlReturn_t nvmlInit_v2(void)
{
	nvmlReturn_t rc = NVML_SUCCESS;
	pthread_mutex_lock(&nvml_mu);
	if (init_count == 0) {
		fc_gpus_load(&gpus);
		for (int i = 0; i < gpus.count; i++) {
			devices[i].index = i;
			fc_uuid_format(&gpus.uuid[i], devices[i].uuid, sizeof(devices[i].uuid));
		}
		if (fakecuda_nvml_attach() != CUDA_SUCCESS)
			rc = NVML_ERROR_DRIVER_NOT_LOADED;
	}
	init_count += rc == NVML_SUCCESS;
	pthread_mutex_unlock(&nvml_mu);
	return rc;
}

nvmlReturn_t nvmlInit(void)
{
	return nvmlInit_v2();
}

nvmlReturn_t nvmlShutdown(void)
{
	pthread_mutex_lock(&nvml_mu);
	nvmlReturn_t rc = init_count > 0 ? NVML_SUCCESS : NVML_ERROR_UNINITIALIZED;
	init_count -= init_count > 0;
	pthread_mutex_unlock(&nvml_mu);
	return rc;
}

const char *nvmlErrorString(nvmlReturn_t result)
{
	switch (result) {
	case NVML_SUCCESS: return "Success";
	case NVML_ERROR_UNINITIALIZED: return "Uninitialized";
	case NVML_ERROR_INVALID_ARGUMENT: return "Invalid Argument";
	case NVML_ERROR_NOT_SUPPORTED: return "Not Supported";
	case NVML_ERROR_NO_PERMISSION: return "Insufficient Permissions";
	case NVML_ERROR_NOT_FOUND: return "Not Found";
	case NVML_ERROR_INSUFFICIENT_SIZE: return "Insufficient Size";
	case NVML_ERROR_DRIVER_NOT_LOADED: return "Driver Not Loaded";
	default: return "Unknown Error";
	}
}

int fc_nvml_initialized(void)
{
	pthread_mutex_lock(&nvml_mu);
	int n = init_count;
	pthread_mutex_unlock(&nvml_mu);
	return n > 0;
}

int fc_nvml_count(void)
{
	return gpus.count;
}

const struct fc_gpus *fc_nvml_gpus(void)
{
	return &gpus;
}

nvmlDevice_t fc_nvml_device(int index)
{
	return &devices[index];
}

nvmlReturn_t fc_nvml_copy_out(const char *s, char *buf, unsigned int length)
{
	if (!fc_nvml_initialized())
		return NVML_ERROR_UNINITIALIZED;
	if (buf == NULL)
		return NVML_ERROR_INVALID_ARGUMENT;
	if (strlen(s) >= length)
		return NVML_ERROR_INSUFFICIENT_SIZE;
	memcpy(buf, s, strlen(s) + 1);
	return NVML_SUCCESS;
}

nvmlReturn_t nvmlSystemGetDriverVersion(char *version, unsigned int length)
{
	char buf[96];
	const char *env = fc_setting("FAKECUDA_DRIVER_STRING", buf, sizeof(buf));
	return fc_nvml_copy_out(env && *env ? env : "580.159.04", version, length);
}

nvmlReturn_t nvmlSystemGetCudaDriverVersion_v2(int *version)
{
	if (!fc_nvml_initialized())
		return NVML_ERROR_UNINITIALIZED;
	if (version == NULL)
		return NVML_ERROR_INVALID_ARGUMENT;
	return cuDriverGetVersion(version) == CUDA_SUCCESS ? NVML_SUCCESS : NVML_ERROR_UNKNOWN;
}

nvmlReturn_t nvmlSystemGetCudaDriverVersion(int *version)
{
	return nvmlSystemGetCudaDriverVersion_v2(version);
}
