#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <sys/mman.h>
#include <unistd.h>

#include "fakecuda.h"
#include "internal.h"
#include "procinfo.h"

/* Device memory lives in an unmapped memfd: outside the heap and outside the
 * process's resident set, as GPU memory is, so that a checkpoint visibly
 * grows the RSS by the amount it copies to the host. The memfd is named
 * after the GPU it is on, which is how the NVML double finds, without asking
 * the process, what it holds on which GPU (procinfo.c). It is created at the
 * first allocation, as a real process gets its context at its first use of
 * the device, not at cuInit. Memory imported from another process (CUDA
 * IPC) is that process's memfd, mapped: it is never copied at checkpoint. */

#define MAX_ALLOCS 64
#define DEVPTR_BASE 0x7f2a00000000ull
#define IMPORT_BASE 0x7f3b00000000ull
#define ALIGN 256u

struct alloc {
	uint64_t dptr;
	size_t bytes;
	unsigned char *imported; /* another process's memory, mapped; NULL: our own */
};

static pthread_mutex_t mem_mu = PTHREAD_MUTEX_INITIALIZER;
static struct alloc allocs[MAX_ALLOCS];
static int nallocs;
static size_t total;
static size_t imported_total;
static int memfd = -1;
static unsigned char *host_copy;

static int new_memfd(const CUuuid *gpu)
{
	char name[64], uuid[FAKECUDA_UUID_STRLEN];
	fc_uuid_format(gpu, uuid, sizeof(uuid));
	snprintf(name, sizeof(name), "%s:%s", FC_DEVMEM_NAME, uuid);
	return memfd_create(name, MFD_CLOEXEC);
}

CUresult fc_devmem_alloc(uint64_t *dptr, size_t bytes, const CUuuid *gpu)
{
	CUresult rc = CUDA_ERROR_OUT_OF_MEMORY;
	size_t rounded = (bytes + ALIGN - 1) / ALIGN * ALIGN;
	pthread_mutex_lock(&mem_mu);
	if (memfd < 0)
		memfd = new_memfd(gpu);
	if (memfd >= 0 && nallocs < MAX_ALLOCS && rounded >= bytes &&
	    ftruncate(memfd, (off_t)(total + rounded)) == 0) {
		*dptr = DEVPTR_BASE + total;
		allocs[nallocs++] = (struct alloc){ *dptr, bytes, NULL };
		total += rounded;
		rc = CUDA_SUCCESS;
	}
	pthread_mutex_unlock(&mem_mu);
	return rc;
}

CUresult fc_devmem_import(unsigned char *mem, size_t bytes, uint64_t *dptr)
{
	CUresult rc = CUDA_ERROR_OUT_OF_MEMORY;
	size_t rounded = (bytes + ALIGN - 1) / ALIGN * ALIGN;
	pthread_mutex_lock(&mem_mu);
	if (nallocs < MAX_ALLOCS && rounded >= bytes) {
		*dptr = IMPORT_BASE + imported_total;
		allocs[nallocs++] = (struct alloc){ *dptr, bytes, mem };
		imported_total += rounded;
		rc = CUDA_SUCCESS;
	}
	pthread_mutex_unlock(&mem_mu);
	return rc;
}

int fc_devmem_locate(uint64_t dptr, size_t bytes, struct fc_region *r)
{
	int found = -1;
	pthread_mutex_lock(&mem_mu);
	for (int i = 0; i < nallocs; i++) {
		const struct alloc *a = &allocs[i];
		if (dptr < a->dptr || bytes > a->bytes || dptr - a->dptr > a->bytes - bytes)
			continue;
		r->fd = a->imported ? -1 : memfd;
		r->off = a->imported ? 0 : (off_t)(dptr - DEVPTR_BASE);
		r->mem = a->imported ? a->imported + (dptr - a->dptr) : NULL;
		found = 0;
		break;
	}
	pthread_mutex_unlock(&mem_mu);
	return found;
}

static int io_all(int fd, unsigned char *buf, size_t len, int writing)
{
	size_t done = 0;
	while (done < len) {
		ssize_t n = writing ? pwrite(fd, buf + done, len - done, (off_t)done)
				    : pread(fd, buf + done, len - done, (off_t)done);
		if (n < 0 && errno == EINTR)
			continue;
		if (n <= 0)
			return -1;
		done += (size_t)n;
	}
	return 0;
}

/* Only called while locked, when no fake API call is in progress. The copy
 * is the target's own heap, charged to its memory cgroup as the real
 * driver's copy is: the read writes every byte of it (the kernel writes
 * zeros for never-filled memory too), so its pages are faulted in and
 * charged during this call, and a cgroup without room for them gets the
 * target OOM-killed here, not later. */
int fc_devmem_save(void)
{
	if (memfd < 0 || host_copy != NULL)
		return 0;
	unsigned char *copy = malloc(total ? total : 1);
	if (copy == NULL || io_all(memfd, copy, total, 0) != 0) {
		free(copy);
		return -1;
	}
	host_copy = copy;
	close(memfd);
	memfd = -1;
	return 0;
}

uint64_t fc_devmem_saved(void)
{
	return host_copy != NULL ? (uint64_t)total : 0;
}

int fc_devmem_restore(const CUuuid *gpu)
{
	if (host_copy == NULL)
		return 0;
	int fd = new_memfd(gpu);
	if (fd < 0 || ftruncate(fd, (off_t)total) != 0 || io_all(fd, host_copy, total, 1) != 0) {
		if (fd >= 0)
			close(fd);
		return -1;
	}
	free(host_copy);
	host_copy = NULL;
	memfd = fd;
	return 0;
}

/* A child forked without exec has no device memory of its own. */
void fc_devmem_forget(void)
{
	if (memfd >= 0)
		close(memfd);
	memfd = -1;
}
