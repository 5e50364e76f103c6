/* The virtual memory management API of the driver double (cuMemCreate,
 * cuMemMap...): physical allocations (vmm_phys.c), the device address
 * space that maps them (vmm_va.c), and what a checkpoint and a restore do
 * with them (vmm_save.c). The tables change only under fc_mem_rw
 * held for writing, inside fc_gate_enter; a checkpoint or restore touches
 * them while no call is in progress (the process is locked). */
#ifndef FAKECUDA_VMM_H
#define FAKECUDA_VMM_H

#include <stddef.h>
#include <stdint.h>

#include "internal.h"
#include "../../park/cuda_vmm_abi.h"

/* Minimum and recommended granularity, as on an H200. */
#define FC_VMM_GRANULARITY (2ull << 20)

/* A physical allocation: our own (a memfd created by cuMemCreate) or
 * imported from another process (its memfd, mapped without an fd). It
 * lives while a handle to it is unreleased or a mapping uses it. */
struct fc_phys {
	CUmemGenericAllocationHandle handle;
	size_t size;
	int ordinal; /* the device it is on; -1: an import from a GPU we do not see */
	int handle_types; /* requestedHandleTypes */
	int rdma; /* allocFlags.gpuDirectRDMACapable */
	int released; /* cuMemRelease was called (once more than cuMemRetainAllocationHandle) */
	int retained; /* references cuMemRetainAllocationHandle added, not released yet */
	int maps; /* mappings that use it */
	int fd; /* our own: the memfd, read-write; -1 imported or checkpointed */
	unsigned char *mem; /* imported: the whole memfd, mapped */
	unsigned char *saved; /* our own, checkpointed: its bytes on the host */
};

/* attrs.c: whether the GPUs can register cuMemAlloc memory, and VMM
 * memory created with the flag, with a NIC (GPUDirect RDMA) */
int fc_gdr_legacy(void);
int fc_gdr_vmm(void);

/* vmm_phys.c; fc_vmm_phys answers live handles only (not released) */
struct fc_phys *fc_vmm_phys(CUmemGenericAllocationHandle h);
/* Every physical allocation, *n of them. */
struct fc_phys **fc_vmm_all(int *n);
/* A new memfd of size bytes named after gpu, as NVML finds VMM memory. */
int fc_vmm_memfd(const CUuuid *gpu, size_t size);
/* A mapping went away: frees p when nothing refers to it any more. */
void fc_vmm_unref(struct fc_phys *p);
/* One more reference of p's handle (cuMemRetainAllocationHandle): the same
 * value while it lives, a new one when the program had released it (p is
 * then only mapped, and its old value may be another allocation's). */
CUmemGenericAllocationHandle fc_vmm_retain(struct fc_phys *p);

/* vmm_va.c: where dptr is in the VMM address space, *avail the bytes to
 * the end of its mapping. CUDA_ERROR_INVALID_VALUE when nothing is mapped
 * there or the access set does not allow it (write: read-write). */
CUresult fc_vmm_segment(uint64_t dptr, int write, struct fc_region *r, size_t *avail);
/* The mapping that holds dptr; -1 when none does. */
int fc_vmm_range(uint64_t dptr, uint64_t *base, size_t *bytes);
/* The physical allocation mapped at dptr, or NULL. */
struct fc_phys *fc_vmm_phys_at(uint64_t dptr);

/* vmm_save.c. Checkpoint: save copies every physical allocation of our own to the host
 * (all or nothing); drop then closes their memfds, unsave undoes a save. */
int fc_vmm_save(void);
void fc_vmm_drop(void);
void fc_vmm_unsave(void);
/* The bytes that the checkpoint copied of device ordinal's memory. */
uint64_t fc_vmm_saved(int ordinal);
/* Restore: new memfds, named after the GPUs of map (ordinal -> index in
 * fc_tgt.gpus), hold the saved bytes; all or nothing. */
int fc_vmm_restore(const int *map);
/* An imported allocation is still held (unreleased or mapped): such a
 * process is never restored (CUDA_ERROR_NOT_SUPPORTED). */
int fc_vmm_import_held(void);
/* A child forked without exec has no device memory of its own. */
void fc_vmm_forget(void);

#endif
