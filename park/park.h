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

typedef void *(*dlsym_fn)(void *, const char *);

/* Code that may run before a sanitizer's runtime has set itself up: while
 * the dynamic linker binds a name (park_ifunc), or from a lookup the
 * runtime makes as it starts. Built without the sanitizers' checks. */
#define PARK_EARLY __attribute__((no_sanitize("address", "undefined")))

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
	cu_ipc_open_fn ipc_open_v1; /* optional */
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
	/* optional */
	cu_mem_retain_fn retain;
	cu_props_fn props;
	cu_ptr_attr_fn ptr_attr;
	cu_ptr_attrs_fn ptr_attrs;
	cu_dev_attr_fn dev_attr;
	cu_pool_import_fn pool_import;
	cu_pool_destroy_fn pool_destroy;
	cu_ctx_create_fn ctx_create_v1, ctx_create;
	cu_ctx_create_v3_fn ctx_create_v3;
	cu_ctx_create_v4_fn ctx_create_v4;
	cu_ctx_destroy_fn ctx_destroy_v1, ctx_destroy;
	cu_green_create_fn green_create;
	cu_green_destroy_fn green_destroy;
	cu_ctx_from_green_fn ctx_from_green;
	cu_primary_state_fn primary_state;
	cu_primary_retain_fn primary_retain;
	cu_primary_release_fn primary_release;
};

/* resolve.c: the real driver, loaded once; NULL when it cannot be (no
 * driver, or one without VMM): the interposer then only passes calls on.
 * Its functions are the next definitions after this library: a later
 * interposer's, else the driver's. */
const struct park_real *park_real(void);
/* Whether the driver has every VMM function backing needs. */
bool park_vmm(void);
void park_dl_init(void);
/* The definition of name after this library (a later interposer's, else the
 * driver's, loaded globally or not); NULL when none. */
void *park_next_sym(const char *name);
/* Whether the driver (libcuda.so.1 of the program's namespace) is loaded and
 * defines the function name; whether it versions its names. Safe while the
 * dynamic linker binds (reads its symbol table in place). */
bool park_driver_defines(const char *name);
bool park_driver_versions(void);
/* Whether the program installed a seccomp filter since it started (or it
 * cannot be told): system calls it may forbid are then not made. */
bool park_syscalls_changed(void);
/* Why the gate would refuse to close now (gate.c: a seccomp filter since the
 * program started, where its counts need membarrier), NULL if it would not:
 * a status says it before a park meets it. */
const char *park_gate_refuses(void);
/* CUDASNAP_PARK=0: every name and lookup answers the driver's own function,
 * nothing is backed, no control socket. */
extern bool park_passthrough;
/* This library's constructor has run. */
extern bool park_ready;
/* The driver name a dlsym of this thread is looking up now, when the
 * driver lacks it and the lookup reaches this library's definition (dl.c):
 * its resolver answers nothing to it (resolve.c: park_ifunc), and takes it
 * ("" again). A copy: the caller's string may be gone by the next lookup. */
extern __thread char park_dlsym_asks[128];
/* Notes name (NULL: none) as the lookup under way. */
void park_dlsym_asking(const char *name);

/* What dl_x86_64.S passes the program's lookups and loads on to (resolve.c:
 * the next definitions after this library), and what its stand-ins for the
 * C library's functions pass on to (the C library's). */
extern void *park_dlsym_next, *park_dlvsym_next, *park_dlopen_next, *park_dlmopen_next;
extern void *park_dlsym_libc, *park_dlvsym_libc, *park_dlopen_libc, *park_dlmopen_libc;

/* objects.c: the loaded objects, walked while the dynamic linker's list of
 * them holds still: fn is called for each (the program's namespace first,
 * in its order) until it answers nonzero. fn must take no lock of the
 * interposer's but dl.c's and bindings.c's own. */
struct link_map;
struct park_range {
	uintptr_t lo, hi;
};
struct park_obj {
	const struct link_map *lm; /* NULL: of another namespace (dlmopen) */
	uintptr_t base; /* load bias */
	const void *dyn; /* its dynamic section */
	struct park_range range; /* the addresses its segments take */
	const char *name;
	const void *phdr; /* its program headers (NULL before this library's constructor) */
	unsigned long long subs; /* how many objects the loader has unloaded so far */
	bool subs_known; /* it told */
};
typedef int (*park_obj_fn)(const struct park_obj *o, void *arg);
void park_objects(park_obj_fn fn, void *arg);
bool park_range_has(struct park_range r, uintptr_t v);
/* This library's own addresses. */
struct park_range park_self_range(void);

/* dl.c: lookups and loads (dl_x86_64.S) */
/* Whether lm was loaded by, or after, a dlopen with RTLD_DEEPBIND (while
 * the list of objects holds still: from a park_objects callback). */
bool park_after_deepbind(const struct link_map *lm);

/* bindings.c: 0 when every driver function any loaded object binds by name
 * goes through the gate; else -1 with why (what binds which name how). */
int park_bindings_check(char *why, size_t size);
/* bindings_wait.c: the same, on a thread of its own, waited for at most a
 * second (a thread of the program may hold the list of objects while it
 * calls the driver, which a closed gate holds): -1 with why when it did
 * not end by then. */
int park_bindings_check_within(char *why, size_t size);
/* The address ranges of the driver's copies (at most max); how many. */
int park_driver_ranges(uintptr_t *lo, uintptr_t *hi, int max);
/* Whether addr lies in the driver (any copy of it), in this library. */
bool park_in_driver(const void *addr);
bool park_is_ours(const void *addr);

/* entry.c: what stands for the driver's function real, of the given name
 * (a base name of cuGetProcAddress at version, or an exported name): a
 * wrapper, or a gated stub. */
void *park_hand_out(const char *name, void *real, bool base, int version);

/* gate.c: every driver entry point the program obtained goes through the
 * gate. While it is closed, calls wait at its door; park_gate_close waits
 * (at most timeout_ms) for the calls already inside to leave: 0, or -1
 * with *inside calls still in (*tid one of their threads), or why it could
 * not tell. */
void park_gate_init(bool barriers);
/* a gated entry point, or real when none is left; name: its exact name, or
 * with base its family's (cuGetProcAddress), whose stack arguments it takes */
void *park_gate_wrap(void *real, const char *name, bool base);
bool park_gate_stub(const void *fn);
int park_gate_close(unsigned timeout_ms, long *inside, pid_t *tid, const char **why);
void park_gate_open(void);
bool park_gate_closed(void);
void park_gate_wait_open(void);
/* For the interposer's own wrappers, which are C functions. */
void park_gate_enter(void);
void park_gate_leave(void);
/* The calling thread is the interposer's own (a park's): its driver calls
 * pass a closed gate. */
void park_gate_exempt(void);
bool park_gate_exempt_now(void);
/* The exported names (driver_api.inc): the name of slot, its stub; the slot
 * of name, or -1. */
const char *park_name_at(unsigned slot);
/* The CUDA version whose driver names driver_api.inc lists (13.2): a
 * cuGetProcAddress for a later one may hand out a version it lacks. */
#define PARK_API_KNOWN 13020
void *park_name_stub(unsigned slot);
int park_name_index(const char *name);

/* alloc.c: device memory the interposer backs with VMM, at addresses that
 * stay reserved for the life of the allocation. */
struct park_alloc {
	CUdeviceptr va;
	size_t size; /* mapped: bytes rounded up to the granularity */
	size_t bytes; /* what the program asked for */
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
	unsigned pool_imports; /* memory pools imported from another process (never restorable) */
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

/* files.c: a park into files (park_find.h: PARK_FILES_MAX, PARK_PIECE,
 * PARK_LANES and the layout). */
struct park_files {
	int fd[PARK_REQ_FILES_MAX];
	bool direct[PARK_REQ_FILES_MAX]; /* moved with O_DIRECT */
	unsigned n;
	/* a park's files whose space cudasnap still reserves as they are
	 * written: the read end of its pipe (files.c) */
	bool has_room;
	int room;
	unsigned long long bytes;
	/* a failure: its step ("write", "read", "verify", "copy", "flush"...),
	 * file, piece, and errno or the driver's error */
	const char *stage;
	unsigned file;
	unsigned long long piece;
	int err;
	CUresult cu;
};
/* Whether the descriptors are regular files open for writing (out) or
 * reading; probes O_DIRECT on each. 0, or -1 with why. */
int park_files_check(struct park_files *f, bool out, char *why, size_t size);
/* The MACs of one park's pieces, with the park's random key: in the
 * process's memory alone. */
struct park_tags {
	unsigned char key[32];
	bool gcm; /* GMAC, else Poly1305 (files.c) */
	unsigned long long pieces;
	unsigned char tag[][16];
};
/* Room for pieces tags and a new key; NULL when out of memory, or no key
 * could be had. */
struct park_tags *park_tags_new(unsigned long long pieces);
void park_tags_free(struct park_tags *t);
/* Whether this CPU can check t's MACs (GMAC takes AES-NI and PCLMUL). */
bool park_tags_usable(const struct park_tags *t);
/* The memory of the allocations [0, limit) (laid end to end by host_off)
 * out into the files, each piece's MAC into tags, or back from them, each
 * piece checked against its MAC before it reaches the device: 0, or -1
 * with the failure in f. */
int park_files_move(const struct park_real *r, struct park_files *f, struct park_tags *tags, bool out, size_t limit);
unsigned park_files_direct(const struct park_files *f);
void park_files_close(struct park_files *f);

/* move.c: a pinned staging buffer of PARK_PIECE bytes, made at its first use. */
struct park_stage {
	unsigned char *p;
	bool pinned;
	size_t size; /* 0: PARK_PIECE */
};
CUresult park_stage_get(const struct park_real *r, struct park_stage *st);
void park_stage_drop(const struct park_real *r, struct park_stage *st);

/* move.c: park and unpark; the answer is written into reply */
/* unpin: a host copy that is not pinned (made through pinned staging;
 * the driver's checkpoint and restore then have no pinned memory to
 * carry). files: the memory goes into these files instead of host memory
 * (or, at an unpark, comes from them); the park takes them (closed when
 * it ends), NULL or none: host memory, or at an unpark the files the park
 * still holds. */
int park_park(unsigned timeout_ms, bool unpin, struct park_files *files, char *reply, size_t size);
int park_unpark(unsigned timeout_ms, struct park_files *files, char *reply, size_t size);
/* A commit: the files the park holds are let go of (its memory stays in
 * them; an unpark must give them again). */
void park_files_let_go(void);
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

/* fdpass.c: a message received (park_send_fd, park_find.h, sends it): the
 * bytes read, *fd the descriptor that came with it or -1 (the caller closes
 * it). */
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
/* Noted before the memory is handed over; false while a park holds new
 * importers out: from its check that none is attached (park_ipc_hold_out,
 * which is 0 then) until park_ipc_let_in. */
bool park_ipc_attach_begin(uint64_t key, pid_t pid);
unsigned park_ipc_hold_out(pid_t *first);
void park_ipc_let_in(void);
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
/* *marked: the exported descriptor carries the interposer's mark */
CUresult park_w_export(void *shareable, CUmemGenericAllocationHandle h, CUmemAllocationHandleType type,
		       unsigned long long flags, bool *marked);
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
bool park_vmm_mapped(CUmemGenericAllocationHandle h, CUdeviceptr va, size_t size, size_t offset); /* an import's */
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
/* vmm_wrap.c: the program's mappings of VMM memory it made itself
 * (cuMemCreate: PyTorch's expandable segments, JAX), which a park leaves
 * to the driver's checkpoint: their bytes and count. */
unsigned long long park_vmm_own_bytes(unsigned *maps);
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
bool park_backed_mapped(CUmemGenericAllocationHandle h, CUdeviceptr va, size_t size); /* backed memory's */
void park_backed_unmapped(CUdeviceptr va, size_t size);
/* Why its backed memory cannot be parked now (park_tab.mu held), NULL. */
const char *park_backed_why(void);

double park_now(void);

/* observe.c: what the program asks of its memory, answered as the driver
 * answers for memory it did not back */
CUresult park_w_range(CUdeviceptr *base, size_t *size, CUdeviceptr dptr);
CUresult park_w_ptr_attr(void *data, int attr, CUdeviceptr ptr);
CUresult park_w_ptr_attrs(unsigned n, int *attrs, void **data, CUdeviceptr ptr);
/* Memory pools imported from another process, counted while they live. */
CUresult park_pool_import(CUmemoryPool *pool, void *handle, CUmemAllocationHandleType type, unsigned long long flags);
CUresult park_pool_destroy(CUmemoryPool pool);

/* ctx.c: the program's contexts, and waiting for their work with a bound */
CUresult park_ctx_create(CUcontext *ctx, unsigned flags, CUdevice dev);
CUresult park_ctx_create_v3(CUcontext *ctx, void *params, int n, unsigned flags, CUdevice dev);
CUresult park_ctx_create_v4(CUcontext *ctx, void *params, unsigned flags, CUdevice dev);
CUresult park_ctx_destroy(CUcontext ctx);
CUresult park_green_create(CUgreenCtx *g, void *desc, CUdevice dev, unsigned flags);
CUresult park_green_destroy(CUgreenCtx g);
/* Waits until every context of the process has finished its work, for at
 * most until (park_now()): CU_OK, CU_ERR_NOT_READY when time ran out (the
 * waits go on by themselves), or the driver's error. */
CUresult park_sync_all(const struct park_real *r, double until);
/* Waits for the work of ctx (from this thread, made current for it). */
CUresult park_sync_ctx(const struct park_real *r, CUcontext ctx);

/* entry.c: the driver's names the interposer wraps (gate_x86_64.S) */
CUresult park_sp_cuGetProcAddress(const char *symbol, void **pfn, int version, cuuint64_t flags);
CUresult park_sp_cuGetProcAddress_v2(const char *symbol, void **pfn, int version, cuuint64_t flags,
				     CUdriverProcAddressQueryResult *status);
CUresult park_sp_cuMemAlloc_v2(CUdeviceptr *dptr, size_t bytes);
CUresult park_sp_cuMemFree_v2(CUdeviceptr dptr);
CUresult park_sp_cuMemGetAddressRange_v2(CUdeviceptr *base, size_t *size, CUdeviceptr dptr);
CUresult park_sp_cuIpcGetMemHandle(CUipcMemHandle *h, CUdeviceptr dptr);
CUresult park_sp_cuIpcOpenMemHandle(CUdeviceptr *dptr, CUipcMemHandle h, unsigned flags);
CUresult park_sp_cuIpcOpenMemHandle_v2(CUdeviceptr *dptr, CUipcMemHandle h, unsigned flags);
CUresult park_sp_cuIpcCloseMemHandle(CUdeviceptr dptr);
CUresult park_sp_cuMemImportFromShareableHandle(CUmemGenericAllocationHandle *h, void *os_handle,
						CUmemAllocationHandleType type);
CUresult park_sp_cuMemMap(CUdeviceptr va, size_t size, size_t offset, CUmemGenericAllocationHandle h,
			  unsigned long long flags);
CUresult park_sp_cuMemUnmap(CUdeviceptr va, size_t size);
CUresult park_sp_cuMemRelease(CUmemGenericAllocationHandle h);
CUresult park_sp_cuMemCreate(CUmemGenericAllocationHandle *h, size_t size, const CUmemAllocationProp *prop,
			     unsigned long long flags);
CUresult park_sp_cuMemExportToShareableHandle(void *shareable, CUmemGenericAllocationHandle h,
					      CUmemAllocationHandleType type, unsigned long long flags);
CUresult park_sp_cuMemRetainAllocationHandle(CUmemGenericAllocationHandle *h, void *addr);
CUresult park_sp_cuMemGetAllocationPropertiesFromHandle(CUmemAllocationProp *prop, CUmemGenericAllocationHandle h);
CUresult park_sp_cuMemSetAccess(CUdeviceptr va, size_t size, const CUmemAccessDesc *desc, size_t count);
CUresult park_sp_cuPointerGetAttribute(void *data, int attr, CUdeviceptr ptr);
CUresult park_sp_cuPointerGetAttributes(unsigned n, int *attrs, void **data, CUdeviceptr ptr);
CUresult park_sp_cuMemPoolImportFromShareableHandle(CUmemoryPool *pool, void *handle, CUmemAllocationHandleType type,
						    unsigned long long flags);
CUresult park_sp_cuMemPoolDestroy(CUmemoryPool pool);
CUresult park_sp_cuCtxCreate(CUcontext *ctx, unsigned flags, CUdevice dev);
CUresult park_sp_cuCtxCreate_v2(CUcontext *ctx, unsigned flags, CUdevice dev);
CUresult park_sp_cuCtxCreate_v3(CUcontext *ctx, void *params, int n, unsigned flags, CUdevice dev);
CUresult park_sp_cuCtxCreate_v4(CUcontext *ctx, void *params, unsigned flags, CUdevice dev);
CUresult park_sp_cuCtxDestroy(CUcontext ctx);
CUresult park_sp_cuCtxDestroy_v2(CUcontext ctx);
CUresult park_sp_cuGreenCtxCreate(CUgreenCtx *g, void *desc, CUdevice dev, unsigned flags);
CUresult park_sp_cuGreenCtxDestroy(CUgreenCtx g);

#endif
