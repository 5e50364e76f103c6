#include "cuda_vmm_api.h"
#include "fakecuda.h"
#include "internal.h"
#include "proto.h"

#include <unistd.h>

/* Contexts, reduced to what the runtime does with them: one primary context
 * per device, retained and made current by each thread that uses it. Calls
 * on device memory need a current context, as on the real driver. Releasing
 * the last reference does not destroy the context (nor its memory) here.
 * A program may also create contexts of its own (cuCtxCreate_v2, current on
 * the creating thread, until cuCtxDestroy_v2); work in one runs on its
 * device's stream, as in the primary context. */

struct CUctx_st {
	int dev;
	int refs;
};

static pthread_mutex_t ctx_mu = PTHREAD_MUTEX_INITIALIZER;
static struct CUctx_st primary[FC_MAX_GPUS];
#define FC_CREATED 16
static struct CUctx_st created[FC_CREATED]; /* refs 1: in use */
static __thread CUcontext current;

/* CUDA_SUCCESS when cuInit succeeded and dev is a device of the process */
static CUresult check_dev(CUdevice dev)
{
	pthread_mutex_lock(&fc_tgt.mu);
	CUresult rc = CUDA_SUCCESS;
	if (!(fc_tgt.levels & FC_LEVEL_CUDA))
		rc = CUDA_ERROR_NOT_INITIALIZED;
	else if (dev < 0 || dev >= fc_tgt.ndev)
		rc = CUDA_ERROR_INVALID_DEVICE;
	pthread_mutex_unlock(&fc_tgt.mu);
	return rc;
}

CUresult fc_ctx_check(int *dev)
{
	if (current == NULL)
		return CUDA_ERROR_INVALID_CONTEXT;
	if (dev != NULL)
		*dev = current->dev;
	return CUDA_SUCCESS;
}

CUresult cuDevicePrimaryCtxRetain(CUcontext *ctx, CUdevice dev)
{
	CUresult rc = ctx == NULL ? CUDA_ERROR_INVALID_VALUE : check_dev(dev);
	if (rc != CUDA_SUCCESS)
		return rc;
	pthread_mutex_lock(&ctx_mu);
	primary[dev].dev = dev;
	primary[dev].refs++;
	*ctx = &primary[dev];
	pthread_mutex_unlock(&ctx_mu);
	return CUDA_SUCCESS;
}

CUresult cuDevicePrimaryCtxRelease_v2(CUdevice dev)
{
	CUresult rc = check_dev(dev);
	if (rc != CUDA_SUCCESS)
		return rc;
	pthread_mutex_lock(&ctx_mu);
	if (primary[dev].refs > 0)
		primary[dev].refs--;
	else
		rc = CUDA_ERROR_INVALID_CONTEXT;
	pthread_mutex_unlock(&ctx_mu);
	return rc;
}

CUresult cuCtxGetCurrent(CUcontext *ctx)
{
	if (ctx == NULL)
		return CUDA_ERROR_INVALID_VALUE;
	*ctx = current;
	return CUDA_SUCCESS;
}

/* NULL unbinds the thread's context; anything else must be the primary
 * context of a device of the process. */
CUresult cuCtxSetCurrent(CUcontext ctx)
{
	int known = ctx == NULL;
	for (int d = 0; !known && d < FC_MAX_GPUS; d++)
		known = ctx == &primary[d] && check_dev(d) == CUDA_SUCCESS;
	pthread_mutex_lock(&ctx_mu);
	for (int i = 0; !known && i < FC_CREATED; i++)
		known = ctx == &created[i] && created[i].refs > 0;
	pthread_mutex_unlock(&ctx_mu);
	if (!known)
		return CUDA_ERROR_INVALID_CONTEXT;
	current = ctx;
	return CUDA_SUCCESS;
}

CUresult cuCtxCreate_v2(CUcontext *ctx, unsigned int flags, CUdevice dev)
{
	CUresult rc = ctx == NULL ? CUDA_ERROR_INVALID_VALUE : check_dev(dev);
	if (rc != CUDA_SUCCESS)
		return rc;
	(void)flags;
	pthread_mutex_lock(&ctx_mu);
	rc = CUDA_ERROR_OUT_OF_MEMORY;
	for (int i = 0; rc != CUDA_SUCCESS && i < FC_CREATED; i++) {
		if (created[i].refs > 0)
			continue;
		created[i] = (struct CUctx_st){ dev, 1 };
		*ctx = current = &created[i];
		rc = CUDA_SUCCESS;
	}
	pthread_mutex_unlock(&ctx_mu);
	return rc;
}

/* A primary context is not the program's to destroy. */
CUresult cuCtxDestroy_v2(CUcontext ctx)
{
	CUresult rc = CUDA_ERROR_INVALID_CONTEXT;
	pthread_mutex_lock(&ctx_mu);
	for (int i = 0; i < FC_CREATED; i++) {
		if (ctx != &created[i] || created[i].refs == 0)
			continue;
		created[i].refs = 0;
		if (current == ctx)
			current = NULL;
		rc = CUDA_SUCCESS;
	}
	pthread_mutex_unlock(&ctx_mu);
	return rc;
}

CUresult cuCtxGetDevice(CUdevice *dev)
{
	if (dev == NULL)
		return CUDA_ERROR_INVALID_VALUE;
	return fc_ctx_check(dev);
}

/* Waits for the current context's device's stream; the fault op "sync"
 * answers an error instead (a context that met one). */
CUresult cuCtxSynchronize(void)
{
	int dev = 0;
	CUresult rc = fc_ctx_check(&dev);
	if (rc != CUDA_SUCCESS)
		return rc;
	struct fc_fault_hit hit;
	fc_faults_check(FC_OP_SYNC, getpid(), 1, &hit);
	if (hit.delay_ms)
		fc_sleep_ms(hit.delay_ms);
	return hit.error != CUDA_SUCCESS ? hit.error : fc_stream_drain_dev(dev);
}

CUresult cuDevicePrimaryCtxGetState(CUdevice dev, unsigned int *flags, int *active)
{
	CUresult rc = flags == NULL || active == NULL ? CUDA_ERROR_INVALID_VALUE : check_dev(dev);
	if (rc != CUDA_SUCCESS)
		return rc;
	pthread_mutex_lock(&ctx_mu);
	*flags = 0;
	*active = primary[dev].refs > 0;
	pthread_mutex_unlock(&ctx_mu);
	return CUDA_SUCCESS;
}

/* No peer access between the double's GPUs. */
CUresult cuDeviceCanAccessPeer(int *can, CUdevice dev, CUdevice peer)
{
	CUresult rc = can == NULL ? CUDA_ERROR_INVALID_VALUE : check_dev(dev);
	if (rc == CUDA_SUCCESS)
		rc = check_dev(peer);
	if (rc == CUDA_SUCCESS)
		*can = 0;
	return rc;
}

/* A fake kernel on the one fake stream, whatever f and stream: asynchronous,
 * waited for by cuCtxSynchronize and by a lock. Its first parameter, when
 * there is one, is its length in ms (1 ms otherwise). */
CUresult cuLaunchKernel(CUfunction f, unsigned int gx, unsigned int gy, unsigned int gz,
			unsigned int bx, unsigned int by, unsigned int bz, unsigned int shmem,
			CUstream stream, void **params, void **extra)
{
	unsigned int ms = 1;
	int dev = 0;
	CUresult rc = fc_ctx_check(&dev);
	if (rc != CUDA_SUCCESS)
		return rc;
	if (gx == 0 || gy == 0 || gz == 0 || bx == 0 || by == 0 || bz == 0)
		return CUDA_ERROR_INVALID_VALUE;
	/* the driver's refusals of parameters and of more shared memory than a
	 * block may have without opting in (48 KiB) */
	if ((params != NULL && extra != NULL) || shmem > (48u << 10))
		return CUDA_ERROR_INVALID_VALUE;
	if (params != NULL && params[0] != NULL)
		ms = *(const unsigned int *)params[0];
	return fc_kernel_on(dev, ms);
}
