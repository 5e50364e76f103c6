/* The cuda-checkpoint drop-in's entry in the history of operations
 * (lib/history.h): one per state-changing call (--action, --toggle),
 * refusals included, written where the state directory exists (the drop-in
 * creates none) with the library's writer. The drop-in makes its driver
 * calls itself, not through a session, so it says here what each did. One
 * call per process: the entry lives in this file. */
#include "compat.h"
#include "history.h"
#include "pool.h"
#include "proc.h"
#include "util.h"

#include <stdio.h>
#include <string.h>

static struct {
	bool on;
	cs_history h;
	cs_history_proc *p;
	bool failed, lost, refused;
	bool undone, undo_failed; /* a step undone after a failure (toggle's unlock) */
	int undo_step;
	int failed_res;
	char why[512];
} rec;

static const char *op_name(const compat_args *a)
{
	return a->op == COMPAT_TOGGLE ? "toggle" : cs_call_name(a->action);
}

void compat_history_begin(const compat_args *a)
{
	cs_history_begin(&rec.h, "drop-in", op_name(a));
	rec.on = true;
	rec.p = cs_history_proc_of(&rec.h, a->pid, "?");
}

void compat_history_target(pid_t tgid)
{
	_cleanup_close_ int pdir = rec.p && tgid > 0 ? cs_proc_open(cs_proc_dir(), tgid) : -1;
	cs_stat st;
	cs_proc_ident id;
	if (pdir < 0)
		return;
	rec.p->pid = tgid;
	if (cs_proc_read_stat(pdir, &st) == 0)
		snprintf(rec.p->comm, sizeof(rec.p->comm), "%s", st.comm);
	if (cs_proc_read_ident(pdir, tgid, &id) == 0)
		rec.p->nspid = id.nspid;
}

void compat_history_step(const cs_driver *d, cs_step s, int res, double seconds)
{
	if (!rec.on || !rec.p)
		return;
	if (res == CS_CU_SUCCESS) {
		rec.p->timed[s] = true;
		rec.p->seconds[s] = seconds;
		return;
	}
	rec.failed = true;
	rec.failed_res = res;
	rec.p->step = (int)s;
	rec.p->cu = res;
	snprintf(rec.why, sizeof(rec.why), "%s failed after %.3f s: %s (%s)", cs_step_name(s), seconds,
		 cs_cu_string(d, res), cs_cu_name(d, res));
	/* Driver 580 destroys the checkpointed state of a process whose restore
	 * runs out of GPU memory. */
	rec.lost = s == CS_STEP_RESTORE && res == CS_CU_OUT_OF_MEMORY;
}

void compat_history_undo(cs_step s, int res)
{
	if (!rec.on)
		return;
	rec.undo_step = (int)s;
	rec.undone = res == CS_CU_SUCCESS;
	rec.undo_failed = res != CS_CU_SUCCESS;
}

void compat_history_bytes(unsigned long long bytes)
{
	if (rec.on && rec.p)
		rec.p->bytes = bytes;
}

void compat_history_failed(const char *why)
{
	if (rec.on && !rec.why[0])
		snprintf(rec.why, sizeof(rec.why), "%s", why);
}

void compat_history_refused(const char *code, const char *why)
{
	if (!rec.on || !rec.p)
		return;
	rec.refused = true;
	cs_history_refused(rec.p, code, why);
}

/* What became of the process, from the calls made and their answers. */
static void settle(int status)
{
	cs_history_proc *p = rec.p;
	if (!p || rec.refused)
		return;
	if (status == EXIT_DONE) {
		p->outcome = CS_HIST_DONE;
	} else if (rec.lost) {
		p->outcome = CS_HIST_LOST;
		snprintf(p->why, sizeof(p->why),
			 "the driver ran out of GPU memory during its restore, which destroys a process's checkpointed "
			 "state (every later restore fails)");
	} else if (rec.undo_failed) {
		p->outcome = CS_HIST_LEFT_BEHIND;
		snprintf(p->recovery, sizeof(p->recovery), "cudasnap %s --pid %d", cs_step_name((cs_step)rec.undo_step),
			 (int)p->pid);
	} else {
		p->outcome = rec.undone ? CS_HIST_ROLLED_BACK : CS_HIST_FAILED;
	}
	if (!p->why[0])
		snprintf(p->why, sizeof(p->why), "%s", rec.why);
}

static void warn_stderr(void *ctx, const char *line)
{
	(void)ctx;
	fprintf(stderr, "cuda-checkpoint: %s\n", line);
}

void compat_history_end(int status)
{
	if (!rec.on)
		return;
	rec.on = false;
	settle(status);
	cs_error err = { 0 };
	const char *why = rec.p && rec.p->why[0] ? rec.p->why : rec.why;
	if (status != EXIT_DONE)
		cs_error_set(&err, rec.failed ? CS_EDRIVER : CS_EPROC, NULL, "%s", why[0] ? why : "the call failed");
	if (rec.failed)
		err.cu = rec.failed_res;
	cs_history_finish(&rec.h, cs_history_outcome(&rec.h, status != EXIT_DONE, true), status, &err);
	/* Where the state directory exists only: the drop-in creates none. */
	cs_history_write(&rec.h, -1, false, warn_stderr, NULL);
	cs_history_free(&rec.h);
}
