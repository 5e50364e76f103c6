/* What kind of place cudasnap runs in: gVisor or not, a container or not,
 * which PID namespace, with which privileges, and how much host memory is
 * left. Every reader takes a root directory so that tests can lay out a fake
 * /proc, /run and /sys in a temporary directory. */
#ifndef CS_SANDBOX_H
#define CS_SANDBOX_H

#include <stdbool.h>
#include <sys/types.h>

typedef enum cs_pidns {
	/* Neither the namespace link nor any other signal could be read. */
	CS_PIDNS_UNKNOWN = 0,
	/* The kernel's initial PID namespace: PIDs here are the ones NVML and
	 * nvidia-smi report. */
	CS_PIDNS_HOST,
	/* A nested PID namespace (container, sandbox): NVML's PIDs mean nothing here. */
	CS_PIDNS_CHILD,
} cs_pidns;

/* The inode number Linux (3.8+) gives the initial PID namespace
 * (PROC_PID_INIT_INO in the kernel's proc_ns.h). */
#define CS_PIDNS_INIT_INO 0xEFFFFFFCUL

#define CS_SIGNAL_SIZE 160

typedef struct cs_sandbox {
	bool gvisor;
	char gvisor_signal[CS_SIGNAL_SIZE]; /* what showed it; "" when not gVisor */
	bool container;
	char container_signal[CS_SIGNAL_SIZE];
	int pid_ns; /* cs_pidns */
	char pid_ns_signal[CS_SIGNAL_SIZE];
	/* Entries on the NSpid line of our status: more than one means /proc was
	 * mounted by an outer PID namespace, so its PIDs are not this namespace's. */
	int nspid_depth; /* 0 when unknown */
	char kernel_release[64];
	uid_t euid;
	bool caps_known;
	bool cap_sys_ptrace; /* bit 19 of CapEff */
} cs_sandbox;

/* The machine's side of a checkpoint's host memory; each process's own
 * cgroup chain is read where it is judged (lib/room/capacity.h). */
typedef struct cs_hostmem {
	long long mem_available; /* bytes, MemAvailable of /proc/meminfo; -1 unknown */
} cs_hostmem;

/* $CUDASNAP_ROOT, or "/" */
const char *cs_sandbox_root(void);
/* Fills out from files under root (NULL: cs_sandbox_root()). Never fails:
 * what cannot be read stays unknown. */
void cs_sandbox_detect(const char *root, cs_sandbox *out);
/* Whether the caller may trace (and so checkpoint) processes of every user:
 * CAP_SYS_PTRACE, or root where the capabilities cannot be read. */
bool cs_sandbox_may_trace_all(const cs_sandbox *s);
void cs_host_memory(const char *root, cs_hostmem *out);
const char *cs_pidns_name(int ns); /* "host", "child", "unknown" */

#endif
