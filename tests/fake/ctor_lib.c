#include <stddef.h>
#include <time.h>

#include "cuda_vmm_api.h"

/* libfakecuda-ctor.so: a library whose constructor calls the driver, as a
 * library that sets CUDA up when loaded does; it runs while the thread that
 * loads it holds the dynamic linker's lock. It waits a while first, so that
 * a park or a question to the interposer comes meanwhile
 * (fakecuda-named --load). CTOR_POINTER (libfakecuda-ctor-pointer.so):
 * it asks where a pointer's memory lives instead. */
__attribute__((constructor)) static void ctor(void)
{
	struct timespec ts = { 0, 800 * 1000 * 1000L };
	nanosleep(&ts, NULL);
#ifdef CTOR_POINTER
	CUdeviceptr base = 0;
	size_t size = 0;
	(void)cuMemGetAddressRange_v2(&base, &size, 0x1000);
#else
	int v = 0;
	(void)cuDriverGetVersion(&v);
#endif
}
