/* Whether a checkpoint fits in host memory, before anything changes.
 *
 * A checkpoint copies each process's GPU memory into that process's own host
 * memory, which the kernel charges to the process's memory cgroup; when it
 * does not fit, the OOM killer kills the process and its data is lost
 * (measured on the H200, driver-behavior.md). Processes checkpointed
 * together fill their cgroups together, so their needs add up in every
 * cgroup they share, and in MemAvailable. */
#ifndef CS_CAPACITY_H
#define CS_CAPACITY_H

#include "cudasnap.h"

#include <stdint.h>
#include "halt.h"
#include "memcg.h"

/* How the GPU memory of a process is known. */
typedef enum cs_gpu_known {
	CS_GPU_UNKNOWN = 0, /* no NVML, or nothing it could tell */
	CS_GPU_AT_MOST, /* NVML's use of the GPUs it uses: its processes are not named in this PID namespace */
	CS_GPU_EXACT, /* NVML's figure for the process */
} cs_gpu_known;

/* The host memory a checkpoint of a process that holds gpu bytes of GPU
 * memory (as NVML counts it, its context included) charges to its cgroup. */
unsigned long long cs_checkpoint_host_need(unsigned long long gpu);

/* How much of the room in a process's memory cgroups is known. */
typedef enum cs_room {
	CS_ROOM_KNOWN = 0, /* every cgroup of its chain was read, or it has none */
	CS_ROOM_PART, /* judged by the limits of the part of its chain that could be read; those above could not */
	CS_ROOM_UNKNOWN, /* no limit of its chain could be read, and one may exist above what was read */
} cs_room;

/* One process of a checkpoint, as the check sees it. */
typedef struct cs_fit {
	pid_t pid;
	char comm[64];
	unsigned long long gpu; /* GPU memory it holds; with CS_GPU_AT_MOST a bound */
	int known; /* cs_gpu_known */
	unsigned long long need; /* host memory its checkpoint charges */
	/* Set before cs_fit_measure: of its GPU memory, what a park into files
	 * takes out of host memory, and the staging buffers that park keeps in
	 * its memory instead. */
	unsigned long long off_host, staging;
	uint64_t seen; /* CS_GPU_AT_MOST: the GPUs it uses (bit = NVML index), whose use bounds its own */
	cs_memcg cg; /* its memory cgroup chain before anything changed */
	int room; /* cs_room, set by cs_fit_judge */
	bool refused;
	/* Refused: why it does not fit (the cgroup, the bytes, the room, the
	 * limit); else with CS_ROOM_UNKNOWN, what could not be read. */
	char why[1536];
	char fix[1536]; /* what to do */
} cs_fit;

/* What cs_fit_measure needs to know of the machine. */
typedef struct cs_fit_env {
	bool host_pidns; /* NVML's PIDs are this namespace's */
	const char *procdir;
	cs_cgroup_mounts mounts;
	long long mem_available; /* bytes, -1 unknown */
	unsigned long long gpu_used[64]; /* by NVML index: the bounds of CS_GPU_AT_MOST */
} cs_fit_env;

/* Reads the machine: the cgroup mounts, MemAvailable, and whether NVML's
 * PIDs mean anything here. */
void cs_fit_env_read(cs_fit_env *env, bool host_pidns);

/* Fills each entry (pid and comm set) with its GPU memory (NVML's figure
 * for the process where NVML names this namespace's PIDs; else, as a bound,
 * the memory in use on the GPUs whose device files procs[i] holds, or on
 * every GPU when it holds none that NVML names; else unknown) and its cgroup
 * chain. procs[i] is entry i's process as /proc showed it (NULL, or procs
 * NULL: unknown). */
void cs_fit_measure(cs_fit *f, size_t n, const cs_proc *const *procs, cs_fit_env *env);

/* The node of f's chain with the least room under a limit (NULL when none
 * has a limit), with that room, the limit and its file. Its path is the
 * first n->len bytes of f->cg.path. */
const cs_memcg_node *cs_fit_tightest(const cs_fit *f, long long *room, long long *limit, const char **which);

/* Judges the set: in every cgroup of any chain that has a limit (one
 * cgroup, however the chains name it, is one directory), the needs of the
 * processes under it add up, and so they do in MemAvailable (where
 * processes are known only by the use of the GPUs they see, a group counts
 * each GPU once). Marks the entries that do not fit (refused, why, fix). A
 * bound that does not fit refuses too: nothing is said to fit unless it is
 * known to. Sets each entry's room: an entry whose chain could not be read
 * whole is judged by the limits that could be read (CS_ROOM_PART), and one
 * with no limit read where one may exist gets CS_ROOM_UNKNOWN (why, fix).
 * Entries whose memory is unknown are neither refused nor counted;
 * *unknown says how many. Returns how many cannot go ahead: refused, or of
 * known memory with CS_ROOM_UNKNOWN. */
size_t cs_fit_judge(cs_fit *f, size_t n, const cs_fit_env *env, size_t *unknown);

#endif
