/* What the program does itself with the physical memory of the
 * allocations the interposer backs. cudaMalloc memory is VMM memory here,
 * so cuMemRetainAllocationHandle answers on it (on the driver's own
 * allocations it does not), and NCCL's user-buffer registration and UCX
 * take that path: they retain the handle, export it to their peers
 * (cuMemExportToShareableHandle) or map it elsewhere. A park would release
 * that memory from under them: the program's handle, its other mapping or
 * a peer's import would keep the old memory while the program's address
 * gets new memory after the unpark. So such an allocation is not parked:
 * while the program holds a handle or a mapping of its own of it, and for
 * good once it was exported (who imported it cannot be known). */
#include "park.h"

struct bmap {
	CUdeviceptr va;
	size_t size;
	CUmemGenericAllocationHandle h;
};

static struct bmap *maps; /* park_tab.mu */
static size_t nmaps, capmaps;

static struct park_alloc *by_handle(CUmemGenericAllocationHandle h)
{
	for (size_t i = 0; h && i < park_tab.n; i++)
		if (park_tab.a[i].handle == h)
			return &park_tab.a[i];
	return NULL;
}

void park_backed_retained(CUmemGenericAllocationHandle h)
{
	pthread_mutex_lock(&park_tab.mu);
	struct park_alloc *a = by_handle(h);
	if (a)
		a->retained++;
	pthread_mutex_unlock(&park_tab.mu);
}

bool park_backed_release(CUmemGenericAllocationHandle h)
{
	pthread_mutex_lock(&park_tab.mu);
	struct park_alloc *a = by_handle(h);
	bool ok = a == NULL || a->retained > 0;
	if (a && a->retained)
		a->retained--;
	pthread_mutex_unlock(&park_tab.mu);
	return ok;
}

void park_backed_exported(CUmemGenericAllocationHandle h)
{
	pthread_mutex_lock(&park_tab.mu);
	struct park_alloc *a = by_handle(h);
	if (a)
		a->shared = true;
	pthread_mutex_unlock(&park_tab.mu);
}

bool park_backed_mapped(CUmemGenericAllocationHandle h, CUdeviceptr va, size_t size)
{
	pthread_mutex_lock(&park_tab.mu);
	struct park_alloc *a = by_handle(h);
	if (a && park_grow((void **)&maps, nmaps, &capmaps, sizeof(*maps))) {
		maps[nmaps++] = (struct bmap){ va, size, h };
		a->mapped++;
	} else if (a) {
		a->shared = true; /* a mapping it could not note: never parked */
	}
	pthread_mutex_unlock(&park_tab.mu);
	return a != NULL;
}

void park_backed_unmapped(CUdeviceptr va, size_t size)
{
	pthread_mutex_lock(&park_tab.mu);
	for (size_t i = 0; i < nmaps;) {
		struct bmap m = maps[i];
		if (m.va < va || m.va + m.size > va + size) {
			i++;
			continue;
		}
		maps[i] = maps[--nmaps];
		struct park_alloc *a = by_handle(m.h);
		if (a && a->mapped)
			a->mapped--;
	}
	pthread_mutex_unlock(&park_tab.mu);
}

const char *park_backed_why(void)
{
	for (size_t i = 0; i < park_tab.n; i++) {
		const struct park_alloc *a = &park_tab.a[i];
		if (a->shared)
			return "it exported the memory of a cudaMalloc allocation as a shareable handle "
			       "(cuMemRetainAllocationHandle, then cuMemExportToShareableHandle, as NCCL's user "
			       "buffers and UCX do): other processes may map it, and a park would leave them on "
			       "its old memory";
		if (a->retained || a->mapped)
			return "it holds a handle of the memory of a cudaMalloc allocation "
			       "(cuMemRetainAllocationHandle) or maps it elsewhere, which a park would leave on "
			       "its old memory";
	}
	return NULL;
}
