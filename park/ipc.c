/* Legacy CUDA IPC (cuIpcGetMemHandle / cuIpcOpenMemHandle) on memory the
 * interposer backs with VMM, which the driver's legacy IPC refuses. The
 * handle names the exporting process beyond doubt (its pid, its PID
 * namespace, and a secret of the allocation's that only the handle
 * carries) and the allocation; the importer asks the exporter's control
 * socket for a file descriptor of the physical memory
 * (cuMemExportToShareableHandle, passed with SCM_RIGHTS) and maps it at an
 * address of its own, as cuIpcOpenMemHandle does. The two prove to each
 * other that they hold the secret without sending it (proof.c): a process
 * that is not the exporter (the pid means another process in the
 * importer's PID namespace, or was reused) cannot pass for it, and a peer
 * without the handle gets nothing, not even an allocation's existence.
 * An open that cannot reach the exporter fails as the driver's does,
 * CUDA_ERROR_INVALID_VALUE: the driver cannot open a handle of a process in
 * another PID namespace either.
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
#include <sys/random.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <unistd.h>

#include "park.h"
#include "park_find.h"

#define MAGIC 0x4b505343u /* "CSPK" */
#define VERSION 2

struct handle_v2 {
	uint32_t magic;
	uint32_t version;
	int32_t pid; /* the exporter, in its PID namespace */
	uint32_t reserved;
	uint64_t pidns; /* that namespace's inode */
	uint64_t va;
	uint64_t size;
	uint8_t secret[PARK_SECRET_LEN];
	char pad[8];
};
_Static_assert(sizeof(struct handle_v2) == CU_IPC_HANDLE_SIZE, "an IPC handle");

struct import {
	CUdeviceptr va;
	size_t size;
	CUmemGenericAllocationHandle h; /* 0 while detached */
	CUcontext ctx; /* current when it was imported */
	struct handle_v2 from;
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
/* A park is under way, which found no importer attached: none may attach
 * until it ends (imp_mu). */
static bool held_out;

/* A child of fork() imported nothing and exported nothing (table.c). */
static void child_forgets(void)
{
	imp_mu = (pthread_mutex_t)PTHREAD_MUTEX_INITIALIZER;
	imps = NULL;
	atts = NULL;
	nimps = capimps = natts = capatts = 0;
	held_out = false;
}

__attribute__((constructor)) static void ipc_atfork(void)
{
	pthread_atfork(NULL, NULL, child_forgets);
}

/* imp_mu held; false when it could not be noted (out of memory). */
static bool note_locked(uint64_t key, pid_t pid, bool on)
{
	size_t i = 0;
	while (i < natts && !(atts[i].key == key && atts[i].pid == pid))
		i++;
	if (!on && i < natts) {
		atts[i] = atts[--natts];
	} else if (on && i == natts) {
		if (!park_grow((void **)&atts, natts, &capatts, sizeof(*atts)))
			return false;
		atts[natts++] = (struct attach){ key, pid };
	}
	return true;
}

void park_ipc_note(uint64_t key, pid_t pid, bool on)
{
	pthread_mutex_lock(&imp_mu);
	note_locked(key, pid, on);
	pthread_mutex_unlock(&imp_mu);
}

/* An importer is noted before it is given the memory, not after: a park
 * that came in between would not know of it. */
bool park_ipc_attach_begin(uint64_t key, pid_t pid)
{
	pthread_mutex_lock(&imp_mu);
	bool ok = !held_out && note_locked(key, pid, true);
	pthread_mutex_unlock(&imp_mu);
	return ok;
}

/* imp_mu held */
static unsigned attached_locked(pid_t *first)
{
	for (size_t i = 0; i < natts;) {
		/* an importer that died keeps nothing attached */
		if (kill(atts[i].pid, 0) != 0 && errno == ESRCH)
			atts[i] = atts[--natts];
		else
			i++;
	}
	if (first)
		*first = natts ? atts[0].pid : 0;
	return (unsigned)natts;
}

unsigned park_ipc_attached(pid_t *first)
{
	pthread_mutex_lock(&imp_mu);
	unsigned n = attached_locked(first);
	pthread_mutex_unlock(&imp_mu);
	return n;
}

unsigned park_ipc_hold_out(pid_t *first)
{
	pthread_mutex_lock(&imp_mu);
	unsigned n = attached_locked(first);
	held_out = n == 0;
	pthread_mutex_unlock(&imp_mu);
	return n;
}

void park_ipc_let_in(void)
{
	pthread_mutex_lock(&imp_mu);
	held_out = false;
	pthread_mutex_unlock(&imp_mu);
}

/* The inode of this process's PID namespace, 0 when it cannot be read. */
static uint64_t pidns_self(void)
{
	struct stat st;
	return stat("/proc/self/ns/pid", &st) == 0 ? (uint64_t)st.st_ino : 0;
}

CUresult park_ipc_get(CUipcMemHandle *out, CUdeviceptr dptr)
{
	const struct park_real *r = park_real();
	if (r == NULL || r->ipc_get == NULL)
		return CU_ERR_NOT_INITIALIZED;
	park_gate_enter();
	struct handle_v2 h = { .magic = MAGIC, .version = VERSION, .pid = (int32_t)getpid(), .pidns = pidns_self() };
	pthread_mutex_lock(&park_tab.mu);
	struct park_alloc *a = park_find(dptr);
	bool secret = a && (a->exported || getrandom(a->secret, sizeof(a->secret), 0) == sizeof(a->secret));
	if (secret) {
		a->exported = true;
		h.va = a->va;
		h.size = a->size;
		memcpy(h.secret, a->secret, sizeof(h.secret));
	}
	pthread_mutex_unlock(&park_tab.mu);
	CUresult rc = CU_OK;
	if (a == NULL)
		rc = r->ipc_get(out, dptr);
	else if (out == NULL)
		rc = CU_ERR_INVALID_VALUE;
	else if (!secret)
		rc = CU_ERR_UNKNOWN;
	else
		memcpy(out, &h, sizeof(h));
	park_gate_leave();
	return rc;
}

/* The secret of the exported allocation at va into out; a random one (that
 * no asker can prove) when there is none, so that the answer says nothing
 * of what is there. */
static bool export_secret(CUdeviceptr va, uint8_t out[PARK_SECRET_LEN])
{
	pthread_mutex_lock(&park_tab.mu);
	struct park_alloc *a = park_find(va);
	bool found = a && a->va == va && a->exported;
	if (found)
		memcpy(out, a->secret, PARK_SECRET_LEN);
	pthread_mutex_unlock(&park_tab.mu);
	if (!found && getrandom(out, PARK_SECRET_LEN, 0) != PARK_SECRET_LEN)
		memset(out, 0xa5, PARK_SECRET_LEN); /* still no asker's: it knows no secret of ours */
	return found;
}

/* The exporter's side: "fd VA N", once the asker proved the handle's
 * secret, answers a line and the descriptor (and notes the importer
 * attached); "detach VA" notes it detached (a peer detaches only itself). */
int park_ipc_serve(int conn, const struct park_req *rq)
{
	const struct park_real *r = park_real();
	pid_t peer = park_peer_pid(conn);
	if (rq->verb == PARK_REQ_DETACH) {
		park_ipc_note(rq->id, peer, false);
		return park_send_fd(conn, "ok\n", 3, -1, 0);
	}
	uint8_t secret[PARK_SECRET_LEN];
	bool found = export_secret(rq->id, secret);
	/* an importer this process cannot name (another PID namespace) could
	 * never be waited for at a park */
	if (!park_proof_check(conn, rq, secret) || !found || peer <= 0)
		return park_send_fd(conn, "error code=1 stage=proof\n", 25, -1, 0);
	int fd = -1;
	CUresult rc = CU_ERR_INVALID_HANDLE;
	pthread_mutex_lock(&park_tab.mu);
	struct park_alloc *a = park_find(rq->id);
	/* parked, or a park under way: no memory to give (the importer asks
	 * again when it attaches after a restore) */
	if (r && a && a->va == rq->id && a->exported && park_same(a->secret, secret, sizeof(secret)) && a->handle &&
	    park_ipc_attach_begin(rq->id, peer)) {
		rc = r->export_handle(&fd, a->handle, CU_MEM_HANDLE_TYPE_POSIX_FILE_DESCRIPTOR, 0);
		if (rc != CU_OK)
			park_ipc_note(rq->id, peer, false);
	}
	pthread_mutex_unlock(&park_tab.mu);
	char reply[64];
	int len = snprintf(reply, sizeof(reply), rc == CU_OK ? "ok\n" : "error code=%d\n", rc);
	int w = park_send_fd(conn, reply, (size_t)len, rc == CU_OK ? fd : -1, 0);
	if (fd >= 0)
		close(fd);
	if (w != 0 && rc == CU_OK)
		park_ipc_note(rq->id, peer, false);
	return w;
}

/* The importer's side: tells the exporter it detached. */
static void tell_detached(const struct handle_v2 *h)
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

/* The importer's side: the exporter's descriptor of the allocation into
 * *fd. CUDA_ERROR_INVALID_VALUE when the exporter cannot be reached or is
 * not the process that made the handle (its proof fails);
 * CUDA_ERROR_INVALID_HANDLE when it is but has no memory to give (parked,
 * or freed). */
static CUresult fetch_fd(const struct handle_v2 *h, int *fd)
{
	*fd = -1;
	int conn = park_find_connect(h->pid, "/proc", 5000);
	if (conn < 0)
		return CU_ERR_INVALID_VALUE;
	CUresult rc = CU_ERR_INVALID_VALUE;
	if (park_proof_ask(conn, PARK_REQ_FD, h->va, h->secret)) {
		char reply[64];
		ssize_t n = park_recv_fd(conn, reply, sizeof(reply) - 1, fd);
		bool ok = n >= 2 && strncmp(reply, "ok", 2) == 0 && *fd >= 0;
		if (!ok && *fd >= 0)
			close(*fd);
		*fd = ok ? *fd : -1;
		rc = ok ? CU_OK : CU_ERR_INVALID_HANDLE;
	}
	close(conn);
	return rc;
}

/* Maps the exporter's memory at im->va (reserved), readable and writable
 * by the current device; fills im->h. */
static CUresult attach_at(const struct park_real *r, struct import *im)
{
	int fd;
	CUresult rc = fetch_fd(&im->from, &fd);
	if (rc != CU_OK)
		return rc;
	rc = r->import_handle(&im->h, (void *)(uintptr_t)fd, CU_MEM_HANDLE_TYPE_POSIX_FILE_DESCRIPTOR);
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

static CUresult import_mapped(const struct park_real *r, const struct handle_v2 *h, CUdeviceptr *dptr)
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
	struct handle_v2 *told = calloc(nimps ? nimps : 1, sizeof(*told));
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
 * still parked has nothing to give yet, and one CRIU restores may not
 * listen yet: asked again for up to wait_ms (when each process unparks on
 * its own, exporters and importers at once). */
CUresult park_ipc_attach_all(const struct park_real *r, unsigned wait_ms)
{
	double until = park_now() + wait_ms / 1000.0;
	pthread_mutex_lock(&imp_mu);
	CUresult rc = CU_OK;
	for (size_t i = 0; i < nimps && rc == CU_OK; i++) {
		if (imps[i].h != 0 || (rc = r->ctx_set(imps[i].ctx)) != CU_OK)
			continue;
		while (((rc = attach_at(r, &imps[i])) == CU_ERR_INVALID_HANDLE || rc == CU_ERR_INVALID_VALUE) &&
		       park_now() < until)
			usleep(20000);
	}
	pthread_mutex_unlock(&imp_mu);
	return rc;
}

/* What the driver answers for a handle of ours that it cannot open here:
 * of another PID namespace (no pid of ours names the exporter; the driver
 * answers so for its own handles: CUDA_ERROR_INVALID_VALUE), or this
 * process's own (CUDA_ERROR_INVALID_CONTEXT); CU_OK to go on. */
static CUresult openable(const struct handle_v2 *h, const CUdeviceptr *dptr)
{
	if (dptr == NULL || h->version != VERSION || h->size == 0 || !park_vmm())
		return CU_ERR_INVALID_VALUE;
	if (h->pidns != pidns_self() || h->pidns == 0)
		return CU_ERR_INVALID_VALUE;
	if (h->pid == (int32_t)getpid())
		return CU_ERR_INVALID_CONTEXT;
	return CU_OK;
}

CUresult park_ipc_open(CUdeviceptr *dptr, CUipcMemHandle handle, unsigned flags)
{
	const struct park_real *r = park_real();
	if (r == NULL || r->ipc_open == NULL)
		return CU_ERR_NOT_INITIALIZED;
	struct handle_v2 h;
	memcpy(&h, &handle, sizeof(h));
	park_gate_enter();
	CUresult rc;
	if (h.magic != MAGIC) {
		rc = r->ipc_open(dptr, handle, flags);
		if (rc == CU_OK) {
			pthread_mutex_lock(&park_tab.mu);
			park_tab.legacy_imports++;
			pthread_mutex_unlock(&park_tab.mu);
		}
	} else if ((rc = openable(&h, dptr)) == CU_OK) {
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
