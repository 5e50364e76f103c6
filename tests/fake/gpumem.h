/* GPU memory as the double's NVML reports it. Shared by NVML and by the
 * driver's caller half, which judges a restore by the same figures, so that
 * a tool that reads NVML before a restore and the driver agree. */
#ifndef FAKECUDA_GPUMEM_H
#define FAKECUDA_GPUMEM_H

#include "gpus.h"

/* A fake CUDA process of the caller's /proc that holds device memory. */
struct fc_gpu_user {
	int pid;                  /* as the caller's /proc names it */
	const char *uuid;         /* the GPU its memory is on */
	unsigned long long bytes; /* its device memory and FAKECUDA_CONTEXT_MIB */
};

/* Calls visit for every such process. Read from /proc only, never asking the
 * processes, so that a stopped or frozen one never blocks the call. */
void fc_gpu_users(void (*visit)(const struct fc_gpu_user *u, void *arg), void *arg);
/* The same in the /proc at root, with the context of each process given. */
void fc_gpu_users_with(const char *root, unsigned long long context,
		       void (*visit)(const struct fc_gpu_user *u, void *arg), void *arg);

struct fc_gpu_memory {
	unsigned long long total;
	unsigned long long used; /* at most total */
	unsigned long long free; /* total - used */
	unsigned long long users; /* of used: what the processes found hold; 0 with FAKECUDA_GPU_USED_MIB */
	int scanned; /* the processes were looked at (no FAKECUDA_GPU_USED_MIB) */
};

/* out[i]: the memory of g->uuid[i], the i-th GPU of FAKECUDA_GPUS, from one
 * look at the caller's /proc. */
void fc_gpu_memory(const struct fc_gpus *g, struct fc_gpu_memory *out);

/* The bytes of a setting given in MiB; 0 when it is not set. */
unsigned long long fc_mib_setting(const char *name);

#endif
