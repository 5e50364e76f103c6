#include <stdio.h>
#include <sys/mman.h>
#include <ucontext.h>
#include <unistd.h>

#include "cuda_vmm_api.h"
#include "named.h"

/* --fiber: driver calls from the first frame of a makecontext stack whose
 * top is followed by a guard page, as fibres and coroutines run them. The
 * calls' stack arguments (cuLaunchKernel's last five) must arrive intact,
 * and nothing may read above the frame: the guard page would stop the
 * program. */

static ucontext_t back, fibre;
static cu_ctx_sync_fn sync_rt;
static named_launch_fn launch_rt;
static CUresult rcs[4];
static const char *const what[4] = { "cuCtxSynchronize by name", "cuCtxSynchronize from cuGetProcAddress",
				     "cuLaunchKernel by name", "cuLaunchKernel from cuGetProcAddress" };

static __attribute__((noinline)) CUresult launch(named_launch_fn fn)
{
	unsigned ms = 1;
	void *params[] = { &ms };
	/* shmem 0 and extra NULL: a stack argument lost or moved makes the
	 * driver refuse the launch (too much shared memory, both params and extra) */
	return fn(NULL, 1, 1, 1, 1, 1, 1, 0, NULL, params, NULL);
}

/* The fibre's first frame: no locals, so that its callees' frames lie
 * within a few words of the guard page. */
static void fibre_main(void)
{
	rcs[0] = cuCtxSynchronize();
	rcs[1] = sync_rt();
	rcs[2] = launch((named_launch_fn)cuLaunchKernel);
	rcs[3] = launch(launch_rt);
}

int named_fiber(void *(*rt)(const char *))
{
	long pg = sysconf(_SC_PAGESIZE);
	size_t size = 16 * (size_t)pg;
	/* the stack, then a guard page right above its top */
	char *m = mmap(NULL, size + (size_t)pg, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
	if (m == MAP_FAILED || mprotect(m + size, (size_t)pg, PROT_NONE) != 0) {
		perror("fakecuda-named: fibre stack");
		return 2;
	}
	sync_rt = (cu_ctx_sync_fn)rt("cuCtxSynchronize");
	launch_rt = (named_launch_fn)rt("cuLaunchKernel");
	for (int i = 0; i < 4; i++)
		rcs[i] = -1;
	if (getcontext(&fibre) != 0)
		return 2;
	fibre.uc_stack.ss_sp = m;
	fibre.uc_stack.ss_size = size;
	fibre.uc_link = &back;
	makecontext(&fibre, fibre_main, 0);
	if (swapcontext(&back, &fibre) != 0)
		return 2;
	munmap(m, size + (size_t)pg);
	for (int i = 0; i < 4; i++)
		if (rcs[i] != CU_OK) {
			printf("fiber FAILED %s -> %d\n", what[i], rcs[i]);
			return 1;
		}
	printf("fiber ok\n");
	return 0;
}
