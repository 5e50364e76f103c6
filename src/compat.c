/* cudasnap as NVIDIA's cuda-checkpoint: the same options, output and exit
 * statuses, so that callers written for NVIDIA's binary run unchanged. */
#include "compat.h"
#include "devmap.h"
#include "persist.h"
#include "pool.h"
#include "util.h"

#include <stdlib.h>
#include <string.h>

/* A failed driver call: NVIDIA's line, then cudasnap's hint. */
static int call_failed(cs_driver *d, const compat_args *a, cs_call call, int res)
{
	char why[256];
	snprintf(why, sizeof(why), "%s failed: %s (%s)", cs_call_name(call), cs_cu_string(d, res), cs_cu_name(d, res));
	compat_history_failed(why);
	compat_fail_line(a, call, cs_cu_string(d, res));
	compat_hint(d, call, a->pid, res, a->timeout_ms);
	return EXIT_FAILED;
}

/* Every call but GetRestoreThreadId waits, without bound and whatever the
 * lock timeout, while the target's restore thread cannot run; NVIDIA's
 * binary hangs there. Refuse at once instead; returns CLI_GO_ON to go on. */
static int refuse_halted(cs_driver *d, const compat_args *a)
{
	compat_halt h;
	if (!compat_halted(d, a->pid, &h))
		return CLI_GO_ON;
	char text[64];
	snprintf(text, sizeof(text), "the process is %s and cannot answer", cs_halt_name(h.info.halt));
	compat_history_refused(cs_halt_name(h.info.halt), text);
	compat_fail_line(a, a->op == COMPAT_ACTION ? a->action : CS_CALL_GET_STATE, text);
	compat_halt_hint(&h);
	return EXIT_FAILED;
}

/* A driver call that changes the process, begun at t0, in the history. */
static int record(const cs_driver *d, cs_step s, double t0, int res)
{
	compat_history_step(d, s, res, cs_now() - t0);
	return res;
}

static int get_state(cs_driver *d, const compat_args *a)
{
	int state;
	int r = cs_cu_get_state(d, a->pid, &state);
	if (r != CS_CU_SUCCESS)
		return call_failed(d, a, CS_CALL_GET_STATE, r);
	printf("%s\n", cs_state_name(state) ? cs_state_name(state) : "unknown");
	return EXIT_DONE;
}

static int get_restore_tid(cs_driver *d, const compat_args *a)
{
	pid_t tid;
	int r = cs_cu_get_restore_tid(d, a->pid, &tid);
	if (r != CS_CU_SUCCESS)
		return call_failed(d, a, CS_CALL_GET_TID, r);
	printf("%d\n", (int)tid);
	return EXIT_DONE;
}

/* Checks --device-map before the driver sees it; returns CLI_GO_ON to go on. */
static int device_pairs(cs_driver *d, const compat_args *a, const cs_nvml_gpu *gpus, size_t ngpus, cs_gpu_pair **pairs,
			unsigned *npairs)
{
	cs_error err = { 0 };
	if (!a->device_map)
		return CLI_GO_ON;
	if (!cs_driver_can_remap(d)) {
		compat_history_refused("device-map", "this driver cannot remap GPUs");
		return compat_fail("cuda-checkpoint: --device-map: this driver (version %d) cannot remap GPUs; "
				   "that needs driver R580 (CUDA 13.0) or newer",
				   cs_driver_version(d));
	}
	if (cs_devmap_parse(a->device_map, gpus, ngpus, pairs, npairs, &err) < 0) {
		compat_history_refused("device-map", err.message);
		return compat_fail("cuda-checkpoint: %s\ncuda-checkpoint: hint: %s", err.message, err.hint);
	}
	return CLI_GO_ON;
}

/* The GPU list serves two things at restore: indices in --device-map, and
 * whether cuInit is needed (persistence mode off). Before the driver is
 * asked, the GPU must have room for the process: a restore that runs out of
 * GPU memory destroys its checkpointed state. */
static int restore(cs_driver *d, const compat_args *a, pid_t tgid)
{
	_cleanup_free_ cs_nvml_gpu *gpus = NULL;
	size_t ngpus = 0;
	_cleanup_free_ cs_gpu_pair *pairs = NULL;
	unsigned npairs = 0;
	cs_nvml_list(&gpus, &ngpus);
	int status = device_pairs(d, a, gpus, ngpus, &pairs, &npairs);
	if (status == CLI_GO_ON && tgid > 0)
		status = compat_check(d, a, tgid, CS_OP_RESTORE, CS_CALL_RESTORE);
	if (status == CLI_GO_ON) {
		cs_restore_init(d, gpus, ngpus);
		double t0 = cs_now();
		int r = record(d, CS_STEP_RESTORE, t0, cs_cu_restore(d, a->pid, pairs, npairs));
		status = r == CS_CU_SUCCESS ? EXIT_DONE : call_failed(d, a, CS_CALL_RESTORE, r);
		if (r == CS_CU_SUCCESS)
			compat_forget(tgid);
	}
	return status;
}

/* A checkpoint that the checks refuse leaves a process that an earlier
 * '--action lock' locked running again, as the caller found it before its
 * lock: CRIU's CUDA plugin would otherwise leave it locked for good (after
 * a failed checkpoint it tries a restore, and never an unlock). */
static int refused_checkpoint(cs_driver *d, const compat_args *a, int state)
{
	if (state == CS_STATE_LOCKED && cs_cu_unlock(d, a->pid) == CS_CU_SUCCESS)
		fprintf(stderr, "cuda-checkpoint: process %d was unlocked again, so that it keeps running\n",
			(int)a->pid);
	return EXIT_FAILED;
}

/* The driver's checkpoint, recorded when it succeeds. */
static int checkpoint_call(cs_driver *d, const compat_args *a, pid_t tgid)
{
	cs_target rec;
	compat_note_before(tgid, &rec);
	double t0 = cs_now();
	int r = record(d, CS_STEP_CHECKPOINT, t0, cs_cu_checkpoint(d, a->pid));
	if (r != CS_CU_SUCCESS)
		return call_failed(d, a, CS_CALL_CHECKPOINT, r);
	compat_record(d, &rec, cs_now() - t0);
	compat_history_bytes(rec.bytes);
	return EXIT_DONE;
}

static int checkpoint(cs_driver *d, const compat_args *a, pid_t tgid)
{
	int state = CS_STATE_UNKNOWN;
	if (tgid > 0 && cs_cu_get_state(d, a->pid, &state) == CS_CU_SUCCESS &&
	    compat_check_checkpoint(d, a, tgid, state) != CLI_GO_ON)
		return refused_checkpoint(d, a, state);
	return checkpoint_call(d, a, tgid);
}

static int action(cs_driver *d, const compat_args *a, pid_t tgid)
{
	int r;
	double t0 = cs_now();
	switch (a->action) {
	case CS_CALL_LOCK: r = record(d, CS_STEP_LOCK, t0, cs_cu_lock(d, a->pid, a->timeout_ms)); break;
	case CS_CALL_CHECKPOINT: return checkpoint(d, a, tgid);
	case CS_CALL_RESTORE: return restore(d, a, tgid);
	default: r = record(d, CS_STEP_UNLOCK, t0, cs_cu_unlock(d, a->pid)); break;
	}
	return r == CS_CU_SUCCESS ? EXIT_DONE : call_failed(d, a, a->action, r);
}

/* Running -> locked -> checkpointed; a failed checkpoint is unlocked again so
 * that the caller's failure leaves the process running, as it found it. */
static int toggle_out(cs_driver *d, const compat_args *a, pid_t tgid)
{
	double t0 = cs_now();
	int r = record(d, CS_STEP_LOCK, t0, cs_cu_lock(d, a->pid, a->timeout_ms));
	if (r != CS_CU_SUCCESS)
		return call_failed(d, a, CS_CALL_LOCK, r);
	if (checkpoint_call(d, a, tgid) == EXIT_DONE)
		return EXIT_DONE;
	int u = cs_cu_unlock(d, a->pid);
	compat_history_undo(CS_STEP_UNLOCK, u);
	if (u == CS_CU_SUCCESS)
		return EXIT_FAILED;
	int state;
	cs_cu_get_state(d, a->pid, &state);
	const char *now = cs_state_name(state);
	return compat_fail("cuda-checkpoint: process %d could not be unlocked again (\"%s\"); it is %s", (int)a->pid,
			   cs_cu_string(d, u), now ? now : "in an unknown state");
}

/* Checkpointed -> locked -> running. A failed restore leaves the process
 * checkpointed, where a later toggle can retry. */
static int toggle_in(cs_driver *d, const compat_args *a, pid_t tgid)
{
	int status = restore(d, a, tgid);
	if (status != EXIT_DONE)
		return status;
	double t0 = cs_now();
	int r = record(d, CS_STEP_UNLOCK, t0, cs_cu_unlock(d, a->pid));
	return r == CS_CU_SUCCESS ? EXIT_DONE : call_failed(d, a, CS_CALL_UNLOCK, r);
}

static int toggle(cs_driver *d, const compat_args *a, pid_t tgid)
{
	int state;
	int r = cs_cu_get_state(d, a->pid, &state);
	if (r != CS_CU_SUCCESS)
		return call_failed(d, a, CS_CALL_GET_STATE, r);
	if (state == CS_STATE_RUNNING && tgid > 0 && compat_check_checkpoint(d, a, tgid, state) != CLI_GO_ON)
		return EXIT_FAILED;
	if (state == CS_STATE_RUNNING)
		return toggle_out(d, a, tgid);
	if (state == CS_STATE_CHECKPOINTED)
		return toggle_in(d, a, tgid);
	/* Locked or failed: neither direction is defined, and guessing one
	 * could undo what another caller is in the middle of. */
	compat_history_refused("state",
			       state == CS_STATE_LOCKED ? "the process is locked: neither direction is defined" :
							  "the driver reports that checkpointing it failed");
	compat_fail_line(a, CS_CALL_GET_STATE, cs_cu_string(d, CS_CU_ILLEGAL_STATE));
	fprintf(stderr, "cuda-checkpoint: hint: %s\n",
		state == CS_STATE_LOCKED ?
			"The process is locked (by another caller, or by a step that failed half-way): "
			"'--action unlock' resumes it, '--action checkpoint' completes the checkpoint." :
			"The driver reports that checkpointing this process failed; it cannot be toggled. "
			"Run 'cudasnap doctor' and check the kernel log (dmesg).");
	return EXIT_FAILED;
}

static int run(cs_driver *d, const compat_args *a)
{
	/* A state-changing call claims its process before any driver question,
	 * as cudasnap's own commands do: the second of two fails at once. */
	_cleanup_(cs_claims_releasep) cs_claims claims;
	cs_claims_init(&claims);
	pid_t tgid = 0;
	bool changes = a->op == COMPAT_ACTION || a->op == COMPAT_TOGGLE;
	if (changes)
		compat_history_begin(a);
	int status = changes ? compat_claim(a, &claims, &tgid) : CLI_GO_ON;
	if (changes)
		compat_history_target(tgid);
	if (status == CLI_GO_ON && a->op != COMPAT_GET_TID)
		status = refuse_halted(d, a);
	if (status != CLI_GO_ON)
		return status;
	switch (a->op) {
	case COMPAT_GET_STATE: return get_state(d, a);
	case COMPAT_GET_TID: return get_restore_tid(d, a);
	case COMPAT_ACTION: return action(d, a, tgid);
	case COMPAT_TOGGLE: return toggle(d, a, tgid);
	default: return EXIT_FAILED;
	}
}

int cmd_cuda_checkpoint(int argc, char **argv)
{
	compat_args a;
	cs_prog = "cuda-checkpoint";
	int status = compat_parse(argc, argv, &a);
	if (status != CLI_GO_ON)
		return status;
	_cleanup_(cs_driver_freep) cs_driver *d = NULL;
	cs_error err = { 0 };
	if (cs_driver_open(&d, &err) < 0)
		return compat_fail("cuda-checkpoint: %s%s%s", err.message,
				   err.hint[0] ? "\ncuda-checkpoint: hint: " : "", err.hint);
	status = run(d, &a);
	compat_history_end(status);
	return status;
}
