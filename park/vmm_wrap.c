/* The program's own VMM calls: they reach the driver as they are, except
 * that a handle of an import the interposer carried through a park is the
 * driver's new one (vmm_import.c), and what the program makes, maps,
 * exports and imports is noted for parking. */
#include <pthread.h>

#include "park.h"

/* Mappings of memory the program made itself: a park does not move it (the
 * driver's checkpoint does), and cudasnap says how much that is. */
struct own_map {
	CUdeviceptr va;
	size_t size;
};
static pthread_mutex_t own_mu = PTHREAD_MUTEX_INITIALIZER;
static struct own_map *owns;
static size_t nowns, capowns;
static bool own_lost; /* a mapping it could not note */

static void own_forget(void)
{
	own_mu = (pthread_mutex_t)PTHREAD_MUTEX_INITIALIZER;
	owns = NULL;
	nowns = capowns = 0;
	own_lost = false;
}

__attribute__((constructor)) static void own_atfork(void)
{
	pthread_atfork(NULL, NULL, own_forget);
}

static void own_mapped(CUdeviceptr va, size_t size)
{
	pthread_mutex_lock(&own_mu);
	if (park_grow((void **)&owns, nowns, &capowns, sizeof(*owns)))
		owns[nowns++] = (struct own_map){ va, size };
	else
		own_lost = true;
	pthread_mutex_unlock(&own_mu);
}

static void own_unmapped(CUdeviceptr va, size_t size)
{
	pthread_mutex_lock(&own_mu);
	for (size_t i = 0; i < nowns;)
		if (owns[i].va >= va && owns[i].va + owns[i].size <= va + size)
			owns[i] = owns[--nowns];
		else
			i++;
	if (nowns == 0)
		own_lost = false; /* nothing of its own is mapped any longer */
	pthread_mutex_unlock(&own_mu);
}

unsigned long long park_vmm_own_bytes(unsigned *maps)
{
	unsigned long long b = 0;
	pthread_mutex_lock(&own_mu);
	for (size_t i = 0; i < nowns; i++)
		b += owns[i].size;
	*maps = (unsigned)nowns + own_lost;
	pthread_mutex_unlock(&own_mu);
	return b;
}

CUresult park_w_create(CUmemGenericAllocationHandle *h, size_t size, const CUmemAllocationProp *prop,
		       unsigned long long flags)
{
	const struct park_real *r = park_real();
	if (r == NULL || r->mem_create == NULL)
		return CU_ERR_NOT_INITIALIZED;
	park_gate_enter();
	CUresult rc = h ? park_create_fresh(r, h, size, prop, flags) : r->mem_create(h, size, prop, flags);
	if (rc == CU_OK)
		park_vmm_made(*h, prop);
	park_gate_leave();
	return rc;
}

CUresult park_w_import(CUmemGenericAllocationHandle *h, void *os_handle, CUmemAllocationHandleType type)
{
	const struct park_real *r = park_real();
	if (r == NULL || r->import_handle == NULL)
		return CU_ERR_NOT_INITIALIZED;
	park_gate_enter();
	CUresult rc = h ? park_import_fresh(r, h, os_handle, type) : r->import_handle(h, os_handle, type);
	if (rc == CU_OK)
		park_vmm_imported(*h, type == CU_MEM_HANDLE_TYPE_POSIX_FILE_DESCRIPTOR ? (int)(intptr_t)os_handle : -1);
	park_gate_leave();
	return rc;
}

CUresult park_w_export(void *shareable, CUmemGenericAllocationHandle h, CUmemAllocationHandleType type,
		       unsigned long long flags, bool *marked)
{
	const struct park_real *r = park_real();
	if (r == NULL || r->export_handle == NULL)
		return CU_ERR_NOT_INITIALIZED;
	park_gate_enter();
	CUresult rc = r->export_handle(shareable, park_vmm_real(h), type, flags);
	if (rc == CU_OK)
		park_backed_exported(h);
	*marked = rc == CU_OK && type == CU_MEM_HANDLE_TYPE_POSIX_FILE_DESCRIPTOR && shareable &&
		park_vmm_exported(h, *(int *)shareable);
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
	CUresult rc = r->mem_map(va, size, offset, park_vmm_real(h), flags);
	if (rc == CU_OK) {
		bool imported = park_vmm_mapped(h, va, size, offset);
		park_vmm_made_mapped(h, va, size);
		if (!park_backed_mapped(h, va, size) && !imported)
			own_mapped(va, size);
	}
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
	if (rc == CU_OK) {
		park_vmm_unmapped(va, size);
		park_vmm_made_unmapped(va, size);
		park_backed_unmapped(va, size);
		own_unmapped(va, size);
	}
	park_gate_leave();
	return rc;
}

CUresult park_w_release(CUmemGenericAllocationHandle h)
{
	const struct park_real *r = park_real();
	if (r == NULL || r->mem_release == NULL)
		return CU_ERR_NOT_INITIALIZED;
	park_gate_enter();
	CUresult rc = CU_OK;
	if (!park_vmm_release(h)) {
		rc = park_backed_release(h) ? r->mem_release(h) : CU_ERR_INVALID_VALUE;
		if (rc == CU_OK)
			park_vmm_made_released(h);
	}
	park_gate_leave();
	return rc;
}

CUresult park_w_retain(CUmemGenericAllocationHandle *h, void *addr)
{
	const struct park_real *r = park_real();
	if (r == NULL || r->retain == NULL)
		return CU_ERR_NOT_INITIALIZED;
	park_gate_enter();
	CUresult rc = r->retain(h, addr);
	if (rc == CU_OK && h) {
		*h = park_vmm_retained(*h, (CUdeviceptr)(uintptr_t)addr);
		park_backed_retained(*h);
	}
	park_gate_leave();
	return rc;
}

CUresult park_w_props(CUmemAllocationProp *prop, CUmemGenericAllocationHandle h)
{
	const struct park_real *r = park_real();
	if (r == NULL || r->props == NULL)
		return CU_ERR_NOT_INITIALIZED;
	park_gate_enter();
	CUresult rc = r->props(prop, park_vmm_real(h));
	park_gate_leave();
	return rc;
}

CUresult park_w_access(CUdeviceptr va, size_t size, const CUmemAccessDesc *desc, size_t count)
{
	const struct park_real *r = park_real();
	if (r == NULL || r->set_access == NULL)
		return CU_ERR_NOT_INITIALIZED;
	park_gate_enter();
	CUresult rc = r->set_access(va, size, desc, count);
	if (rc == CU_OK && desc)
		park_vmm_access(va, size, desc, count);
	park_gate_leave();
	return rc;
}
