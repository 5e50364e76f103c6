/* The parking interposer (libcudasnap-park.so), loaded into a CUDA program
 * with LD_PRELOAD. It stands between the program and the driver so that
 * cudasnap can, before the driver's checkpoint lock, hold the program's
 * GPU work, copy its device memory into host memory and release it
 * ("park"), and after the driver's restore and unlock put it back at the
 * same addresses ("unpark"). The driver then moves only what is left (the
 * context), and host memory and PCIe, not the driver's copy, set the
 * speed. Nothing here changes what the program computes: while nothing is
 * parked, every call reaches the driver as it would without it. */
#ifndef CS_PARK_H
#define CS_PARK_H

#include <pthread.h>
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <sys/types.h>

#include "cuda_vmm_abi.h"
#include "request.h"

#define PARK_EXPORT __attribute__((visibility("default")))

/* The driver's functions the interposer itself calls, never gated. */
struct park_real {
	void *lib; /* libcuda.so.1's handle */
	cu_get_proc_fn get_proc;
	cu_get_proc_v1_fn get_proc_v1;
	cu_mem_alloc_fn mem_alloc;
	cu_mem_free_fn mem_free;
	cu_mem_range_fn mem_range;
	cu_addr_reserve_fn addr_reserve;
	cu_addr_free_fn addr_free;
	cu_mem_create_fn mem_create;
	cu_mem_release_fn mem_release;
	cu_mem_map_fn mem_map;
	cu_mem_unmap_fn mem_unmap;
	cu_set_access_fn set_access;
	cu_granularity_fn granularity;
	cu_export_fn export_handle;
	cu_import_fn import_handle;
	cu_ipc_get_fn ipc_get;
	cu_ipc_open_fn ipc_open;
	cu_ipc_close_fn ipc_close;
	cu_dtoh_fn dtoh;
	cu_htod_fn htod;
	cu_host_register_fn host_register;
	cu_host_unregister_fn host_unregister;
	cu_ctx_sync_fn ctx_sync;
	cu_ctx_get_fn ctx_get;
	cu_ctx_set_fn ctx_set;
	cu_ctx_device_fn ctx_device;
	cu_can_peer_fn can_peer;
	cu_device_count_fn device_count;
	cu_mem_retain_fn retain; /* optional */
	cu_props_fn props; /* optional */
};

/* resolve.c: the real driver, loaded once; NULL when it cannot be (no
 * driver, or one without VMM): the interposer then only passes calls on. */
const struct park_real *park_real(void);
/* Whether the driver has every VMM function backing needs. */
bool park_vmm(void);
/* The real dlsym, not the interposer's. */
void *park_real_dlsym(void *handle, const char *name);
void *(*park_dlsym_init(void))(void *, const char *);
void *park_dlsym_handle(void *handle, const char *name);

/* gate.c: every driver entry point the program obtained goes through the
 * gate. While it is closed, calls wait at its door; park_gate_close waits
 * (at most timeout_ms) for the calls already inside to leave. */
void *park_gate_wrap(void *real); /* a gated entry point, or real when none is left */
int park_gate_close(unsigned timeout_ms, long *inside);
void park_gate_open(void);
bool park_gate_closed(void);
/* For the interposer's own wrappers, which are C functions. */
void park_gate_enter(void);
void park_gate_leave(void);

/* alloc.c: device memory the interposer backs with VMM, at addresses that
 * stay reserved for the life of the allocation. */
struct park_alloc {
	CUdeviceptr va;
	size_t size;
	CUdevice dev;
	CUcontext ctx;
	CUmemGenericAllocationHandle handle; /* 0 while parked */
	size_t host_off; /* where its copy sits while parked */
	bool exported; /* shared with another process (IPC) */
	uint8_t secret[PARK_SECRET_LEN]; /* its IPC handle's, once exported */
	/* What the program did with its physical memory itself (backed.c) */
	unsigned retained; /* handles of it the program holds (cuMemRetainAllocationHandle) */
	unsigned mapped; /* mappings of it the program made (cuMemMap of such a handle) */
	bool shared; /* exported as a shareable handle (cuMemExportToShareableHandle): for good */
};

struct park_table {
	pthread_mutex_t mu;
	struct park_alloc *a;
	size_t n, cap;
	size_t granularity;
	unsigned long long backed_bytes;
	/* what the process did that parking cannot carry (0: nothing) */
	const char *unparkable;
	unsigned legacy_imports; /* cuIpcOpenMemHandle of memory the interposer did not make */
};

extern struct park_table park_tab;

CUresult park_alloc(CUdeviceptr *dptr, size_t bytes);
CUresult park_free(CUdeviceptr dptr);
/* The allocation holding dptr (park_tab.mu held), or NULL. */
struct park_alloc *park_find(CUdeviceptr dptr);
CUresult park_map_new(struct park_alloc *a, const struct park_real *r);
void park_mark_unparkable(const char *why);
/* Room for one more element in *arr (n used of *cap); false when out of memory. */
bool park_grow(void **arr, size_t n, size_t *cap, size_t elem);

/* move.c: park and unpark; the answer is written into reply */
/* unpin: a host copy that is not pinned (made through pinned staging;
 * the driver's checkpoint and restore then have no pinned memory to
 * carry). */
int park_park(unsigned timeout_ms, bool unpin, char *reply, size_t size);
int park_unpark(unsigned timeout_ms, char *reply, size_t size);
bool park_is_parked(void);
void park_status(char *reply, size_t size);
/* After an unpark's answer: the host copy is given back. */
void park_drop_host_copy(void);

/* proof.c: one line from conn without its newline, terminated: its length
 * + 1; 0 at the end, -1 on an error. A line longer than size is read
 * whole and given as an empty one. */
ssize_t park_read_line(int conn, char *buf, size_t size);
/* The proof exchange (proof.c): the asker sends "VERB ID NONCE" and
 * true means the other side proved it holds secret (and this side's
 * proof was sent: the answer to the request follows). */
bool park_proof_ask(int conn, enum park_verb verb, uint64_t id, const uint8_t secret[PARK_SECRET_LEN]);
/* The holder's side, for rq (which carries the asker's nonce): true when
 * the asker proved it holds secret. */
bool park_proof_check(int conn, const struct park_req *rq, const uint8_t secret[PARK_SECRET_LEN]);

/* fdpass.c: a message and, when fd >= 0, a descriptor with it: 0 or -1;
 * received: the bytes read, *fd the descriptor or -1 (the caller closes it). */
int park_send_fd(int conn, const void *msg, size_t len, int fd);
ssize_t park_recv_fd(int conn, void *buf, size_t size, int *fd);
/* The process at the other end of conn, in this PID namespace; 0 unknown. */
pid_t park_peer_pid(int conn);

/* control.c: the socket cudasnap asks; started with the first backed
 * allocation. */
void park_control_start(void);
/* Connections that hold a park now (it lasts while they live). */
unsigned park_control_held(void);

/* ipc.c: legacy CUDA IPC on memory the interposer backs */
CUresult park_ipc_get(CUipcMemHandle *h, CUdeviceptr dptr);
CUresult park_ipc_open(CUdeviceptr *dptr, CUipcMemHandle h, unsigned flags);
CUresult park_ipc_close(CUdeviceptr dptr);
/* control.c answers a peer's request for an allocation's file descriptor
 * ("fd", after a proof of the handle's secret) or its detach */
int park_ipc_serve(int conn, const struct park_req *rq);
/* The exporter's side: pid (in this PID namespace) attached to (on) or
 * detached from what key names: a legacy export's address, or
 * PARK_VMM_KEY of a VMM export's serial. */
#define PARK_VMM_KEY(serial) ((serial) | (1ULL << 63))
void park_ipc_note(uint64_t key, pid_t pid, bool on);
/* Importers of this process's memory still attached (dead ones dropped);
 * first: one of them. */
unsigned park_ipc_attached(pid_t *first);
/* The imports, detached for a park and attached again after it. */
CUresult park_ipc_detach_all(const struct park_real *r);
CUresult park_ipc_attach_all(const struct park_real *r, unsigned wait_ms);
unsigned park_ipc_imports(void);

/* vmm_wrap.c: the program's own VMM calls */
CUresult park_w_create(CUmemGenericAllocationHandle *h, size_t size, const CUmemAllocationProp *prop,
		       unsigned long long flags);
CUresult park_w_import(CUmemGenericAllocationHandle *h, void *os_handle, CUmemAllocationHandleType type);
CUresult park_w_export(void *shareable, CUmemGenericAllocationHandle h, CUmemAllocationHandleType type,
		       unsigned long long flags);
CUresult park_w_map(CUdeviceptr va, size_t size, size_t offset, CUmemGenericAllocationHandle h,
		    unsigned long long flags);
CUresult park_w_unmap(CUdeviceptr va, size_t size);
CUresult park_w_release(CUmemGenericAllocationHandle h);
CUresult park_w_retain(CUmemGenericAllocationHandle *h, void *addr);
CUresult park_w_props(CUmemAllocationProp *prop, CUmemGenericAllocationHandle h);
CUresult park_w_access(CUdeviceptr va, size_t size, const CUmemAccessDesc *desc, size_t count);
/* vmm_import.c: a new allocation, or import, whose handle value no
 * carried import of the program holds (the interposer's own memory too:
 * the program may retain it). */
CUresult park_create_fresh(const struct park_real *r, CUmemGenericAllocationHandle *h, size_t size,
			   const CUmemAllocationProp *prop, unsigned long long flags);
CUresult park_import_fresh(const struct park_real *r, CUmemGenericAllocationHandle *h, void *os_handle,
			   CUmemAllocationHandleType type);

/* vmm_import.c: VMM memory the program imports itself. Carried when its
 * exporter runs the interposer too (the descriptor carries its mark);
 * counted otherwise (park_vmm_imports), and cudasnap refuses the process. */
unsigned park_vmm_imports(void);
unsigned park_vmm_carried(void);
void park_vmm_imported(CUmemGenericAllocationHandle h, int fd);
void park_vmm_mapped(CUmemGenericAllocationHandle h, CUdeviceptr va, size_t size, size_t offset);
void park_vmm_access(CUdeviceptr va, size_t size, const CUmemAccessDesc *desc, size_t count);
void park_vmm_unmapped(CUdeviceptr va, size_t size);
bool park_vmm_release(CUmemGenericAllocationHandle h);
CUmemGenericAllocationHandle park_vmm_retained(CUmemGenericAllocationHandle h, CUdeviceptr va);
/* The driver's handle for a program's value (the value itself, but for an
 * import carried through a park). */
CUmemGenericAllocationHandle park_vmm_real(CUmemGenericAllocationHandle h);
/* Park and unpark of the imports; *lost: an exporter that has no memory to
 * give again. */
CUresult park_vmm_detach_all(const struct park_real *r, pid_t *lost);
CUresult park_vmm_attach_all(const struct park_real *r, unsigned wait_ms);

/* vmm_export.c: VMM memory the program makes and exports itself */
void park_vmm_made(CUmemGenericAllocationHandle h, const CUmemAllocationProp *prop);
void park_vmm_made_mapped(CUmemGenericAllocationHandle h, CUdeviceptr va, size_t size);
void park_vmm_made_unmapped(CUdeviceptr va, size_t size);
void park_vmm_made_released(CUmemGenericAllocationHandle h);
/* Whether the export's descriptor fd was marked (vmm_export.c). */
bool park_vmm_exported(CUmemGenericAllocationHandle h, int fd);
/* The mark fd carries: its exporter (in this PID namespace) and serial. */
bool park_vmm_mark(int fd, pid_t *pid, uint64_t *serial);
/* control.c: a peer's request about a VMM export */
int park_vmm_serve(int conn, const struct park_req *rq);
/* Exports whose descriptor the exporter still keeps a copy of, to tell its
 * first importer's claim from a forged one. */
unsigned park_vmm_unclaimed(void);
/* Before a checkpoint: those copies (device files) are closed, and exports
 * not claimed by then are not carried. */
void park_vmm_close_unclaimed(void);

/* backed.c: what the program does itself with the physical memory of the
 * allocations the interposer backs; a park would take that memory from
 * under it (or from a peer it exported it to). park_tab.mu is taken. */
void park_backed_retained(CUmemGenericAllocationHandle h);
/* The program's release of h: false when h is the handle of a backed
 * allocation that the program holds no retained reference of (its release
 * would drop the interposer's own: the driver would not know such a
 * handle of cudaMalloc memory either); the count goes down otherwise. */
bool park_backed_release(CUmemGenericAllocationHandle h);
void park_backed_exported(CUmemGenericAllocationHandle h);
void park_backed_mapped(CUmemGenericAllocationHandle h, CUdeviceptr va, size_t size);
void park_backed_unmapped(CUdeviceptr va, size_t size);
/* Why its backed memory cannot be parked now (park_tab.mu held), NULL. */
const char *park_backed_why(void);

double park_now(void);

/* resolve.c: what the interposer exports by name */
PARK_EXPORT CUresult cuGetProcAddress_v2(const char *symbol, void **pfn, int version, cuuint64_t flags,
					 CUdriverProcAddressQueryResult *status);
PARK_EXPORT CUresult cuGetProcAddress(const char *symbol, void **pfn, int version, cuuint64_t flags);
PARK_EXPORT CUresult cuMemAlloc_v2(CUdeviceptr *dptr, size_t bytes);
PARK_EXPORT CUresult cuMemFree_v2(CUdeviceptr dptr);
PARK_EXPORT CUresult cuIpcGetMemHandle(CUipcMemHandle *h, CUdeviceptr dptr);
PARK_EXPORT CUresult cuIpcOpenMemHandle_v2(CUdeviceptr *dptr, CUipcMemHandle h, unsigned flags);
PARK_EXPORT CUresult cuIpcCloseMemHandle(CUdeviceptr dptr);
PARK_EXPORT CUresult cuMemImportFromShareableHandle(CUmemGenericAllocationHandle *h, void *os_handle,
						    CUmemAllocationHandleType type);
PARK_EXPORT CUresult cuMemMap(CUdeviceptr va, size_t size, size_t offset, CUmemGenericAllocationHandle h,
			      unsigned long long flags);
PARK_EXPORT CUresult cuMemUnmap(CUdeviceptr va, size_t size);
PARK_EXPORT CUresult cuMemRelease(CUmemGenericAllocationHandle h);
PARK_EXPORT CUresult cuMemCreate(CUmemGenericAllocationHandle *h, size_t size, const CUmemAllocationProp *prop,
				 unsigned long long flags);
PARK_EXPORT CUresult cuMemExportToShareableHandle(void *shareable, CUmemGenericAllocationHandle h,
						  CUmemAllocationHandleType type, unsigned long long flags);
PARK_EXPORT CUresult cuMemRetainAllocationHandle(CUmemGenericAllocationHandle *h, void *addr);
PARK_EXPORT CUresult cuMemGetAllocationPropertiesFromHandle(CUmemAllocationProp *prop, CUmemGenericAllocationHandle h);
PARK_EXPORT CUresult cuMemSetAccess(CUdeviceptr va, size_t size, const CUmemAccessDesc *desc, size_t count);

#endif
