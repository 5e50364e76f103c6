#include <stdlib.h>
#include <string.h>
#include <fcntl.h>
#include <sys/mman.h>
#include <unistd.h>

#include "cuda_vmm_api.h"
#include "internal.h"

/* Memory pools, reduced to what CUDA IPC of stream-ordered memory does with
 * them: a pool created for POSIX file descriptors is exported as a
 * descriptor and imported by another process. A process that holds an
 * imported pool is treated as one that holds an imported VMM allocation:
 * it checkpoints, but its restore answers 801 (CUDA_ERROR_NOT_SUPPORTED)
 * for ever (not measured: the pool's memory is VMM memory, shared the same
 * way). Allocations from pools are not modelled. */

struct CUmemPoolHandle_st {
	int fd; /* a memfd standing for the pool's memory */
	int imported;
	int handle_types;
};

/* cuda.h's CUmemPoolProps (88 bytes) */
struct pool_props {
	int alloc_type;
	int handle_types;
	CUmemLocation location;
	void *win32;
	size_t max_size;
	unsigned short usage;
	unsigned char reserved[54];
};
_Static_assert(sizeof(struct pool_props) == 88, "CUmemPoolProps");

static pthread_mutex_t pool_mu = PTHREAD_MUTEX_INITIALIZER;
static int imported_pools;

int fc_pool_import_held(void)
{
	pthread_mutex_lock(&pool_mu);
	int n = imported_pools;
	pthread_mutex_unlock(&pool_mu);
	return n > 0;
}

CUresult cuMemPoolCreate(CUmemoryPool *pool, const void *props_in)
{
	const struct pool_props *props = props_in;
	int dev = 0;
	CUresult rc = fc_ctx_check(&dev);
	if (rc != CUDA_SUCCESS)
		return rc;
	if (pool == NULL || props == NULL || props->alloc_type != CU_MEM_ALLOCATION_TYPE_PINNED ||
	    props->location.type != CU_MEM_LOCATION_TYPE_DEVICE)
		return CUDA_ERROR_INVALID_VALUE;
	if (props->handle_types & ~CU_MEM_HANDLE_TYPE_POSIX_FILE_DESCRIPTOR)
		return CUDA_ERROR_NOT_SUPPORTED;
	struct CUmemPoolHandle_st *p = calloc(1, sizeof(*p));
	if (p == NULL)
		return CUDA_ERROR_OUT_OF_MEMORY;
	p->fd = memfd_create("fakecuda-pool", MFD_CLOEXEC);
	p->handle_types = props->handle_types;
	if (p->fd < 0) {
		free(p);
		return CUDA_ERROR_OUT_OF_MEMORY;
	}
	*pool = p;
	return CUDA_SUCCESS;
}

CUresult cuMemPoolDestroy(CUmemoryPool pool)
{
	if (pool == NULL)
		return CUDA_ERROR_INVALID_VALUE;
	pthread_mutex_lock(&pool_mu);
	imported_pools -= pool->imported;
	pthread_mutex_unlock(&pool_mu);
	close(pool->fd);
	free(pool);
	return CUDA_SUCCESS;
}

CUresult cuMemPoolExportToShareableHandle(void *handle, CUmemoryPool pool, CUmemAllocationHandleType type,
					  unsigned long long flags)
{
	if (handle == NULL || pool == NULL || flags != 0 || type != CU_MEM_HANDLE_TYPE_POSIX_FILE_DESCRIPTOR ||
	    !(pool->handle_types & CU_MEM_HANDLE_TYPE_POSIX_FILE_DESCRIPTOR))
		return CUDA_ERROR_INVALID_VALUE;
	int fd = fcntl(pool->fd, F_DUPFD_CLOEXEC, 0);
	if (fd < 0)
		return CUDA_ERROR_OUT_OF_MEMORY;
	*(int *)handle = fd;
	return CUDA_SUCCESS;
}

/* The descriptor stays the caller's. */
CUresult cuMemPoolImportFromShareableHandle(CUmemoryPool *pool, void *handle, CUmemAllocationHandleType type,
					    unsigned long long flags)
{
	int fd = (int)(intptr_t)handle;
	if (pool == NULL || flags != 0 || type != CU_MEM_HANDLE_TYPE_POSIX_FILE_DESCRIPTOR || fd < 0)
		return CUDA_ERROR_INVALID_VALUE;
	struct CUmemPoolHandle_st *p = calloc(1, sizeof(*p));
	if (p == NULL)
		return CUDA_ERROR_OUT_OF_MEMORY;
	p->fd = fcntl(fd, F_DUPFD_CLOEXEC, 0);
	if (p->fd < 0) {
		free(p);
		return CUDA_ERROR_INVALID_VALUE;
	}
	p->imported = 1;
	p->handle_types = CU_MEM_HANDLE_TYPE_POSIX_FILE_DESCRIPTOR;
	pthread_mutex_lock(&pool_mu);
	imported_pools++;
	pthread_mutex_unlock(&pool_mu);
	*pool = p;
	return CUDA_SUCCESS;
}
