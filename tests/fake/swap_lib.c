#include <stddef.h>

#include "cuda_vmm_api.h"

/* libfakecuda-swapb.so: a library that binds a driver function the
 * interposer does not know (lazily: nothing binds it before its first
 * call). libfakecuda-swapa.so: the same library, but for that name, which
 * no driver defines; it binds nothing of the driver. Built alike, they take
 * the same room, and one loaded where the other was unloaded takes its
 * addresses (fakecuda-named --via swap:FILE). */
#ifdef SWAP_CLEAN
#define SWAP_CALLS xuMemcpyHtoD_v9
#else
#define SWAP_CALLS cuMemcpyHtoD_v9
#endif

__attribute__((visibility("default"))) CUresult swap_htod(CUdeviceptr dst, const void *src, size_t n);
extern CUresult SWAP_CALLS(CUdeviceptr dst, const void *src, size_t n);

CUresult swap_htod(CUdeviceptr dst, const void *src, size_t n)
{
	return SWAP_CALLS(dst, src, n);
}
