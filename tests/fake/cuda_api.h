/* The subset of the CUDA driver API that the double implements, declared
 * from the documented signatures (there is no cuda.h on CI machines). */
#ifndef FAKECUDA_CUDA_API_H
#define FAKECUDA_CUDA_API_H

#include <stddef.h>
#include <stdint.h>

#define FC_EXPORT __attribute__((visibility("default")))

typedef int CUresult;
typedef int CUdevice;

enum {
	CUDA_SUCCESS = 0,
	CUDA_ERROR_INVALID_VALUE = 1,
	CUDA_ERROR_OUT_OF_MEMORY = 2,
	CUDA_ERROR_NOT_INITIALIZED = 3,
	CUDA_ERROR_DEINITIALIZED = 4,
	CUDA_ERROR_NO_DEVICE = 100,
	CUDA_ERROR_INVALID_DEVICE = 101,
	CUDA_ERROR_OPERATING_SYSTEM = 304,
	CUDA_ERROR_INVALID_HANDLE = 400,
	CUDA_ERROR_ILLEGAL_STATE = 401,
	CUDA_ERROR_NOT_FOUND = 500,
	CUDA_ERROR_NOT_READY = 600,
	CUDA_ERROR_NOT_PERMITTED = 800,
	CUDA_ERROR_NOT_SUPPORTED = 801,
	CUDA_ERROR_UNKNOWN = 999,
};

typedef struct {
	unsigned char bytes[16];
} CUuuid;

typedef enum {
	CU_PROCESS_STATE_RUNNING = 0,
	CU_PROCESS_STATE_LOCKED = 1,
	CU_PROCESS_STATE_CHECKPOINTED = 2,
	CU_PROCESS_STATE_FAILED = 3,
} CUprocessState;

typedef struct {
	unsigned int timeoutMs;
	unsigned int reserved0;
	uint64_t reserved1[7];
} CUcheckpointLockArgs;

typedef struct {
	uint64_t reserved[8];
} CUcheckpointCheckpointArgs;

typedef struct {
	CUuuid oldUuid;
	CUuuid newUuid;
} CUcheckpointGpuPair;

typedef struct {
	CUcheckpointGpuPair *gpuPairs;
	unsigned int gpuPairsCount;
	char reserved[44];
	uint64_t reserved1;
} CUcheckpointRestoreArgs;

typedef struct {
	uint64_t reserved[8];
} CUcheckpointUnlockArgs;

_Static_assert(sizeof(CUcheckpointLockArgs) == 64, "driver ABI");
_Static_assert(sizeof(CUcheckpointCheckpointArgs) == 64, "driver ABI");
_Static_assert(sizeof(CUcheckpointRestoreArgs) == 64, "driver ABI");
_Static_assert(sizeof(CUcheckpointUnlockArgs) == 64, "driver ABI");

FC_EXPORT CUresult cuInit(unsigned int flags);
FC_EXPORT CUresult cuDriverGetVersion(int *version);
FC_EXPORT CUresult cuGetErrorName(CUresult error, const char **str);
FC_EXPORT CUresult cuGetErrorString(CUresult error, const char **str);
FC_EXPORT CUresult cuDeviceGetCount(int *count);
FC_EXPORT CUresult cuDeviceGet(CUdevice *device, int ordinal);
FC_EXPORT CUresult cuDeviceGetUuid(CUuuid *uuid, CUdevice device);
FC_EXPORT CUresult cuDeviceGetUuid_v2(CUuuid *uuid, CUdevice device);
/* meminfo.c: the caller library only (it measures as NVML does) */
FC_EXPORT CUresult cuDeviceGetName(char *name, int len, CUdevice dev);
FC_EXPORT CUresult cuDeviceTotalMem_v2(size_t *bytes, CUdevice dev);
FC_EXPORT CUresult cuMemGetInfo_v2(size_t *free, size_t *total);

FC_EXPORT CUresult cuCheckpointProcessGetState(int pid, CUprocessState *state);
FC_EXPORT CUresult cuCheckpointProcessGetRestoreThreadId(int pid, int *tid);
FC_EXPORT CUresult cuCheckpointProcessLock(int pid, CUcheckpointLockArgs *args);
FC_EXPORT CUresult cuCheckpointProcessCheckpoint(int pid, CUcheckpointCheckpointArgs *args);
FC_EXPORT CUresult cuCheckpointProcessRestore(int pid, CUcheckpointRestoreArgs *args);
FC_EXPORT CUresult cuCheckpointProcessUnlock(int pid, CUcheckpointUnlockArgs *args);

#endif
