/* VMM memory the program imports itself from another process
 * (cuMemImportFromShareableHandle, a POSIX file descriptor it passed on its
 * own): the driver checkpoints such a process but never restores it
 * (driver 580: CUDA_ERROR_NOT_SUPPORTED, for good), nothing in /proc shows
 * it, and parking cannot carry it (the interposer cannot ask the exporter
 * for the memory again). So the interposer counts what is alive of such
 * imports, handles not yet released and the mappings made of them, and
 * cudasnap refuses the process while any is. Calls on the program's own
 * memory only pass through. */
#include <string.h>

#include "park.h"

struct imported {
	CUmemGenericAllocationHandle h;
	bool released;
	unsigned maps;
};

struct mapping {
	CUdeviceptr va;
	size_t size;
	CUmemGenericAllocationHandle h;
};

static pthread_mutex_t mu = PTHREAD_MUTEX_INITIALIZER;
static struct imported *imps;
static size_t nimps, capimps;
static struct mapping *maps;
static size_t nmaps, capmaps;

static struct imported *find(CUmemGenericAllocationHandle h)
{
	for (size_t i = 0; i < nimps; i++)
		if (imps[i].h == h)
			return &imps[i];
	return NULL;
}

/* An import whose handle is released and whose mappings are gone is gone. */
static void settle(struct imported *x)
{
	if (x->released && x->maps == 0)
		*x = imps[--nimps];
}

unsigned park_vmm_imports(void)
{
	pthread_mutex_lock(&mu);
	unsigned n = (unsigned)nimps;
	pthread_mutex_unlock(&mu);
	return n;
}

CUresult park_w_import(CUmemGenericAllocationHandle *h, void *os_handle, CUmemAllocationHandleType type)
{
	const struct park_real *r = park_real();
	if (r == NULL || r->import_handle == NULL)
		return CU_ERR_NOT_INITIALIZED;
	park_gate_enter();
	CUresult rc = r->import_handle(h, os_handle, type);
	if (rc == CU_OK) {
		pthread_mutex_lock(&mu);
		if (park_grow((void **)&imps, nimps, &capimps, sizeof(*imps)))
			imps[nimps++] = (struct imported){ .h = *h };
		else
			park_mark_unparkable("out of memory tracking its imports");
		pthread_mutex_unlock(&mu);
	}
	park_gate_leave();
	return rc;
}

CUresult park_w_map(CUdeviceptr va, size_t size, size_t offset, CUmemGenericAllocationHandle h,
		    unsigned long long flags)
{
	const struct park_real *r = park_real();
	if (r == NULL || r->mem_map == NULL)
		return CU_ERR_NOT_INITIALIZED;
	park_gate_enter();
	CUresult rc = r->mem_map(va, size, offset, h, flags);
	pthread_mutex_lock(&mu);
	struct imported *x = rc == CU_OK ? find(h) : NULL;
	if (x && park_grow((void **)&maps, nmaps, &capmaps, sizeof(*maps))) {
		maps[nmaps++] = (struct mapping){ va, size, h };
		x->maps++;
	}
	pthread_mutex_unlock(&mu);
	park_gate_leave();
	return rc;
}

CUresult park_w_unmap(CUdeviceptr va, size_t size)
{
	const struct park_real *r = park_real();
	if (r == NULL || r->mem_unmap == NULL)
		return CU_ERR_NOT_INITIALIZED;
	park_gate_enter();
	CUresult rc = r->mem_unmap(va, size);
	pthread_mutex_lock(&mu);
	for (size_t i = 0; rc == CU_OK && i < nmaps;) {
		struct mapping *m = &maps[i];
		if (m->va < va || m->va + m->size > va + size) {
			i++;
			continue;
		}
		struct imported *x = find(m->h);
		*m = maps[--nmaps];
		if (x) {
			x->maps--;
			settle(x);
		}
	}
	pthread_mutex_unlock(&mu);
	park_gate_leave();
	return rc;
}

CUresult park_w_release(CUmemGenericAllocationHandle h)
{
	const struct park_real *r = park_real();
	if (r == NULL || r->mem_release == NULL)
		return CU_ERR_NOT_INITIALIZED;
	park_gate_enter();
	CUresult rc = r->mem_release(h);
	pthread_mutex_lock(&mu);
	struct imported *x = rc == CU_OK ? find(h) : NULL;
	if (x) {
		x->released = true;
		settle(x);
	}
	pthread_mutex_unlock(&mu);
	park_gate_leave();
	return rc;
}

PARK_EXPORT CUresult cuMemMap(CUdeviceptr va, size_t size, size_t offset, CUmemGenericAllocationHandle h,
			      unsigned long long flags)
{
	return park_w_map(va, size, offset, h, flags);
}

PARK_EXPORT CUresult cuMemUnmap(CUdeviceptr va, size_t size)
{
	return park_w_unmap(va, size);
}

PARK_EXPORT CUresult cuMemRelease(CUmemGenericAllocationHandle h)
{
	return park_w_release(h);
}
