/* The self-test of the driver API that the parking interposer uses (VMM,
 * legacy memory, copies, contexts, cuGetProcAddress): the driver's calls,
 * and peers, fresh processes of this test program that make them (a
 * process that only forked from the test would not be a CUDA process once
 * the test has initialized NVML). */
#ifndef FAKECUDA_TEST_VMM_H
#define FAKECUDA_TEST_VMM_H

#include <sys/types.h>

#include "cuda_vmm_api.h"
#include "test_util.h"

#define MIB (1ull << 20)

struct cuv {
	void *handle;
	CUresult (*init)(unsigned int);
	CUresult (*retain)(CUcontext *, CUdevice);
	CUresult (*release_ctx)(CUdevice);
	cu_ctx_set_fn ctx_set;
	cu_ctx_get_fn ctx_get;
	cu_ctx_device_fn ctx_device;
	cu_ctx_sync_fn sync;
	cu_can_peer_fn can_peer;
	cu_mem_alloc_fn alloc;
	cu_mem_free_fn free;
	cu_mem_range_fn range;
	cu_htod_fn htod;
	cu_dtoh_fn dtoh;
	CUresult (*dtod)(CUdeviceptr, CUdeviceptr, size_t);
	CUresult (*set8)(CUdeviceptr, unsigned char, size_t);
	CUresult (*set32)(CUdeviceptr, unsigned int, size_t);
	cu_host_register_fn host_register;
	cu_host_unregister_fn host_unregister;
	CUresult (*host_alloc)(void **, size_t, unsigned int);
	CUresult (*free_host)(void *);
	cu_granularity_fn granularity;
	cu_addr_reserve_fn reserve;
	cu_addr_free_fn addr_free;
	cu_mem_create_fn create;
	cu_mem_release_fn release;
	cu_mem_map_fn map;
	cu_mem_unmap_fn unmap;
	cu_set_access_fn access;
	cu_export_fn export_fd;
	cu_import_fn import_fd;
	cu_ipc_get_fn ipc_get;
	cu_ipc_open_fn ipc_open;
	cu_ipc_close_fn ipc_close;
	CUresult (*launch)(CUfunction, unsigned int, unsigned int, unsigned int, unsigned int,
			   unsigned int, unsigned int, unsigned int, CUstream, void **, void **);
	cu_get_proc_fn get_proc;
	cu_get_proc_v1_fn get_proc_v1;
};

/* test_vmm_util.c */
int cuv_load(struct cuv *c, const char *lib);
/* cuInit, device 0's primary context made current: 0, or -1 (a failed
 * check) */
int cuv_start(const struct cuv *c);
/* A VMM allocation of bytes on device 0, mapped read-write at *ptr;
 * handle_types as cuMemCreate takes them. */
int cuv_vmm(const struct cuv *c, size_t bytes, int handle_types, CUdeviceptr *ptr,
	    CUmemGenericAllocationHandle *h);
/* Whether all n words at dptr are value (read back with cuMemcpyDtoH). */
int cuv_all(const struct cuv *c, CUdeviceptr dptr, size_t bytes, unsigned int value);

struct peer {
	pid_t pid;
	int sock; /* our end of a socketpair */
};

/* A fresh process of this program running role (test_vmm_peer) with arg;
 * 0, or -1 (a failed check). */
int peer_start(const struct env *e, struct peer *p, const char *role, const char *arg);
/* Its exit status (killed after 10 s: -1). */
int peer_end(struct peer *p);
int say(int sock, const char *line);
/* The next line, without its newline; "" when none came within ms. */
void hear(int sock, char *buf, size_t len, unsigned int ms);
/* Whether the next line is want. */
int expect(int sock, const char *want, unsigned int ms);
int send_fd(int sock, int fd);
int recv_fd(int sock, unsigned int ms);

/* fakecuda-cuapp with args, its stdout a pipe: 0, or -1 (a failed check) */
struct cuapp_proc {
	pid_t pid;
	int out;
	char ready[512]; /* its ready line */
};
int cuapp_start(const struct env *e, const char *const *args, struct cuapp_proc *p);
int cuapp_stop(struct cuapp_proc *p);

/* test_vmm_*.c: peers' roles */
int test_vmm_peer(const char *role, const char *lib, int sock, const char *arg);
int peer_basics(const struct cuv *c, int sock, const char *arg);
int peer_exporter(const struct cuv *c, int sock, const char *arg);
int peer_importer(const struct cuv *c, int sock, const char *arg);
int peer_ipc(const struct cuv *c, int sock, const char *arg);
int peer_event(const struct cuv *c, int sock, const char *arg);

/* the groups of checks */
void test_vmm(const struct env *e, const struct drv *d);
void test_vmm_share(const struct env *e, const struct drv *d);
void test_vmm_cycle(const struct env *e, const struct drv *d);
void test_event(const struct env *e, const struct drv *d); /* test_event.c */

#endif
