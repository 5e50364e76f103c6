/* The checks a single call makes before it changes its process, with the
 * session's own (a dry-run session of the one process, lib/session/plan.c): a
 * checkpoint whose copy would not fit in host memory or that the driver
 * could never restore, a restore whose GPU has no room for it (which
 * destroys the process's checkpointed state), and --device-map. */
#include "onecall_int.h"
#include "park.h"
#include "devmap.h"
#include "env.h"
#include "plan.h"
#include "pool.h"
#include "sandbox.h"
#include "state.h"

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

/* The process as the restore's check judged it: what its restore needs
 * on each GPU, for its booking. */
static void keep_room(cs_onecall *oc, const cs_session *s)
{
	size_t n = 0;
	const cs_target *t = cs_session_targets(s, &n);
	for (size_t i = 0; i < n; i++)
		if (t[i].pid == oc->tgid && !t[i].skipped) {
			oc->room = t[i];
			oc->room_known = true;
		}
}

/* The session's checks before op of the process, which this call already
 * claimed. What a checkpoint's checks could not read, the driver's own
 * call will tell. A restore is refused whatever else stopped its check (a
 * process it could not read): one asked of the driver without room
 * destroys the process's state; told to ignore the room, it goes on. A
 * device map that does not cover the process's GPUs (a usage error) the
 * driver refuses itself, with nothing destroyed, in NVIDIA's words. */
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
	/* what it needs, for its booking, also where the check refused a
	 * restore told to ignore the room: the others must count it */
	bool restore = op == CS_OP_RESTORE && !cs_env_on("CUDASNAP_IGNORE_GPU_MEMORY");
	if (s && op == CS_OP_RESTORE && (r == 0 || !restore))
		keep_room(oc, s);
	if (r == 0 || (err.status != CS_EPROC && !(restore && err.status != CS_EUSAGE)))
		return 0;
	size_t n = 0;
	const cs_refusal *v = s ? cs_session_refusals(s, &n) : NULL;
	return cs_onecall_refuse(oc, why,
				 n                              ? v[0].reason.code :
					 err.status == CS_EPROC ? "refused" :
								  "check",
				 &err, NULL);
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

/* The room the check found, booked across every cudasnap of the node
 * until the driver has answered: two restores that each fit alone are
 * never both let through onto a GPU that holds only one. A restore told
 * to ignore the room books it all the same, for the others to count. A
 * pid this namespace does not show the driver answers at once. */
static int book(cs_onecall *oc, cs_onecall_refusal *why)
{
	/* The check found no checkpointed process to restore: the driver
	 * answers that at once, and there is nothing to lose. */
	bool ignore = cs_env_on("CUDASNAP_IGNORE_GPU_MEMORY");
	if (oc->tgid <= 0 || !oc->room_known)
		return 0;
	cs_error err = { 0 };
	double wait = 0;
	cs_wait_memory_setting(&wait, NULL);
	cs_sandbox sb;
	cs_sandbox_detect(NULL, &sb);
	oc->ledger = calloc(1, sizeof(*oc->ledger));
	if (!oc->ledger) {
		cs_error_set(&err, CS_ESYS, NULL, "out of memory");
		return cs_onecall_refuse(oc, why, "gpu-memory", &err, NULL);
	}
	cs_gpu_ledger_init(oc->ledger, oc->d, oc->o.command, cs_now() + wait, NULL, sb.pid_ns == CS_PIDNS_HOST,
			   hold_line, why);
	oc->ledger->ignore = ignore;
	oc->ledger->orphans.parked = cs_park_parked_now;
	if (cs_gpu_ledger_take(oc->ledger, &oc->room, false, &err) < 0)
		return cs_onecall_refuse(oc, why, "gpu-memory", &err, NULL);
	oc->booked = true;
	return 0;
}

int cs_onecall_check_restore(cs_onecall *oc, cs_onecall_refusal *why)
{
	memset(why, 0, sizeof(*why));
	/* A wait the check could not read would leave the room unjudged. */
	double wait;
	cs_error err = { 0 };
	if (cs_wait_memory_setting(&wait, &err) < 0)
		return cs_onecall_refuse(oc, why, "usage", &err, NULL);
	int r = prepare_restore(oc, why);
	if (r == 0)
		r = check(oc, CS_OP_RESTORE, why);
	return r < 0 ? r : book(oc, why);
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
