/* Single calls: one driver call per action on one process, as NVIDIA's
 * cuda-checkpoint makes them, for the drop-in that stands in for it (CRIU's
 * CUDA plugin, runsc and wrapper scripts sequence the calls themselves, so
 * there is no transaction around them). What cudasnap keeps of its own
 * rules for touching a process:
 * - a call that may change the process claims it first (lib/record/claim.h): two
 *   operations never act on one process at once, whoever runs them;
 * - no call but GetRestoreThreadId is made on a process whose restore
 *   thread is stopped, traced or frozen: it would wait without bound;
 * - a checkpoint that would not fit in host memory or that the driver could
 *   never restore, and a restore whose GPU has no room (which destroys the
 *   process's checkpointed state), are refused before the driver is asked;
 * - every change is kept in the history of operations, and a checkpoint in
 *   the state directory's manifest, where that directory exists (NVIDIA's
 *   binary leaves nothing behind, so none is created).
 * Nothing here prints: refusals come back to the caller, warnings go
 * through its callback. One cs_onecall per call of the drop-in. */
#ifndef CS_ONECALL_H
#define CS_ONECALL_H

#include "cudasnap.h"
#include "explain.h"
#include "halt.h"
#include "util.h"

typedef struct cs_onecall_opts {
	/* As the caller gave it: a thread id names its process. The driver
	 * gets it as given, also when /proc of this namespace does not show
	 * it (pid 0, a host PID): the driver's answer is part of the interface. */
	pid_t pid;
	/* A question (CS_CALL_GET_STATE, CS_CALL_GET_TID), which changes
	 * nothing: no claim, no entry in the history. Or an action
	 * (CS_CALL_LOCK, _CHECKPOINT, _RESTORE, _UNLOCK). */
	cs_call call;
	/* Lock and checkpoint, or restore and unlock (call is not read). */
	bool toggle;
	unsigned timeout_ms; /* lock: 0 waits for GPU work without limit */
	const char *device_map; /* restore: OLD=NEW,... (NULL: none) */
	const char *command; /* names the caller in claims and in the manifest's lock ("cuda-checkpoint") */
	const char *front; /* names it in the history ("drop-in") */
	/* A lock of the claim ignored, a history that cannot be written. */
	cs_warn_fn warn;
	void *warn_ctx;
} cs_onecall_opts;

/* Room for the checks' own warning lines; a report shows no more. */
#define CS_ONECALL_HELD 8192

/* Why a call was refused before the driver was asked to change anything
 * (the history keeps it too), and the checks' own warning lines. */
typedef struct cs_onecall_refusal {
	/* The reason's code, as the history keeps it: "busy", "stopped",
	 * "frozen", "memory", "ipc-import", "gpu-memory", "device-map",
	 * "state"...; "" when the call could not even begin (out of memory). */
	char code[24];
	/* message: the reason, as the first line of a report quotes it; hint:
	 * what to do ("" for a halted process and for "state": the caller words
	 * those from halt and state below). */
	cs_error err;
	/* The options were refused (--device-map), not the process: no
	 * process was asked anything. */
	bool options;
	int state; /* "state": the state the driver reports (locked, or failed) */
	/* "stopped" and "frozen": the process (--pid may name a thread), its
	 * command when /proc could be read, and what holds it. */
	pid_t tgid;
	bool comm_known;
	char comm[64];
	cs_halt_info halt;
	/* A checkpoint refused of a process that was locked: it was unlocked
	 * again, so that it keeps running. */
	bool unlocked;
	/* The checks' warning lines, also when they let the call through, each
	 * ended by a NUL, nheld bytes in all: a caller whose callers take its
	 * first line as the reason says them after that line. */
	char held[CS_ONECALL_HELD];
	size_t nheld;
} cs_onecall_refusal;

typedef struct cs_onecall cs_onecall;

/* Begins the call: for an action or a toggle, its entry in the history and
 * the claim of its process (when /proc of this namespace shows it); then,
 * for every call but GetRestoreThreadId, whether the process's restore
 * thread can answer (GetRestoreThreadId, which the driver answers itself,
 * says which thread that is). Keeps a copy of o (the strings it points to
 * must outlive the call). *out gets the call also when it is refused, so
 * that cs_onecall_end records the refusal; it is NULL only when out of
 * memory. Returns 0, or -cs_status with why filled when nothing may be
 * asked: another operation holds the process (code "busy"), its restore
 * thread is stopped or frozen ("stopped", "frozen"), out of memory (""). */
int cs_onecall_open(cs_onecall **out, cs_driver *d, const cs_onecall_opts *o, cs_onecall_refusal *why);
/* Completes the entry of the history (the call ended with exit_status, 0
 * when it did what was asked) and writes it where the state directory
 * exists, while the claim is still held. NULL: nothing. */
void cs_onecall_end(cs_onecall *oc, int exit_status);
/* Lets go of the claim. NULL: nothing. */
void cs_onecall_free(cs_onecall *oc);
CS_DEFINE_CLEANUP(cs_onecall, cs_onecall_free)

/* The questions, of the pid as given: the driver's answer (CS_CU_*). */
int cs_onecall_get_state(cs_onecall *oc, int *state);
int cs_onecall_get_restore_tid(cs_onecall *oc, pid_t *tid);

/* The checks before a change, each returning 0 (why->held may still hold
 * lines), or -cs_status with why filled when the change is refused. Checks
 * that cannot read what they need let the call through: the driver's own
 * call then says what is wrong. */
/* Before --action checkpoint, of the process as it is, running or locked
 * (asked of the driver): host memory, CUDA IPC. A refused process that was
 * locked is unlocked again (why->unlocked when that worked): CRIU's CUDA
 * plugin, after a failed checkpoint, tries a restore and never an unlock,
 * and would leave it locked for good. */
int cs_onecall_check_checkpoint(cs_onecall *oc, cs_onecall_refusal *why);
/* Before a restore: --device-map against this machine's GPUs and this
 * driver (why->options), then the room on each GPU the process restores
 * onto. Keeps the GPU list and the map for cs_onecall_restore. */
int cs_onecall_check_restore(cs_onecall *oc, cs_onecall_refusal *why);
/* --toggle's direction, from state (the driver's answer to GetState): a
 * running process gets CS_OP_CHECKPOINT (lock, then checkpoint) once the
 * checkpoint's checks let it through; a checkpointed one CS_OP_RESTORE
 * (restore, then unlock; cs_onecall_check_restore still to come). A locked
 * or failed process is refused (code "state"): neither direction is
 * defined, and guessing one could undo what another caller is in the
 * middle of. */
int cs_onecall_toggle_way(cs_onecall *oc, int state, cs_op *way, cs_onecall_refusal *why);

/* The actions: one driver call each, on the pid as given, timed and kept in
 * the entry of the history. Return the driver's answer (CS_CU_*). */
int cs_onecall_lock(cs_onecall *oc);
/* After it succeeded: the process's record (identity, GPUs, bytes moved)
 * merged into the state directory's manifest, where that exists, so that a
 * later restore knows what room it needs. */
int cs_onecall_checkpoint(cs_onecall *oc);
/* With cuInit first when the GPUs are not in persistence mode, and the
 * device map that cs_onecall_check_restore accepted (called without that
 * check, the map is read here, and one that does not parse is answered
 * CS_CU_INVALID_VALUE without asking the driver). After it succeeded, the
 * process's record leaves the manifest (its GPU memory is back). */
int cs_onecall_restore(cs_onecall *oc);
int cs_onecall_unlock(cs_onecall *oc);
/* Undoes this call's lock after its checkpoint failed, so that the caller's
 * failure leaves the process running as it found it; kept in the entry as
 * the step undone. When the unlock fails, *state gets the state the driver
 * reports then (CS_STATE_UNKNOWN when it does not say). */
int cs_onecall_undo_lock(cs_onecall *oc, int *state);

/* A driver call of this call that failed with res, about to be reported:
 * the entry's reason (unless a step's failure gave it one), and err filled
 * by cs_explain with what /proc and the driver say of the process now
 * (only the process itself is asked: any other may be stopped by the
 * caller, CRIU stops a tree's parent first). */
void cs_onecall_failed(cs_onecall *oc, cs_call call, int res, cs_error *err);

#endif
