/* The subset of NVML the double implements, declared from the documented
 * signatures. */
#ifndef FAKECUDA_NVML_API_H
#define FAKECUDA_NVML_API_H

#include "cuda_api.h"

typedef int nvmlReturn_t;
typedef struct fc_nvml_device *nvmlDevice_t;

enum {
	NVML_SUCCESS = 0,
	NVML_ERROR_UNINITIALIZED = 1,
	NVML_ERROR_INVALID_ARGUMENT = 2,
	NVML_ERROR_NOT_SUPPORTED = 3,
	NVML_ERROR_NO_PERMISSION = 4,
	NVML_ERROR_NOT_FOUND = 6,
	NVML_ERROR_INSUFFICIENT_SIZE = 7,
	NVML_ERROR_DRIVER_NOT_LOADED = 9,
	NVML_ERROR_ARGUMENT_VERSION_MISMATCH = 25,
	NVML_ERROR_UNKNOWN = 999,
};

typedef struct {
	unsigned long long total;
	unsigned long long free;
	unsigned long long used;
} nvmlMemory_t;

typedef struct {
	unsigned int version;
	unsigned long long total;
	unsigned long long reserved;
	unsigned long long free;
	unsigned long long used;
} nvmlMemory_v2_t;

/* NVML_STRUCT_VERSION(Memory, 2) */
#define nvmlMemory_v2 ((unsigned int)sizeof(nvmlMemory_v2_t) | (2u << 24))

typedef struct {
	unsigned int pid;
	unsigned long long usedGpuMemory;
	unsigned int gpuInstanceId;
	unsigned int computeInstanceId;
} nvmlProcessInfo_t;

FC_EXPORT nvmlReturn_t nvmlInit_v2(void);
FC_EXPORT nvmlReturn_t nvmlInit(void);
FC_EXPORT nvmlReturn_t nvmlShutdown(void);
FC_EXPORT const char *nvmlErrorString(nvmlReturn_t result);
FC_EXPORT nvmlReturn_t nvmlSystemGetDriverVersion(char *version, unsigned int length);
FC_EXPORT nvmlReturn_t nvmlSystemGetCudaDriverVersion(int *version);
FC_EXPORT nvmlReturn_t nvmlSystemGetCudaDriverVersion_v2(int *version);
FC_EXPORT nvmlReturn_t nvmlDeviceGetCount_v2(unsigned int *count);
FC_EXPORT nvmlReturn_t nvmlDeviceGetHandleByIndex_v2(unsigned int index, nvmlDevice_t *device);
FC_EXPORT nvmlReturn_t nvmlDeviceGetUUID(nvmlDevice_t device, char *uuid, unsigned int length);
FC_EXPORT nvmlReturn_t nvmlDeviceGetMinorNumber(nvmlDevice_t device, unsigned int *minor);
FC_EXPORT nvmlReturn_t nvmlDeviceGetName(nvmlDevice_t device, char *name, unsigned int length);
FC_EXPORT nvmlReturn_t nvmlDeviceGetPersistenceMode(nvmlDevice_t device, int *mode);
FC_EXPORT nvmlReturn_t nvmlDeviceGetMemoryInfo(nvmlDevice_t device, nvmlMemory_t *memory);
FC_EXPORT nvmlReturn_t nvmlDeviceGetMemoryInfo_v2(nvmlDevice_t device, nvmlMemory_v2_t *memory);
FC_EXPORT nvmlReturn_t nvmlDeviceGetMigMode(nvmlDevice_t device, unsigned int *current,
					    unsigned int *pending);
FC_EXPORT nvmlReturn_t nvmlDeviceGetComputeRunningProcesses_v3(nvmlDevice_t device,
							       unsigned int *count,
							       nvmlProcessInfo_t *infos);

#endif
