#include <errno.h>
#include <stdio.h>
#include <string.h>
#include <sys/syscall.h>
#include <unistd.h>

#include "cuapp.h"

static int load(struct cu *cu)
{
	return cuapp_resolve(cu->get, "cuMemExportToShareableHandle", &cu->export_fd) |
		cuapp_resolve(cu->get, "cuMemImportFromShareableHandle", &cu->import_fd);
}

/* "PID FD" into path, for an importer to take fd from this process. */
static int publish_fd(const char *path, int fd)
{
	char tmp[4200];
	snprintf(tmp, sizeof(tmp), "%s.tmp", path);
	FILE *f = fopen(tmp, "we");
	if (f == NULL || fprintf(f, "%d %d\n", (int)getpid(), fd) < 0 || fclose(f) != 0 || rename(tmp, path) != 0) {
		fprintf(stderr, "fakecuda-cuapp: cannot write %s: %s\n", path, strerror(errno));
		return -1;
	}
	return 0; /* the fd stays open: the importer takes it from here */
}

int cuapp_vmm_share(struct cuapp *app)
{
	struct cu *cu = &app->cu;
	int fd = -1;
	if (app->vmm_first == 0) {
		fprintf(stderr, "fakecuda-cuapp: --vmm-share needs a --vmm-mib allocation\n");
		return -1;
	}
	if (load(cu) != 0 ||
	    cuapp_failed(cu, cu->export_fd(&fd, app->vmm_first, CU_MEM_HANDLE_TYPE_POSIX_FILE_DESCRIPTOR, 0),
			 "cuMemExportToShareableHandle"))
		return -1;
	return publish_fd(app->vmm_share, fd);
}

int cuapp_retain(struct cuapp *app)
{
	struct cu *cu = &app->cu;
	const struct cuapp_alloc *a = NULL;
	for (int i = 0; i < app->n && a == NULL; i++)
		if (app->a[i].kind == KIND_LEGACY)
			a = &app->a[i];
	CUmemGenericAllocationHandle h;
	int fd = -1;
	if (a == NULL) {
		fprintf(stderr, "fakecuda-cuapp: --retain needs an --alloc-mib allocation\n");
		return -1;
	}
	if (load(cu) != 0 || cuapp_resolve(cu->get, "cuMemRetainAllocationHandle", &cu->retain_handle) != 0 ||
	    cuapp_failed(cu, cu->retain_handle(&h, (void *)(uintptr_t)a->ptr), "cuMemRetainAllocationHandle"))
		return -1;
	if (app->retain_share == NULL)
		return 0; /* kept */
	if (cuapp_failed(cu, cu->export_fd(&fd, h, CU_MEM_HANDLE_TYPE_POSIX_FILE_DESCRIPTOR, 0),
			 "cuMemExportToShareableHandle") ||
	    cuapp_failed(cu, cu->release(h), "cuMemRelease"))
		return -1;
	return publish_fd(app->retain_share, fd);
}

/* The exporter's fd, taken from it. */
static int take_fd(const char *path)
{
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
		int pidfd = (int)syscall(SYS_pidfd_open, pid, 0);
		int mine = pidfd < 0 ? -1 : (int)syscall(SYS_pidfd_getfd, pidfd, fd, 0);
		if (pidfd >= 0)
			close(pidfd);
		return mine;
	}
	return -1;
}

int cuapp_vmm_import(struct cuapp *app)
{
	struct cu *cu = &app->cu;
	struct cuapp_alloc *a = &app->a[app->n];
	CUmemGenericAllocationHandle h;
	CUmemAccessDesc desc = { { CU_MEM_LOCATION_TYPE_DEVICE, 0 }, CU_MEM_ACCESS_FLAGS_PROT_READWRITE };
	int fd = take_fd(app->vmm_import);
	if (fd < 0 || load(cu) != 0) {
		fprintf(stderr, "fakecuda-cuapp: no fd from %s: %s\n", app->vmm_import, strerror(errno));
		return -1;
	}
	CUresult rc = cu->import_fd(&h, (void *)(intptr_t)fd, CU_MEM_HANDLE_TYPE_POSIX_FILE_DESCRIPTOR);
	close(fd);
	CUdeviceptr base;
	if (cuapp_failed(cu, rc, "cuMemImportFromShareableHandle") ||
	    cuapp_failed(cu, cu->reserve(&a->ptr, app->vmm_bytes[0], 0, 0, 0), "cuMemAddressReserve") ||
	    cuapp_failed(cu, cu->map(a->ptr, app->vmm_bytes[0], 0, h, 0), "cuMemMap") ||
	    cuapp_failed(cu, cu->access(a->ptr, app->vmm_bytes[0], &desc, 1), "cuMemSetAccess") ||
	    cuapp_failed(cu, cu->range(&base, &a->bytes, a->ptr), "cuMemGetAddressRange"))
		return -1;
	app->vmm_imported = h;
	a->kind = KIND_IMPORTED;
	a->seed = app->peer_seed;
	a->index = 0;
	app->n++;
	return 0;
}

int cuapp_vmm_remap(struct cuapp *app, char *why, size_t len)
{
	struct cu *cu = &app->cu;
	CUmemAccessDesc desc = { { CU_MEM_LOCATION_TYPE_DEVICE, 0 }, CU_MEM_ACCESS_FLAGS_PROT_READWRITE };
	for (int i = 0; i < app->n; i++) {
		struct cuapp_alloc *a = &app->a[i];
		CUresult rc;
		if (a->kind != KIND_IMPORTED)
			continue;
		if ((rc = cu->unmap(a->ptr, a->bytes)) != CU_OK ||
		    (rc = cu->map(a->ptr, a->bytes, 0, app->vmm_imported, 0)) != CU_OK ||
		    (rc = cu->access(a->ptr, a->bytes, &desc, 1)) != CU_OK) {
			snprintf(why, len, "remapping the import with its handle: %d", rc);
			return -1;
		}
	}
	/* and memory of its own for a moment: the driver may give it a handle
	 * value the program had before */
	CUmemAllocationProp prop = { .type = CU_MEM_ALLOCATION_TYPE_PINNED,
				     .location = { CU_MEM_LOCATION_TYPE_DEVICE, 0 } };
	CUmemGenericAllocationHandle h;
	size_t gran;
	CUresult rc = cu->granularity(&gran, &prop, CU_MEM_ALLOC_GRANULARITY_MINIMUM);
	if (rc == CU_OK && (rc = cu->create(&h, gran, &prop, 0)) == CU_OK)
		rc = cu->release(h);
	if (rc != CU_OK) {
		snprintf(why, len, "a scratch allocation: %d", rc);
		return -1;
	}
	return 0;
}
