/* cudasnap as NVIDIA's cuda-checkpoint: the same options, output and exit
 * statuses, so that callers written for NVIDIA's binary run unchanged. Each
 * action is one driver call, made by the library (lib/onecall/onecall.h), which
 * also claims the process and refuses what would lose it. */
#include "compat.h"
#include "util.h"

#include <stdlib.h>

static int get_state(const compat_call *c)
{
	int state;
	int r = cs_onecall_get_state(c->oc, &state);
	if (r != CS_CU_SUCCESS)
		return compat_call_failed(c, CS_CALL_GET_STATE, r);
	printf("%s\n", cs_state_name(state) ? cs_state_name(state) : "unknown");
	return EXIT_DONE;
}

static int get_restore_tid(const compat_call *c)
{
	pid_t tid;
	int r = cs_onecall_get_restore_tid(c->oc, &tid);
	if (r != CS_CU_SUCCESS)
		return compat_call_failed(c, CS_CALL_GET_TID, r);
	printf("%d\n", (int)tid);
	return EXIT_DONE;
}

/* A driver call of the action: EXIT_DONE, or its failure reported. */
static int done(const compat_call *c, cs_call call, int res)
{
	return res == CS_CU_SUCCESS ? EXIT_DONE : compat_call_failed(c, call, res);
}

/* Before the driver is asked, the GPU must have room for the process: a
 * restore that runs out of GPU memory destroys its checkpointed state. */
static int restore(const compat_call *c)
{
	cs_onecall_refusal why;
	if (cs_onecall_check_restore(c->oc, &why) < 0)
		return compat_refused(c->a, CS_CALL_RESTORE, &why);
	compat_held(&why);
	return done(c, CS_CALL_RESTORE, cs_onecall_restore(c->oc));
}

static int checkpoint(const compat_call *c)
{
	cs_onecall_refusal why;
	if (cs_onecall_check_checkpoint(c->oc, &why) < 0)
		return compat_refused(c->a, CS_CALL_CHECKPOINT, &why);
	compat_held(&why);
	return done(c, CS_CALL_CHECKPOINT, cs_onecall_checkpoint(c->oc));
}

static int action(const compat_call *c)
{
	switch (c->a->action) {
	case CS_CALL_LOCK: return done(c, CS_CALL_LOCK, cs_onecall_lock(c->oc));
	case CS_CALL_CHECKPOINT: return checkpoint(c);
	case CS_CALL_RESTORE: return restore(c);
	default: return done(c, CS_CALL_UNLOCK, cs_onecall_unlock(c->oc));
	}
}

/* Running -> locked -> checkpointed; a failed checkpoint is unlocked again so
 * that the caller's failure leaves the process running, as it found it. */
static int toggle_out(const compat_call *c)
{
	int r = cs_onecall_lock(c->oc);
	if (r != CS_CU_SUCCESS)
		return compat_call_failed(c, CS_CALL_LOCK, r);
	r = cs_onecall_checkpoint(c->oc);
	if (r == CS_CU_SUCCESS)
		return EXIT_DONE;
	compat_call_failed(c, CS_CALL_CHECKPOINT, r);
	int state;
	int u = cs_onecall_undo_lock(c->oc, &state);
	if (u == CS_CU_SUCCESS)
		return EXIT_FAILED;
	const char *now = cs_state_name(state);
	return compat_fail("cuda-checkpoint: process %d could not be unlocked again (\"%s\"); it is %s", (int)c->a->pid,
			   cs_cu_string(c->d, u), now ? now : "in an unknown state");
}

/* Checkpointed -> locked -> running. A failed restore leaves the process
 * checkpointed, where a later toggle can retry. */
static int toggle_in(const compat_call *c)
{
	int status = restore(c);
	if (status != EXIT_DONE)
		return status;
	return done(c, CS_CALL_UNLOCK, cs_onecall_unlock(c->oc));
}

static int toggle(const compat_call *c)
{
	int state;
	int r = cs_onecall_get_state(c->oc, &state);
	if (r != CS_CU_SUCCESS)
		return compat_call_failed(c, CS_CALL_GET_STATE, r);
	cs_onecall_refusal why;
	cs_op way;
	if (cs_onecall_toggle_way(c->oc, state, &way, &why) < 0)
		return compat_refused(c->a, CS_CALL_GET_STATE, &why);
	compat_held(&why);
	return way == CS_OP_RESTORE ? toggle_in(c) : toggle_out(c);
}

static int run(const compat_call *c)
{
	switch (c->a->op) {
	case COMPAT_GET_STATE: return get_state(c);
	case COMPAT_GET_TID: return get_restore_tid(c);
	case COMPAT_ACTION: return action(c);
	case COMPAT_TOGGLE: return toggle(c);
	default: return EXIT_FAILED;
	}
}

/* The question or action of a, for the library (toggle stands apart). */
static cs_call call_of(const compat_args *a)
{
	switch (a->op) {
	case COMPAT_GET_STATE: return CS_CALL_GET_STATE;
	case COMPAT_GET_TID: return CS_CALL_GET_TID;
	default: return a->action;
	}
}

/* A state-changing call claims its process before any driver question, as
 * cudasnap's own commands do: the second of two fails at once. */
static int open_call(const compat_args *a, cs_driver *d, cs_onecall **oc)
{
	cs_onecall_opts o = {
		.pid = a->pid,
		.call = call_of(a),
		.toggle = a->op == COMPAT_TOGGLE,
		.timeout_ms = a->timeout_ms,
		.device_map = a->device_map,
		.command = "cuda-checkpoint",
		.front = "drop-in",
		.warn = compat_warn,
	};
	cs_onecall_refusal why;
	if (cs_onecall_open(oc, d, &o, &why) == 0)
		return CLI_GO_ON;
	return compat_refused(a, a->op == COMPAT_ACTION ? a->action : CS_CALL_GET_STATE, &why);
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
	_cleanup_(cs_onecall_freep) cs_onecall *oc = NULL;
	status = open_call(&a, d, &oc);
	compat_call c = { .a = &a, .d = d, .oc = oc };
	if (status == CLI_GO_ON)
		status = run(&c);
	cs_onecall_end(oc, status);
	return status;
}
