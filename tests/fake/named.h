/* fakecuda-named: a CUDA program that gets its memory as the CUDA runtime
 * does (cuGetProcAddress), and does its work through driver functions
 * reached another way (--via): by name, as code linked with -lcuda calls
 * them (Triton's launchers), by dlsym, by cuGetProcAddress at some CUDA
 * version, or from a library it loads. Its worker writes a new pattern into
 * its memory, launches a kernel, synchronizes and reads the memory back,
 * over and over; a write the driver refused or that did not stay is
 * reported. */
#ifndef FAKECUDA_NAMED_H
#define FAKECUDA_NAMED_H

#include <stddef.h>
#include <stdint.h>

#include "../../park/cuda_vmm_abi.h"

typedef CUresult (*named_launch_fn)(void *f, unsigned gx, unsigned gy, unsigned gz, unsigned bx, unsigned by,
				    unsigned bz, unsigned shmem, CUstream s, void **params, void **extra);
typedef CUresult (*named_wait_fn)(CUstream s, CUdeviceptr addr, uint32_t value, unsigned flags);

/* The functions the worker uses, however they were reached. */
struct named_fns {
	cu_htod_fn htod;
	cu_dtoh_fn dtoh;
	named_launch_fn launch;
	cu_ctx_sync_fn sync;
	cu_ctx_get_fn ctx_get;
};

/* named_via.c: fills fns as --via says (handle: libcuda.so.1's, get: its
 * cuGetProcAddress_v2); 0, or -1 with the reason on stderr. */
int named_via(const char *via, void *handle, cu_get_proc_fn get, const char *probe, struct named_fns *fns);

/* named_pool.c: --pool-share and --pool-import (rt: a driver function by
 * its base name); 0, or -1. */
int named_pool_share(void *(*rt)(const char *), const char *path);
int named_pool_import(void *(*rt)(const char *), const char *path);

/* named_fiber.c: --fiber; 0 when every call from the fibre passed. */
int named_fiber(void *(*rt)(const char *));

/* named_reuse.c: --reuse-tid, once SIGUSR2 comes; prints 'reuse tid=<n>
 * again=<0|1> set=<0|1>'; 0, or -1. */
int named_reuse_tid(void *(*rt)(const char *));

#endif
