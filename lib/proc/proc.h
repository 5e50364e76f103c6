/* Parsers of /proc text. Every function tolerates truncated input, odd bytes
 * and processes that vanish between two reads (-ENOENT / -ESRCH). */
#ifndef CS_PROC_H
#define CS_PROC_H

#include "cudasnap.h"
#include "text.h"
#include "util.h"

#include <stdbool.h>
#include <stddef.h>
#include <sys/types.h>

/* PF_KTHREAD in the flags field of /proc/PID/stat. */
#define CS_PF_KTHREAD 0x00200000UL
/* PF_EXITING: the process is tearing itself down (set before its memory
 * and files go, long before it becomes a zombie). */
#define CS_PF_EXITING 0x00000004UL

typedef struct cs_stat {
	pid_t pid, ppid;
	char state;
	unsigned long flags;
	unsigned long long start_time;
	char comm[64];
} cs_stat;

typedef struct cs_map_entry {
	unsigned long start, end;
	const char *path; /* points into the parsed line; "" for anonymous */
	size_t path_len;
	/* The mapped file's device and inode (st_dev's major and minor, st_ino);
	 * has_id false when those fields do not read as such. */
	bool has_id;
	unsigned long dev_major, dev_minor;
	unsigned long long ino;
} cs_map_entry;

/* /proc/PID/stat: comm is whatever lies between the first '(' and the last ')'. */
int cs_parse_stat(const char *buf, size_t len, cs_stat *out);
/* The first number after "Key:" at the start of a line of /proc/PID/status. */
int cs_parse_status_field(const char *buf, const char *key, long *out);
/* The last number on the line "Key:" (NSpid, NStgid: the id in the
 * process's own PID namespace); -EINVAL for anything but numbers. */
int cs_parse_status_last(const char *buf, const char *key, long *out);
/* The idx-th number (from 0) on the line "Key:", in base 10 or 16 (Uid's
 * effective uid is number 1, CapEff's mask number 0); -ENOENT without such
 * a line, -EINVAL when it has no such number. */
int cs_parse_status_nth(const char *buf, const char *key, int idx, int base, unsigned long long *out);
/* One line of /proc/PID/maps (without its newline). */
int cs_parse_maps_line(const char *line, size_t len, cs_map_entry *out);
/* Value of NAME in a NUL-separated environ block; NULL when absent. */
const char *cs_environ_get(const char *buf, size_t len, const char *name);

bool cs_path_is_device(const char *path, size_t len, const char *devdir);
bool cs_path_is_libcuda(const char *path, size_t len);
bool cs_path_is_nvml(const char *path, size_t len);
/* A file the driver shares device memory through between processes (CUDA
 * IPC): /dev/shm/cuda.shm.* as the process's own mount namespace names it. */
bool cs_path_is_cuda_ipc(const char *path, size_t len);
/* The minor number of a GPU's device file, /dev/nvidia<minor> (by its name,
 * in whatever directory); -1 for any other file (nvidiactl, nvidia-uvm,
 * nvidia-caps/...). */
int cs_path_gpu_minor(const char *path);

/* Opens procdir/PID as a directory (O_CLOEXEC); -errno on failure. */
int cs_proc_open(const char *procdir, pid_t pid);

/* Readers over an open /proc/PID directory. */
int cs_proc_read_stat(int pdir, cs_stat *out);
int cs_proc_scan_fds(int pdir, const char *devdir, cs_proc *p);
int cs_proc_scan_maps(int pdir, const char *devdir, cs_proc *p);
/* Both scans: the device references and driver mappings of the process,
 * from /proc alone (no driver call). Returns the first error, or 0. */
int cs_proc_scan_gpu(int pdir, const char *devdir, cs_proc *p);
/* After both scans counted CUDA IPC mappings (p->ipc_maps): finds one such
 * mapped file that no fd of the process holds, compared by device and
 * inode (p->ipc_import), the mark of memory imported from another process
 * (lib/proc/ipc.c). */
void cs_proc_scan_ipc(int pdir, cs_proc *p);
/* How every PID namespace can name one process: the inode of its own PID
 * namespace and its pid there (the last NSpid field). ns_ino is 0 when the
 * namespace link cannot be read; nspid falls back to pid. */
typedef struct cs_proc_ident {
	unsigned long long ns_ino;
	pid_t nspid;
} cs_proc_ident;
int cs_proc_read_ident(int pdir, pid_t pid, cs_proc_ident *out);
/* The thread of pid that the driver named tid, as this PID namespace names
 * it: the driver may answer in the target's own namespace, which is not
 * the caller's when the target lives in a container. tid itself when pid
 * has such a thread here, else the one whose id inside the process's own
 * namespace is tid; 0 when none. */
pid_t cs_proc_thread_here(const char *procdir, pid_t pid, pid_t tid);
/* Thread id (any thread, visible in /proc) -> its process id. */
int cs_tid_to_tgid(const char *procdir, pid_t tid, pid_t *tgid);
/* Start time (stat field 22) of PID, for detecting PID reuse. */
int cs_proc_start_time(const char *procdir, pid_t pid, unsigned long long *start);
/* Whether PID is still the process that started at start, and has not
 * exited or begun to: a zombie keeps its /proc entry and start time until
 * its parent reaps it, and an exiting process keeps them while the kernel
 * frees its memory (seconds for a large one), but the driver can no longer
 * act on either. */
bool cs_proc_alive(const char *procdir, pid_t pid, unsigned long long start);

int cs_proc_add_ref(cs_proc *p, const cs_devref *ref);
/* Frees p's references; p may be zeroed. */
void cs_proc_clear(cs_proc *p);
CS_DEFINE_CLEANUP_STRUCT(cs_proc, cs_proc_clear)

#endif
