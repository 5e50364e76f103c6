#include <stdlib.h>
#include <unistd.h>

#include "cuda_vmm_api.h"
#include "proto.h"
#include "vmm.h"

/* The device address space of the VMM API: reservations taken from a range
 * of their own (apart from legacy and imported memory), and mappings of
 * physical allocations inside them, each with the access cuMemSetAccess
 * gave it (none at first: copies to it fail until then). */

#define VA_BASE 0x7f4c00000000ull
#define VA_END 0x7f5c00000000ull /* 1 TiB */

struct resv {
	uint64_t base;
	size_t size;
};

struct vmap {
	uint64_t ptr;
	size_t size;
	size_t offset; /* into the physical allocation */
	struct fc_phys *p;
	int access; /* CUmemAccess_flags */
};

static struct resv *resvs;
static int nresvs, resv_cap;
static struct vmap *maps;
static int nmaps, map_cap;

/* Grows *v (of *cap elements of size elem) to hold one more than n. */
static int grow(void **v, int *cap, int n, size_t elem)
{
	if (n < *cap)
		return 0;
	int c = *cap ? *cap * 2 : 16;
	void *bigger = realloc(*v, elem * (size_t)c);
	if (bigger == NULL)
		return -1;
	*v = bigger;
	*cap = c;
	return 0;
}

CUresult cuMemGetAllocationGranularity(size_t *gran, const CUmemAllocationProp *prop,
				       CUmemAllocationGranularity_flags option)
{
	if (gran == NULL || prop == NULL || prop->location.type != CU_MEM_LOCATION_TYPE_DEVICE ||
	    (option != CU_MEM_ALLOC_GRANULARITY_MINIMUM &&
	     option != CU_MEM_ALLOC_GRANULARITY_RECOMMENDED))
		return CUDA_ERROR_INVALID_VALUE;
	*gran = FC_VMM_GRANULARITY;
	return CUDA_SUCCESS;
}

static int resv_free(uint64_t at, size_t size)
{
	if (at < VA_BASE || at > VA_END || size > VA_END - at)
		return 0;
	for (int i = 0; i < nresvs; i++)
		if (resvs[i].base < at + size && at < resvs[i].base + resvs[i].size)
			return 0;
	return 1;
}

/* First fit; 0 when the range is full. */
static uint64_t find_room(size_t size, size_t align)
{
	uint64_t at = VA_BASE;
	for (int moved = 1; moved;) {
		moved = 0;
		for (int i = 0; i < nresvs; i++) {
			const struct resv *r = &resvs[i];
			if (r->base < at + size && at < r->base + r->size) {
				at = (r->base + r->size + align - 1) / align * align;
				moved = 1;
			}
		}
	}
	return at <= VA_END && size <= VA_END - at ? at : 0;
}

/* addr is a hint, taken when that range is free, as the real driver does. */
CUresult cuMemAddressReserve(CUdeviceptr *ptr, size_t size, size_t align, CUdeviceptr addr,
			     unsigned long long flags)
{
	if (ptr == NULL || size == 0 || size % FC_VMM_GRANULARITY != 0 || flags != 0 ||
	    (align & (align - 1)))
		return CUDA_ERROR_INVALID_VALUE;
	if (align < FC_VMM_GRANULARITY)
		align = FC_VMM_GRANULARITY;
	CUresult rc = fc_gate_enter();
	if (rc != CUDA_SUCCESS)
		return rc;
	pthread_rwlock_wrlock(&fc_mem_rw);
	uint64_t at = addr != 0 && addr % align == 0 && resv_free(addr, size) ?
		addr :
		find_room(size, align);
	if (at == 0 || grow((void **)&resvs, &resv_cap, nresvs, sizeof(*resvs)) != 0) {
		rc = CUDA_ERROR_OUT_OF_MEMORY;
	} else {
		resvs[nresvs++] = (struct resv){ at, size };
		*ptr = at;
	}
	pthread_rwlock_unlock(&fc_mem_rw);
	fc_gate_leave();
	return rc;
}

static int map_overlaps(uint64_t ptr, size_t size)
{
	for (int i = 0; i < nmaps; i++)
		if (maps[i].ptr < ptr + size && ptr < maps[i].ptr + maps[i].size)
			return 1;
	return 0;
}

/* The whole reservation, with nothing mapped in it any more. */
CUresult cuMemAddressFree(CUdeviceptr ptr, size_t size)
{
	CUresult rc = fc_gate_enter();
	if (rc != CUDA_SUCCESS)
		return rc;
	pthread_rwlock_wrlock(&fc_mem_rw);
	rc = CUDA_ERROR_INVALID_VALUE;
	for (int i = 0; i < nresvs; i++) {
		if (resvs[i].base != ptr || resvs[i].size != size || map_overlaps(ptr, size))
			continue;
		resvs[i] = resvs[--nresvs];
		rc = CUDA_SUCCESS;
		break;
	}
	pthread_rwlock_unlock(&fc_mem_rw);
	fc_gate_leave();
	return rc;
}

static int in_reservation(uint64_t ptr, size_t size)
{
	for (int i = 0; i < nresvs; i++)
		if (ptr >= resvs[i].base && size <= resvs[i].size &&
		    ptr - resvs[i].base <= resvs[i].size - size)
			return 1;
	return 0;
}

CUresult cuMemMap(CUdeviceptr ptr, size_t size, size_t offset, CUmemGenericAllocationHandle h,
		  unsigned long long flags)
{
	if (size == 0 || size % FC_VMM_GRANULARITY != 0 || offset % FC_VMM_GRANULARITY != 0 ||
	    flags != 0 || ptr % FC_VMM_GRANULARITY != 0)
		return CUDA_ERROR_INVALID_VALUE;
	CUresult rc = fc_gate_enter();
	if (rc != CUDA_SUCCESS)
		return rc;
	pthread_rwlock_wrlock(&fc_mem_rw);
	struct fc_phys *p = fc_vmm_phys(h);
	if (p == NULL || offset > p->size || size > p->size - offset ||
	    !in_reservation(ptr, size) || map_overlaps(ptr, size))
		rc = CUDA_ERROR_INVALID_VALUE;
	else if (grow((void **)&maps, &map_cap, nmaps, sizeof(*maps)) != 0)
		rc = CUDA_ERROR_OUT_OF_MEMORY;
	if (rc == CUDA_SUCCESS) {
		maps[nmaps++] =
			(struct vmap){ ptr, size, offset, p, CU_MEM_ACCESS_FLAGS_PROT_NONE };
		p->maps++;
	}
	pthread_rwlock_unlock(&fc_mem_rw);
	fc_gate_leave();
	return rc;
}

/* [ptr, ptr + size) is made of whole mappings, without a gap: unmap and
 * access act on whole mappings only. */
static int whole_mappings(uint64_t ptr, size_t size)
{
	size_t covered = 0;
	for (int i = 0; i < nmaps; i++) {
		const struct vmap *m = &maps[i];
		if (!(m->ptr < ptr + size && ptr < m->ptr + m->size))
			continue;
		if (m->ptr < ptr || m->ptr + m->size > ptr + size)
			return 0;
		covered += m->size;
	}
	return size > 0 && covered == size;
}

CUresult cuMemUnmap(CUdeviceptr ptr, size_t size)
{
	struct fc_fault_hit hit = { 0 };
	fc_faults_check(FC_OP_MEM_UNMAP, getpid(), 1, &hit);
	if (hit.error != CUDA_SUCCESS)
		return hit.error;
	CUresult rc = fc_gate_enter();
	if (rc != CUDA_SUCCESS)
		return rc;
	pthread_rwlock_wrlock(&fc_mem_rw);
	if (!whole_mappings(ptr, size))
		rc = CUDA_ERROR_INVALID_VALUE;
	for (int i = 0; rc == CUDA_SUCCESS && i < nmaps;) {
		struct vmap m = maps[i];
		if (!(m.ptr >= ptr && m.ptr - ptr < size)) {
			i++;
			continue;
		}
		maps[i] = maps[--nmaps];
		m.p->maps--;
		fc_vmm_unref(m.p);
	}
	pthread_rwlock_unlock(&fc_mem_rw);
	fc_gate_leave();
	return rc;
}

static CUresult check_desc(const CUmemAccessDesc *desc, size_t count, int *access)
{
	*access = CU_MEM_ACCESS_FLAGS_PROT_NONE;
	pthread_mutex_lock(&fc_tgt.mu);
	int ndev = fc_tgt.ndev;
	pthread_mutex_unlock(&fc_tgt.mu);
	for (size_t i = 0; i < count; i++) {
		int f = (int)desc[i].flags;
		if (desc[i].location.type != CU_MEM_LOCATION_TYPE_DEVICE ||
		    desc[i].location.id < 0 || desc[i].location.id >= ndev ||
		    (f != CU_MEM_ACCESS_FLAGS_PROT_NONE && f != CU_MEM_ACCESS_FLAGS_PROT_READ &&
		     f != CU_MEM_ACCESS_FLAGS_PROT_READWRITE))
			return CUDA_ERROR_INVALID_VALUE;
		/* one address space for every device: the widest access wins */
		*access |= f;
	}
	return CUDA_SUCCESS;
}

CUresult cuMemSetAccess(CUdeviceptr ptr, size_t size, const CUmemAccessDesc *desc, size_t count)
{
	int access;
	if (desc == NULL || count == 0)
		return CUDA_ERROR_INVALID_VALUE;
	CUresult rc = check_desc(desc, count, &access);
	if (rc != CUDA_SUCCESS)
		return rc;
	if ((rc = fc_gate_enter()) != CUDA_SUCCESS)
		return rc;
	pthread_rwlock_wrlock(&fc_mem_rw);
	if (!whole_mappings(ptr, size))
		rc = CUDA_ERROR_INVALID_VALUE;
	for (int i = 0; rc == CUDA_SUCCESS && i < nmaps; i++)
		if (maps[i].ptr >= ptr && maps[i].ptr - ptr < size)
			maps[i].access = access;
	pthread_rwlock_unlock(&fc_mem_rw);
	fc_gate_leave();
	return rc;
}

static const struct vmap *find_map(uint64_t dptr)
{
	for (int i = 0; i < nmaps; i++)
		if (dptr >= maps[i].ptr && dptr - maps[i].ptr < maps[i].size)
			return &maps[i];
	return NULL;
}

/* The handle of the physical allocation mapped at addr, one reference more
 * (released with cuMemRelease); an address that is not mapped: 1. */
CUresult cuMemRetainAllocationHandle(CUmemGenericAllocationHandle *h, void *addr)
{
	if (h == NULL)
		return CUDA_ERROR_INVALID_VALUE;
	CUresult rc = fc_gate_enter();
	if (rc != CUDA_SUCCESS)
		return rc;
	pthread_rwlock_wrlock(&fc_mem_rw);
	const struct vmap *m = find_map((uint64_t)(uintptr_t)addr);
	if (m == NULL)
		rc = CUDA_ERROR_INVALID_VALUE;
	else
		*h = fc_vmm_retain(m->p);
	pthread_rwlock_unlock(&fc_mem_rw);
	fc_gate_leave();
	return rc;
}

/* Called with fc_mem_rw held. */
CUresult fc_vmm_segment(uint64_t dptr, int write, struct fc_region *r, size_t *avail)
{
	const struct vmap *m = find_map(dptr);
	int need = write ? CU_MEM_ACCESS_FLAGS_PROT_READWRITE : CU_MEM_ACCESS_FLAGS_PROT_READ;
	if (m == NULL || (m->access & need) != need)
		return CUDA_ERROR_INVALID_VALUE;
	size_t at = m->offset + (size_t)(dptr - m->ptr);
	r->fd = m->p->fd;
	r->off = (off_t)at;
	r->mem = m->p->mem != NULL ? m->p->mem + at : NULL;
	*avail = m->size - (size_t)(dptr - m->ptr);
	return CUDA_SUCCESS;
}

/* Called with fc_mem_rw held. */
struct fc_phys *fc_vmm_phys_at(uint64_t dptr)
{
	const struct vmap *m = find_map(dptr);
	return m ? m->p : NULL;
}

int fc_vmm_range(uint64_t dptr, uint64_t *base, size_t *bytes)
{
	const struct vmap *m = find_map(dptr);
	if (m == NULL)
		return -1;
	*base = m->ptr;
	*bytes = m->size;
	return 0;
}
