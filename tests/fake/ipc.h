/* CUDA IPC between processes as the double models it: what an exporter of
 * device memory leaves for its importers. */
#ifndef FAKECUDA_IPC_H
#define FAKECUDA_IPC_H

#include <stddef.h>
#include <stdint.h>

#include "cuda_api.h"

#define FC_SHM_DIR "/dev/shm"
#define FC_IPC_MAGIC 0x66636970u

/* The shared file of an exporter, the one place that names it:
 * <dir>/cuda.shm.<uid>.<pid>, dir being FAKECUDA_SHM_DIR or /dev/shm, uid the
 * exporter's effective uid and pid the exporter's pid as it sees itself
 * (the real driver's exporters map /dev/shm/cuda.shm.0.N). 0, or -1 when
 * the name does not fit in len. */
int fc_ipc_shm_path(char *buf, size_t len, unsigned int uid, int pid);
/* The n-th such file of the process (1: the memory export's; interprocess
 * events take the next ones). */
int fc_ipc_file_path(char *buf, size_t len, unsigned int uid, int pid, unsigned int n);

/* At the start of the shared file: where the exported memory is in the
 * exporter's device memory memfd. */
struct fc_ipc_record {
	uint32_t magic;
	int32_t pid; /* the exporter's, as it sees itself */
	uint64_t offset;
	uint64_t bytes;
};

/* A CUipcMemHandle of the double (64 bytes): the exporter, as it sees
 * itself, and where the allocation is in its device memory memfd. */
struct fc_ipc_handle {
	uint32_t magic; /* FC_IPC_MAGIC */
	int32_t pid;
	uint64_t offset;
	uint64_t bytes;
	uint64_t dptr; /* the exporter's address, for its own checks */
	unsigned char reserved[32];
};

struct fakecuda_ipc_mem;

/* ipc.c: the export of bytes at dptr (of our own legacy memory), *offset
 * where they are in the memfd; the import of process pid's export, of the
 * bytes that want names (NULL: those its shared file names). */
CUresult fc_ipc_export(uint64_t dptr, size_t bytes, uint64_t *offset);
CUresult fc_ipc_import(int pid, const struct fc_ipc_record *want, struct fakecuda_ipc_mem *mem);

#endif
