#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>

#include "cuda_vmm_api.h"
#include "fakecuda.h"
#include "procinfo.h"
#include "proto.h"
#include "vmm.h"

/* Physical allocations of the VMM API. Each is a memfd of its own, named
 * like device memory (with FC_VMM_SUFFIX), held read-write by the process
 * that created it: that is how the NVML double counts it for that process,
 * once, and no longer once it is gone. An exported handle is a read-only fd
 * of the same memfd, which NVML does not count; an importer maps the memfd
 * and keeps no fd, so that it is the exporter's memory, as on the real
 * driver. */

static struct fc_phys **phys;
static int nphys, cap;
static CUmemGenericAllocationHandle next_handle = 0x1000;
/* Released handle values, which cuMemCreate gives out again, oldest first:
 * the real driver's handles are heap addresses (driver 580), which a later
 * allocation may get again. An import always gets a new one. */
#define FREED_MAX 64
static CUmemGenericAllocationHandle freed[FREED_MAX];
static int nfreed;

struct fc_phys **fc_vmm_all(int *n)
{
	*n = nphys;
	return phys;
}

struct fc_phys *fc_vmm_phys(CUmemGenericAllocationHandle h)
{
	for (int i = 0; i < nphys; i++)
		if (phys[i]->handle == h && !phys[i]->released)
			return phys[i];
	return NULL;
}

static CUresult add_phys(struct fc_phys *p, CUmemGenericAllocationHandle *h, int reuse)
{
	if (nphys == cap) {
		int n = cap ? cap * 2 : 16;
		struct fc_phys **bigger = realloc(phys, sizeof(struct fc_phys *) * (size_t)n);
		if (bigger == NULL)
			return CUDA_ERROR_OUT_OF_MEMORY;
		phys = bigger;
		cap = n;
	}
	if (reuse && nfreed > 0) {
		p->handle = freed[0];
		memmove(freed, freed + 1, sizeof(freed[0]) * (size_t)--nfreed);
	} else {
		p->handle = next_handle++;
	}
	phys[nphys++] = p;
	*h = p->handle;
	return CUDA_SUCCESS;
}

void fc_vmm_unref(struct fc_phys *p)
{
	if (!p->released || p->maps > 0)
		return;
	for (int i = 0; i < nphys; i++)
		if (phys[i] == p)
			phys[i] = phys[--nphys];
	if (p->fd >= 0)
		close(p->fd);
	if (p->mem != NULL)
		munmap(p->mem, p->size);
	free(p->saved);
	free(p);
}

CUmemGenericAllocationHandle fc_vmm_retain(struct fc_phys *p)
{
	if (p->released) {
		p->released = 0;
		p->handle = next_handle++;
	} else {
		p->retained++;
	}
	return p->handle;
}

int fc_vmm_memfd(const CUuuid *gpu, size_t size)
{
	char name[80], uuid[FAKECUDA_UUID_STRLEN];
	fc_uuid_format(gpu, uuid, sizeof(uuid));
	snprintf(name, sizeof(name), "%s:%s%s", FC_DEVMEM_NAME, uuid, FC_VMM_SUFFIX);
	int fd = memfd_create(name, MFD_CLOEXEC);
	if (fd >= 0 && ftruncate(fd, (off_t)size) != 0) {
		close(fd);
		fd = -1;
	}
	return fd;
}

/* *gpu: the GPU of the device the allocation is to be on */
static CUresult check_prop(const CUmemAllocationProp *prop, size_t size, CUuuid *gpu)
{
	if (prop == NULL || size == 0 || size % FC_VMM_GRANULARITY != 0 ||
	    prop->type != CU_MEM_ALLOCATION_TYPE_PINNED ||
	    prop->location.type != CU_MEM_LOCATION_TYPE_DEVICE)
		return CUDA_ERROR_INVALID_VALUE;
	if (prop->requestedHandleTypes & ~CU_MEM_HANDLE_TYPE_POSIX_FILE_DESCRIPTOR)
		return CUDA_ERROR_NOT_SUPPORTED;
	/* the flag on a device that cannot register VMM memory with a NIC */
	if (prop->allocFlags.gpuDirectRDMACapable && !fc_gdr_vmm())
		return CUDA_ERROR_NOT_SUPPORTED;
	pthread_mutex_lock(&fc_tgt.mu);
	int ok = prop->location.id >= 0 && prop->location.id < fc_tgt.ndev;
	if (ok)
		*gpu = fc_tgt.gpus.uuid[fc_tgt.map[prop->location.id]];
	pthread_mutex_unlock(&fc_tgt.mu);
	return ok ? CUDA_SUCCESS : CUDA_ERROR_INVALID_DEVICE;
}

CUresult cuMemCreate(CUmemGenericAllocationHandle *h, size_t size, const CUmemAllocationProp *prop,
		     unsigned long long flags)
{
	if (h == NULL || flags != 0)
		return CUDA_ERROR_INVALID_VALUE;
	struct fc_fault_hit hit = { 0 };
	fc_faults_check(FC_OP_MEM_CREATE, getpid(), 1, &hit);
	if (hit.error != CUDA_SUCCESS)
		return hit.error;
	CUresult rc = fc_gate_enter();
	if (rc != CUDA_SUCCESS)
		return rc;
	CUuuid gpu;
	rc = check_prop(prop, size, &gpu);
	struct fc_phys *p = rc == CUDA_SUCCESS ? calloc(1, sizeof(*p)) : NULL;
	if (rc == CUDA_SUCCESS && p == NULL)
		rc = CUDA_ERROR_OUT_OF_MEMORY;
	pthread_rwlock_wrlock(&fc_mem_rw);
	if (rc == CUDA_SUCCESS) {
		*p = (struct fc_phys){ .size = size,
				       .ordinal = prop->location.id,
				       .handle_types = (int)prop->requestedHandleTypes,
				       .rdma = prop->allocFlags.gpuDirectRDMACapable != 0,
				       .fd = -1 };
		p->fd = fc_vmm_memfd(&gpu, size);
		rc = p->fd < 0 ? CUDA_ERROR_OUT_OF_MEMORY : add_phys(p, h, 1);
	}
	if (rc != CUDA_SUCCESS && p != NULL) {
		if (p->fd >= 0)
			close(p->fd);
		free(p);
	}
	pthread_rwlock_unlock(&fc_mem_rw);
	fc_gate_leave();
	return rc;
}

CUresult cuMemRelease(CUmemGenericAllocationHandle h)
{
	CUresult rc = fc_gate_enter();
	if (rc != CUDA_SUCCESS)
		return rc;
	pthread_rwlock_wrlock(&fc_mem_rw);
	struct fc_phys *p = fc_vmm_phys(h);
	if (p == NULL) {
		rc = CUDA_ERROR_INVALID_VALUE;
	} else if (p->retained > 0) {
		p->retained--;
	} else {
		p->released = 1;
		if (nfreed < FREED_MAX)
			freed[nfreed++] = h;
		fc_vmm_unref(p);
	}
	pthread_rwlock_unlock(&fc_mem_rw);
	fc_gate_leave();
	return rc;
}

/* The caller owns the new fd: it may close it or pass it on. */
CUresult cuMemExportToShareableHandle(void *shareable, CUmemGenericAllocationHandle h,
				      CUmemAllocationHandleType type, unsigned long long flags)
{
	char path[64];
	if (shareable == NULL || flags != 0 || type != CU_MEM_HANDLE_TYPE_POSIX_FILE_DESCRIPTOR)
		return CUDA_ERROR_INVALID_VALUE;
	CUresult rc = fc_gate_enter();
	if (rc != CUDA_SUCCESS)
		return rc;
	pthread_rwlock_rdlock(&fc_mem_rw);
	struct fc_phys *p = fc_vmm_phys(h);
	if (p == NULL || p->fd < 0 ||
	    !(p->handle_types & CU_MEM_HANDLE_TYPE_POSIX_FILE_DESCRIPTOR)) {
		rc = CUDA_ERROR_INVALID_VALUE;
	} else {
		snprintf(path, sizeof(path), "/proc/self/fd/%d", p->fd);
		int fd = open(path, O_RDONLY | O_CLOEXEC);
		if (fd < 0)
			rc = CUDA_ERROR_OPERATING_SYSTEM;
		else
			*(int *)shareable = fd;
	}
	pthread_rwlock_unlock(&fc_mem_rw);
	fc_gate_leave();
	return rc;
}

/* The device ordinal of the GPU the memfd fd is on, -1 when this process
 * does not see it; -2 when fd is no VMM allocation. */
static int import_ordinal(int fd)
{
	char path[64], target[256], want[300], uuid[FAKECUDA_UUID_STRLEN];
	snprintf(path, sizeof(path), "/proc/self/fd/%d", fd);
	ssize_t n = readlink(path, target, sizeof(target) - 1);
	if (n <= 0)
		return -2;
	target[n] = '\0';
	pthread_mutex_lock(&fc_tgt.mu);
	int found = -2;
	for (int d = 0; d < fc_tgt.ndev && found == -2; d++) {
		fc_uuid_format(&fc_tgt.gpus.uuid[fc_tgt.map[d]], uuid, sizeof(uuid));
		snprintf(want, sizeof(want), "/memfd:%s:%s%s", FC_DEVMEM_NAME, uuid, FC_VMM_SUFFIX);
		if (strncmp(target, want, strlen(want)) == 0)
			found = d;
	}
	pthread_mutex_unlock(&fc_tgt.mu);
	static const char any[] = "/memfd:" FC_DEVMEM_NAME ":";
	if (found == -2 && strncmp(target, any, strlen(any)) == 0 && strstr(target, FC_VMM_SUFFIX))
		found = -1;
	return found;
}

/* The fd stays the caller's; the memory is mapped (from a read-write open
 * of it) for as long as the import is held. */
static CUresult map_import(int fd, struct fc_phys *p)
{
	char path[64];
	struct stat st;
	p->ordinal = import_ordinal(fd);
	if (p->ordinal == -2)
		return CUDA_ERROR_INVALID_VALUE;
	snprintf(path, sizeof(path), "/proc/self/fd/%d", fd);
	int rw = open(path, O_RDWR | O_CLOEXEC);
	if (rw < 0)
		return CUDA_ERROR_INVALID_VALUE;
	void *m = MAP_FAILED;
	if (fstat(rw, &st) == 0 && st.st_size > 0)
		m = mmap(NULL, (size_t)st.st_size, PROT_READ | PROT_WRITE, MAP_SHARED, rw, 0);
	close(rw);
	if (m == MAP_FAILED)
		return CUDA_ERROR_INVALID_VALUE;
	p->mem = m;
	p->size = (size_t)st.st_size;
	return CUDA_SUCCESS;
}

CUresult cuMemImportFromShareableHandle(CUmemGenericAllocationHandle *h, void *os_handle,
					CUmemAllocationHandleType type)
{
	if (h == NULL || type != CU_MEM_HANDLE_TYPE_POSIX_FILE_DESCRIPTOR)
		return CUDA_ERROR_INVALID_VALUE;
	struct fc_fault_hit hit = { 0 };
	fc_faults_check(FC_OP_IMPORT, getpid(), 1, &hit);
	if (hit.error != CUDA_SUCCESS)
		return hit.error;
	CUresult rc = fc_gate_enter();
	if (rc != CUDA_SUCCESS)
		return rc;
	struct fc_phys *p = calloc(1, sizeof(*p));
	rc = p == NULL ? CUDA_ERROR_OUT_OF_MEMORY : CUDA_SUCCESS;
	if (rc == CUDA_SUCCESS) {
		p->fd = -1;
		p->handle_types = CU_MEM_HANDLE_TYPE_POSIX_FILE_DESCRIPTOR;
		rc = map_import((int)(intptr_t)os_handle, p);
	}
	pthread_rwlock_wrlock(&fc_mem_rw);
	if (rc == CUDA_SUCCESS)
		rc = add_phys(p, h, 0);
	pthread_rwlock_unlock(&fc_mem_rw);
	if (rc != CUDA_SUCCESS && p != NULL) {
		if (p->mem != NULL)
			munmap(p->mem, p->size);
		free(p);
	}
	fc_gate_leave();
	return rc;
}
