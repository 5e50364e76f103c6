/* CUDA IPC between processes as the double models it: what an exporter of
 * device memory leaves for its importers. */
#ifndef FAKECUDA_IPC_H
#define FAKECUDA_IPC_H

#include <stddef.h>
#include <stdint.h>

#define FC_SHM_DIR "/dev/shm"
#define FC_IPC_MAGIC 0x66636970u

/* The shared file of an exporter, the one place that names it:
 * <dir>/cuda.shm.<uid>.<pid>, dir being FAKECUDA_SHM_DIR or /dev/shm, uid the
 * exporter's effective uid and pid the exporter's pid as it sees itself
 * (the real driver's exporters map /dev/shm/cuda.shm.0.N). 0, or -1 when
 * the name does not fit in len. */
int fc_ipc_shm_path(char *buf, size_t len, unsigned int uid, int pid);

/* At the start of the shared file: where the exported memory is in the
 * exporter's device memory memfd. */
struct fc_ipc_record {
	uint32_t magic;
	int32_t pid; /* the exporter's, as it sees itself */
	uint64_t offset;
	uint64_t bytes;
};

#endif
