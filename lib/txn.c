/* The transaction: every target reaches the goal state, or every target is
 * returned to the state it had, newest change first. */
#include "cudasnap.h"
#include "explain.h"
#include "pool.h"
#include "proc.h"
#include "util.h"

#include <fcntl.h>
#include <pthread.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

typedef struct run {
	cs_driver *d;
	const cs_txn_opts *o;
	cs_target *t;
	size_t n;
	size_t *order;         /* indices of the targets to act on, in dispatch order */
	size_t nact;
	cs_step step;
	atomic_ulong seq;
	atomic_int abort;
	pthread_mutex_t mu;
	cs_txn_result *res;
} run;

const char *cs_op_name(cs_op op)
{
	static const char *const n[] = { "checkpoint", "restore", "lock", "unlock" };
	return (unsigned)op < CS_ARRAY_SIZE(n) ? n[op] : "?";
}

const char *cs_step_name(cs_step s)
{
	static const char *const n[] = { "lock", "checkpoint", "restore", "unlock" };
	return (unsigned)s < CS_ARRAY_SIZE(n) ? n[s] : "?";
}

/* The forward steps of each operation and the state each needs first. */
static size_t op_steps(cs_op op, cs_step steps[2])
{
	switch (op) {
	case CS_OP_CHECKPOINT: steps[0] = CS_STEP_LOCK; steps[1] = CS_STEP_CHECKPOINT; return 2;
	case CS_OP_RESTORE: steps[0] = CS_STEP_RESTORE; steps[1] = CS_STEP_UNLOCK; return 2;
	case CS_OP_LOCK: steps[0] = CS_STEP_LOCK; return 1;
	default: steps[0] = CS_STEP_UNLOCK; return 1;
	}
}

static int op_start_state(cs_op op)
{
	return op == CS_OP_RESTORE ? CS_STATE_CHECKPOINTED : op == CS_OP_UNLOCK ? CS_STATE_LOCKED : CS_STATE_RUNNING;
}

static int step_result_state(cs_step s)
{
	return s == CS_STEP_CHECKPOINT ? CS_STATE_CHECKPOINTED : s == CS_STEP_UNLOCK ? CS_STATE_RUNNING : CS_STATE_LOCKED;
}

static cs_step inverse(cs_step s)
{
	return s == CS_STEP_LOCK ? CS_STEP_UNLOCK : s == CS_STEP_UNLOCK ? CS_STEP_LOCK :
	       s == CS_STEP_CHECKPOINT ? CS_STEP_RESTORE : CS_STEP_CHECKPOINT;
}

static cs_call step_call(cs_step s)
{
	static const cs_call c[] = { CS_CALL_LOCK, CS_CALL_CHECKPOINT, CS_CALL_RESTORE, CS_CALL_UNLOCK };
	return c[s];
}

/* Whether the process that was pid when the command began is still there. */
static bool alive(const cs_target *t)
{
	return cs_proc_alive(cs_proc_dir(), t->pid, t->start_time);
}

static unsigned long long rss_bytes(pid_t pid)
{
	char path[64], buf[4096];
	snprintf(path, sizeof(path), "%d/status", (int)pid);
	_cleanup_close_ int dfd = open(cs_proc_dir(), O_RDONLY | O_DIRECTORY | O_CLOEXEC);
	long kb;
	if (dfd < 0 || cs_read_at(dfd, path, buf, sizeof(buf)) < 0 || cs_parse_status_field(buf, "VmRSS", &kb) < 0)
		return 0;
	return (unsigned long long)kb * 1024;
}

static int call_step(run *r, cs_target *t, cs_step s, bool fwd)
{
	switch (s) {
	case CS_STEP_LOCK: return cs_cu_lock(r->d, t->pid, r->o->timeout_ms);
	case CS_STEP_CHECKPOINT: return cs_cu_checkpoint(r->d, t->pid);
	case CS_STEP_RESTORE:
		/* A rollback restores onto the GPUs the process came from. */
		return cs_cu_restore(r->d, t->pid, fwd ? r->o->pairs : NULL, fwd ? r->o->npairs : 0);
	default: return cs_cu_unlock(r->d, t->pid);
	}
}

static void fail_target(run *r, cs_target *t, cs_step s, int res)
{
	t->exited = !alive(t);
	int state = CS_STATE_UNKNOWN;
	if (!t->exited)
		cs_cu_get_state(r->d, t->pid, &state);
	cs_explain_ctx c = {
		.call = step_call(s), .pid = t->pid, .comm = t->comm, .cls = CS_CLASS_CUDA,
		.state = state, .pid_visible = !t->exited, .timeout_ms = r->o->timeout_ms, .gvisor = r->o->gvisor,
	};
	cs_explain(r->d, &c, res, &t->error);
	if (t->exited) {
		t->state = CS_STATE_UNKNOWN;
		snprintf(t->error.message, sizeof(t->error.message), "%s of process %d (%s) failed: the process "
			 "exited (%s, %d)", cs_step_name(s), (int)t->pid, t->comm, cs_cu_name(r->d, res), res);
		snprintf(t->error.hint, sizeof(t->error.hint), "The process exited during the %s; the others "
			 "are returned to their state before the command.", cs_step_name(s));
	}
	t->failed = true;
}

static void report(run *r, const cs_target *t, cs_step s, bool undo, int res, double secs)
{
	if (!r->o->progress)
		return;
	pthread_mutex_lock(&r->mu);
	r->o->progress(r->o->progress_ctx, t, s, undo, res, secs);
	pthread_mutex_unlock(&r->mu);
}

static void do_step(void *ctx, size_t i)
{
	run *r = ctx;
	cs_target *t = &r->t[r->order[i]];
	if (atomic_load(&r->abort) || (r->o->interrupted && *r->o->interrupted))
		return;
	cs_step s = r->step;
	int res;
	double t0 = cs_now();
	if (!alive(t)) {
		res = CS_CU_OPERATING_SYSTEM;
	} else {
		bool moves = s == CS_STEP_CHECKPOINT || s == CS_STEP_RESTORE;
		if (moves)
			t->rss_before = rss_bytes(t->pid);
		res = call_step(r, t, s, true);
		if (moves && res == CS_CU_SUCCESS) {
			t->rss_after = rss_bytes(t->pid);
			unsigned long long a = t->rss_after, b = t->rss_before;
			t->bytes = s == CS_STEP_CHECKPOINT ? (a > b ? a - b : 0) : (b > a ? b - a : 0);
		}
	}
	double secs = cs_now() - t0;
	if (res == CS_CU_SUCCESS) {
		t->seconds[s] = secs;
		t->done[s] = true;
		t->seq[s] = atomic_fetch_add(&r->seq, 1) + 1;
		t->state = step_result_state(s);
	} else {
		fail_target(r, t, s, res);
		atomic_store(&r->abort, 1);
	}
	report(r, t, s, false, res, secs);
}

typedef struct undo_item {
	cs_target *t;
	cs_step s;
	unsigned long seq;
} undo_item;

static int newest_first(const void *a, const void *b)
{
	const undo_item *x = a, *y = b;
	return (x->seq < y->seq) - (x->seq > y->seq);
}

/* Undoes every step done, newest first. A target whose undo fails is not
 * touched again: the next undo would only fail on the wrong state. */
static void rollback(run *r)
{
	size_t cap = r->n * CS_STEP_COUNT, m = 0;
	undo_item *items = calloc(cap ? cap : 1, sizeof(*items));
	if (!items) {
		for (size_t i = 0; i < r->n; i++)
			r->t[i].rollback_failed = r->t[i].done[0] || r->t[i].done[1] || r->t[i].done[2] || r->t[i].done[3];
		return;
	}
	for (size_t i = 0; i < r->n; i++)
		for (int s = 0; s < CS_STEP_COUNT; s++)
			if (r->t[i].done[s])
				items[m++] = (undo_item){ &r->t[i], (cs_step)s, r->t[i].seq[s] };
	qsort(items, m, sizeof(*items), newest_first);
	for (size_t k = 0; k < m; k++) {
		cs_target *t = items[k].t;
		if (t->rollback_failed || t->exited)
			continue;
		cs_step u = inverse(items[k].s);
		double t0 = cs_now();
		int res = alive(t) ? call_step(r, t, u, false) : CS_CU_OPERATING_SYSTEM;
		report(r, t, u, true, res, cs_now() - t0);
		if (res == CS_CU_SUCCESS) {
			t->state = step_result_state(u);
			continue;
		}
		t->rollback_failed = true;
		if (!t->failed) {
			fail_target(r, t, u, res);
			t->failed = false; /* the forward step did not fail; keep the rollback's error */
		}
	}
	free(items);
}

/* Re-reads the state of every target the command touched, so that the
 * report shows what the driver says, not what the engine expects. */
static void settle(run *r)
{
	for (size_t i = 0; i < r->n; i++) {
		cs_target *t = &r->t[i];
		if (t->skipped)
			continue;
		if (!alive(t)) {
			t->exited = true;
			t->state = CS_STATE_UNKNOWN;
			continue;
		}
		int s;
		if (cs_cu_get_state(r->d, t->pid, &s) == CS_CU_SUCCESS)
			t->state = s;
	}
}

static int by_order(const void *a, const void *b, void *ctx)
{
	const cs_target *t = ctx;
	const cs_target *x = &t[*(const size_t *)a], *y = &t[*(const size_t *)b];
	if (x->order != y->order)
		return (x->order > y->order) - (x->order < y->order);
	return (x->pid > y->pid) - (x->pid < y->pid);
}

/* Reads every target's starting state; fails before anything changes when
 * one cannot be read. */
static int plan(run *r, cs_error *err)
{
	int want = op_start_state(r->o->op);
	for (size_t i = 0; i < r->n; i++) {
		cs_target *t = &r->t[i];
		t->state = t->initial_state = CS_STATE_UNKNOWN;
		int s, res = alive(t) ? cs_cu_get_state(r->d, t->pid, &s) : CS_CU_OPERATING_SYSTEM;
		if (res != CS_CU_SUCCESS) {
			t->exited = !alive(t);
			cs_explain_ctx c = { .call = CS_CALL_GET_STATE, .pid = t->pid, .comm = t->comm,
					     .cls = CS_CLASS_CUDA, .state = CS_STATE_UNKNOWN, .pid_visible = !t->exited,
					     .gvisor = r->o->gvisor };
			cs_explain(r->d, &c, res, &t->error);
			t->failed = true;
			*err = t->error;
			return -CS_EDRIVER;
		}
		t->state = t->initial_state = s;
		if (s != want) {
			t->skipped = true;
			continue;
		}
		r->order[r->nact++] = i;
	}
	qsort_r(r->order, r->nact, sizeof(*r->order), by_order, r->t);
	return 0;
}

static void finish(run *r, bool rolled)
{
	cs_txn_result *res = r->res;
	res->outcome = CS_OUTCOME_DONE;
	if (rolled) {
		rollback(r);
		settle(r);
		res->outcome = CS_OUTCOME_ROLLED_BACK;
		for (size_t i = 0; i < r->n; i++) {
			cs_target *t = &r->t[i];
			/* A process that exited cannot be returned; it is reported as exited. */
			if (!t->skipped && !t->exited && (t->rollback_failed || t->state != t->initial_state)) {
				t->rollback_failed = true;
				res->outcome = CS_OUTCOME_INCOMPLETE;
			}
		}
	}
	for (size_t i = 0; i < r->n; i++) {
		res->bytes += rolled ? 0 : r->t[i].bytes;
		res->skipped += r->t[i].skipped;
	}
	res->acted = r->nact;
}

/* The first failure, in dispatch order, becomes the transaction's error. */
static void first_error(run *r, cs_error *err)
{
	for (size_t k = 0; k < r->nact; k++) {
		cs_target *t = &r->t[r->order[k]];
		if (t->failed) {
			*err = t->error;
			return;
		}
	}
}

int cs_txn_run(cs_driver *d, const cs_txn_opts *o, cs_target *targets, size_t n, cs_txn_result *res)
{
	memset(res, 0, sizeof(*res));
	double t0 = cs_now();
	run r = { .d = d, .o = o, .t = targets, .n = n, .res = res };
	atomic_init(&r.seq, 0);
	atomic_init(&r.abort, 0);
	pthread_mutex_init(&r.mu, NULL);
	r.order = calloc(n ? n : 1, sizeof(*r.order));
	if (!r.order)
		return cs_error_set(&res->error, CS_ESYS, NULL, "out of memory");
	int rc = plan(&r, &res->error);
	if (rc < 0) {
		res->outcome = CS_OUTCOME_ROLLED_BACK;
		goto out;
	}
	unsigned jobs = o->sequential ? 1 : o->jobs ? o->jobs : 8;
	cs_step steps[2];
	size_t nsteps = op_steps(o->op, steps);
	bool failed = false;
	for (size_t k = 0; k < nsteps && !failed && r.nact; k++) {
		r.step = steps[k];
		cs_pool_run(jobs, r.nact, do_step, &r);
		failed = atomic_load(&r.abort);
		if (!failed && o->interrupted && *o->interrupted) {
			failed = true;
			cs_error_set(&res->error, CS_EINTR, "The command was interrupted by a signal; every "
				     "process was returned to its state before the command.",
				     "%s interrupted by a signal", cs_op_name(o->op));
		}
	}
	if (failed && res->error.status == 0)
		first_error(&r, &res->error);
	if (!failed && r.nact && o->post_check && o->post_check(o->post_ctx, targets, n, &res->error) < 0)
		failed = true;
	finish(&r, failed);
	rc = failed ? -(res->error.status ? res->error.status : CS_EDRIVER) : 0;
out:
	res->wall_seconds = cs_now() - t0;
	pthread_mutex_destroy(&r.mu);
	free(r.order);
	return rc;
}
