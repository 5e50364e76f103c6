#include <errno.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "cuda_vmm_api.h"
#include "proto.h"
#include "vmm.h"

/* Copies and sets on any device memory: legacy allocations, their imports,
 * VMM mappings and VMM imports. They block while the process is locked or
 * checkpointed, as every call does. A range that is not wholly allocated or
 * mapped (with the access the copy needs) answers CUDA_ERROR_INVALID_VALUE,
 * before any byte is written: the real driver faults there, and a clear
 * error is what a test wants. A VMM range that is unmapped (parked) fails
 * so, and never reads what the memory held before. */

#define CHUNK (1u << 20)

pthread_rwlock_t fc_mem_rw = PTHREAD_RWLOCK_INITIALIZER;

static int segment(uint64_t dptr, int write, struct fc_region *r, size_t *avail)
{
	if (fc_devmem_segment(dptr, r, avail) == 0)
		return 0;
	return fc_vmm_segment(dptr, write, r, avail) == CUDA_SUCCESS ? 0 : -1;
}

/* Called with fc_mem_rw held; whether all of the range may be accessed. */
static int range_ok(uint64_t dptr, size_t len, int write)
{
	struct fc_region r;
	size_t avail;
	while (len > 0) {
		if (dptr + len < dptr || segment(dptr, write, &r, &avail) != 0)
			return 0;
		size_t n = avail < len ? avail : len;
		dptr += n;
		len -= n;
	}
	return 1;
}

static int fd_io(int fd, unsigned char *buf, size_t len, off_t off, int write)
{
	while (len > 0) {
		ssize_t n = write ? pwrite(fd, buf, len, off) : pread(fd, buf, len, off);
		if (n < 0 && errno == EINTR)
			continue;
		if (n <= 0)
			return -1;
		buf += n;
		len -= (size_t)n;
		off += n;
	}
	return 0;
}

/* Called with fc_mem_rw held, on a range that range_ok accepted. */
static CUresult dev_io(uint64_t dptr, unsigned char *buf, size_t len, int write)
{
	struct fc_region r;
	size_t avail;
	while (len > 0) {
		if (segment(dptr, write, &r, &avail) != 0)
			return CUDA_ERROR_INVALID_VALUE;
		size_t n = avail < len ? avail : len;
		if (r.mem != NULL) {
			if (write)
				memcpy(r.mem, buf, n);
			else
				memcpy(buf, r.mem, n);
		} else if (r.fd < 0 || fd_io(r.fd, buf, n, r.off, write) != 0) {
			return CUDA_ERROR_UNKNOWN;
		}
		dptr += n;
		buf += n;
		len -= n;
	}
	return CUDA_SUCCESS;
}

/* Enters the gate, checks the context and holds fc_mem_rw for reading. */
static CUresult begin(void)
{
	CUresult rc = fc_ctx_check(NULL);
	if (rc == CUDA_SUCCESS)
		rc = fc_gate_enter();
	if (rc == CUDA_SUCCESS)
		pthread_rwlock_rdlock(&fc_mem_rw);
	return rc;
}

static CUresult end(CUresult rc)
{
	pthread_rwlock_unlock(&fc_mem_rw);
	fc_gate_leave();
	return rc;
}

static CUresult host_copy(uint64_t dptr, unsigned char *host, size_t bytes, int write)
{
	if (host == NULL && bytes > 0)
		return CUDA_ERROR_INVALID_VALUE;
	CUresult rc = begin();
	if (rc != CUDA_SUCCESS)
		return rc;
	rc = range_ok(dptr, bytes, write) ? dev_io(dptr, host, bytes, write) :
					    CUDA_ERROR_INVALID_VALUE;
	return end(rc);
}

CUresult cuMemcpyHtoD_v2(CUdeviceptr dst, const void *src, size_t bytes)
{
	return host_copy(dst, (unsigned char *)(uintptr_t)src, bytes, 1);
}

/* A stand-in for a driver function newer than any the interposer knows:
 * the same copy under a name no driver has. */
CUresult cuMemcpyHtoD_v9(CUdeviceptr dst, const void *src, size_t bytes)
{
	return host_copy(dst, (unsigned char *)(uintptr_t)src, bytes, 1);
}

CUresult cuMemcpyDtoH_v2(void *dst, CUdeviceptr src, size_t bytes)
{
	struct fc_fault_hit hit = { 0 };
	fc_faults_check(FC_OP_DTOH, getpid(), 1, &hit);
	if (hit.error != CUDA_SUCCESS)
		return hit.error;
	return host_copy(src, dst, bytes, 0);
}

CUresult cuMemcpyDtoD_v2(CUdeviceptr dst, CUdeviceptr src, size_t bytes)
{
	unsigned char *buf = malloc(CHUNK);
	if (buf == NULL)
		return CUDA_ERROR_OUT_OF_MEMORY;
	CUresult rc = begin();
	if (rc != CUDA_SUCCESS) {
		free(buf);
		return rc;
	}
	if (!range_ok(src, bytes, 0) || !range_ok(dst, bytes, 1))
		rc = CUDA_ERROR_INVALID_VALUE;
	for (size_t pos = 0; rc == CUDA_SUCCESS && pos < bytes; pos += CHUNK) {
		size_t n = bytes - pos < CHUNK ? bytes - pos : CHUNK;
		rc = dev_io(src + pos, buf, n, 0);
		if (rc == CUDA_SUCCESS)
			rc = dev_io(dst + pos, buf, n, 1);
	}
	free(buf);
	return end(rc);
}

/* count elements of size elem (1 or 4), each value */
static CUresult set(uint64_t dst, uint32_t value, size_t elem, size_t count)
{
	size_t bytes = count * elem;
	if (bytes / elem != count || dst % elem != 0)
		return CUDA_ERROR_INVALID_VALUE;
	uint32_t *buf = malloc(CHUNK);
	if (buf == NULL)
		return CUDA_ERROR_OUT_OF_MEMORY;
	if (elem == 1)
		memset(buf, (int)value, CHUNK);
	for (size_t i = 0; elem == 4 && i < CHUNK / 4; i++)
		buf[i] = value;
	CUresult rc = begin();
	if (rc != CUDA_SUCCESS) {
		free(buf);
		return rc;
	}
	if (!range_ok(dst, bytes, 1))
		rc = CUDA_ERROR_INVALID_VALUE;
	for (size_t pos = 0; rc == CUDA_SUCCESS && pos < bytes; pos += CHUNK)
		rc = dev_io(dst + pos, (unsigned char *)buf,
			    bytes - pos < CHUNK ? bytes - pos : CHUNK, 1);
	free(buf);
	return end(rc);
}

CUresult cuMemsetD8_v2(CUdeviceptr dst, unsigned char value, size_t count)
{
	return set(dst, value, 1, count);
}

CUresult cuMemsetD32_v2(CUdeviceptr dst, unsigned int value, size_t count)
{
	return set(dst, value, 4, count);
}
