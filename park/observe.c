/* What the program asks of the memory the interposer backs, answered as the
 * driver answers for cuMemAlloc memory: the range of an allocation is the
 * size the program asked for, not the granularity-rounded size mapped
 * (CU_POINTER_ATTRIBUTE_RANGE_SIZE, cuMemGetAddressRange). The bytes past
 * it up to the rounded size belong to no allocation of the program's, and
 * are answered so. And memory pools the program imports from another
 * process (CUDA IPC of stream-ordered memory): counted while they live,
 * since neither the driver nor parking could give them back after a
 * checkpoint. */
#include <string.h>

#include "park.h"

/* The backed allocation that holds ptr: its start and the size the program
 * asked for; 1 inside it, -1 in its padding, 0 in none. */
static int backed(CUdeviceptr ptr, CUdeviceptr *va, size_t *bytes)
{
	pthread_mutex_lock(&park_tab.mu);
	struct park_alloc *a = park_find(ptr);
	int in = 0;
	if (a) {
		*va = a->va;
		*bytes = a->bytes;
		in = ptr - a->va < a->bytes ? 1 : -1;
	}
	pthread_mutex_unlock(&park_tab.mu);
	return in;
}

CUresult park_w_range(CUdeviceptr *base, size_t *size, CUdeviceptr dptr)
{
	const struct park_real *r = park_real();
	if (r == NULL || r->mem_range == NULL)
		return CU_ERR_NOT_INITIALIZED;
	park_gate_enter();
	CUdeviceptr va = 0;
	size_t bytes = 0;
	int in = backed(dptr, &va, &bytes);
	CUresult rc = CU_OK;
	if (in == 0) {
		rc = r->mem_range(base, size, dptr);
	} else if (in < 0) {
		rc = CU_ERR_NOT_FOUND;
	} else {
		if (base)
			*base = va;
		if (size)
			*size = bytes;
	}
	park_gate_leave();
	return rc;
}

static bool ranged(int attr)
{
	return attr == CU_POINTER_ATTRIBUTE_RANGE_START_ADDR || attr == CU_POINTER_ATTRIBUTE_RANGE_SIZE;
}

static void fill_range(int attr, void *data, CUdeviceptr va, size_t bytes)
{
	if (attr == CU_POINTER_ATTRIBUTE_RANGE_START_ADDR)
		memcpy(data, &va, sizeof(va));
	else
		memcpy(data, &bytes, sizeof(bytes));
}

CUresult park_w_ptr_attr(void *data, int attr, CUdeviceptr ptr)
{
	const struct park_real *r = park_real();
	if (r == NULL || r->ptr_attr == NULL)
		return CU_ERR_NOT_INITIALIZED;
	park_gate_enter();
	CUdeviceptr va = 0;
	size_t bytes = 0;
	int in = ranged(attr) && data ? backed(ptr, &va, &bytes) : 0;
	CUresult rc = CU_OK;
	if (in == 0)
		rc = r->ptr_attr(data, attr, ptr);
	else if (in < 0)
		rc = CU_ERR_INVALID_VALUE; /* as for a pointer of no allocation */
	else
		fill_range(attr, data, va, bytes);
	park_gate_leave();
	return rc;
}

/* cuPointerGetAttributes fills a pointer of no allocation with zeros
 * rather than failing. */
CUresult park_w_ptr_attrs(unsigned n, int *attrs, void **data, CUdeviceptr ptr)
{
	const struct park_real *r = park_real();
	if (r == NULL || r->ptr_attrs == NULL)
		return CU_ERR_NOT_INITIALIZED;
	park_gate_enter();
	CUresult rc = r->ptr_attrs(n, attrs, data, ptr);
	CUdeviceptr va = 0;
	size_t bytes = 0;
	int in = rc == CU_OK && attrs && data ? backed(ptr, &va, &bytes) : 0;
	for (unsigned i = 0; in != 0 && i < n; i++) {
		if (!ranged(attrs[i]) || data[i] == NULL)
			continue;
		fill_range(attrs[i], data[i], in > 0 ? va : 0, in > 0 ? bytes : 0);
	}
	park_gate_leave();
	return rc;
}

static pthread_mutex_t pool_mu = PTHREAD_MUTEX_INITIALIZER;
static CUmemoryPool *pools;
static size_t npools, cappools;

/* A child of fork() imported no pool (table.c). */
static void child_forgets(void)
{
	pool_mu = (pthread_mutex_t)PTHREAD_MUTEX_INITIALIZER;
	pools = NULL;
	npools = cappools = 0;
}

__attribute__((constructor)) static void pool_atfork(void)
{
	pthread_atfork(NULL, NULL, child_forgets);
}

CUresult park_pool_import(CUmemoryPool *pool, void *handle, CUmemAllocationHandleType type, unsigned long long flags)
{
	const struct park_real *r = park_real();
	if (r == NULL || r->pool_import == NULL)
		return CU_ERR_NOT_INITIALIZED;
	park_gate_enter();
	CUresult rc = r->pool_import(pool, handle, type, flags);
	if (rc == CU_OK && pool) {
		pthread_mutex_lock(&pool_mu);
		if (park_grow((void **)&pools, npools, &cappools, sizeof(*pools)))
			pools[npools++] = *pool;
		else
			park_mark_unparkable("it lost track of a memory pool it imported (out of memory)");
		pthread_mutex_unlock(&pool_mu);
		pthread_mutex_lock(&park_tab.mu);
		park_tab.pool_imports++;
		pthread_mutex_unlock(&park_tab.mu);
	}
	park_gate_leave();
	return rc;
}

CUresult park_pool_destroy(CUmemoryPool pool)
{
	const struct park_real *r = park_real();
	if (r == NULL || r->pool_destroy == NULL)
		return CU_ERR_NOT_INITIALIZED;
	park_gate_enter();
	CUresult rc = r->pool_destroy(pool);
	bool was = false;
	pthread_mutex_lock(&pool_mu);
	for (size_t i = 0; rc == CU_OK && !was && i < npools; i++)
		if (pools[i] == pool) {
			pools[i] = pools[--npools];
			was = true;
		}
	pthread_mutex_unlock(&pool_mu);
	if (was) {
		pthread_mutex_lock(&park_tab.mu);
		park_tab.pool_imports--;
		pthread_mutex_unlock(&park_tab.mu);
	}
	park_gate_leave();
	return rc;
}
