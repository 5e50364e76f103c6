/* Legacy CUDA IPC (cuIpcGetMemHandle / cuIpcOpenMemHandle) on memory the
 * interposer backs with VMM, which the driver's legacy IPC refuses. The
 * handle names the exporting process and the allocation; the importer asks
 * the exporter's control socket for a file descriptor of the physical
 * memory (cuMemExportToShareableHandle, passed with SCM_RIGHTS) and maps it
 * at an address of its own, as cuIpcOpenMemHandle does.
 *
 * Parking a pair: an importer parks by detaching (unmap and release, the
 * address kept) before its exporter parks, which the exporter checks (it
 * keeps who attached, and a detach tells it); after the restore the
 * exporter unparks first and the importer attaches again, at the same
 * address, to the exporter's new memory. The driver then never sees an
 * import, which it could not restore. */
#include <errno.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <unistd.h>

#include "park.h"
#include "park_find.h"

#define MAGIC 0x4b505343u /* "CSPK" */

struct handle_v1 {
	uint32_t magic;
	uint32_t version;
	int32_t pid; /* the exporter, in its PID namespace */
	uint32_t reserved;
	uint64_t va;
	uint64_t size;
	char pad[32];
};
_Static_assert(sizeof(struct handle_v1) == CU_IPC_HANDLE_SIZE, "an IPC handle");

struct import {
	CUdeviceptr va;
	size_t size;
	CUmemGenericAllocationHandle h; /* 0 while detached */
	CUcontext ctx; /* current when it was imported */
	struct handle_v1 from;
};

static pthread_mutex_t imp_mu = PTHREAD_MUTEX_INITIALIZER;
static struct import *imps;
static size_t nimps, capimps;

/* The exporter's side: who attached to what (an allocation's address, or
 * a VMM export, PARK_VMM_KEY). */
struct attach {
	uint64_t key;
	pid_t pid; /* in this process's PID namespace (SO_PEERCRED) */
};
static struct attach *atts;
static size_t natts, capatts;

void park_ipc_note(uint64_t key, pid_t pid, bool on)
{
	pthread_mutex_lock(&imp_mu);
	size_t i = 0;
	while (i < natts && !(atts[i].key == key && atts[i].pid == pid))
		i++;
	if (!on && i < natts) {
		atts[i] = atts[--natts];
	} else if (on && i == natts && park_grow((void **)&atts, natts, &capatts, sizeof(*atts))) {
		atts[natts++] = (struct attach){ key, pid };
	}
	pthread_mutex_unlock(&imp_mu);
}

unsigned park_ipc_attached(pid_t *first)
{
	pthread_mutex_lock(&imp_mu);
	for (size_t i = 0; i < natts;) {
		/* an importer that died keeps nothing attached */
		if (kill(atts[i].pid, 0) != 0 && errno == ESRCH)
			atts[i] = atts[--natts];
		else
			i++;
	}
	unsigned n = (unsigned)natts;
	if (first)
		*first = natts ? atts[0].pid : 0;
	pthread_mutex_unlock(&imp_mu);
	return n;
}

CUresult park_ipc_get(CUipcMemHandle *out, CUdeviceptr dptr)
{
	const struct park_real *r = park_real();
	if (r == NULL || r->ipc_get == NULL)
		return CU_ERR_NOT_INITIALIZED;
	park_gate_enter();
	pthread_mutex_lock(&park_tab.mu);
	struct park_alloc *a = park_find(dptr);
	struct handle_v1 h = { .magic = MAGIC, .version = 1, .pid = (int32_t)getpid() };
	if (a) {
		a->exported = true;
		h.va = a->va;
		h.size = a->size;
	}
	pthread_mutex_unlock(&park_tab.mu);
	CUresult rc = CU_OK;
	if (a == NULL)
		rc = r->ipc_get(out, dptr);
	else if (out == NULL)
		rc = CU_ERR_INVALID_VALUE;
	else
		memcpy(out, &h, sizeof(h));
	park_gate_leave();
	return rc;
}

/* The exporter's side: "fd VA" answers a line and the descriptor (and
 * notes the importer attached); "detach VA" notes it detached. */
int park_ipc_serve(int conn, const char *line)
{
	const struct park_real *r = park_real();
	if (strncmp(line, "detach ", 7) == 0) {
		park_ipc_note(strtoull(line + 7, NULL, 16), park_peer_pid(conn), false);
		ssize_t w = send(conn, "ok\n", 3, MSG_NOSIGNAL);
		return w == 3 ? 0 : -1;
	}
	CUdeviceptr va = strtoull(line + 3, NULL, 16);
	int fd = -1;
	CUresult rc = CU_ERR_INVALID_HANDLE;
	pthread_mutex_lock(&park_tab.mu);
	struct park_alloc *a = park_find(va);
	if (r && a && a->va == va && a->handle)
		rc = r->export_handle(&fd, a->handle, CU_MEM_HANDLE_TYPE_POSIX_FILE_DESCRIPTOR, 0);
	pthread_mutex_unlock(&park_tab.mu);
	char reply[64];
	int len = snprintf(reply, sizeof(reply), rc == CU_OK ? "ok\n" : "error code=%d\n", rc);
	int w = park_send_fd(conn, reply, (size_t)len, rc == CU_OK ? fd : -1);
	if (fd >= 0)
		close(fd);
	if (w == 0 && rc == CU_OK)
		park_ipc_note(va, park_peer_pid(conn), true);
	return w;
}

/* The importer's side: tells the exporter it detached. */
static void tell_detached(const struct handle_v1 *h)
{
	int conn = park_find_connect(h->pid, "/proc", 5000);
	if (conn < 0)
		return;
	char req[64], reply[8];
	int len = snprintf(req, sizeof(req), "detach %llx\n", (unsigned long long)h->va);
	if (send(conn, req, (size_t)len, MSG_NOSIGNAL) == len)
		(void)!recv(conn, reply, sizeof(reply), 0);
	close(conn);
}

/* The importer's side: the exporter's descriptor of the allocation. */
static int fetch_fd(const struct handle_v1 *h)
{
	int conn = park_find_connect(h->pid, "/proc", 5000);
	if (conn < 0)
		return -1;
	char req[64], reply[64];
	int len = snprintf(req, sizeof(req), "fd %llx\n", (unsigned long long)h->va);
	int fd = -1;
	if (send(conn, req, (size_t)len, MSG_NOSIGNAL) == len) {
		ssize_t n = park_recv_fd(conn, reply, sizeof(reply) - 1, &fd);
		if (fd >= 0 && (n < 2 || strncmp(reply, "ok", 2) != 0)) {
			close(fd);
			fd = -1;
		}
	}
	close(conn);
	return fd;
}

/* Maps the exporter's memory at im->va (reserved), readable and writable
 * by the current device; fills im->h. */
static CUresult attach_at(const struct park_real *r, struct import *im)
{
	int fd = fetch_fd(&im->from);
	if (fd < 0)
		return CU_ERR_INVALID_HANDLE;
	CUresult rc = r->import_handle(&im->h, (void *)(uintptr_t)fd, CU_MEM_HANDLE_TYPE_POSIX_FILE_DESCRIPTOR);
	close(fd);
	if (rc != CU_OK)
		return rc;
	CUdevice dev = 0;
	r->ctx_device(&dev);
	rc = r->mem_map(im->va, im->size, 0, im->h, 0);
	CUmemAccessDesc d = { { CU_MEM_LOCATION_TYPE_DEVICE, dev }, CU_MEM_ACCESS_FLAGS_PROT_READWRITE };
	if (rc == CU_OK && (rc = r->set_access(im->va, im->size, &d, 1)) != CU_OK)
		r->mem_unmap(im->va, im->size);
	if (rc != CU_OK) {
		r->mem_release(im->h);
		im->h = 0;
	}
	return rc;
}

static CUresult import_mapped(const struct park_real *r, const struct handle_v1 *h, CUdeviceptr *dptr)
{
	struct import im = { .size = h->size, .from = *h };
	r->ctx_get(&im.ctx);
	CUresult rc = r->addr_reserve(&im.va, im.size, 0, 0, 0);
	if (rc != CU_OK)
		return rc;
	rc = attach_at(r, &im);
	if (rc != CU_OK) {
		r->addr_free(im.va, im.size);
		return rc;
	}
	pthread_mutex_lock(&imp_mu);
	if (park_grow((void **)&imps, nimps, &capimps, sizeof(*imps)))
		imps[nimps++] = im;
	else
		rc = CU_ERR_OUT_OF_MEMORY;
	pthread_mutex_unlock(&imp_mu);
	if (rc != CU_OK) {
		r->mem_unmap(im.va, im.size);
		r->addr_free(im.va, im.size);
		r->mem_release(im.h);
		tell_detached(h);
		return rc;
	}
	*dptr = im.va;
	return CU_OK;
}

unsigned park_ipc_imports(void)
{
	pthread_mutex_lock(&imp_mu);
	unsigned n = (unsigned)nimps;
	pthread_mutex_unlock(&imp_mu);
	return n;
}

/* Park: every import unmapped and released, its address kept, and its
 * exporter told. */
CUresult park_ipc_detach_all(const struct park_real *r)
{
	pthread_mutex_lock(&imp_mu);
	CUresult rc = CU_OK;
	for (size_t i = 0; i < nimps && rc == CU_OK; i++) {
		struct import *im = &imps[i];
		if (im->h == 0)
			continue;
		rc = r->mem_unmap(im->va, im->size);
		if (rc != CU_OK)
			break;
		r->mem_release(im->h);
		im->h = 0;
	}
	struct handle_v1 *told = calloc(nimps ? nimps : 1, sizeof(*told));
	size_t ntold = 0;
	for (size_t i = 0; told && i < nimps; i++)
		if (imps[i].h == 0)
			told[ntold++] = imps[i].from;
	pthread_mutex_unlock(&imp_mu);
	for (size_t i = 0; i < ntold; i++)
		tell_detached(&told[i]);
	free(told);
	return rc;
}

/* Unpark: every detached import mapped again at its address. An exporter
 * still parked has nothing to give yet: asked again for up to wait_ms (when
 * each process unparks on its own, exporters and importers at once). */
CUresult park_ipc_attach_all(const struct park_real *r, unsigned wait_ms)
{
	double until = park_now() + wait_ms / 1000.0;
	pthread_mutex_lock(&imp_mu);
	CUresult rc = CU_OK;
	for (size_t i = 0; i < nimps && rc == CU_OK; i++) {
		if (imps[i].h != 0 || (rc = r->ctx_set(imps[i].ctx)) != CU_OK)
			continue;
		while ((rc = attach_at(r, &imps[i])) == CU_ERR_INVALID_HANDLE && park_now() < until)
			usleep(20000);
	}
	pthread_mutex_unlock(&imp_mu);
	return rc;
}

CUresult park_ipc_open(CUdeviceptr *dptr, CUipcMemHandle handle, unsigned flags)
{
	const struct park_real *r = park_real();
	if (r == NULL || r->ipc_open == NULL)
		return CU_ERR_NOT_INITIALIZED;
	struct handle_v1 h;
	memcpy(&h, &handle, sizeof(h));
	park_gate_enter();
	CUresult rc;
	if (h.magic != MAGIC || h.version != 1) {
		rc = r->ipc_open(dptr, handle, flags);
		if (rc == CU_OK) {
			pthread_mutex_lock(&park_tab.mu);
			park_tab.legacy_imports++;
			pthread_mutex_unlock(&park_tab.mu);
		}
	} else if (dptr == NULL || h.size == 0 || !park_vmm()) {
		rc = CU_ERR_INVALID_VALUE;
	} else {
		rc = import_mapped(r, &h, dptr);
	}
	park_gate_leave();
	return rc;
}

CUresult park_ipc_close(CUdeviceptr dptr)
{
	const struct park_real *r = park_real();
	if (r == NULL || r->ipc_close == NULL)
		return CU_ERR_NOT_INITIALIZED;
	park_gate_enter();
	struct import im = { 0 };
	pthread_mutex_lock(&imp_mu);
	for (size_t i = 0; i < nimps; i++)
		if (imps[i].va == dptr) {
			im = imps[i];
			imps[i] = imps[--nimps];
			break;
		}
	pthread_mutex_unlock(&imp_mu);
	CUresult rc;
	if (im.va) {
		r->ctx_sync();
		rc = im.h ? r->mem_unmap(im.va, im.size) : CU_OK;
		if (im.h)
			r->mem_release(im.h);
		r->addr_free(im.va, im.size);
		tell_detached(&im.from);
	} else {
		rc = r->ipc_close(dptr);
		if (rc == CU_OK) {
			pthread_mutex_lock(&park_tab.mu);
			if (park_tab.legacy_imports)
				park_tab.legacy_imports--;
			pthread_mutex_unlock(&park_tab.mu);
		}
	}
	park_gate_leave();
	return rc;
}
