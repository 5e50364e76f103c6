/* Device memory backed by VMM: the program's cuMemAlloc becomes a reserved
 * address range with a physical allocation mapped into it, so that a park
 * can release the physical memory and an unpark map new memory at the same
 * address. Small and odd-sized allocations stay the driver's (rounding them
 * up to the VMM granularity would cost GPU memory); the driver's checkpoint
 * moves those as before. So does all memory of a device on which VMM memory
 * cannot be registered for GPUDirect RDMA while cuMemAlloc memory can:
 * NICs, GDRCopy and GPUDirect Storage would refuse it. */
#include <stdlib.h>
#include <string.h>

#include "park.h"

#define MAX_DEVS 64

/* Per device: 0 not asked yet, 1 backed without the RDMA flag, 2 backed
 * with it, 3 not backed. */
static unsigned char rdma_state[MAX_DEVS];

static int attr(const struct park_real *r, int which, CUdevice dev)
{
	int v = 0;
	return r->dev_attr && r->dev_attr(&v, which, dev) == CU_OK ? v : 0;
}

static unsigned char rdma_of(const struct park_real *r, CUdevice dev)
{
	if (dev < 0 || dev >= MAX_DEVS)
		return 3;
	unsigned char s = __atomic_load_n(&rdma_state[dev], __ATOMIC_ACQUIRE);
	if (s == 0) {
		bool legacy = attr(r, CU_DEVICE_ATTRIBUTE_GPU_DIRECT_RDMA_SUPPORTED, dev) != 0;
		bool vmm = attr(r, CU_DEVICE_ATTRIBUTE_GPU_DIRECT_RDMA_WITH_CUDA_VMM_SUPPORTED, dev) != 0;
		s = vmm ? 2 : legacy ? 3 : 1;
		__atomic_store_n(&rdma_state[dev], s, __ATOMIC_RELEASE);
	}
	return s;
}

static CUmemAllocationProp prop_for(const struct park_real *r, CUdevice dev)
{
	CUmemAllocationProp p;
	memset(&p, 0, sizeof(p));
	p.type = CU_MEM_ALLOCATION_TYPE_PINNED;
	p.requestedHandleTypes = CU_MEM_HANDLE_TYPE_POSIX_FILE_DESCRIPTOR; /* for CUDA IPC */
	p.location.type = CU_MEM_LOCATION_TYPE_DEVICE;
	p.location.id = dev;
	/* cuMemAlloc memory can be registered with a NIC (GPUDirect RDMA) */
	p.allocFlags.gpuDirectRDMACapable = rdma_of(r, dev) == 2;
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
	CUmemAllocationProp p = prop_for(r, a->dev);
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
	CUmemAllocationProp p = prop_for(r, dev);
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
	if (park_passthrough || !park_vmm() || r->ctx_get(&a.ctx) != CU_OK || a.ctx == NULL ||
	    r->ctx_device(&a.dev) != CU_OK || rdma_of(r, a.dev) == 3)
		return CU_ERR_NOT_SUPPORTED;
	size_t gran = granularity(r, a.dev);
	if (!worth_backing(bytes, gran))
		return CU_ERR_NOT_SUPPORTED;
	a.bytes = bytes;
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

/* cuMemFree waits for the work that may still use the memory: that of the
 * allocation's context, not the caller's. When that wait fails (the
 * context met an error), the memory stays, and the error is the answer,
 * as the driver's cuMemFree answers it. */
static CUresult free_backed(const struct park_real *r, struct park_alloc *gone)
{
	CUresult rc = park_sync_ctx(r, gone->ctx);
	if (rc == CU_OK)
		rc = r->mem_unmap(gone->va, gone->size);
	if (rc == CU_OK) {
		r->mem_release(gone->handle);
		r->addr_free(gone->va, gone->size);
	}
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
	CUresult rc = gone.va ? free_backed(r, &gone) : r->mem_free(dptr);
	if (rc != CU_OK && gone.va) {
		pthread_mutex_lock(&park_tab.mu);
		if (add(&gone) != 0)
			park_mark_unparkable("it lost track of an allocation it could not free");
		pthread_mutex_unlock(&park_tab.mu);
	}
	park_gate_leave();
	return rc;
}
