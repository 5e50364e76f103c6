/* Device memory backed by VMM: the program's cuMemAlloc becomes a reserved
 * address range with a physical allocation mapped into it, so that a park
 * can release the physical memory and an unpark map new memory at the same
 * address. Small and odd-sized allocations stay the driver's (rounding them
 * up to the VMM granularity would cost GPU memory); the driver's checkpoint
 * moves those as before. */
#include <stdlib.h>
#include <string.h>

#include "park.h"

static bool backing_wanted(void)
{
	static int wanted = -1;
	if (wanted < 0) {
		const char *e = getenv("CUDASNAP_PARK");
		wanted = !(e && (strcmp(e, "0") == 0 || strcmp(e, "off") == 0));
	}
	return wanted;
}

static CUmemAllocationProp prop_for(CUdevice dev)
{
	CUmemAllocationProp p;
	memset(&p, 0, sizeof(p));
	p.type = CU_MEM_ALLOCATION_TYPE_PINNED;
	p.requestedHandleTypes = CU_MEM_HANDLE_TYPE_POSIX_FILE_DESCRIPTOR; /* for CUDA IPC */
	p.location.type = CU_MEM_LOCATION_TYPE_DEVICE;
	p.location.id = dev;
	return p;
}

/* Backed when the granularity costs nothing (a multiple of it) or little
 * (a large allocation: under 1/32 more). */
static bool worth_backing(size_t bytes, size_t gran)
{
	return gran && bytes >= gran && (bytes % gran == 0 || bytes >= 32 * gran);
}

/* Maps fresh physical memory into a's range, readable and writable by its
 * device and by every device that can reach it (as cuMemAlloc memory is
 * once peer access is enabled). */
CUresult park_map_new(struct park_alloc *a, const struct park_real *r)
{
	CUmemAllocationProp p = prop_for(a->dev);
	CUmemGenericAllocationHandle h = 0;
	CUresult rc = park_create_fresh(r, &h, a->size, &p, 0);
	if (rc != CU_OK)
		return rc;
	rc = r->mem_map(a->va, a->size, 0, h, 0);
	if (rc != CU_OK) {
		r->mem_release(h);
		return rc;
	}
	CUmemAccessDesc d[16];
	size_t nd = 0;
	int count = 0;
	if (r->device_count(&count) != CU_OK || count < 1)
		count = 1;
	for (int dev = 0; dev < count && nd < 16; dev++) {
		int can = dev == a->dev;
		if (!can && r->can_peer(&can, dev, a->dev) != CU_OK)
			can = 0;
		if (can)
			d[nd++] = (CUmemAccessDesc){ { CU_MEM_LOCATION_TYPE_DEVICE, dev },
						     CU_MEM_ACCESS_FLAGS_PROT_READWRITE };
	}
	rc = r->set_access(a->va, a->size, d, nd);
	if (rc != CU_OK) {
		r->mem_unmap(a->va, a->size);
		r->mem_release(h);
		return rc;
	}
	a->handle = h;
	return CU_OK;
}

static int add(const struct park_alloc *a)
{
	if (!park_grow((void **)&park_tab.a, park_tab.n, &park_tab.cap, sizeof(*park_tab.a)))
		return -1;
	park_tab.a[park_tab.n++] = *a;
	park_tab.backed_bytes += a->size;
	return 0;
}

static size_t granularity(const struct park_real *r, CUdevice dev)
{
	CUmemAllocationProp p = prop_for(dev);
	size_t g = 0;
	if (r->granularity(&g, &p, CU_MEM_ALLOC_GRANULARITY_MINIMUM) != CU_OK)
		return 0;
	return g;
}

/* A VMM-backed allocation; CU_ERR_NOT_SUPPORTED when this one is not to be
 * backed (the caller then asks the driver for ordinary memory). */
static CUresult back(const struct park_real *r, CUdeviceptr *dptr, size_t bytes)
{
	struct park_alloc a = { 0 };
	if (!backing_wanted() || !park_vmm() || r->ctx_get(&a.ctx) != CU_OK || a.ctx == NULL ||
	    r->ctx_device(&a.dev) != CU_OK)
		return CU_ERR_NOT_SUPPORTED;
	size_t gran = granularity(r, a.dev);
	if (!worth_backing(bytes, gran))
		return CU_ERR_NOT_SUPPORTED;
	a.size = (bytes + gran - 1) / gran * gran;
	if (r->addr_reserve(&a.va, a.size, 0, 0, 0) != CU_OK)
		return CU_ERR_NOT_SUPPORTED;
	CUresult rc = park_map_new(&a, r);
	if (rc == CU_OK) {
		pthread_mutex_lock(&park_tab.mu);
		if (add(&a) != 0)
			rc = CU_ERR_OUT_OF_MEMORY;
		pthread_mutex_unlock(&park_tab.mu);
		if (rc != CU_OK) {
			r->mem_unmap(a.va, a.size);
			r->mem_release(a.handle);
		}
	}
	if (rc != CU_OK) {
		r->addr_free(a.va, a.size);
		/* Out of memory is the program's answer; anything else, the driver's own memory. */
		return rc == CU_ERR_OUT_OF_MEMORY ? rc : CU_ERR_NOT_SUPPORTED;
	}
	*dptr = a.va;
	return CU_OK;
}

CUresult park_alloc(CUdeviceptr *dptr, size_t bytes)
{
	const struct park_real *r = park_real();
	if (r == NULL || r->mem_alloc == NULL)
		return CU_ERR_NOT_INITIALIZED;
	park_gate_enter();
	CUresult rc = dptr ? back(r, dptr, bytes) : CU_ERR_NOT_SUPPORTED;
	if (rc == CU_ERR_NOT_SUPPORTED)
		rc = r->mem_alloc(dptr, bytes);
	park_gate_leave();
	return rc;
}

CUresult park_free(CUdeviceptr dptr)
{
	const struct park_real *r = park_real();
	if (r == NULL || r->mem_free == NULL)
		return CU_ERR_NOT_INITIALIZED;
	park_gate_enter();
	pthread_mutex_lock(&park_tab.mu);
	struct park_alloc *a = park_find(dptr);
	struct park_alloc gone = { 0 };
	if (a && a->va == dptr) {
		gone = *a;
		park_tab.backed_bytes -= a->size;
		*a = park_tab.a[--park_tab.n];
	}
	pthread_mutex_unlock(&park_tab.mu);
	CUresult rc;
	if (gone.va) {
		/* cuMemFree waits for the work that may still use the memory. */
		r->ctx_sync();
		rc = r->mem_unmap(gone.va, gone.size);
		if (rc == CU_OK)
			rc = r->mem_release(gone.handle);
		if (rc == CU_OK)
			rc = r->addr_free(gone.va, gone.size);
	} else {
		rc = r->mem_free(dptr);
	}
	park_gate_leave();
	return rc;
}
