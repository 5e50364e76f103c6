/* cuda-checkpoint: NVIDIA's R580 command line, for the callers that run it by
 * name (CRIU's CUDA plugin, runsc --cuda-checkpoint-path, wrapper scripts).
 * One process per call: callers run many at once, one per target, and each
 * state-changing call claims its target as cudasnap's commands do. */
#ifndef CS_COMPAT_H
#define CS_COMPAT_H

#include "cli.h"
#include "explain.h"
#include "claim.h"
#include "halt.h"

typedef enum compat_op {
	COMPAT_NONE,
	COMPAT_GET_STATE,
	COMPAT_GET_TID,
	COMPAT_ACTION,
	COMPAT_TOGGLE,
} compat_op;

typedef struct compat_args {
	compat_op op;
	cs_call action; /* COMPAT_ACTION: lock, checkpoint, restore or unlock */
	pid_t pid;
	bool have_pid;
	unsigned timeout_ms; /* lock; 0 waits forever, as the driver does */
	const char *device_map; /* --action restore only */
} compat_args;

/* Parses NVIDIA's options; returns CLI_GO_ON to go on, or the exit status. */
int compat_parse(int argc, char **argv, compat_args *a);

/* The first line of a failure, in the words NVIDIA's binary uses for the
 * operation; text is the quoted part. */
void compat_fail_line(const compat_args *a, cs_call call, const char *text);

/* Claims the target of a state-changing action (src/compat_guard.c): *tgid
 * gets its process. CLI_GO_ON, or EXIT_FAILED when another operation holds
 * it (said in NVIDIA's format). */
int compat_claim(const compat_args *a, cs_claims *c, pid_t *tgid);
/* Before a checkpoint of tgid (in state, running or locked): CLI_GO_ON, or
 * EXIT_FAILED when its copy would not fit in host memory or the driver could
 * never restore it (said in NVIDIA's format, with the numbers and the fix). */
int compat_check_checkpoint(cs_driver *d, const compat_args *a, pid_t tgid, int state);

/* The checks made before op (a checkpoint, or a restore with a->device_map)
 * of tgid, whose driver call is call: CLI_GO_ON, or EXIT_FAILED when they
 * refuse it (said in NVIDIA's format, with the numbers and the fix): a
 * checkpoint whose copy would not fit in host memory or that the driver
 * could never restore, a restore whose GPU has no room for it. */
int compat_check(cs_driver *d, const compat_args *a, pid_t tgid, cs_op op, cs_call call);

/* Before a checkpoint of tgid: what its record needs to know (its identity,
 * the GPUs it sees and uses, its resident memory); after the checkpoint
 * succeeded in seconds: the record, merged into the state directory's
 * manifest (silently skipped when that cannot be written). */
void compat_note_before(pid_t tgid, cs_target *t);
void compat_record(const cs_driver *d, cs_target *t, double seconds);
/* After tgid's restore: its record goes (its GPU memory is back). */
void compat_forget(pid_t tgid);

/* The entry of the history of operations for a state-changing call
 * (src/compat_history.c): begun before its claim, each driver call that
 * changes the process (step, its answer, how long), a step undone after a
 * failure (toggle's unlock), the bytes a checkpoint moved, a refusal (its
 * code and why) or another failure, and at the end the exit status; the
 * entry is then written where the state directory exists. */
void compat_history_begin(const compat_args *a);
void compat_history_target(pid_t tgid);
void compat_history_step(const cs_driver *d, cs_step s, int res, double seconds);
void compat_history_undo(cs_step s, int res);
void compat_history_bytes(unsigned long long bytes);
void compat_history_refused(const char *code, const char *why);
void compat_history_failed(const char *why);
void compat_history_end(int status);

/* One error line in NVIDIA's wording; exits 1 when returned. */
int compat_fail(const char *fmt, ...) __attribute__((format(printf, 1, 2)));
/* After a failed driver call: one more stderr line with cudasnap's hint. */
void compat_hint(cs_driver *d, cs_call call, pid_t pid, int res, unsigned timeout_ms);

typedef struct compat_halt {
	pid_t tgid; /* the process of --pid (which may name a thread) */
	cs_halt_info info;
} compat_halt;

/* Whether the target's restore thread is stopped, traced or frozen, so that
 * any call but GetRestoreThreadId would wait until it runs again. */
bool compat_halted(cs_driver *d, pid_t pid, compat_halt *out);
/* The hint line for a halted target: why, and how it runs again. */
void compat_halt_hint(const compat_halt *h);

#endif
