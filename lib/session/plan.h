/* What an operation would do to each process, known before anything
 * changes: the checks that refuse a checkpoint which would lose a process
 * (host memory, CUDA IPC), and the whole plan that --dry-run prints. */
#ifndef CS_PLAN_H
#define CS_PLAN_H

#include "capacity.h"
#include "cudasnap.h"
#include "util.h"

#define CS_PLAN_REASONS 6

typedef struct cs_reason {
	const char *code; /* "stopped", "frozen", "busy", "memory", "memory-unknown", "ipc-import",
			     "device-holder", "nvml-only", "unrestorable", "already" */
	bool blocks; /* the operation would fail (or lose the process) because of it */
	char text[1536];
	char fix[1536]; /* what to do about it, "" when nothing needs doing */
} cs_reason;

/* Restore: one GPU a process restores onto, and its room. */
typedef struct cs_plan_gpu {
	char uuid[48];
	int index; /* NVML's, -1 when not on this machine */
	unsigned long long need; /* 0: unknown */
	unsigned long long free; /* as NVML last read it; with free_known */
	bool free_known;
} cs_plan_gpu;

typedef struct cs_plan_entry {
	pid_t pid;
	char comm[64];
	int cls; /* cs_class */
	int state; /* cs_state, CS_STATE_UNKNOWN when not asked */
	bool target; /* the operation would act on it */
	cs_fit fit; /* checkpoint: its memory and cgroup; restore: gpu is what it needs */
	unsigned long long park_out; /* checkpoint: what its park into files writes (--park-to) */
	cs_plan_gpu gpu[CS_TARGET_GPUS]; /* restore: the GPUs it restores onto */
	unsigned ngpu;
	cs_reason reason[CS_PLAN_REASONS];
	size_t nreasons;
	bool blocked; /* one of its reasons blocks the operation */
} cs_plan_entry;

typedef struct cs_plan {
	cs_op op;
	cs_plan_entry *e;
	size_t n;
	size_t targets, blocked, unknown_memory;
	unsigned long long gpu_bytes, host_bytes; /* of the targets, known or bounded */
	double seconds; /* expected driver time of the moves, from the measured rates */
	bool go; /* nothing blocks it */
	cs_error problem; /* what fails the whole operation before any process (status 0: nothing) */
} cs_plan;

void cs_plan_free(cs_plan *p);
CS_DEFINE_CLEANUP_STRUCT(cs_plan, cs_plan_free)

/* The plan of a selected session (cs_session_select): every target, and
 * with everything set every other GPU-related process in the selection's
 * scope, with the reasons known in advance why it would fail. Makes no
 * driver call that changes a state. */
int cs_session_plan(cs_session *s, bool everything, cs_plan *out, cs_error *err);

/* Whether the real operation refuses a process for r before anything
 * changes, as cs_session_check does: r blocks, and is "memory" or
 * "ipc-import". (A "busy" process is refused earlier, by the claims.) */
bool cs_reason_refused_by_check(const cs_reason *r);

/* Before a checkpoint's first step: refuses (CS_EPROC, err filled, nothing
 * changed) when a target's checkpoint would not fit in host memory or could
 * never be restored, unless the session's options override that; names
 * each refused process through the warning callback, and keeps each for
 * cs_session_refusals (err names the first). Keeps what it measured for
 * cs_session_name_lost. */
int cs_session_check(cs_session *s, cs_error *err);

/* A reason added to e (a spare when e is full), and its fix. */
cs_reason *cs_plan_add_reason(cs_plan_entry *e, const char *code, bool blocks, const char *fmt, ...)
	__attribute__((format(printf, 4, 5)));
void cs_plan_set_fix(cs_reason *r, const char *fix);

/* Restore: each target entry's GPU memory need against the free memory of
 * the GPUs it restores onto (fills the targets' need), as reasons. */
void cs_plan_restore_room(cs_session *s, cs_plan_entry *e, size_t n);
/* Restore with a wait for memory: plans again every half second while a
 * process's restore finds no room, until the session's wait is over or a
 * signal came; *p is the last plan. */
int cs_plan_wait_room(cs_session *s, cs_plan *p, cs_error *err);
/* A process that cs_session_check refused, and why. */
typedef struct cs_refusal {
	pid_t pid;
	char comm[64];
	cs_reason reason; /* code "memory" or "ipc-import", its text and fix */
} cs_refusal;

/* Every refusal of the session's cs_session_check, one per refused process
 * and reason, in the order of the warnings; NULL and 0 when it refused none
 * (or was not called). Owned by the session, valid until it is freed:
 * callers that report after the session failed (the command line's --json,
 * the hook) list them all, where the error names the first. */
const cs_refusal *cs_session_refusals(const cs_session *s, size_t *n);

/* After the transaction: why each lost target was lost (the OOM killer of
 * its cgroup, when that cgroup's count of OOM kills went up). */
void cs_session_name_lost(cs_session *s);

#endif
