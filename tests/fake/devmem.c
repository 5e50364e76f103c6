#include <errno.h>
#include <fcntl.h>
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

#define MAX_ALLOCS 1024
#define DEVPTR_BASE 0x7f2a00000000ull
#define IMPORT_BASE 0x7f3b00000000ull
#define ALIGN 256u

struct alloc {
	uint64_t dptr;
	size_t bytes;
	size_t span;             /* bytes rounded up: the room it takes */
	unsigned char *imported; /* another process's memory, mapped; NULL: our own */
	void *map_base;          /* the whole mapping of an import */
	size_t map_len;
};

static pthread_mutex_t mem_mu = PTHREAD_MUTEX_INITIALIZER;
static struct alloc allocs[MAX_ALLOCS];
static int nallocs;
static size_t total; /* the memfd's size: the end of the last allocation */
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

/* First fit: freed room is used again, so that a process that frees and
 * allocates keeps a memfd (and an NVML figure) of the size it uses. */
static uint64_t find_room(size_t span)
{
	uint64_t at = DEVPTR_BASE;
	for (int moved = 1; moved;) {
		moved = 0;
		for (int i = 0; i < nallocs; i++) {
			const struct alloc *a = &allocs[i];
			if (a->imported == NULL && a->dptr < at + span && at < a->dptr + a->span) {
				at = a->dptr + a->span;
				moved = 1;
			}
		}
	}
	return at;
}

CUresult fc_devmem_alloc(uint64_t *dptr, size_t bytes, const CUuuid *gpu)
{
	CUresult rc = CUDA_ERROR_OUT_OF_MEMORY;
	size_t rounded = (bytes + ALIGN - 1) / ALIGN * ALIGN;
	pthread_mutex_lock(&mem_mu);
	if (memfd < 0)
		memfd = new_memfd(gpu);
	uint64_t at = find_room(rounded);
	size_t end = (size_t)(at - DEVPTR_BASE) + rounded;
	if (memfd >= 0 && nallocs < MAX_ALLOCS && rounded >= bytes &&
	    (end <= total || ftruncate(memfd, (off_t)end) == 0)) {
		*dptr = at;
		allocs[nallocs++] = (struct alloc){ at, bytes, rounded, NULL, NULL, 0 };
		total = end > total ? end : total;
		rc = CUDA_SUCCESS;
	}
	pthread_mutex_unlock(&mem_mu);
	return rc;
}

/* The room of a freed allocation goes back to the host (a hole punched in
 * the memfd); when it was the last, the memfd shrinks, and NVML with it.
 * Room in the middle still counts in NVML, as a fragmented heap does. */
static void give_back(const struct alloc *a)
{
	size_t end = 0;
	for (int i = 0; i < nallocs; i++)
		if (allocs[i].imported == NULL && allocs[i].dptr + allocs[i].span - DEVPTR_BASE > end)
			end = (size_t)(allocs[i].dptr + allocs[i].span - DEVPTR_BASE);
	if (memfd < 0)
		return;
	if (end < total && ftruncate(memfd, (off_t)end) == 0)
		total = end;
	if (a->dptr - DEVPTR_BASE < total)
		fallocate(memfd, FALLOC_FL_PUNCH_HOLE | FALLOC_FL_KEEP_SIZE, (off_t)(a->dptr - DEVPTR_BASE),
			  (off_t)a->span);
}

/* own: memory of our own (cuMemFree), else an import (cuIpcCloseMemHandle),
 * whose mapping goes with it. */
CUresult fc_devmem_free(uint64_t dptr, int own)
{
	CUresult rc = CUDA_ERROR_INVALID_VALUE;
	pthread_mutex_lock(&mem_mu);
	for (int i = 0; i < nallocs; i++) {
		struct alloc a = allocs[i];
		if (a.dptr != dptr || (a.imported == NULL) != own)
			continue;
		allocs[i] = allocs[--nallocs];
		if (own)
			give_back(&a);
		else
			munmap(a.map_base, a.map_len);
		rc = CUDA_SUCCESS;
		break;
	}
	pthread_mutex_unlock(&mem_mu);
	return rc;
}

CUresult fc_devmem_import(unsigned char *mem, size_t bytes, void *map_base, size_t map_len,
			  uint64_t *dptr)
{
	CUresult rc = CUDA_ERROR_OUT_OF_MEMORY;
	size_t rounded = (bytes + ALIGN - 1) / ALIGN * ALIGN;
	pthread_mutex_lock(&mem_mu);
	if (nallocs < MAX_ALLOCS && rounded >= bytes) {
		*dptr = IMPORT_BASE + imported_total;
		allocs[nallocs++] = (struct alloc){ *dptr, bytes, rounded, mem, map_base, map_len };
		imported_total += rounded;
		rc = CUDA_SUCCESS;
	}
	pthread_mutex_unlock(&mem_mu);
	return rc;
}

/* Called with mem_mu held. */
static const struct alloc *find_alloc(uint64_t dptr)
{
	for (int i = 0; i < nallocs; i++)
		if (dptr >= allocs[i].dptr && dptr - allocs[i].dptr < allocs[i].bytes)
			return &allocs[i];
	return NULL;
}

static void region_of(const struct alloc *a, uint64_t dptr, struct fc_region *r)
{
	r->fd = a->imported ? -1 : memfd;
	r->off = a->imported ? 0 : (off_t)(dptr - DEVPTR_BASE);
	r->mem = a->imported ? a->imported + (dptr - a->dptr) : NULL;
}

int fc_devmem_locate(uint64_t dptr, size_t bytes, struct fc_region *r)
{
	pthread_mutex_lock(&mem_mu);
	const struct alloc *a = find_alloc(dptr);
	int found = a != NULL && bytes <= a->bytes - (dptr - a->dptr) ? 0 : -1;
	if (found == 0)
		region_of(a, dptr, r);
	pthread_mutex_unlock(&mem_mu);
	return found;
}

int fc_devmem_segment(uint64_t dptr, struct fc_region *r, size_t *avail)
{
	pthread_mutex_lock(&mem_mu);
	const struct alloc *a = find_alloc(dptr);
	if (a != NULL) {
		region_of(a, dptr, r);
		*avail = a->bytes - (size_t)(dptr - a->dptr);
	}
	pthread_mutex_unlock(&mem_mu);
	return a != NULL ? 0 : -1;
}

int fc_devmem_range(uint64_t dptr, uint64_t *base, size_t *bytes, int *imported)
{
	pthread_mutex_lock(&mem_mu);
	const struct alloc *a = find_alloc(dptr);
	if (a != NULL) {
		*base = a->dptr;
		*bytes = a->bytes;
		*imported = a->imported != NULL;
	}
	pthread_mutex_unlock(&mem_mu);
	return a != NULL ? 0 : -1;
}

int fc_io_all(int fd, unsigned char *buf, size_t len, int writing)
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
	if (copy == NULL || fc_io_all(memfd, copy, total, 0) != 0) {
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
	if (fd < 0 || ftruncate(fd, (off_t)total) != 0 || fc_io_all(fd, host_copy, total, 1) != 0) {
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
