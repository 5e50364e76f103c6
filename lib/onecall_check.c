/* The checks a single call makes before it changes its process, with the
 * session's own (a dry-run session of the one process, lib/plan.c): a
 * checkpoint whose copy would not fit in host memory or that the driver
 * could never restore, a restore whose GPU has no room for it (which
 * destroys the process's checkpointed state), and --device-map. */
#include "onecall_int.h"
#include "devmap.h"
#include "plan.h"

#include <stdio.h>
#include <string.h>

/* A warning line of the checks, held for the caller (see held). */
static void hold_line(void *ctx, const char *line)
{
	cs_onecall_refusal *why = ctx;
	size_t left = sizeof(why->held) - why->nheld;
	if (left == 0)
		return;
	size_t len = strnlen(line, left - 1);
	memcpy(why->held + why->nheld, line, len);
	why->held[why->nheld + len] = '\0';
	why->nheld += len + 1;
}

/* The session's checks before op of the process, which this call already
 * claimed. What they could not read, the driver's own call will tell. */
static int check(cs_onecall *oc, cs_op op, cs_onecall_refusal *why)
{
	if (oc->tgid <= 0)
		return 0;
	pid_t tgid = oc->tgid;
	cs_session_opts o = {
		.op = op,
		.command = oc->o.command,
		.sel = { .pids = &tgid, .npids = 1 },
		.only_selected = true,
		.claimed = true,
		.dry_run = true,
		.no_manifest = true,
		.device_map = op == CS_OP_RESTORE ? oc->o.device_map : NULL,
		.warn = hold_line,
		.warn_ctx = why,
	};
	_cleanup_(cs_session_freep) cs_session *s = NULL;
	cs_error err = { 0 };
	int r = cs_session_open(&s, oc->d, &o, &err);
	if (r == 0)
		r = cs_session_select(s, &err);
	if (r == 0)
		r = cs_session_check(s, &err);
	if (r == 0 || err.status != CS_EPROC)
		return 0;
	size_t n = 0;
	const cs_refusal *v = cs_session_refusals(s, &n);
	return cs_onecall_refuse(oc, why, n ? v[0].reason.code : "refused", &err, NULL);
}

int cs_onecall_check_checkpoint(cs_onecall *oc, cs_onecall_refusal *why)
{
	memset(why, 0, sizeof(*why));
	int state = CS_STATE_UNKNOWN;
	if (oc->tgid <= 0 || cs_cu_get_state(oc->d, oc->o.pid, &state) != CS_CU_SUCCESS)
		return 0;
	int r = check(oc, state == CS_STATE_LOCKED ? CS_OP_CHECKPOINT_LOCKED : CS_OP_CHECKPOINT, why);
	if (r < 0 && state == CS_STATE_LOCKED)
		why->unlocked = cs_cu_unlock(oc->d, oc->o.pid) == CS_CU_SUCCESS;
	return r;
}

/* The GPU list serves two things at restore: indices in --device-map, and
 * whether cuInit is needed (persistence mode off). Then the map, checked
 * before the driver sees it; why NULL: not a check, nothing is refused. */
static int prepare_restore(cs_onecall *oc, cs_onecall_refusal *why)
{
	if (!oc->listed)
		cs_nvml_list(&oc->gpus, &oc->ngpus);
	oc->listed = true;
	if (!oc->o.device_map || oc->mapped)
		return 0;
	cs_error err = { 0 };
	const char *history_why = NULL;
	if (!cs_driver_can_remap(oc->d)) {
		cs_error_set(&err, CS_EUSAGE, NULL,
			     "--device-map: this driver (version %d) cannot remap GPUs; that needs driver R580 "
			     "(CUDA 13.0) or newer",
			     cs_driver_version(oc->d));
		history_why = "this driver cannot remap GPUs";
	} else if (cs_devmap_parse(oc->o.device_map, oc->gpus, oc->ngpus, &oc->pairs, &oc->npairs, &err) == 0) {
		oc->mapped = true;
		return 0;
	}
	if (!why)
		return -err.status;
	why->options = true;
	return cs_onecall_refuse(oc, why, "device-map", &err, history_why);
}

int cs_onecall_check_restore(cs_onecall *oc, cs_onecall_refusal *why)
{
	memset(why, 0, sizeof(*why));
	int r = prepare_restore(oc, why);
	return r < 0 ? r : check(oc, CS_OP_RESTORE, why);
}

int cs_onecall_restore_pairs(cs_onecall *oc)
{
	return prepare_restore(oc, NULL);
}

int cs_onecall_toggle_way(cs_onecall *oc, int state, cs_op *way, cs_onecall_refusal *why)
{
	memset(why, 0, sizeof(*why));
	if (state == CS_STATE_RUNNING) {
		*way = CS_OP_CHECKPOINT;
		return check(oc, CS_OP_CHECKPOINT, why);
	}
	if (state == CS_STATE_CHECKPOINTED) {
		*way = CS_OP_RESTORE;
		return 0;
	}
	/* The driver's own words for a call made in this state. */
	cs_error err = { 0 };
	cs_error_set(&err, CS_EPROC, NULL, "%s", cs_cu_string(oc->d, CS_CU_ILLEGAL_STATE));
	why->state = state;
	return cs_onecall_refuse(oc, why, "state", &err,
				 state == CS_STATE_LOCKED ? "the process is locked: neither direction is defined" :
							    "the driver reports that checkpointing it failed");
}
