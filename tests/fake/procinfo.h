/* What the double reads of other processes in /proc. None of it asks the
 * process itself, so a stopped or frozen process never blocks the reader. */
#ifndef FAKECUDA_PROCINFO_H
#define FAKECUDA_PROCINFO_H

#include <sys/types.h>

#include "fakecuda.h"

/* A process's device memory is a memfd named FC_DEVMEM_NAME ":" followed by
 * the UUID of the GPU it is on; /proc/PID/fd shows it as
 * "/memfd:fakecuda-devmem:GPU-... (deleted)". */
#define FC_DEVMEM_NAME "fakecuda-devmem"
/* A physical allocation of the VMM API (cuMemCreate) is a memfd of its own,
 * named like device memory with this suffix after the UUID, so that the
 * legacy memory that CUDA IPC exports stays the one memfd without it. The
 * process that created it holds it read-write; the fds it exports are
 * read-only, and an importer maps it without an fd: only its creator
 * counts it. */
#define FC_VMM_SUFFIX ":vmm"

/* The tgid of process pid (any of its thread ids, in the caller's /proc):
 * *own in the process's own pid namespace (the last NStgid field), which is
 * what it calls itself, and *local in the caller's. 0, or -1 when pid is
 * gone or its status unreadable. */
int fc_proc_tgid(int pid, int *own, int *local);

struct fc_devmem_info {
	int fd;      /* its number in the process's fd table */
	off_t bytes; /* the memfd's size */
	dev_t dev;   /* the memfd's identity, to check a later open of it */
	ino_t ino;
	char uuid[FAKECUDA_UUID_STRLEN]; /* the GPU it is on */
};

/* The legacy device memory (cuMemAlloc, the fake API) that process pid
 * holds now: 0, or -1 when it holds none (it never allocated any, it is
 * checkpointed, it is no fake CUDA process, it is gone or its fds are not
 * readable by the caller). */
int fc_proc_devmem(int pid, struct fc_devmem_info *out);

/* The device memory of one GPU that a process owns. */
struct fc_devmem_use {
	char uuid[FAKECUDA_UUID_STRLEN];
	unsigned long long bytes;
};

/* Every GPU on which process pid owns device memory now, its legacy memfd
 * and its VMM physical allocations summed per GPU: how many (at most max,
 * 0 when none or unreadable). */
int fc_proc_devmem_use(int pid, struct fc_devmem_use *out, int max);
/* The same for pid of the /proc at root (a caller's, through a descriptor
 * it sent: "/proc/thread-self/fd/N"). */
int fc_proc_devmem_use_in(const char *root, int pid, struct fc_devmem_use *out, int max);

#endif
