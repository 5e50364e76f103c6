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

typedef struct cs_plan_entry {
	pid_t pid;
	char comm[64];
	int cls; /* cs_class */
	int state; /* cs_state, CS_STATE_UNKNOWN when not asked */
	bool target; /* the operation would act on it */
	cs_fit fit; /* checkpoint: its memory and cgroup */
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

/* Before a checkpoint's first step: refuses (CS_EPROC, err filled, nothing
 * changed) when a target's checkpoint would not fit in host memory or could
 * never be restored, unless the session's options override that; names
 * each refused process through the warning callback. Keeps what it measured
 * for cs_session_name_lost. */
int cs_session_check(cs_session *s, cs_error *err);

/* After the transaction: why each lost target was lost (the OOM killer of
 * its cgroup, when that cgroup's count of OOM kills went up). */
void cs_session_name_lost(cs_session *s);

#endif
