/* Events of the double, on its one stream. A record notes when the stream
 * drains of what was queued before it; a query and a synchronize compare
 * that moment with the clock; a stream that waits on an event drains no
 * earlier. An interprocess event keeps the moment in a shared file, as
 * driver 580 keeps its state: the creator makes /dev/shm/cuda.shm.<uid>.
 * <pid>.<n>, holds it open and maps it; a process that opens the event's
 * handle maps the same file without holding it, and keeps the mapping
 * after it destroys the event (H200, 2026-12-04). Unlike imported memory,
 * an imported event does not keep a process from being restored: driver
 * 580 restored such importers, alone and with the creator, whether they
 * kept the event or destroyed it. */
#include <errno.h>
#include <fcntl.h>
#include <stdatomic.h>
#include <stdbool.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>

#include "cuda_vmm_api.h"
#include "internal.h"
#include "ipc.h"

#define EV_MAGIC 0x66636576u /* "fcev" */
#define EV_FLAGS (CU_EVENT_BLOCKING_SYNC | CU_EVENT_DISABLE_TIMING | CU_EVENT_INTERPROCESS)

/* The shared file's first bytes. */
struct shared_state {
	uint32_t magic;
	int32_t pid; /* the creator, as it sees itself */
	_Atomic uint64_t done_ns;
};

struct CUevent_st {
	uint32_t magic;
	unsigned int flags;
	_Atomic uint64_t done_ns; /* when not interprocess */
	struct shared_state *shared; /* interprocess: the mapped file */
	int fd; /* the creator's descriptor of it; -1 in an importer */
	char path[PATH_MAX];
};

struct handle {
	uint32_t magic;
	int32_t pid;
	uint32_t uid;
	uint32_t n;
	unsigned char reserved[48];
};
_Static_assert(sizeof(struct handle) == sizeof(CUipcEventHandle), "an event handle");

static atomic_uint next_file = 1; /* 1 is the memory export's */

static size_t page(void)
{
	return (size_t)sysconf(_SC_PAGESIZE);
}

static _Atomic uint64_t *moment(struct CUevent_st *e)
{
	return e->shared ? &e->shared->done_ns : &e->done_ns;
}

static CUresult check(CUevent ev)
{
	return ev != NULL && ev->magic == EV_MAGIC ? CUDA_SUCCESS : CUDA_ERROR_INVALID_HANDLE;
}

/* A call on ev (its other arguments valid or not) inside the gate, which
 * the caller leaves when this answers CUDA_SUCCESS. */
static CUresult enter(CUevent ev, bool valid)
{
	CUresult rc = check(ev);
	if (rc == CUDA_SUCCESS && !valid)
		rc = CUDA_ERROR_INVALID_VALUE;
	return rc == CUDA_SUCCESS ? fc_gate_enter() : rc;
}

static int create_file(struct CUevent_st *e)
{
	unsigned int n = atomic_fetch_add(&next_file, 1) + 1;
	if (fc_ipc_file_path(e->path, sizeof(e->path), (unsigned)geteuid(), (int)getpid(), n) != 0)
		return -1;
	if (unlink(e->path) != 0 && errno != ENOENT)
		return -1;
	e->fd = open(e->path, O_RDWR | O_CREAT | O_EXCL | O_NOFOLLOW | O_CLOEXEC, 0600);
	if (e->fd < 0)
		return -1;
	void *p = MAP_FAILED;
	if (ftruncate(e->fd, (off_t)page()) == 0)
		p = mmap(NULL, page(), PROT_READ | PROT_WRITE, MAP_SHARED, e->fd, 0);
	if (p == MAP_FAILED) {
		close(e->fd);
		unlink(e->path);
		return -1;
	}
	e->shared = p;
	e->shared->pid = (int32_t)getpid();
	e->shared->magic = EV_MAGIC;
	return 0;
}

/* A new event of the current context, without its shared file yet. */
static CUresult new_event(struct CUevent_st **out, unsigned int flags)
{
	CUresult rc = fc_ctx_check(NULL);
	if (rc != CUDA_SUCCESS)
		return rc;
	struct CUevent_st *e = calloc(1, sizeof(*e));
	if (e == NULL)
		return CUDA_ERROR_OUT_OF_MEMORY;
	e->magic = EV_MAGIC;
	e->flags = flags;
	e->fd = -1;
	*out = e;
	return CUDA_SUCCESS;
}

CUresult cuEventCreate(CUevent *ev, unsigned int flags)
{
	if (ev == NULL || (flags & ~EV_FLAGS) ||
	    ((flags & CU_EVENT_INTERPROCESS) && !(flags & CU_EVENT_DISABLE_TIMING)))
		return CUDA_ERROR_INVALID_VALUE;
	struct CUevent_st *e;
	CUresult rc = new_event(&e, flags);
	if (rc != CUDA_SUCCESS)
		return rc;
	if ((flags & CU_EVENT_INTERPROCESS) && create_file(e) != 0) {
		free(e);
		return CUDA_ERROR_OPERATING_SYSTEM;
	}
	*ev = e;
	return CUDA_SUCCESS;
}

CUresult cuEventDestroy_v2(CUevent ev)
{
	CUresult rc = check(ev);
	if (rc != CUDA_SUCCESS)
		return rc;
	ev->magic = 0;
	/* an importer keeps the file mapped (as driver 580's importers do) */
	if (ev->fd >= 0) {
		munmap(ev->shared, page());
		close(ev->fd);
		unlink(ev->path);
	}
	free(ev);
	return CUDA_SUCCESS;
}

CUresult cuEventRecord(CUevent ev, CUstream stream)
{
	(void)stream;
	CUresult rc = enter(ev, true);
	if (rc != CUDA_SUCCESS)
		return rc;
	int dev = 0;
	fc_ctx_check(&dev);
	pthread_mutex_lock(&fc_tgt.mu);
	uint64_t now = fc_now_ns(), busy = fc_tgt.streams[dev].busy_until, done = busy > now ? busy : now;
	pthread_mutex_unlock(&fc_tgt.mu);
	atomic_store(moment(ev), done);
	fc_gate_leave();
	return CUDA_SUCCESS;
}

CUresult cuEventQuery(CUevent ev)
{
	CUresult rc = check(ev);
	if (rc != CUDA_SUCCESS)
		return rc;
	return fc_now_ns() >= atomic_load(moment(ev)) ? CUDA_SUCCESS : CUDA_ERROR_NOT_READY;
}

CUresult cuEventSynchronize(CUevent ev)
{
	CUresult rc = enter(ev, true);
	if (rc != CUDA_SUCCESS)
		return rc;
	uint64_t done = atomic_load(moment(ev));
	pthread_mutex_lock(&fc_tgt.mu);
	while (fc_now_ns() < done)
		fc_wait_until(done);
	pthread_mutex_unlock(&fc_tgt.mu);
	fc_gate_leave();
	return CUDA_SUCCESS;
}

CUresult cuStreamWaitEvent(CUstream stream, CUevent ev, unsigned int flags)
{
	(void)stream;
	CUresult rc = enter(ev, flags == 0);
	if (rc != CUDA_SUCCESS)
		return rc;
	uint64_t done = atomic_load(moment(ev));
	int dev = 0;
	fc_ctx_check(&dev);
	pthread_mutex_lock(&fc_tgt.mu);
	if (fc_tgt.streams[dev].busy_until < done)
		fc_tgt.streams[dev].busy_until = done;
	pthread_mutex_unlock(&fc_tgt.mu);
	fc_gate_leave();
	return CUDA_SUCCESS;
}

CUresult cuIpcGetEventHandle(CUipcEventHandle *out, CUevent ev)
{
	CUresult rc = check(ev);
	if (rc != CUDA_SUCCESS || out == NULL)
		return rc != CUDA_SUCCESS ? rc : CUDA_ERROR_INVALID_VALUE;
	if (ev->fd < 0)
		return CUDA_ERROR_INVALID_HANDLE; /* not interprocess, or imported */
	struct handle h = { .magic = EV_MAGIC, .pid = ev->shared->pid, .uid = (uint32_t)geteuid() };
	const char *dot = strrchr(ev->path, '.');
	h.n = (uint32_t)strtoul(dot + 1, NULL, 10);
	memcpy(out, &h, sizeof(h));
	return CUDA_SUCCESS;
}

CUresult cuIpcOpenEventHandle(CUevent *ev, CUipcEventHandle handle)
{
	struct handle h;
	memcpy(&h, &handle, sizeof(h));
	if (ev == NULL || h.magic != EV_MAGIC)
		return CUDA_ERROR_INVALID_VALUE;
	struct CUevent_st *e;
	CUresult rc = new_event(&e, CU_EVENT_DISABLE_TIMING | CU_EVENT_INTERPROCESS);
	if (rc != CUDA_SUCCESS)
		return rc;
	int fd = -1;
	if (fc_ipc_file_path(e->path, sizeof(e->path), h.uid, h.pid, h.n) == 0)
		fd = open(e->path, O_RDWR | O_NOFOLLOW | O_CLOEXEC);
	struct stat st;
	void *p = MAP_FAILED;
	if (fd >= 0 && fstat(fd, &st) == 0 && S_ISREG(st.st_mode) && st.st_size >= (off_t)page())
		p = mmap(NULL, page(), PROT_READ | PROT_WRITE, MAP_SHARED, fd, 0);
	if (fd >= 0)
		close(fd);
	if (p != MAP_FAILED && ((struct shared_state *)p)->magic != EV_MAGIC) {
		munmap(p, page());
		p = MAP_FAILED;
	}
	if (p == MAP_FAILED) {
		free(e);
		return CUDA_ERROR_INVALID_HANDLE;
	}
	e->shared = p;
	*ev = e;
	return CUDA_SUCCESS;
}
