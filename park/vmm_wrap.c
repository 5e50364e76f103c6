/* The program's own VMM calls: they reach the driver as they are, except
 * that a handle of an import the interposer carried through a park is the
 * driver's new one (vmm_import.c), and what the program makes, maps,
 * exports and imports is noted for parking. */
#include "park.h"

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
		park_vmm_mapped(h, va, size, offset);
		park_vmm_made_mapped(h, va, size);
		park_backed_mapped(h, va, size);
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
