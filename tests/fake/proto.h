/* What a caller and a target's restore thread say to each other. */
#ifndef FAKECUDA_PROTO_H
#define FAKECUDA_PROTO_H

#include <stddef.h>
#include <stdint.h>
#include <sys/socket.h>
#include <sys/un.h>

#include "cuda_api.h"
#include "gpus.h"

enum fc_op {
	FC_OP_GET_STATE,
	FC_OP_GET_RESTORE_TID,
	FC_OP_LOCK,
	FC_OP_CHECKPOINT,
	FC_OP_RESTORE,
	FC_OP_UNLOCK,
	/* not requests: faults of the target's own API calls */
	FC_OP_MEM_CREATE,
	FC_OP_DTOH,
	FC_OP_IMPORT,
	FC_OP_MEM_UNMAP,
	FC_OP_SYNC,
	FC_OP_COUNT
};

#define FC_MAGIC 0x66637564u

/* The restore thread's name (its /proc/PID/task/TID/comm): the caller finds
 * the thread by it, without asking the target, which may be stopped. */
#define FC_RESTORE_THREAD_NAME "fakecuda-rt"
#define FC_MAX_PAIRS 32

/* A GPU's free memory as the caller's NVML reports it. */
struct fc_gpu_free {
	CUuuid uuid;
	uint64_t bytes;
};

/* What a restore may take: measured by the caller, which sees its own /proc
 * as its NVML does, and judged by the target, which alone knows how much it
 * checkpointed and which GPU it will use after the GPU map. */
struct fc_room {
	uint32_t ngpus; /* the caller's FAKECUDA_GPUS */
	uint32_t scanned; /* users[] were read from the caller's /proc (no FAKECUDA_GPU_USED_MIB) */
	uint64_t context; /* FAKECUDA_CONTEXT_MIB, in bytes */
	uint64_t extra;   /* FAKECUDA_RESTORE_EXTRA_MIB, in bytes */
	struct fc_gpu_free gpu[FC_MAX_GPUS];
	uint64_t users[FC_MAX_GPUS]; /* of each GPU's used memory, what the processes found held */
};

/* What a restore sends beside its request (SCM_RIGHTS), so that its target
 * judges the room when it admits the restore, as the driver allocates
 * then, not when its caller asked: the caller's /proc, and the file whose
 * flock makes one restore of the device directory at a time. Either may
 * be -1. */
struct fc_req_fds {
	int proc;
	int room;
};

struct fc_req {
	uint32_t magic;
	uint32_t op;
	uint32_t timeout_ms;
	uint32_t npairs;
	CUcheckpointGpuPair pairs[FC_MAX_PAIRS];
	struct fc_room room; /* restore only */
};

struct fc_rsp {
	int32_t result;
	int32_t value;
};

int fc_op_from_name(const char *name);
/* The restore thread's address: the target's pid namespace (the inode of
 * /proc/PID/ns/pid) and its tgid inside that namespace. */
socklen_t fc_sockaddr(unsigned long pidns, int tgid, struct sockaddr_un *sa);
/* pidns of /proc/<pid> ("self" when pid is 0); 0 when unknown */
unsigned long fc_pidns(int pid);
int fc_write_all(int fd, const void *buf, size_t len);
int fc_read_all(int fd, void *buf, size_t len);
/* A request with its descriptors (those >= 0), and its reading: fds gets
 * what came (-1 for the others; close them). */
int fc_send_req(int fd, const void *buf, size_t len, const struct fc_req_fds *fds);
int fc_recv_req(int fd, void *buf, size_t len, struct fc_req_fds *fds);

#endif
