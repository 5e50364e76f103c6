/* Pieces of the driver double shared between its source files. */
#ifndef FAKECUDA_INTERNAL_H
#define FAKECUDA_INTERNAL_H

#include <limits.h>
#include <pthread.h>
#include <stddef.h>
#include <stdint.h>
#include <sys/types.h>

#include "cuda_api.h"
#include "gpus.h"

/* A device's one stream: kernels run back to back until busy_until; a
 * stream wait (cuStreamWaitValue32) holds it until a word of host memory
 * says so, and the kernels queued behind it then run for queued_ns. */
struct fc_stream {
	uint64_t busy_until; /* ns */
	const volatile uint32_t *wait_addr; /* NULL: no wait */
	uint32_t wait_value;
	unsigned int wait_flags;
	uint64_t queued_ns;
};

/* What initialized the driver in this process; they hold different device
 * files (NVML clients keep a few fds and no mappings). */
enum { FC_LEVEL_NVML = 1, FC_LEVEL_CUDA = 2 };

struct fc_target {
	pthread_mutex_t mu;
	pthread_cond_t cv; /* CLOCK_MONOTONIC; broadcast on every change */
	int levels;
	int cuda_inited;
	int shutdown;
	int forked_child;
	CUprocessState state;
	int lock_pending;
	int active;           /* fake API calls in progress */
	struct fc_stream streams[FC_MAX_GPUS]; /* one per device (stream.c) */
	int restore_tid;
	struct fc_gpus gpus;
	int ndev;             /* GPUs visible to the process */
	int map[FC_MAX_GPUS]; /* device ordinal -> index in gpus */
	char devdir[PATH_MAX];
	int devdir_set; /* named by CUDASNAP_DEV_DIR: missing files are created */
	int ipc_imported; /* mapped another process's device memory: never restorable */
	/* a restore ran out of GPU memory: the checkpointed state is gone, and
	 * every later restore answers 304 (driver 580) */
	int destroyed;
};

extern struct fc_target fc_tgt;

/* errors.c */
int fc_error_parse(const char *s, CUresult *out);

/* state.c */
uint64_t fc_now_ns(void);
void fc_sleep_ms(unsigned int ms);
/* Waits on fc_tgt.cv (fc_tgt.mu held) until woken or deadline_ns passes. */
void fc_wait_until(uint64_t deadline_ns);

/* stream.c, with fc_tgt.mu held: whether device dev's stream (every
 * stream: dev -1) has drained by now; when the streams next change by time
 * alone (a kernel ends; a wait is looked at again every millisecond). */
int fc_streams_idle(int dev, uint64_t now);
uint64_t fc_streams_wake(int dev, uint64_t now);
/* Queues a kernel of ms on dev's stream (waiting while it holds a whole
 * kernel); waits until dev's stream has drained. fc_tgt.mu not held. */
CUresult fc_kernel_on(int dev, unsigned int ms);
/* Waits, as a call does, while the process is locked or checkpointed, then
 * until dev's stream has drained (cuCtxSynchronize). */
CUresult fc_stream_drain_dev(int dev);

/* state.c: the fake API's view of the checkpoint state */
CUresult fc_gate_enter(void);
void fc_gate_leave(void);

/* pool.c: whether the process holds a memory pool imported from another */
int fc_pool_import_held(void);

/* hostmem.c: whether [p, p + bytes) is registered or allocated pinned
 * host memory */
int fc_host_registered(const void *p, size_t bytes);

/* ctx.c: the calling thread's current context: CUDA_ERROR_INVALID_CONTEXT
 * when it has none; *dev (may be NULL) its device */
CUresult fc_ctx_check(int *dev);

/* copy.c: taken for reading by every copy for its whole length, and for
 * writing by whatever changes what device addresses mean (frees, VMM maps
 * and releases), so that no copy meets a closed memfd */
extern pthread_rwlock_t fc_mem_rw;

/* devfiles.c: create makes the missing files (empty, mode 0666) */
/* The GPU whose device file a CUDA process opens: its index in the machine's
 * list (the fake NVML's minor number). */
void fc_devfiles_set_gpu(int index);
int fc_devfiles_present(const char *devdir, int level);
int fc_devfiles_open(const char *devdir, int create, int level);
void fc_devfiles_close(int leak_fd, int leak_map);
int fc_devfiles_reopen(const char *devdir, int create);

/* devmem.c: gpu names the GPU that holds the memory (device 0's) */
CUresult fc_devmem_alloc(uint64_t *dptr, size_t bytes, const CUuuid *gpu);
/* own: cuMemFree of our own memory; else the import at dptr, unmapped */
CUresult fc_devmem_free(uint64_t dptr, int own);
/* mem: another process's device memory, within the mapping map_base (of
 * map_len bytes), which stays until fc_devmem_free(dptr, 0) */
CUresult fc_devmem_import(unsigned char *mem, size_t bytes, void *map_base, size_t map_len,
			  uint64_t *dptr);
/* Where device memory is: our own at off in the memfd fd (mem NULL), or
 * imported memory at mem (fd -1). */
struct fc_region {
	int fd;
	off_t off;
	unsigned char *mem;
};
int fc_devmem_locate(uint64_t dptr, size_t bytes, struct fc_region *r);
/* The allocation that holds dptr: where dptr is, and *avail the bytes from
 * dptr to the allocation's end; -1 when none holds it. */
int fc_devmem_segment(uint64_t dptr, struct fc_region *r, size_t *avail);
/* The allocation that holds dptr, and whether it is imported; -1 if none */
int fc_devmem_range(uint64_t dptr, uint64_t *base, size_t *bytes, int *imported);
int fc_devmem_save(void);
/* All of len bytes at offset 0 of fd, read or written (-1 on a short one). */
int fc_io_all(int fd, unsigned char *buf, size_t len, int writing);
/* Bytes that the checkpoint copied to the host (0 when not checkpointed). */
uint64_t fc_devmem_saved(void);
int fc_devmem_restore(const CUuuid *gpu);
void fc_devmem_forget(void);

/* ops.c, run by the restore thread */
struct fc_req;
CUresult fc_op_lock(unsigned int timeout_ms);
CUresult fc_op_checkpoint(int leak_fd, int leak_map);
/* oom: the fault that makes the restore run out of GPU memory */
struct fc_req_fds;
CUresult fc_op_restore(const struct fc_req *req, int oom, const struct fc_req_fds *fds);
CUresult fc_op_unlock(void);

/* faults.c */
struct fc_fault_hit {
	CUresult error;
	unsigned int delay_ms;
	int exit_now;
	int leak_fd;
	int leak_map;
	int oom; /* restore only */
};
/* pid: the target's own pid (as its getpid() says), matched against the
 * lines; warn: report bad lines on stderr (targets only, so that a caller's
 * own output stays clean) */
void fc_faults_check(int op, int pid, int warn, struct fc_fault_hit *hit);

/* caller_tid.c: the restore thread of process pid (any of its thread ids,
 * in the caller's pid namespace), as the target itself numbers it; 0 if it
 * has none */
int fc_find_restore_tid(int pid);
/* The same for pid of the /proc at root. */
int fc_find_restore_tid_in(const char *root, int pid);

/* caller_room.c: the free memory of every GPU, as the caller's NVML
 * reports it now, for a restore to be judged by */
struct fc_room;
void fc_measure_room(struct fc_room *room);
/* caller_room.c: the file whose flock lets one restore of the device
 * directory be admitted at a time (-1: none), and, in the target, the room
 * its caller measured less what the processes of the caller's /proc
 * (procfd) took since */
int fc_room_file(void);
void fc_room_admit(struct fc_room *room, int procfd);

/* caller_sock.c: a connection to the restore thread of process pid (in the
 * caller's pid namespace; pidns and tgid as fc_sockaddr takes them), from
 * any network namespace */
CUresult fc_connect_target(int pid, unsigned long pidns, int tgid, int *fd);

/* server.c */
int fc_server_start(void);
void fc_server_forget(void);

#endif
