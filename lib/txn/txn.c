/* The transaction: every target reaches the goal state, or every target is
 * returned to the state it had, newest change first. */
#include "cudasnap.h"
#include "bounded.h"
#include "explain.h"
#include "halt.h"
#include "park.h"
#include "parkfiles.h"
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
	size_t *order; /* indices of the targets to act on, in dispatch order */
	size_t nact;
	cs_step step;
	int wave; /* park steps run in two: importers of CUDA IPC memory, then the others */
	atomic_ulong seq;
	atomic_int abort;
	atomic_int no_room; /* a target was refused for want of GPU room */
	pthread_mutex_t mu;
	cs_txn_result *res;
	struct watched *w; /* per target: what the progress watch compares */
} run;

/* What the caller's thread remembers of each target between two looks. */
typedef struct watched {
	double last_move_at;
	unsigned long long last_rss;
} watched;

const char *cs_op_name(cs_op op)
{
	static const char *const n[] = { "checkpoint", "restore", "lock", "unlock", "checkpoint-locked" };
	return (unsigned)op < CS_ARRAY_SIZE(n) ? n[op] : "?";
}

const char *cs_step_name(cs_step s)
{
	static const char *const n[] = { "lock", "checkpoint", "restore", "unlock", "park", "unpark" };
	return (unsigned)s < CS_ARRAY_SIZE(n) ? n[s] : "?";
}

/* The forward steps of each operation and the state each needs first. A
 * park comes before the lock and an unpark after the unlock: the driver's
 * lock holds the program's own threads, which park and unpark. */
static size_t op_steps(cs_op op, cs_step steps[3])
{
	switch (op) {
	case CS_OP_CHECKPOINT:
		steps[0] = CS_STEP_PARK;
		steps[1] = CS_STEP_LOCK;
		steps[2] = CS_STEP_CHECKPOINT;
		return 3;
	case CS_OP_RESTORE:
		steps[0] = CS_STEP_RESTORE;
		steps[1] = CS_STEP_UNLOCK;
		steps[2] = CS_STEP_UNPARK;
		return 3;
	case CS_OP_LOCK: steps[0] = CS_STEP_LOCK; return 1;
	case CS_OP_CHECKPOINT_LOCKED: steps[0] = CS_STEP_CHECKPOINT; return 1;
	default: steps[0] = CS_STEP_UNLOCK; return 1;
	}
}

static int op_start_state(cs_op op)
{
	if (op == CS_OP_RESTORE)
		return CS_STATE_CHECKPOINTED;
	return op == CS_OP_UNLOCK || op == CS_OP_CHECKPOINT_LOCKED ? CS_STATE_LOCKED : CS_STATE_RUNNING;
}

static bool is_park(cs_step s)
{
	return s == CS_STEP_PARK || s == CS_STEP_UNPARK;
}

/* The driver's state after step s (park steps leave it as it was). */
static int step_result_state(const cs_target *t, cs_step s)
{
	if (is_park(s))
		return t->state;
	return s == CS_STEP_CHECKPOINT ? CS_STATE_CHECKPOINTED :
		s == CS_STEP_UNLOCK    ? CS_STATE_RUNNING :
					 CS_STATE_LOCKED;
}

static cs_step inverse(cs_step s)
{
	if (is_park(s))
		return s == CS_STEP_PARK ? CS_STEP_UNPARK : CS_STEP_PARK;
	return s == CS_STEP_LOCK        ? CS_STEP_UNLOCK :
		s == CS_STEP_UNLOCK     ? CS_STEP_LOCK :
		s == CS_STEP_CHECKPOINT ? CS_STEP_RESTORE :
					  CS_STEP_CHECKPOINT;
}

static cs_call step_call(cs_step s)
{
	static const cs_call c[] = { CS_CALL_LOCK,   CS_CALL_CHECKPOINT, CS_CALL_RESTORE,
				     CS_CALL_UNLOCK, CS_CALL_LOCK,       CS_CALL_UNLOCK };
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

/* The files of t's park into files (cs_txn_opts.park_to), made for a park
 * (named after it, sized by what it said it holds) or opened for its
 * unpark: 0, or -1 with t->error and nothing left behind. *dirfd: the
 * directory, open. */
static int park_files(run *r, cs_target *t, bool park, int *dirfd, cs_park_files *f)
{
	/* a rollback's park, back where its memory came from */
	bool back = park && t->park_files_back;
	if (park && !back)
		snprintf(t->park_dir, sizeof(t->park_dir), "%s", r->o->park_to);
	cs_error e = { 0 };
	*dirfd = cs_park_dir_open(t->park_dir, &e);
	if (back) {
		/* its old files make room for the new ones */
		if (*dirfd >= 0)
			cs_park_files_remove(*dirfd, t->park_name, t->park_nfiles);
		t->park_files_back = false;
	}
	if (park) {
		cs_park_files_name(t->pid, t->start_time, t->park_name, sizeof(t->park_name));
		t->park_nfiles = cs_park_files_count(t->park_bytes);
	}
	/* Files of an earlier park in the way: the caller's plan refused the
	 * command, and the make's O_EXCL refuses what came since. */
	if (r->o->park_files_at)
		r->o->park_files_at(r->o->restore_ctx, t, park);
	int rc = *dirfd < 0 ?
		-1 :
		park ?
		cs_park_files_make(*dirfd, t->park_dir, t->park_name, t->park_nfiles, t->park_bytes, t->park_grows, f,
				   &e) :
		cs_park_files_open(*dirfd, t->park_dir, t->park_name, t->park_nfiles, t->park_bytes, t->pid, f, &e);
	if (rc == 0)
		return 0;
	t->error = e;
	if (park)
		t->park_nfiles = 0;
	if (*dirfd >= 0)
		close(*dirfd);
	*dirfd = -1;
	return -1;
}

/* A park into files whose release failed and whose undo could not read
 * the memory back: part of it is in the files alone, the process parked
 * so. Its unpark is tried again at once; when that fails too, the files
 * stay where they are and the process is named with them. */
static int park_stuck(run *r, cs_target *t, int dirfd, const cs_park_answer *a, const cs_error *e)
{
	cs_park_files f = { .n = 0 };
	cs_park_answer u;
	cs_error ue = { 0 };
	t->park_bytes = a->bytes;
	int rc = cs_park_files_open(dirfd, t->park_dir, t->park_name, t->park_nfiles, t->park_bytes, t->pid, &f, &ue);
	if (rc == 0)
		rc = cs_park_step(t, false, &t->park_conn, r->o->timeout_ms ? r->o->timeout_ms : 10000,
				  cs_park_answer_s(r->d, t->park_bytes, r->o->timeout_ms), &f, &u, &ue);
	cs_park_files_close(&f);
	t->error = *e;
	if (rc == 0) {
		cs_park_files_remove(dirfd, t->park_name, t->park_nfiles);
		t->park_nfiles = 0;
		return CS_CU_PARK_FAILED;
	}
	t->parked = true;
	cs_error_set(&t->error, CS_ESTATE,
		     "Its GPU work stays held and the files are kept (the manifest names them): once what fails the "
		     "reads is mended, cudasnap restore --pid unparks it from them.",
		     "park of process %d (%s) failed half-way and could not be undone: part of its GPU memory is in "
		     "%s/%s.* alone (%.200s)",
		     (int)t->pid, t->comm, t->park_dir, t->park_name, ue.message);
	return CS_CU_PARK_FAILED;
}

/* A park or an unpark, through the process's interposer. */
static int park_call(run *r, cs_target *t, cs_step s, bool fwd)
{
	bool park = s == CS_STEP_PARK;
	bool files = park ? (r->o->park_to != NULL || t->park_files_back) && t->park_bytes > 0 : t->park_nfiles > 0;
	cs_park_answer a;
	cs_error e = { 0 };
	_cleanup_close_ int dirfd = -1;
	cs_park_files f = { .n = 0 };
	if (files && park_files(r, t, park, &dirfd, &f) != 0)
		return CS_CU_PARK_FAILED;
	double answer_s = cs_park_answer_s(r->d, t->park_bytes, r->o->timeout_ms);
	int rc =
		cs_park_step(t, park, &t->park_conn, r->o->timeout_ms ? r->o->timeout_ms : 10000, answer_s, &f, &a, &e);
	/* A park that ran out of the room still being reserved failed for
	 * the reservation's reason. */
	cs_error re = { 0 };
	if (cs_park_files_reserved(&f, rc != 0, dirfd, t->park_dir, t->park_name, t->park_bytes, &re) != 0 && rc != 0 &&
	    strcmp(a.stage, "room") == 0)
		e = re;
	cs_park_files_close(&f);
	if (rc != 0 && files && park && strcmp(a.stage, "undo") == 0)
		return park_stuck(r, t, dirfd, &a, &e);
	if (rc != 0) {
		t->error = e;
		/* A park that failed wrote nothing anybody needs. */
		if (files && park) {
			cs_park_files_remove(dirfd, t->park_name, t->park_nfiles);
			t->park_nfiles = 0;
		}
		return CS_CU_PARK_FAILED;
	}
	t->parked = park;
	t->park_copy_s = a.copy_s;
	t->park_gbps = a.gbps;
	/* A park's answer says what it moved, 0 included (the program may
	 * have freed it all since its status); an unpark's 0 says nothing. */
	if (park || a.bytes)
		t->park_bytes = a.bytes;
	/* already parked (into host memory): its files hold nothing */
	if (files && park && a.files == 0) {
		cs_park_files_remove(dirfd, t->park_name, t->park_nfiles);
		t->park_nfiles = 0;
	}
	if (files && park) {
		t->park_direct = a.direct;
		fsync(dirfd);
	}
	/* Back in its GPU memory: the files have done their work once the
	 * whole command has (drop_park_files), as a rollback would park it
	 * back into them; at once where this is the rollback. */
	if (files && !park && fwd) {
		t->park_files_back = true;
	} else if (files && !park) {
		if (!r->o->park_keep)
			cs_park_files_remove(dirfd, t->park_name, t->park_nfiles);
		t->park_nfiles = 0;
	}
	if (!park)
		cs_park_close(&t->park_conn, false);
	return CS_CU_SUCCESS;
}

/* Whether step s has anything to do for t: a park for a process whose
 * interposer can park memory, an unpark for one that is parked. */
static bool park_applies(const run *r, const cs_target *t, cs_step s)
{
	/* --no-park parks nothing; whatever is parked is always unparked. */
	if (r->o->no_park && s == CS_STEP_PARK)
		return false;
	/* Importers park in the first wave and unpark in the second. */
	if ((t->park_imports > 0) != (r->wave == (s == CS_STEP_PARK ? 0 : 1)))
		return false;
	return s == CS_STEP_PARK ? t->parkable && t->park_wanted : t->parked;
}

static int call_step(run *r, cs_target *t, cs_step s, bool fwd)
{
	switch (s) {
	case CS_STEP_PARK:
	case CS_STEP_UNPARK: return park_call(r, t, s, fwd);
	case CS_STEP_LOCK: return cs_cu_lock(r->d, t->pid, r->o->timeout_ms);
	case CS_STEP_CHECKPOINT: return cs_cu_checkpoint_by(r->d, t->pid, cs_move_deadline(r->d, t->gpu_bytes));
	case CS_STEP_RESTORE:
		/* A rollback restores onto the GPUs the process came from. */
		return cs_cu_restore_by(r->d, t->pid, fwd ? r->o->pairs : NULL, fwd ? r->o->npairs : 0,
					cs_move_deadline(r->d, t->gpu_bytes));
	default: return cs_cu_unlock(r->d, t->pid);
	}
}

/* Checkpoint and restore move GPU memory: long deadlines, progress to watch. */
static bool moves_memory(cs_step s)
{
	return s == CS_STEP_CHECKPOINT || s == CS_STEP_RESTORE;
}

static bool gave_up(int res)
{
	return res == CS_CU_TIMED_OUT || res == CS_CU_INTERRUPTED;
}

/* Whether the target cannot answer the driver now; fills h. */
static bool halted_now(const cs_target *t, cs_halt_info *h)
{
	return cs_proc_halt(cs_proc_dir(), t->pid, t->restore_tid, h) != CS_HALT_NONE;
}

static bool touched(const cs_target *t)
{
	for (int s = 0; s < CS_STEP_COUNT; s++)
		if (t->done[s])
			return true;
	return false;
}

/* A target that exited with nothing done to it, or during a lock or an
 * unlock (which change nothing that could be lost): it is left out, and the
 * transaction goes on without it. A monitor or a short-lived helper comes
 * and goes; it must not fail the others. */
static void vanish(cs_target *t)
{
	t->exited = t->vanished = true;
	t->state = CS_STATE_UNKNOWN;
	t->error = (cs_error){ 0 };
}

/* A target that exited is lost when its GPU state lived only in its own
 * host memory (checkpointed), or was moving when it died (called: the
 * driver's call was made): that is where the OOM killer strikes. One that
 * was only locked takes nothing with it that the driver kept. */
static void note_exit(cs_target *t, cs_step s, bool called)
{
	if (t->state == CS_STATE_CHECKPOINTED || (called && moves_memory(s)))
		t->lost = true;
	t->state = CS_STATE_UNKNOWN;
}

static void fail_target(run *r, cs_target *t, cs_step s, int res, bool fwd, bool called)
{
	t->exited = !alive(t);
	if (t->exited && fwd && !touched(t) && !moves_memory(s)) {
		vanish(t);
		return;
	}
	if (t->exited)
		note_exit(t, s, called);
	int state = CS_STATE_UNKNOWN;
	cs_halt_info h;
	if (gave_up(res))
		t->abandoned = true;
	/* Asking a process that did not answer, or cannot, would only wait again. */
	if (!t->exited && !t->abandoned && !halted_now(t, &h))
		cs_cu_get_state(r->d, t->pid, &state);
	if (t->abandoned)
		t->state = CS_STATE_UNKNOWN;
	cs_explain_ctx c = {
		.call = step_call(s),
		.pid = t->pid,
		.comm = t->comm,
		.cls = CS_CLASS_CUDA,
		.state = state,
		.pid_visible = !t->exited,
		.timeout_ms = r->o->timeout_ms,
		.gvisor = r->o->gvisor,
		.mapped = fwd && r->o->npairs,
	};
	if (!is_park(s))
		cs_explain(r->d, &c, res, &t->error);
	/* A restore that ran out of GPU memory destroyed the checkpointed state
	 * (driver 580: every later restore answers 304): the process lives on,
	 * its GPU state does not. */
	if (!t->exited && s == CS_STEP_RESTORE && res == CS_CU_OUT_OF_MEMORY) {
		t->lost = t->unrestorable = true;
		snprintf(t->lost_why, sizeof(t->lost_why),
			 "the driver ran out of GPU memory during its restore, which destroys a process's checkpointed "
			 "state (every later restore fails)");
	}
	/* The driver answers an importer of another process's memory so at
	 * every restore (INVALID_VALUE for a cudaIpcOpenMemHandle import,
	 * NOT_SUPPORTED for a VMM handle, driver 580): nothing to retry. */
	if (!t->exited && s == CS_STEP_RESTORE && !c.mapped &&
	    (res == CS_CU_INVALID_VALUE || res == CS_CU_NOT_SUPPORTED)) {
		t->unrestorable = true;
		size_t len = strlen(t->error.message);
		snprintf(t->error.message + len, sizeof(t->error.message) - len,
			 ": the driver cannot restore it; it must be restarted");
	}
	if (t->exited) {
		snprintf(t->lost_why, sizeof(t->lost_why), "it exited %s its %s", called ? "during" : "before",
			 cs_step_name(s));
		snprintf(t->error.message, sizeof(t->error.message),
			 "%s of process %d (%s) failed: the process "
			 "exited (%s, %d)",
			 cs_step_name(s), (int)t->pid, t->comm, cs_cu_name(r->d, res), res);
		snprintf(t->error.hint, sizeof(t->error.hint),
			 t->lost ? "The process exited during the %s, and its GPU state with it: it must be restarted. "
				   "The others are returned to their state before the command." :
				   "The process exited during the %s; the others are returned to their state before "
				   "the command.",
			 cs_step_name(s));
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

static void fail_halted(cs_target *t, const cs_halt_info *h, const char *doing)
{
	t->halted = true;
	t->failed = true;
	cs_halt_error(&t->error, t->pid, t->comm, h, doing);
}

static unsigned long long moved_between(cs_step s, unsigned long long before, unsigned long long now)
{
	if (s == CS_STEP_CHECKPOINT)
		return now > before ? now - before : 0;
	return before > now ? before - now : 0;
}

/* A checkpoint or restore call, watched by the caller's thread through
 * stepping (1 while running, 2 once done and bytes are final). */
static int moving_call(run *r, cs_target *t, cs_step s)
{
	watched *w = &r->w[t - r->t];
	t->rss_before = w->last_rss = rss_bytes(t->pid);
	t->moved = 0;
	w->last_move_at = cs_now();
	__atomic_store_n(&t->stepping, 1, __ATOMIC_RELEASE);
	int res = call_step(r, t, s, true);
	if (res == CS_CU_SUCCESS) {
		t->rss_after = rss_bytes(t->pid);
		t->bytes = moved_between(s, t->rss_before, t->rss_after);
	}
	__atomic_store_n(&t->stepping, 2, __ATOMIC_RELEASE);
	return res;
}

/* Whether the GPUs t restores onto (by the driver's restore, or by the
 * unpark of step s) have room for it now; when not, t fails (forward) or is
 * left as it is (rollback) without the call. */
static bool room_for(run *r, cs_target *t, cs_step s, bool rollback)
{
	int (*check)(void *, cs_target *, bool, cs_error *) =
		s == CS_STEP_UNPARK ? r->o->before_unpark : r->o->before_restore;
	if (!check)
		return true;
	cs_error e = { 0 };
	if (check(r->o->restore_ctx, t, rollback, &e) == 0)
		return true;
	t->error = e;
	if (rollback)
		t->rollback_failed = true;
	else
		t->failed = true;
	return false;
}

/* After a call that room_for let through: its answer. */
static void room_used(run *r, cs_target *t, cs_step s, int res)
{
	void (*done)(void *, cs_target *, int) = s == CS_STEP_UNPARK ? r->o->unparked : r->o->restored;
	if (done)
		done(r->o->restore_ctx, t, res);
}

static bool needs_room(cs_step s)
{
	return s == CS_STEP_RESTORE || s == CS_STEP_UNPARK;
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
	cs_halt_info h;
	bool called = false;
	if (is_park(s) && !park_applies(r, t, s))
		return; /* the driver's path: nothing to do here */
	/* A process left running and parked (an unpark that failed) comes
	 * back by its unpark alone. */
	if (r->o->op == CS_OP_RESTORE && !is_park(s) && t->state == CS_STATE_RUNNING)
		return;
	if (!alive(t) && !touched(t)) {
		vanish(t);
		report(r, t, s, false, CS_CU_OPERATING_SYSTEM, 0);
		return;
	} else if (!alive(t)) {
		res = CS_CU_OPERATING_SYSTEM;
	} else if ((moves_memory(s) || is_park(s)) && halted_now(t, &h)) {
		/* Stopped since the plan: the call would wait for it, and these have
		 * long deadlines (lock and unlock follow the plan's check closely and
		 * wait seconds at most). */
		fail_halted(t, &h, cs_step_name(s));
		atomic_store(&r->abort, 1);
		return;
	} else if (needs_room(s) && !room_for(r, t, s, false)) {
		report(r, t, s, false, CS_CU_NO_ROOM, 0);
		atomic_store(&r->no_room, 1);
		atomic_store(&r->abort, 1);
		return;
	} else {
		called = true;
		res = moves_memory(s) ? moving_call(r, t, s) : call_step(r, t, s, true);
		if (needs_room(s))
			room_used(r, t, s, res);
	}
	double secs = cs_now() - t0;
	if (res == CS_CU_SUCCESS) {
		t->seconds[s] = secs;
		t->done[s] = true;
		t->seq[s] = atomic_fetch_add(&r->seq, 1) + 1;
		t->state = step_result_state(t, s);
		/* What moved is what the park moved and what the driver moved. */
		if (is_park(s))
			t->bytes = (s == CS_STEP_UNPARK ? t->bytes : 0) + t->park_bytes;
		else if (moves_memory(s) && t->done[CS_STEP_PARK])
			t->bytes += t->park_bytes;
	} else {
		fail_target(r, t, s, res, true, called);
		if (!t->vanished)
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
	if (r->o->interrupted && *r->o->interrupted)
		cs_bounded_extend(cs_driver_limits(r->d)->rollback_grace_s);
	size_t cap = r->n * CS_STEP_COUNT, m = 0;
	_cleanup_free_ undo_item *items = calloc(cap ? cap : 1, sizeof(*items));
	if (!items) {
		for (size_t i = 0; i < r->n; i++)
			r->t[i].rollback_failed =
				r->t[i].done[0] || r->t[i].done[1] || r->t[i].done[2] || r->t[i].done[3];
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
		if (t->abandoned) {
			/* Its last call may still complete: nothing more can be asked of it. */
			t->rollback_failed = true;
			continue;
		}
		cs_step u = inverse(items[k].s);
		cs_halt_info h;
		if (alive(t) && halted_now(t, &h)) {
			char doing[64];
			snprintf(doing, sizeof(doing), "roll back (%s)", cs_step_name(u));
			t->rollback_failed = true;
			t->halted = true;
			cs_halt_error(&t->error, t->pid, t->comm, &h, doing);
			continue;
		}
		/* A rollback's restore or unpark needs room on the GPU as much as any. */
		bool checked = needs_room(u) && alive(t);
		if (checked && !room_for(r, t, u, true)) {
			/* Left parked, kept so: a park given up on would unpark
			 * itself, into room that is not there. */
			if (u == CS_STEP_UNPARK)
				cs_park_close(&t->park_conn, true);
			report(r, t, u, true, CS_CU_NO_ROOM, 0);
			continue;
		}
		double t0 = cs_now();
		int res = alive(t) ? call_step(r, t, u, false) : CS_CU_OPERATING_SYSTEM;
		if (checked)
			room_used(r, t, u, res);
		report(r, t, u, true, res, cs_now() - t0);
		if (res == CS_CU_SUCCESS) {
			t->state = step_result_state(t, u);
			/* A rollback's park stays once the rest of its rollback
			 * is done (close_parks): let go uncommitted, its process
			 * would unpark itself, checkpointed again. */
			if (u == CS_STEP_PARK)
				t->park_by_rollback = true;
			continue;
		}
		t->rollback_failed = true;
		if (!t->failed) {
			fail_target(r, t, u, res, false, true);
			t->failed = false; /* the forward step did not fail; keep the rollback's error */
		}
	}
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
			note_exit(t, CS_STEP_LOCK, false);
			if (!t->lost_why[0])
				snprintf(t->lost_why, sizeof(t->lost_why), "it exited during the command");
			continue;
		}
		cs_halt_info h;
		if (t->abandoned || halted_now(t, &h))
			continue; /* it cannot answer: keep the last known state */
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

/* Refuses, before any call that a target must answer, a selection that
 * holds a stopped or frozen process: each is named in its own error. */
static int refuse_halted(run *r, cs_error *err)
{
	size_t halted = 0;
	cs_target *first = NULL;
	for (size_t i = 0; i < r->n; i++) {
		cs_target *t = &r->t[i];
		cs_halt_info h;
		if (!alive(t))
			continue;
		if (t->restore_tid == 0)
			cs_cu_get_restore_tid(r->d, t->pid, &t->restore_tid); /* answered without the target */
		if (!halted_now(t, &h))
			continue;
		fail_halted(t, &h, cs_op_name(r->o->op));
		first = first ? first : t;
		halted++;
	}
	if (!halted)
		return 0;
	*err = first->error;
	if (halted > 1) {
		size_t len = strlen(err->message);
		snprintf(err->message + len, sizeof(err->message) - len, "; %zu selected processes cannot answer",
			 halted);
	}
	return -CS_EPROC;
}

/* A process left parked in n files that no record names (a CRIU restore
 * left it so: they are in its images): the files --park-from names, which
 * must be a park of its size into n files. The operator names them: a set
 * found by its size alone could be another process's, handed to this one.
 * 0, or -1 with t failed and why: nothing is asked of it. */
static int find_park_files(run *r, cs_target *t, unsigned n)
{
	char dir[sizeof(t->park_dir)], name[sizeof(t->park_name)];
	t->failed = true;
	if (!r->o->park_from)
		return cs_error_set(&t->error, CS_ESTATE,
				    "Name them: cudasnap restore --pid N --park-from DIR/cudasnap-gpumem.PID.START, as "
				    "the CRIU plugin's log and 'cudasnap history' give it.",
				    "process %d (%s) is parked in %u files that no record here names", (int)t->pid,
				    t->comm, n);
	if (cs_park_from_split(r->o->park_from, dir, sizeof(dir), name, sizeof(name), &t->error) < 0)
		return -1;
	cs_error e = { 0 };
	_cleanup_close_ int dirfd = cs_park_dir_open(dir, &e);
	if (dirfd < 0) {
		t->error = e;
		return -1;
	}
	if (!cs_park_files_match(dirfd, name, n, t->park_bytes))
		return cs_error_set(&t->error, CS_ESTATE,
				    "Name the files of its own park: the plugin's log and 'cudasnap history' give them.",
				    "process %d (%s) is parked in %u files of %.2f GiB, and %s.* are not those",
				    (int)t->pid, t->comm, n, (double)t->park_bytes / (1 << 30), r->o->park_from);
	t->failed = false;
	snprintf(t->park_dir, sizeof(t->park_dir), "%s", dir);
	snprintf(t->park_name, sizeof(t->park_name), "%s", name);
	t->park_nfiles = n;
	return 0;
}

/* Asks every target that runs the parking interposer what it holds. A
 * checkpoint of one whose interposer stopped answering after the caller's
 * own checks found it answering is refused before anything changes: the
 * driver alone would take it silently. The first refused, or NULL. */
static cs_target *look_for_parking(run *r)
{
	cs_target *refused = NULL;
	bool parks = r->o->op == CS_OP_CHECKPOINT || r->o->op == CS_OP_RESTORE;
	for (size_t i = 0; i < r->n; i++) {
		cs_target *t = &r->t[i];
		cs_halt_info h;
		/* a stopped process could not answer: it is asked nothing */
		if (!parks || (r->o->no_park && r->o->op == CS_OP_CHECKPOINT) || !alive(t) || halted_now(t, &h))
			continue;
		cs_park_info info;
		cs_park_status(t->pid, 2000, &info);
		t->park_seen = info.seen;
		t->parkable = info.seen && info.parkable;
		t->parked = t->was_parked = info.seen && info.parked;
		t->park_bytes = info.bytes;
		t->park_grows = info.version >= 2;
		t->park_imports = info.imports;
		t->park_wanted = cs_park_wanted(&info);
		snprintf(t->park_why, sizeof(t->park_why), "%s", info.why);
		if (r->o->op == CS_OP_RESTORE && t->parked && info.files && !t->park_nfiles &&
		    find_park_files(r, t, info.files) < 0)
			refused = refused ? refused : t;
		if (info.unreachable && r->o->op == CS_OP_CHECKPOINT && !r->o->allow_unrestorable) {
			t->failed = true;
			cs_error_set(&t->error, CS_EPROC, cs_park_unreachable_fix, "process %d (%s) refused: %s",
				     t->pid, t->comm, cs_park_unreachable_why);
			refused = refused ? refused : t;
		}
	}
	return refused;
}

/* After the command: the files of those unparked from them. A rollback
 * that did not park one back leaves them, named, where they were. */
static void drop_park_files(run *r, bool done)
{
	for (size_t i = 0; i < r->n; i++) {
		cs_target *t = &r->t[i];
		if (!t->park_files_back)
			continue;
		t->park_files_back = false;
		if (!done)
			continue;
		if (!r->o->park_keep) {
			cs_error e = { 0 };
			_cleanup_close_ int dirfd = cs_park_dir_open(t->park_dir, &e);
			if (dirfd >= 0)
				cs_park_files_remove(dirfd, t->park_name, t->park_nfiles);
		}
		t->park_nfiles = 0;
	}
}

/* Ends every park the transaction holds: kept when it is done, else the
 * rollback unparked it (or the process unparks itself). */
static void close_parks(run *r, bool done)
{
	for (size_t i = 0; i < r->n; i++) {
		cs_target *t = &r->t[i];
		/* a rollback that parked it again and then failed leaves it
		 * running: it unparks itself */
		bool keep = done || (t->park_by_rollback && !t->rollback_failed);
		if (t->park_conn >= 0)
			cs_park_close(&t->park_conn, keep);
	}
}

/* Reads every target's starting state; fails before anything changes when
 * one cannot be read. */
static int plan(run *r, cs_error *err)
{
	int want = op_start_state(r->o->op);
	int rc = refuse_halted(r, err);
	if (rc < 0)
		return rc;
	cs_target *refused = look_for_parking(r);
	if (refused) {
		*err = refused->error;
		return -CS_EPROC;
	}
	for (size_t i = 0; i < r->n; i++) {
		cs_target *t = &r->t[i];
		t->state = t->initial_state = CS_STATE_UNKNOWN;
		int s, res = alive(t) ? cs_cu_get_state(r->d, t->pid, &s) : CS_CU_OPERATING_SYSTEM;
		if (res != CS_CU_SUCCESS && !alive(t)) {
			vanish(t);
			continue;
		}
		if (res != CS_CU_SUCCESS) {
			t->exited = !alive(t);
			cs_explain_ctx c = { .call = CS_CALL_GET_STATE,
					     .pid = t->pid,
					     .comm = t->comm,
					     .cls = CS_CLASS_CUDA,
					     .state = CS_STATE_UNKNOWN,
					     .pid_visible = !t->exited,
					     .gvisor = r->o->gvisor };
			cs_explain(r->d, &c, res, &t->error);
			t->failed = true;
			*err = t->error;
			return -CS_EDRIVER;
		}
		t->state = t->initial_state = s;
		/* A process left running and parked is restored by its unpark. */
		if (s != want && !(r->o->op == CS_OP_RESTORE && s == CS_STATE_RUNNING && t->parked)) {
			t->skipped = true;
			continue;
		}
		r->order[r->nact++] = i;
	}
	qsort_r(r->order, r->nact, sizeof(*r->order), by_order, r->t);
	return 0;
}

/* After a rollback: what is left behind is what is not in its starting
 * state, whatever a failed undo said (another caller may have put it back). */
static void judge_rollback(run *r)
{
	cs_txn_result *res = r->res;
	res->outcome = CS_OUTCOME_ROLLED_BACK;
	for (size_t i = 0; i < r->n; i++) {
		cs_target *t = &r->t[i];
		if (t->skipped || t->exited)
			continue;
		/* parked or not as it was, too: a process left parked while its
		 * driver state is back holds its program's GPU work */
		bool back = !t->abandoned && t->state == t->initial_state && t->parked == t->was_parked;
		t->rollback_failed = !back;
		if (!back)
			res->outcome = CS_OUTCOME_INCOMPLETE;
	}
}

/* A lost target is never "back in its state": the outcome is incomplete. */
static void count_lost(run *r)
{
	cs_txn_result *res = r->res;
	for (size_t i = 0; i < r->n; i++) {
		cs_target *t = &r->t[i];
		res->vanished += t->vanished;
		if (!t->lost)
			continue;
		res->lost++;
		res->outcome = CS_OUTCOME_INCOMPLETE;
	}
}

static void finish(run *r, bool rolled)
{
	cs_txn_result *res = r->res;
	res->outcome = CS_OUTCOME_DONE;
	bool changed = false;
	for (size_t i = 0; i < r->n; i++)
		changed |= touched(&r->t[i]);
	/* refused as the plan's check refuses: before anything changed */
	res->refused_no_room = rolled && !changed && atomic_load(&r->no_room);
	if (rolled) {
		rollback(r);
		settle(r);
		judge_rollback(r);
	}
	count_lost(r);
	for (size_t i = 0; i < r->n; i++) {
		res->bytes += rolled ? 0 : r->t[i].bytes;
		res->skipped += r->t[i].skipped;
	}
	for (size_t k = 0; k < r->nact; k++)
		res->acted += !r->t[r->order[k]].vanished;
}

/* Progress of the step in flight, from the targets' resident memory. */
static void tick(void *ctx, double elapsed)
{
	run *r = ctx;
	double now = cs_now();
	for (size_t k = 0; k < r->nact; k++) {
		cs_target *t = &r->t[r->order[k]];
		watched *w = &r->w[r->order[k]];
		int f = __atomic_load_n(&t->stepping, __ATOMIC_ACQUIRE);
		if (f == 2) {
			t->moved = t->bytes;
			t->stalled_s = 0;
		}
		if (f != 1)
			continue;
		unsigned long long rss = rss_bytes(t->pid);
		if (rss != w->last_rss) {
			w->last_rss = rss;
			w->last_move_at = now;
		}
		t->moved = moved_between(r->step, t->rss_before, rss);
		t->stalled_s = now - w->last_move_at;
	}
	r->o->watch(r->o->watch_ctx, r->t, r->n, r->step, elapsed);
}

void cs_target_recovery(const cs_target *t, char *buf, size_t size)
{
	int s = t->abandoned || t->halted ? CS_STATE_UNKNOWN : t->state;
	/* running but parked: its unpark alone brings it back (a restore does) */
	if (s == CS_STATE_RUNNING && t->parked && !t->was_parked) {
		snprintf(buf, size, "cudasnap restore --pid %d", (int)t->pid);
		return;
	}
	const char *from = s == CS_STATE_CHECKPOINTED ? "restore" : s == CS_STATE_LOCKED ? "unlock" : NULL;
	bool back_running = t->initial_state == CS_STATE_RUNNING;
	if (s == CS_STATE_CHECKPOINTED && t->initial_state == CS_STATE_LOCKED)
		snprintf(buf, size, "cudasnap restore --pid %d, then cudasnap lock --pid %d", (int)t->pid, (int)t->pid);
	else if (from && back_running)
		snprintf(buf, size, "cudasnap %s --pid %d", from, (int)t->pid);
	else if (from)
		snprintf(buf, size, "cudasnap ps; it was %s before",
			 cs_state_name(t->initial_state) ? cs_state_name(t->initial_state) : "in another state");
	else
		snprintf(buf, size,
			 "once it runs again: cudasnap ps, then cudasnap restore --pid %d if it is "
			 "checkpointed, or cudasnap unlock --pid %d if it is locked",
			 (int)t->pid, (int)t->pid);
}

/* Another restore would fail the same way for a target the driver can never
 * restore; the others it returned to checkpointed come back without it. */
static bool restorable_other(const cs_target *t)
{
	return !t->unrestorable && !t->skipped && !t->vanished && !t->exited && !t->abandoned && !t->halted &&
		t->state == CS_STATE_CHECKPOINTED && t->initial_state == CS_STATE_CHECKPOINTED;
}

bool cs_txn_restore_others(const cs_target *t, size_t n, char *buf, size_t size)
{
	bool unrestorable = false, others = false;
	for (size_t i = 0; i < n; i++) {
		unrestorable |= t[i].unrestorable;
		others |= restorable_other(&t[i]);
	}
	if (!unrestorable || !others || size == 0)
		return false;
	size_t len = (size_t)snprintf(buf, size, "cudasnap restore");
	for (size_t i = 0; i < n && len < size; i++)
		if (restorable_other(&t[i]))
			len += (size_t)snprintf(buf + len, size - len, " --pid %d", (int)t[i].pid);
	if (len >= size) /* too many to write out: the list above has them */
		snprintf(buf, size, "cudasnap restore --pid N for each process listed as checkpointed above");
	return true;
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
	for (size_t i = 0; i < n; i++)
		targets[i].park_conn = -1;
	atomic_init(&r.seq, 0);
	atomic_init(&r.abort, 0);
	pthread_mutex_init(&r.mu, NULL);
	_cleanup_free_ size_t *order = r.order = calloc(n ? n : 1, sizeof(*r.order));
	_cleanup_free_ watched *w = r.w = calloc(n ? n : 1, sizeof(*r.w));
	if (!order || !w)
		return cs_error_set(&res->error, CS_ESYS, NULL, "out of memory");
	int rc = plan(&r, &res->error);
	if (rc < 0) {
		res->outcome = rc == -CS_EPROC ? CS_OUTCOME_REFUSED : CS_OUTCOME_ROLLED_BACK;
		goto out;
	}
	unsigned jobs = o->sequential ? 1 : o->jobs ? o->jobs : 8;
	cs_step steps[3];
	size_t nsteps = op_steps(o->op, steps);
	bool failed = false;
	for (size_t k = 0; k < nsteps && !failed && r.nact; k++) {
		r.step = steps[k];
		if (moves_memory(r.step) && o->watch)
			cs_pool_run_watched(jobs, r.nact, do_step, &r, tick, &r, o->watch_s > 0 ? o->watch_s : 0.5);
		else if (is_park(r.step))
			for (r.wave = 0; r.wave < 2 && !atomic_load(&r.abort); r.wave++)
				cs_pool_run(jobs, r.nact, do_step, &r);
		else
			cs_pool_run(jobs, r.nact, do_step, &r);
		failed = atomic_load(&r.abort);
		if (!failed && o->interrupted && *o->interrupted) {
			failed = true;
			cs_error_set(&res->error, CS_EINTR,
				     "The command was interrupted by a signal; every "
				     "process was returned to its state before the command.",
				     "%s interrupted by a signal", cs_op_name(o->op));
		}
	}
	if (failed && res->error.status == 0)
		first_error(&r, &res->error);
	if (!failed && r.nact && o->post_check && o->post_check(o->post_ctx, targets, n, &res->error) < 0)
		failed = true;
	finish(&r, failed);
	drop_park_files(&r, !failed);
	close_parks(&r, !failed);
	rc = failed ? -(res->error.status ? res->error.status : CS_EDRIVER) : 0;
out:
	res->wall_seconds = cs_now() - t0;
	pthread_mutex_destroy(&r.mu);
	return rc;
}
