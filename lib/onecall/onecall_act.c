/* The actions of a single call: one driver call each, timed and kept in the
 * entry of the history, and around a checkpoint and a restore the record of
 * the process in the state directory's manifest: the size its checkpoint
 * moved and the GPUs it used, so that a later restore (by the drop-in, or
 * by cudasnap restore) is refused where a GPU has no room for it. */
#include "onecall_int.h"
#include "manifest.h"
#include "persist.h"
#include "pool.h"
#include "proc.h"
#include "sandbox.h"
#include "select.h"
#include "state.h"

#include <fcntl.h>
#include <stdio.h>
#include <string.h>

/* A driver call that changes the process, begun at t0, in the entry. */
static int step_done(cs_onecall *oc, cs_step s, double t0, int res)
{
	cs_onecall_history_step(oc, s, res, cs_now() - t0);
	return res;
}

int cs_onecall_lock(cs_onecall *oc)
{
	double t0 = cs_now();
	return step_done(oc, CS_STEP_LOCK, t0, cs_cu_lock(oc->d, oc->o.pid, oc->o.timeout_ms));
}

int cs_onecall_unlock(cs_onecall *oc)
{
	double t0 = cs_now();
	return step_done(oc, CS_STEP_UNLOCK, t0, cs_cu_unlock(oc->d, oc->o.pid));
}

int cs_onecall_undo_lock(cs_onecall *oc, int *state)
{
	int u = cs_cu_unlock(oc->d, oc->o.pid);
	cs_onecall_history_undo(oc, CS_STEP_UNLOCK, u);
	*state = CS_STATE_UNKNOWN;
	if (u != CS_CU_SUCCESS)
		cs_cu_get_state(oc->d, oc->o.pid, state);
	return u;
}

static unsigned long long rss_of(pid_t pid)
{
	char path[64], buf[4096];
	long kb;
	snprintf(path, sizeof(path), "%s/%d/status", cs_proc_dir(), (int)pid);
	if (cs_read_at(AT_FDCWD, path, buf, sizeof(buf)) < 0 || cs_parse_status_field(buf, "VmRSS", &kb) < 0)
		return 0;
	return (unsigned long long)kb * 1024;
}

/* Before a checkpoint: what its record needs to know (the process's
 * identity, the GPUs it sees and uses, its resident memory). t->pid stays
 * 0 when /proc does not show the process: then there is no record. */
static void note_before(pid_t tgid, cs_target *t)
{
	memset(t, 0, sizeof(*t));
	_cleanup_close_ int pdir = tgid > 0 ? cs_proc_open(cs_proc_dir(), tgid) : -1;
	cs_stat st;
	cs_proc_ident id = { 0 };
	if (pdir < 0 || cs_proc_read_stat(pdir, &st) < 0)
		return;
	t->pid = tgid;
	t->start_time = st.start_time;
	snprintf(t->comm, sizeof(t->comm), "%s", st.comm);
	if (cs_proc_read_ident(pdir, tgid, &id) == 0)
		t->nspid = id.nspid;
	cs_visible_devices(tgid, t->visible_devices, sizeof(t->visible_devices));
	t->rss_before = rss_of(tgid);
	_cleanup_(cs_proc_clearp) cs_proc p = { .pid = tgid };
	cs_proc_scan_gpu(pdir, cs_dev_dir(), &p);
	_cleanup_(cs_nvml_closep) cs_nvml *nv = NULL;
	_cleanup_free_ cs_nvml_gpu *gpus = NULL;
	size_t ngpus = 0;
	if (cs_nvml_open(&nv, NULL) < 0 || cs_nvml_gpus(nv, &gpus, &ngpus, NULL) < 0)
		ngpus = 0;
	cs_sandbox sb;
	cs_sandbox_detect(NULL, &sb);
	cs_target_note_use(t, &p, nv, gpus, ngpus, sb.pid_ns == CS_PIDNS_HOST);
	cs_target_note_gpus(t, gpus, ngpus);
}

/* After the checkpoint succeeded in seconds: the bytes it moved (the growth
 * of resident memory), and the record merged into the manifest. */
static void record(cs_onecall *oc, cs_target *t, double seconds)
{
	if (t->pid <= 0)
		return;
	t->rss_after = rss_of(t->pid);
	t->bytes = t->rss_after > t->rss_before ? t->rss_after - t->rss_before : 0;
	t->state = CS_STATE_CHECKPOINTED;
	t->done[CS_STEP_CHECKPOINT] = true;
	t->seq[CS_STEP_CHECKPOINT] = 1;
	t->seconds[CS_STEP_CHECKPOINT] = seconds;
	/* Best effort, and silent: NVIDIA's binary prints nothing on success,
	 * and leaves nothing behind, so no state directory is created
	 * (cudasnap's own commands and the CRIU plugin do). A restore without
	 * the record counts the process's resident memory instead. */
	_cleanup_close_ int statefd = cs_state_open_existing(NULL);
	if (statefd >= 0)
		cs_manifest_record(statefd, oc->o.command, t, 1, oc->d, seconds, NULL);
}

int cs_onecall_checkpoint(cs_onecall *oc)
{
	cs_target t;
	note_before(oc->tgid, &t);
	double t0 = cs_now();
	int r = step_done(oc, CS_STEP_CHECKPOINT, t0, cs_cu_checkpoint(oc->d, oc->o.pid));
	if (r != CS_CU_SUCCESS)
		return r;
	record(oc, &t, cs_now() - t0);
	cs_onecall_history_bytes(oc, t.bytes);
	return r;
}

/* After the restore: the process's record goes (its GPU memory is back). */
static void forget(cs_onecall *oc)
{
	cs_target t = { .pid = oc->tgid };
	_cleanup_close_ int pdir = oc->tgid > 0 ? cs_proc_open(cs_proc_dir(), oc->tgid) : -1;
	cs_stat st;
	if (pdir < 0 || cs_proc_read_stat(pdir, &st) < 0)
		return;
	t.start_time = st.start_time;
	_cleanup_close_ int statefd = cs_state_open_existing(NULL);
	if (statefd >= 0)
		cs_manifest_drop(statefd, oc->o.command, &t, NULL);
}

int cs_onecall_restore(cs_onecall *oc)
{
	if (cs_onecall_restore_pairs(oc) < 0)
		return CS_CU_INVALID_VALUE;
	cs_restore_init(oc->d, oc->gpus, oc->ngpus);
	double t0 = cs_now();
	int res = cs_cu_restore(oc->d, oc->o.pid, oc->pairs, oc->npairs);
	/* Answered, the GPU's own figures count from now on; not answered, the
	 * booking stays with the request the driver may still carry out. */
	if (oc->booked)
		cs_gpu_ledger_give(oc->ledger, &oc->room, res);
	int r = step_done(oc, CS_STEP_RESTORE, t0, res);
	oc->booked = false;
	if (r == CS_CU_SUCCESS)
		forget(oc);
	return r;
}
