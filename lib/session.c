/* A session: what checkpoint, restore, lock and unlock do around the
 * transaction, so that every caller of the library gets the same
 * guarantees: one session at a time on each process, PIDs checked against this namespace,
 * privileges checked before the driver refuses, leftovers checked, the
 * manifest kept. */
#include "session_int.h"
#include "select.h"
#include "state.h"
#include "util.h"

#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

void cs_session_warn(const cs_session *s, const char *fmt, ...)
{
	if (!s->o->warn)
		return;
	char line[1024];
	va_list ap;
	va_start(ap, fmt);
	vsnprintf(line, sizeof(line), fmt, ap);
	va_end(ap);
	s->o->warn(s->o->warn_ctx, line);
}

int cs_session_open(cs_session **out, cs_driver *d, const cs_session_opts *o, cs_error *err)
{
	*out = NULL;
	_cleanup_(cs_session_freep) cs_session *s = calloc(1, sizeof(*s));
	if (!s)
		return cs_error_set(err, CS_ESYS, NULL, "out of memory");
	*s = (cs_session){ .d = d, .o = o, .state_fd = -1 };
	cs_claims_init(&s->claims);
	cs_sandbox_detect(NULL, &s->sandbox);
	s->state_fd = cs_state_open(err);
	if (s->state_fd < 0) {
		if (s->sandbox.euid != 0)
			snprintf(err->hint, sizeof(err->hint),
				 "%s needs root (or CAP_SYS_PTRACE and a state directory of "
				 "your own: set CUDASNAP_STATE_DIR).",
				 o->command);
		return -(err->status ? err->status : CS_ESTATE);
	}
	*out = TAKE_PTR(s);
	return 0;
}

static bool named(void *ctx, const cs_ptable *t, pid_t pid)
{
	const cs_session *s = ctx;
	return cs_selection_names(t, &s->o->sel, pid);
}

/* Which processes discovery may ask the driver about: those the selection
 * names. Another process may be in the middle of a long call of another
 * operation (its checkpoint), which the driver would make this one wait
 * for; and it is not this session's business. */
static const cs_scan_opts *scan_opts(cs_session *s)
{
	if (s->o->only_selected)
		s->scan = (cs_scan_opts){ .only = s->o->sel.pids, .nonly = s->o->sel.npids };
	else if (!cs_selection_empty(&s->o->sel))
		s->scan = (cs_scan_opts){ .ask = named, .ask_ctx = s };
	else
		return NULL;
	return &s->scan;
}

/* The driver refuses targets the caller may not trace, with the same code
 * as for a missing process: say what is needed before it is asked. */
static int check_privileges(const cs_session *s, cs_error *err)
{
	const cs_sandbox *sb = &s->sandbox;
	const cs_ptable *t = &s->table;
	if (cs_sandbox_may_trace_all(sb))
		return 0;
	if (t->nunreadable)
		return cs_error_set(err, CS_EENV, "Run cudasnap as root, or give it CAP_SYS_PTRACE.",
				    "%s needs root or CAP_SYS_PTRACE: %zu process%s of this namespace cannot be read "
				    "as uid %u (e.g. process %d), so CUDA processes may be missed",
				    s->o->command, t->nunreadable, t->nunreadable == 1 ? "" : "es", (unsigned)sb->euid,
				    (int)t->unreadable[0].pid);
	for (size_t i = 0; i < s->n; i++) {
		const cs_proc *p = cs_ptable_find(t, s->t[i].pid);
		if (p && p->uid != sb->euid)
			return cs_error_set(err, CS_EENV,
					    "Run cudasnap as root, or give it CAP_SYS_PTRACE "
					    "(e.g. sudo, or setpriv/capsh with cap_sys_ptrace); without it only the "
					    "caller's own processes can be checkpointed.",
					    "%s of process %d (%s, uid %u) needs root or CAP_SYS_PTRACE; cudasnap runs "
					    "as uid %u without it",
					    s->o->command, (int)p->pid, p->comm, (unsigned)p->uid, (unsigned)sb->euid);
	}
	return 0;
}

/* For restore and unlock, only processes in the starting state belong to
 * the set; checkpoint and lock report the others as left as they were. A
 * process whose state is unknown (stopped, so not asked) stays: the
 * transaction refuses it by name rather than skipping it in silence. */
static void keep_relevant(cs_session *s)
{
	cs_op op = s->o->op;
	if (op != CS_OP_RESTORE && op != CS_OP_UNLOCK && op != CS_OP_CHECKPOINT_LOCKED)
		return;
	int want = op == CS_OP_RESTORE ? CS_STATE_CHECKPOINTED : CS_STATE_LOCKED;
	size_t k = 0;
	for (size_t i = 0; i < s->n; i++)
		if (s->t[i].state == want || s->t[i].state == CS_STATE_UNKNOWN)
			s->t[k++] = s->t[i];
	s->n = k;
}

/* The claims of the processes the session may act on, all or none. One
 * that another operation holds fails the session, naming it, whatever its
 * state: a checkpoint of a process that a CRIU dump is locking must not
 * say "left as it was" while the dump may still fail. The transaction reads
 * every state again once they are claimed. */
static int claim(cs_session *s, cs_error *err)
{
	for (size_t i = 0; i < s->n; i++) {
		const cs_target *t = &s->t[i];
		int r = cs_claims_add(&s->claims, s->state_fd, t->pid, t->comm, s->o->command, err);
		if (r < 0) {
			cs_claims_release(&s->claims);
			return r;
		}
	}
	return 0;
}

int cs_session_select(cs_session *s, cs_error *err)
{
	int r = cs_discover(scan_opts(s), s->d, &s->table, err);
	if (r < 0)
		return r;
	r = cs_select(&s->table, &s->o->sel, &s->t, &s->n, err);
	if (r < 0)
		return r;
	r = check_privileges(s, err);
	if (r < 0)
		return r;
	keep_relevant(s);
	return s->o->claimed ? 0 : claim(s, err);
}

/* With a scope, the leftovers of other processes are none of this
 * session's business: another container's processes, say. */
static void keep_scoped_leftovers(cs_session *s)
{
	const cs_session_opts *o = s->o;
	if (!o->scope)
		return;
	size_t k = 0;
	for (size_t i = 0; i < s->nleft; i++)
		for (size_t j = 0; j < o->nscope; j++)
			if (o->scope[j] == s->left[i].proc->pid) {
				s->left[k++] = s->left[i];
				break;
			}
	s->nleft = k;
}

/* Leftover device references after a checkpoint: warnings, or with strict
 * a failure that rolls the transaction back. */
static int post_check(void *ctx, cs_target *targets, size_t n, cs_error *err)
{
	cs_session *s = ctx;
	bool strict = s->o->strict;
	cs_error e = { 0 };
	(void)targets, (void)n;
	if (cs_discover(scan_opts(s), s->d, &s->after, &e) < 0 || cs_verify(&s->after, &s->left, &s->nleft, &e) < 0)
		return strict ?
			cs_error_set(err, CS_ESYS, NULL, "cannot check for leftover device references: %s", e.message) :
			0;
	keep_scoped_leftovers(s);
	for (size_t i = 0; i < s->nleft; i++)
		s->nleft_scope += s->o->scope || cs_selection_covers(&s->after, &s->o->sel, s->left[i].proc->pid);
	for (size_t i = 0, used; i < s->nleft; i += used) {
		char line[768];
		cs_verify_line(s->left + i, s->nleft - i, &used, line, sizeof(line));
		cs_session_warn(s, "%s: %s", strict ? "error" : "warning", line);
	}
	if (s->nleft_scope && strict)
		return cs_error_set(err, CS_EPROC,
				    "gVisor (older runsc) and CRIU cannot save processes that hold "
				    "GPU device files. Stop those processes, or checkpoint without --strict if the "
				    "snapshot engine can save them.",
				    "%zu GPU device reference%s remain after the checkpoint (--strict)", s->nleft_scope,
				    s->nleft_scope == 1 ? "" : "s");
	return 0;
}

int cs_session_run(cs_session *s, cs_txn_result *res, cs_error *err)
{
	const cs_session_opts *o = s->o;
	memset(res, 0, sizeof(*res));
	cs_txn_opts t = { .op = o->op,
			  .timeout_ms = o->timeout_ms,
			  .jobs = o->jobs,
			  .sequential = o->sequential,
			  .interrupted = o->interrupted,
			  .progress = o->progress,
			  .progress_ctx = o->progress_ctx,
			  .gvisor = s->sandbox.gvisor,
			  .watch = o->watch,
			  .watch_ctx = o->watch_ctx,
			  .watch_s = 0.5 };
	bool checkpoint = o->op == CS_OP_CHECKPOINT || o->op == CS_OP_CHECKPOINT_LOCKED;
	if (checkpoint) {
		t.post_check = post_check;
		t.post_ctx = s;
		cs_session_note_gpu_bytes(s);
	}
	if (o->op == CS_OP_RESTORE) {
		int r = cs_session_plan_restore(s, err);
		if (r < 0)
			return r;
		t.pairs = s->pairs;
		t.npairs = s->npairs;
	}
	int rc = cs_txn_run(s->d, &t, s->t, s->n, res); /* clears res first */
	res->ran = true;
	if (rc == 0 && checkpoint && res->acted) {
		cs_session_note_gpus(s);
		if (!o->no_manifest)
			cs_session_save_manifest(s, res);
	}
	if (rc == 0 && o->op == CS_OP_RESTORE && res->acted && !o->no_manifest)
		cs_session_prune_manifest(s);
	return rc;
}

cs_target *cs_session_targets(const cs_session *s, size_t *n)
{
	*n = s->n;
	return s->t;
}

const struct cs_leftover *cs_session_leftovers(const cs_session *s, size_t *n, size_t *in_scope)
{
	*n = s->nleft;
	if (in_scope)
		*in_scope = s->nleft_scope;
	return s->left;
}

void cs_session_free(cs_session *s)
{
	if (!s)
		return;
	free(s->t);
	free(s->pairs);
	free(s->left);
	cs_ptable_free(&s->table);
	cs_ptable_free(&s->after);
	cs_claims_release(&s->claims);
	if (s->state_fd >= 0)
		close(s->state_fd);
	free(s);
}
