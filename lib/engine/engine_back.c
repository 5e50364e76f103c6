/* The end of a staged dump: every process left as the engine leaves the
 * tree. Back to its GPU state before the dump when the dump failed or the
 * tree keeps running; checkpointed (and said so) when it stays stopped; as
 * it is when the engine kills it. The engine still holds the tree here, so
 * the restore threads run through the engine's calls. */
#include "engine_int.h"
#include "park.h"
#include "parkfiles.h"
#include "util.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

static bool was_locked(const eng_task *t)
{
	return t->locked;
}
static bool was_checkpointed(const eng_task *t)
{
	return t->checkpointed;
}
static bool only_locked(const eng_task *t)
{
	return t->locked && !t->checkpointed;
}

typedef struct give_back_arg {
	const cs_engine *e;
	pid_t *restore, *unlock;
	size_t nrestore, nunlock;
} give_back_arg;

/* In the call: both sessions of the way back, their outcomes one after the
 * other. */
static int give_back_tasks(void *arg, void **out, size_t *len)
{
	const give_back_arg *c = arg;
	run_outcome *o[2] = { NULL, NULL };
	for (int k = 0; k < 2; k++) {
		eng_run r = { .op = k ? CS_OP_UNLOCK : CS_OP_RESTORE,
			      .command = c->e->o.command,
			      .pids = k ? c->unlock : c->restore,
			      .npids = k ? c->nunlock : c->nrestore,
			      .claimed = true,
			      .images = -1 };
		o[k] = r.npids ? eng_run_session(c->e, &r) : calloc(1, eng_outcome_size(0));
	}
	size_t a = o[0] ? eng_outcome_size(o[0]->n) : 0, b = o[1] ? eng_outcome_size(o[1]->n) : 0;
	char *buf = o[0] && o[1] ? malloc(a + b) : NULL;
	if (buf) {
		memcpy(buf, o[0], a);
		memcpy(buf + a, o[1], b);
	}
	free(o[0]);
	free(o[1]);
	*out = buf;
	*len = a + b;
	return buf ? 0 : 1;
}

static void name_left_behind(cs_engine *e, const run_outcome *o, const char *after)
{
	for (size_t i = 0; o && i < o->n; i++)
		if (!o->t[i].done && o->t[i].unrestorable)
			eng_log(e, CS_LOG_ERROR,
				"process %d (%s) could not be returned to running after the %s: the driver refuses its "
				"restore at every try; its GPU state is lost: restart it",
				(int)o->t[i].pid, o->t[i].comm, after);
		else if (!o->t[i].done)
			eng_log(e, CS_LOG_ERROR,
				"process %d (%s) could not be returned to running after the %s (%s): it is %s; recover "
				"with 'cudasnap %s --pid %d' once %s has let it go",
				(int)o->t[i].pid, o->t[i].comm, after,
				o->t[i].message[0] ? o->t[i].message : o->message,
				cs_state_name(o->t[i].state) ? cs_state_name(o->t[i].state) : "in an unknown state",
				o->t[i].state == CS_STATE_LOCKED ? "unlock" : "restore", (int)o->t[i].pid, e->o.engine);
}

/* A parked process that an unlock brings back still needs its unpark,
 * which a restore does (a checkpointed one gets it from that restore). */
static const char *then_unpark(const eng_task *t)
{
	return t->parked && !t->checkpointed ? ", then cudasnap restore (it is parked)" : "";
}

/* The way back gave no answer: every process it was to bring back stays
 * named with what recovers it. */
static void left_behind(cs_engine *e)
{
	for (size_t i = 0; i < e->ntasks; i++) {
		const eng_task *t = &e->tasks[i];
		cs_history_proc *h = t->locked ? eng_op_proc(e, t->pid, t->nspid, t->comm) : NULL;
		if (!h)
			continue;
		h->outcome = CS_HIST_LEFT_BEHIND;
		snprintf(h->recovery, sizeof(h->recovery), "cudasnap %s --pid %d once %s has let it go%s",
			 t->checkpointed ? "restore" : "unlock", (int)t->pid, e->o.engine, then_unpark(t));
	}
}

/* A parked process back to running under the driver still has its memory in
 * host memory, and the engine holds it stopped until after this hook: its
 * unpark is left in its control socket, answered once the engine lets it
 * run. */
static void unpark_when_resumed(cs_engine *e, const run_outcome *o1, const run_outcome *o2)
{
	for (size_t i = 0; i < e->ntasks; i++) {
		const eng_task *t = &e->tasks[i];
		const task_outcome *x = eng_outcome_of(o1, t->pid), *y = eng_outcome_of(o2, t->pid);
		/* one parked before its exporter and never locked runs parked */
		if (!t->parked || (t->locked && !((x && x->done) || (y && y->done))))
			continue;
		/* into files of the images: they go with it (and stay: the
		 * images keep what they hold) */
		cs_error err = { 0 };
		if (eng_queue_unpark(e, t->pid, t->park_name, t->park_nfiles, t->park_bytes, &err) == 0)
			eng_log(e, CS_LOG_INFO,
				"process %d (%s) unparks its %.2f GiB once %s lets it run ('cudasnap ps' shows it)",
				(int)t->pid, t->comm, (double)t->park_bytes / (1 << 30), e->o.engine);
		else
			eng_log(e, CS_LOG_ERROR,
				"process %d (%s) runs again but stays parked (%s): its GPU work waits; 'cudasnap restore "
				"--pid %d' unparks it",
				(int)t->pid, t->comm, err.message, (int)t->pid);
	}
}

/* Every process back to the GPU state it had before the dump; failed: the
 * dump failed, so what comes back is rolled back. */
static void give_back(cs_engine *e, const char *after, bool failed)
{
	give_back_arg c = { .e = e,
			    .restore = eng_pids(e, was_checkpointed, &c.nrestore),
			    .unlock = eng_pids(e, only_locked, &c.nunlock) };
	_cleanup_free_ pid_t *r = c.restore, *u = c.unlock;
	if (!r || !u)
		return;
	_cleanup_free_ void *buf = NULL;
	size_t len = 0;
	int rc = eng_call(e, "the way back", eng_bound_moves(), give_back_tasks, &c, was_locked, &buf, &len);
	const run_outcome *o1 = rc == 0 && len >= sizeof(run_outcome) ? buf : NULL;
	size_t first = o1 ? eng_outcome_size(o1->n) : 0;
	o1 = o1 ? eng_outcome_check(e, buf, first <= len ? first : len, "the way back") : NULL;
	const run_outcome *o2 = o1 ? eng_outcome_check(e, (char *)buf + first, len - first, "the way back") : NULL;
	if (!o1 || !o2) {
		left_behind(e);
		eng_log(e, CS_LOG_ERROR,
			"could not return the processes to running after the %s; recover with 'cudasnap restore' and "
			"'cudasnap unlock' once %s has let them go",
			after, e->o.engine);
		return;
	}
	eng_op_session(e, o1, failed);
	eng_op_session(e, o2, failed);
	name_left_behind(e, o1, after);
	name_left_behind(e, o2, after);
	unpark_when_resumed(e, o1, o2);
	size_t n = o1->acted + o2->acted;
	eng_log(e, CS_LOG_INFO, "%zu process%s back to running after the %s", n, n == 1 ? "" : "es", after);
}

/* The engine leaves the tree stopped: the driver cannot be asked now, and
 * the GPU state stays checkpointed until the user resumes the processes. */
static void name_stopped(cs_engine *e)
{
	for (size_t i = 0; i < e->ntasks; i++) {
		const eng_task *t = &e->tasks[i];
		cs_history_proc *h = t->locked ? eng_op_proc(e, t->pid, t->nspid, t->comm) : NULL;
		if (h)
			snprintf(h->recovery, sizeof(h->recovery), "kill -CONT %d, then cudasnap %s --pid %d%s",
				 (int)t->pid, t->checkpointed ? "restore" : "unlock", (int)t->pid, then_unpark(t));
		if (t->locked)
			eng_log(e, CS_LOG_WARN,
				"process %d (%s) is left stopped by %s (--leave-stopped) and %s on the GPU: resume it "
				"with 'kill -CONT %d' and then 'cudasnap %s --pid %d'",
				(int)t->pid, t->comm, e->o.engine, t->checkpointed ? "checkpointed" : "locked",
				(int)t->pid, t->checkpointed ? "restore" : "unlock", (int)t->pid);
	}
}

void eng_give_back_or_name(cs_engine *e, int ret)
{
	cs_engine_final final = ret ? CS_FINAL_ALIVE : e->o.final;
	bool any = false;
	for (size_t i = 0; i < e->ntasks; i++)
		any |= e->tasks[i].locked;
	if (!any) { /* those parked before their exporter's failed lock */
		unpark_when_resumed(e, NULL, NULL);
		return;
	}
	if (final == CS_FINAL_ALIVE)
		give_back(e, ret ? "failed dump" : "dump (the tree keeps running)", ret != 0);
	else if (final == CS_FINAL_STOPPED)
		name_stopped(e);
}
