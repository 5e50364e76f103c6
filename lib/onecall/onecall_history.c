/* The entry of a single call in the history of operations (lib/record/history.h):
 * one per call that may change its process (an action, a toggle), refusals
 * included, written with the library's writer where the state directory
 * exists (the drop-in creates none). The calls are made one by one, not by
 * a transaction, so the entry is built here from what each of them did. */
#include "onecall_int.h"
#include "pool.h"
#include "proc.h"

#include <stdio.h>
#include <string.h>

void cs_onecall_history_begin(cs_onecall *oc)
{
	cs_onecall_rec *rec = &oc->rec;
	cs_history_begin(&rec->h, oc->o.front, oc->o.toggle ? "toggle" : cs_call_name(oc->o.call));
	rec->on = true;
	rec->p = cs_history_proc_of(&rec->h, oc->o.pid, "?");
}

/* The process as /proc names it, once --pid (maybe a thread) is resolved. */
void cs_onecall_history_target(cs_onecall *oc)
{
	cs_history_proc *p = oc->rec.p;
	_cleanup_close_ int pdir = p && oc->tgid > 0 ? cs_proc_open(cs_proc_dir(), oc->tgid) : -1;
	cs_stat st;
	cs_proc_ident id;
	if (pdir < 0)
		return;
	p->pid = oc->tgid;
	if (cs_proc_read_stat(pdir, &st) == 0)
		snprintf(p->comm, sizeof(p->comm), "%s", st.comm);
	if (cs_proc_read_ident(pdir, oc->tgid, &id) == 0)
		p->nspid = id.nspid;
}

void cs_onecall_history_step(cs_onecall *oc, cs_step s, int res, double seconds)
{
	cs_onecall_rec *rec = &oc->rec;
	if (!rec->on || !rec->p)
		return;
	if (res == CS_CU_SUCCESS) {
		rec->p->timed[s] = true;
		rec->p->seconds[s] = seconds;
		return;
	}
	rec->failed = true;
	rec->failed_res = res;
	rec->p->step = (int)s;
	rec->p->cu = res;
	snprintf(rec->why, sizeof(rec->why), "%s failed after %.3f s: %s (%s)", cs_step_name(s), seconds,
		 cs_cu_string(oc->d, res), cs_cu_name(oc->d, res));
	/* Driver 580 destroys the checkpointed state of a process whose restore
	 * runs out of GPU memory. */
	rec->lost = s == CS_STEP_RESTORE && res == CS_CU_OUT_OF_MEMORY;
}

void cs_onecall_history_undo(cs_onecall *oc, cs_step s, int res)
{
	cs_onecall_rec *rec = &oc->rec;
	if (!rec->on)
		return;
	rec->undo_step = (int)s;
	rec->undone = res == CS_CU_SUCCESS;
	rec->undo_failed = res != CS_CU_SUCCESS;
}

void cs_onecall_history_bytes(cs_onecall *oc, unsigned long long bytes)
{
	if (oc->rec.on && oc->rec.p)
		oc->rec.p->bytes = bytes;
}

void cs_onecall_history_failed(cs_onecall *oc, const char *why)
{
	if (oc->rec.on && !oc->rec.why[0])
		snprintf(oc->rec.why, sizeof(oc->rec.why), "%s", why);
}

void cs_onecall_history_refused(cs_onecall *oc, const char *code, const char *why)
{
	if (!oc->rec.on || !oc->rec.p)
		return;
	oc->rec.refused = true;
	cs_history_refused(oc->rec.p, code, why);
}

/* What became of the process, from the calls made and their answers. */
static void settle(cs_onecall_rec *rec, int exit_status)
{
	cs_history_proc *p = rec->p;
	if (!p || rec->refused)
		return;
	if (exit_status == 0) {
		p->outcome = CS_HIST_DONE;
	} else if (rec->lost) {
		p->outcome = CS_HIST_LOST;
		snprintf(p->why, sizeof(p->why),
			 "the driver ran out of GPU memory during its restore, which destroys a process's checkpointed "
			 "state (every later restore fails)");
	} else if (rec->undo_failed) {
		p->outcome = CS_HIST_LEFT_BEHIND;
		snprintf(p->recovery, sizeof(p->recovery), "cudasnap %s --pid %d",
			 cs_step_name((cs_step)rec->undo_step), (int)p->pid);
	} else {
		p->outcome = rec->undone ? CS_HIST_ROLLED_BACK : CS_HIST_FAILED;
	}
	if (!p->why[0])
		snprintf(p->why, sizeof(p->why), "%s", rec->why);
}

void cs_onecall_end(cs_onecall *oc, int exit_status)
{
	if (!oc || !oc->rec.on)
		return;
	cs_onecall_rec *rec = &oc->rec;
	rec->on = false;
	settle(rec, exit_status);
	cs_error err = { 0 };
	const char *why = rec->p && rec->p->why[0] ? rec->p->why : rec->why;
	if (exit_status != 0)
		cs_error_set(&err, rec->failed ? CS_EDRIVER : CS_EPROC, NULL, "%s", why[0] ? why : "the call failed");
	if (rec->failed)
		err.cu = rec->failed_res;
	cs_history_finish(&rec->h, cs_history_outcome(&rec->h, exit_status != 0, true), exit_status, &err);
	/* Where the state directory exists only: a single call creates none. */
	cs_history_write(&rec->h, -1, false, oc->o.warn, oc->o.warn_ctx);
}
