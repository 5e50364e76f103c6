/* GPU device references that remain, with their owner and the reason. */
#ifndef CS_VERIFY_H
#define CS_VERIFY_H

#include "cudasnap.h"

typedef struct cs_leftover {
	const cs_proc *proc;
	const cs_devref *ref;
	pid_t cuda_ancestor; /* a CUDA process it was forked from, 0 if none */
	char reason[256];
} cs_leftover;

/* Lists every device reference in t, but those of cudasnap's own processes
 * (which come and go, and are never part of a workload).
 * *out is malloc'd; entries point into t. Fills err on failure. */
int cs_verify(const cs_ptable *t, cs_leftover **out, size_t *n, cs_error *err);

/* One line per process: "PID (comm) holds 3 fds and 2 mappings (1 without an
 * fd) of nvidiactl, nvidia0: REASON". Leftovers of one process are adjacent. */
void cs_verify_line(const cs_leftover *l, size_t n, size_t *used, char *buf, size_t size);

/* "cannot read 3 processes as uid 65534: 1 (Permission denied), 57, 90":
 * which processes the scan could not read, so that a clean result is not
 * taken for a complete one. "" when every process was read. */
void cs_unreadable_line(const cs_ptable *t, char *buf, size_t size);

/* What to do about processes that could not be read, for a caller without
 * CAP_SYS_PTRACE and for one that has it (then the denial comes from
 * elsewhere: PID 1 of a gVisor sandbox or of a VM may stay unreadable).
 * cudasnap doctor and cudasnap ps say the same. */
#define CS_FIX_UNREADABLE "Run cudasnap as root or with CAP_SYS_PTRACE."
#define CS_FIX_UNREADABLE_TRACER \
	"Even CAP_SYS_PTRACE was refused: a security module (AppArmor, SELinux, " \
	"Yama) or an outer sandbox denies access; run cudasnap where it may read these processes."

#endif
