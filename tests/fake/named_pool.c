#include <errno.h>
#include <stdio.h>
#include <string.h>
#include <sys/syscall.h>
#include <unistd.h>

#include "named.h"

/* --pool-share FILE: a memory pool for POSIX descriptors, exported, 'PID FD'
 * written to FILE; --pool-import FILE: that descriptor taken from the
 * exporter (pidfd_getfd) and the pool imported, as CUDA IPC of
 * stream-ordered memory does. */

struct pool_props {
	int alloc_type;
	int handle_types;
	CUmemLocation location;
	void *win32;
	size_t max_size;
	unsigned short usage;
	unsigned char reserved[54];
};

int named_pool_share(void *(*rt)(const char *), const char *path)
{
	CUresult (*create)(CUmemoryPool *, const struct pool_props *) = NULL;
	CUresult (*export)(void *, CUmemoryPool, CUmemAllocationHandleType, unsigned long long) = NULL;
	*(void **)&create = rt("cuMemPoolCreate");
	*(void **)&export = rt("cuMemPoolExportToShareableHandle");
	struct pool_props props = { .alloc_type = CU_MEM_ALLOCATION_TYPE_PINNED,
				    .handle_types = CU_MEM_HANDLE_TYPE_POSIX_FILE_DESCRIPTOR,
				    .location = { CU_MEM_LOCATION_TYPE_DEVICE, 0 } };
	CUmemoryPool pool;
	int fd = -1;
	char tmp[4200];
	if (create(&pool, &props) != CU_OK || export(&fd, pool, CU_MEM_HANDLE_TYPE_POSIX_FILE_DESCRIPTOR, 0) != CU_OK)
		return -1;
	snprintf(tmp, sizeof(tmp), "%s.tmp", path);
	FILE *f = fopen(tmp, "we");
	if (f == NULL || fprintf(f, "%d %d\n", (int)getpid(), fd) < 0 || fclose(f) != 0 || rename(tmp, path) != 0)
		return -1;
	return 0;
}

int named_pool_import(void *(*rt)(const char *), const char *path)
{
	CUresult (*import)(CUmemoryPool *, void *, CUmemAllocationHandleType, unsigned long long) = NULL;
	*(void **)&import = rt("cuMemPoolImportFromShareableHandle");
	int pid = 0, fd = -1;
	for (int tries = 0; tries < 3000; tries++) {
		FILE *f = fopen(path, "re");
		if (f == NULL) {
			usleep(10000);
			continue;
		}
		int n = fscanf(f, "%d %d", &pid, &fd);
		fclose(f);
		if (n != 2)
			return -1;
		break;
	}
	int pidfd = (int)syscall(SYS_pidfd_open, pid, 0);
	int mine = pidfd < 0 ? -1 : (int)syscall(SYS_pidfd_getfd, pidfd, fd, 0);
	if (pidfd >= 0)
		close(pidfd);
	CUmemoryPool pool;
	if (mine < 0 || import(&pool, (void *)(intptr_t)mine, CU_MEM_HANDLE_TYPE_POSIX_FILE_DESCRIPTOR, 0) != CU_OK) {
		fprintf(stderr, "fakecuda-named: no pool from %s: %s\n", path, strerror(errno));
		return -1;
	}
	close(mine);
	return 0;
}
