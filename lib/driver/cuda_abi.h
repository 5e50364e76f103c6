/* The slice of the CUDA driver ABI that cudasnap uses, declared here so that
 * building needs no CUDA toolkit. Layouts follow cuda.h of CUDA 12.8 / 13.0;
 * every argument struct is 64 bytes and its reserved fields must be zero. */
#ifndef CS_CUDA_ABI_H
#define CS_CUDA_ABI_H

#include <stdint.h>

typedef int CUresult;

typedef struct {
	unsigned int timeoutMs;
	unsigned int reserved0;
	uint64_t reserved1[7];
} CUcheckpointLockArgs;

typedef struct {
	uint64_t reserved[8];
} CUcheckpointCheckpointArgs;

typedef struct {
	unsigned char oldUuid[16];
	unsigned char newUuid[16];
} CUcheckpointGpuPair;

typedef struct {
	CUcheckpointGpuPair *gpuPairs;
	unsigned int gpuPairsCount;
	char reserved[52 - sizeof(CUcheckpointGpuPair *)];
	uint64_t reserved1;
} CUcheckpointRestoreArgs;

typedef struct {
	uint64_t reserved[8];
} CUcheckpointUnlockArgs;

_Static_assert(sizeof(CUcheckpointLockArgs) == 64, "lock args ABI");
_Static_assert(sizeof(CUcheckpointCheckpointArgs) == 64, "checkpoint args ABI");
_Static_assert(sizeof(CUcheckpointRestoreArgs) == 64, "restore args ABI");
_Static_assert(sizeof(CUcheckpointUnlockArgs) == 64, "unlock args ABI");

typedef CUresult (*cu_init_fn)(unsigned int);
typedef CUresult (*cu_version_fn)(int *);
typedef CUresult (*cu_errstr_fn)(CUresult, const char **);
typedef CUresult (*cu_get_state_fn)(int, int *);
typedef CUresult (*cu_get_tid_fn)(int, int *);
typedef CUresult (*cu_lock_fn)(int, CUcheckpointLockArgs *);
typedef CUresult (*cu_ckpt_fn)(int, CUcheckpointCheckpointArgs *);
typedef CUresult (*cu_restore_fn)(int, CUcheckpointRestoreArgs *);
typedef CUresult (*cu_unlock_fn)(int, CUcheckpointUnlockArgs *);

#endif
