/* Calls that only the double has: they stand in for the device work a real
 * CUDA application does, so that tests can observe what a checkpoint keeps.
 * Like real CUDA calls they block while the process is locked or
 * checkpointed. */
#ifndef FAKECUDA_H
#define FAKECUDA_H

#include <stddef.h>
#include <stdint.h>

#include "cuda_api.h"

/* "GPU-" + 36 characters + NUL */
#define FAKECUDA_UUID_STRLEN 41

FC_EXPORT CUresult fakecuda_mem_alloc(uint64_t *dptr, size_t bytes);
FC_EXPORT CUresult fakecuda_fill(uint64_t dptr, size_t bytes, uint64_t seed);
/* CUDA_ERROR_UNKNOWN when the data differs; why then says where. */
FC_EXPORT CUresult fakecuda_verify(uint64_t dptr, size_t bytes, uint64_t seed,
				   char *why, size_t why_len);
/* Queues a kernel of ms milliseconds on the one fake stream; returns once it
 * is queued, and waits while the queue already holds a full kernel. */
FC_EXPORT CUresult fakecuda_kernel(unsigned int ms);
/* UUID of the GPU that device 0 now is (changes after a remapping restore). */
FC_EXPORT CUresult fakecuda_current_gpu(char *uuid, size_t len);
/* Thread id of the restore thread, 0 before initialization. */
FC_EXPORT int fakecuda_restore_tid(void);
/* What libnvidia-ml does on driver 580: initialize just enough of the driver
 * to become a checkpointable process, without device memory. */
FC_EXPORT CUresult fakecuda_nvml_attach(void);
/* CUDA IPC (cudaIpcGetMemHandle, cudaIpcOpenMemHandle), reduced to what a
 * checkpoint meets. Export: makes bytes of this process's device memory at
 * dptr importable by other processes; creates, maps and keeps open the
 * shared file <FAKECUDA_SHM_DIR or /dev/shm>/cuda.shm.<uid>.<pid>, removed at
 * a normal exit. A later export replaces the earlier one. */
FC_EXPORT CUresult fakecuda_ipc_export(uint64_t dptr, size_t bytes);

struct fakecuda_ipc_mem {
	uint64_t dptr; /* where the importer sees the memory */
	size_t bytes;
	int owner_pid; /* the exporter's pid as it sees itself */
};

/* Import: maps the memory that process pid (as the caller's /proc names
 * it) exported, and its shared file, without keeping an fd. From then on
 * the process can be checkpointed but never restored: restore answers
 * CUDA_ERROR_INVALID_VALUE for ever, as the real driver does.
 * CUDA_ERROR_INVALID_HANDLE when pid exports nothing or holds no device
 * memory now (it is checkpointed). */
FC_EXPORT CUresult fakecuda_ipc_import(int pid, struct fakecuda_ipc_mem *mem);
/* The driver calls one of its own exported functions (cuDriverGetVersion)
 * by name from a thread of its own, through the process's lookup, and waits
 * up to wait_ms for it: its answer, or CUDA_ERROR_NOT_READY when it is
 * still waiting; *took_ms how long. */
FC_EXPORT CUresult fakecuda_self_call(unsigned int wait_ms, unsigned int *took_ms);
/* Wakes every call blocked on a locked process with CUDA_ERROR_DEINITIALIZED
 * so that an application can join its threads and exit. */
FC_EXPORT void fakecuda_shutdown(void);

#endif
