/* The entry a staged session leaves in the history of operations: one per
 * dump or restore that met GPU processes (front "criu-dump",
 * "criu-restore"), built in the engine's process across its hooks from the
 * processes met, what each session run in a call said of each (the rule of
 * lib/session/session_history.c, carried back in task_outcome), the refusals and the
 * first error line of the log. A dump writes it into the state directory it
 * opened at its first CUDA process, and no other; a restore of images that
 * hold a record opens the state directory its session uses. An entry that
 * cannot be written is one warning: it fails nothing. */
#include "engine_int.h"
#include "util.h"

#include <stdio.h>
#include <string.h>

void eng_op_begin(cs_engine *e)
{
	bool dump = e->o.op != CS_OP_RESTORE;
	cs_history_free(&e->op.h);
	cs_history_begin(&e->op.h, e->o.front, dump ? "checkpoint" : "restore");
	e->op.error[0] = '\0';
	e->op.gpu = false;
	e->op.failed = false;
}

void eng_op_gpu(cs_engine *e)
{
	e->op.gpu = true;
}

void eng_op_fail(cs_engine *e, const char *message)
{
	snprintf(e->op.error, sizeof(e->op.error), "%s", message);
	e->op.failed = true;
}

cs_history_proc *eng_op_proc(cs_engine *e, pid_t pid, pid_t nspid, const char *comm)
{
	cs_history_proc *p = cs_history_proc_of(&e->op.h, pid, comm);
	if (p && nspid > 0)
		p->nspid = nspid;
	if (p && comm && comm[0])
		snprintf(p->comm, sizeof(p->comm), "%s", comm);
	return p;
}

void eng_op_record(cs_engine *e)
{
	const cs_manifest *m = &e->record;
	for (size_t k = 0; k < m->n; k++) {
		const cs_manifest_entry *x = &m->e[k];
		cs_history_proc *p = cs_history_proc_of(&e->op.h, 0, x->comm);
		if (!p)
			return;
		p->nspid = x->nspid ? x->nspid : x->pid;
		p->bytes = x->bytes;
	}
}

cs_history_proc *eng_op_entry(cs_engine *e, size_t k)
{
	return k < e->op.h.n ? &e->op.h.p[k] : NULL;
}

void eng_op_refused(cs_engine *e, pid_t pid, const char *comm, const char *code, const char *why)
{
	cs_history_proc *p = eng_op_proc(e, pid, 0, comm);
	eng_op_gpu(e);
	if (p)
		cs_history_refused(p, code, why);
}

/* On a failed dump's way back: whether the process is running again, as
 * it was before the dump; otherwise it stays named with what recovers it. */
static void merge_back(cs_engine *e, cs_history_proc *p, const task_outcome *t)
{
	const cs_history_proc *s = &t->hist;
	if (s->outcome == CS_HIST_DONE || s->outcome == CS_HIST_LEFT) {
		if (p->outcome != CS_HIST_REFUSED)
			p->outcome = CS_HIST_ROLLED_BACK;
		return;
	}
	if (s->outcome == CS_HIST_LOST || s->outcome == CS_HIST_UNRESTORABLE || s->outcome == CS_HIST_EXITED ||
	    s->outcome == CS_HIST_VANISHED) {
		p->outcome = s->outcome == CS_HIST_VANISHED ? CS_HIST_EXITED : s->outcome;
	} else {
		p->outcome = CS_HIST_LEFT_BEHIND;
		snprintf(p->recovery, sizeof(p->recovery), "cudasnap %s --pid %d once %s has let it go",
			 t->state == CS_STATE_LOCKED ? "unlock" : "restore", (int)t->pid, e->o.engine);
	}
	snprintf(p->why, sizeof(p->why), "%s", s->why[0] ? s->why : t->message);
	p->step = s->step;
	p->cu = s->cu;
}

void eng_op_session(cs_engine *e, const run_outcome *o, bool back)
{
	for (size_t i = 0; o && i < o->n; i++) {
		const task_outcome *t = &o->t[i];
		const cs_history_proc *s = &t->hist;
		cs_history_proc *p = eng_op_proc(e, t->pid, s->nspid, t->comm);
		if (!p)
			return;
		for (int k = 0; k < CS_STEP_COUNT; k++)
			if (s->timed[k]) {
				p->timed[k] = true;
				p->seconds[k] = s->seconds[k];
			}
		if (back) {
			merge_back(e, p, t);
			continue;
		}
		if (s->bytes)
			p->bytes = s->bytes;
		p->outcome = s->outcome;
		snprintf(p->code, sizeof(p->code), "%s", s->code);
		snprintf(p->why, sizeof(p->why), "%s", s->why);
		snprintf(p->recovery, sizeof(p->recovery), "%s", s->recovery);
		p->step = s->step;
		p->cu = s->cu;
	}
	for (size_t i = 0; o && i < o->nrefused && i < RUN_REFUSED_MAX; i++)
		eng_op_refused(e, o->refused[i].pid, o->refused[i].comm, o->refused[i].code, o->refused[i].why);
}

static const char *final_words(const cs_engine *e, int ret)
{
	if (ret)
		return "failed";
	return e->o.final == CS_FINAL_ALIVE    ? "succeeded; the tree left running" :
		e->o.final == CS_FINAL_STOPPED ? "succeeded; the tree left stopped" :
						 "succeeded; the tree killed";
}

static void warn_line(void *ctx, const char *line)
{
	eng_log(ctx, CS_LOG_WARN, "%s", line);
}

const cs_history *eng_op_end(cs_engine *e, int ret)
{
	cs_history *h = &e->op.h;
	/* Nothing of the GPU's was met or done: not an operation of the session's. */
	if (!e->op.gpu || (h->n == 0 && !e->op.error[0]))
		return NULL;
	bool failed = ret != 0;
	for (size_t i = 0; i < h->n; i++)
		failed |= h->p[i].outcome != CS_HIST_DONE && h->p[i].outcome != CS_HIST_LEFT;
	bool dump = e->o.op != CS_OP_RESTORE;
	const char *how = dump ? final_words(e, ret) : ret ? "failed" : "succeeded";
	if (!h->note[0])
		snprintf(h->note, sizeof(h->note), "%s %s", e->o.command, how);
	cs_error err = { 0 };
	if (e->op.error[0])
		cs_error_set(&err, CS_EPROC, NULL, "%s", e->op.error);
	else if (ret && dump)
		cs_error_set(&err, CS_EPROC, NULL,
			     "%s failed the dump for a reason of its own (its log says which); the GPU processes were "
			     "returned to their state before it",
			     e->o.engine);
	else if (ret)
		cs_error_set(&err, CS_EPROC, NULL, "%s failed the restore for a reason of its own (its log says which)",
			     e->o.engine);
	cs_history_finish(h, cs_history_outcome(h, failed, true), -1, &err);
	/* A dump writes into the state directory it opened for its first CUDA
	 * process, and no other; a restore's session used the directory. */
	bool restore = e->o.op == CS_OP_RESTORE;
	if (e->state_fd >= 0 || restore)
		cs_history_write(h, dump ? e->state_fd : -1, restore, warn_line, e);
	return h;
}
