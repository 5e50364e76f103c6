/* A session: what checkpoint, restore, lock and unlock do around the
 * transaction, so that every caller of the library gets the same
 * guarantees: one session at a time on each process, PIDs checked against this namespace,
 * privileges checked before the driver refuses, leftovers checked, the
 * manifest kept. */
#include "session_int.h"
#include "park.h"
#include "park_find.h"
#include "parkfiles.h"
#include "devmap.h"
#include "env.h"
#include "gpuroom.h"
#include "plan.h"
#include "pool.h"
#include "proc.h"
#include "discover.h"
#include "select.h"
#include "state.h"
#include "util.h"

#include <fcntl.h>
#include <unistd.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

/* The options' own checks; *wait_s and *park_to what they come to. */
static int check_opts(const cs_session_opts *o, double *wait_s_out, const char **park_to_out, cs_error *err)
{
	int r = cs_selection_check(&o->sel, err);
	if (r == 0 && o->device_map && o->op == CS_OP_RESTORE)
		r = cs_devmap_check(o->device_map, err);
	double wait_s = o->wait_memory_s > CS_WAIT_MEMORY_MAX ? CS_WAIT_MEMORY_MAX : o->wait_memory_s;
	if (r == 0 && o->op == CS_OP_RESTORE && !(wait_s > 0))
		r = cs_wait_memory_setting(&wait_s, err);
	const char *park_to = o->park_to ? o->park_to : cs_env("CUDASNAP_PARK_TO");
	park_to = park_to && park_to[0] && o->op == CS_OP_CHECKPOINT ? park_to : NULL;
	if (r == 0 && park_to && !o->no_park) {
		int fd = cs_park_dir_open(park_to, err);
		r = fd < 0 ? -CS_EUSAGE : 0;
		if (fd >= 0)
			close(fd);
	}
	if (r == 0 && o->park_from && o->op == CS_OP_RESTORE) {
		char dir[256], name[64];
		int fd = cs_park_from_split(o->park_from, dir, sizeof(dir), name, sizeof(name), err) < 0 ?
			-1 :
			cs_park_dir_open(dir, err);
		r = fd < 0 ? -CS_EUSAGE : 0;
		if (fd >= 0)
			close(fd);
	}
	*wait_s_out = wait_s;
	*park_to_out = park_to;
	return r;
}

int cs_session_check_opts(const cs_session_opts *o, cs_error *err)
{
	double wait_s;
	const char *park_to;
	return check_opts(o, &wait_s, &park_to, err);
}

int cs_session_open(cs_session **out, cs_driver *d, const cs_session_opts *o, cs_error *err)
{
	*out = NULL;
	/* Options that could only select nothing, or the wrong thing, fail
	 * before anything is done, the state directory's creation included. */
	double wait_s;
	const char *park_to;
	int r = check_opts(o, &wait_s, &park_to, err);
	if (r < 0)
		return r;
	_cleanup_(cs_session_freep) cs_session *s = calloc(1, sizeof(*s));
	if (!s)
		return cs_error_set(err, CS_ESYS, NULL, "out of memory");
	*s = (cs_session){ .d = d,
			   .o = o,
			   .state_fd = -1,
			   .ignore_memory = o->ignore_memory || cs_env_on("CUDASNAP_IGNORE_MEMORY"),
			   .allow_unrestorable = o->allow_unrestorable || cs_env_on("CUDASNAP_ALLOW_UNRESTORABLE"),
			   .ignore_gpu_memory = o->ignore_gpu_memory || cs_env_on("CUDASNAP_IGNORE_GPU_MEMORY"),
			   .no_park = o->no_park || cs_env_on("CUDASNAP_NO_PARK"),
			   .park_to = park_to,
			   .wait_memory_s = wait_s };
	if (!o->dry_run)
		cs_history_begin(&s->hist, o->front, cs_op_name(o->op));
	cs_claims_init(&s->claims);
	s->claims.warn = o->warn;
	s->claims.warn_ctx = o->warn_ctx;
	cs_sandbox_detect(NULL, &s->sandbox);
	/* A plan changes nothing, not even by creating the state directory. */
	s->state_fd =
		o->dry_run ? open(cs_state_dir(), O_RDONLY | O_DIRECTORY | O_NOFOLLOW | O_CLOEXEC) : cs_state_open(err);
	if (s->state_fd < 0 && o->dry_run) {
		s->state_fd = -1;
	} else if (s->state_fd < 0) {
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

static int by_pid(const void *a, const void *b)
{
	pid_t x = *(const pid_t *)a, y = *(const pid_t *)b;
	return (x > y) - (x < y);
}

static bool is_candidate(void *ctx, const cs_ptable *t, pid_t pid)
{
	const cs_session *s = ctx;
	(void)t;
	return s->ncand && bsearch(&pid, s->cand, s->ncand, sizeof(pid), by_pid);
}

static bool is_target(void *ctx, const cs_ptable *t, pid_t pid)
{
	const cs_session *s = ctx;
	(void)t;
	for (size_t i = 0; i < s->n; i++)
		if (s->t[i].pid == pid)
			return true;
	return false;
}

/* Which processes the driver is asked about: the candidates. Another
 * process may be in the middle of a long call of another operation (its
 * checkpoint), which the driver would make this one wait for; and it is not
 * this session's business. */
static const cs_scan_opts *scan_opts(cs_session *s)
{
	/* A plan holds no claim: it must not wait behind other operations. A
	 * caller that holds the claims itself (the drop-in's check) would find
	 * its own flocks there and take its targets for another's. */
	s->scan = (cs_scan_opts){ .ask = is_candidate, .ask_ctx = s, .skip_busy = s->o->dry_run && !s->o->claimed };
	return &s->scan;
}

/* Restore and unlock bring back what is checkpointed or locked, monitors
 * included; checkpoint and lock leave NVML-only monitors alone. */
static bool takes_monitors(const cs_session *s)
{
	return s->o->op == CS_OP_RESTORE || s->o->op == CS_OP_UNLOCK;
}

/* From /proc alone: the processes the selection may act on. */
static int find_candidates(cs_session *s, cs_error *err)
{
	const cs_ptable *t = &s->table;
	s->cand = calloc(t->n + 1, sizeof(*s->cand));
	if (!s->cand)
		return cs_error_set(err, CS_ESYS, NULL, "out of memory");
	for (size_t i = 0; i < t->n; i++) {
		const cs_proc *p = &t->procs[i];
		bool take = s->o->only_selected ? cs_selection_names(t, &s->o->sel, p->pid) :
						  cs_selection_takes(t, &s->o->sel, p, takes_monitors(s));
		if (take)
			s->cand[s->ncand++] = p->pid;
	}
	return 0; /* t->procs is sorted by pid, and so is cand */
}

/* The driver refuses targets the caller may not trace, with the same code
 * as for a missing process: say what is needed before it is asked. */
static int check_privileges(const cs_session *s, cs_error *err)
{
	const cs_sandbox *sb = &s->sandbox;
	const cs_ptable *t = &s->table;
	if (cs_sandbox_may_trace_all(sb))
		return 0;
	/* Processes it cannot read are ones it may miss; a call that names
	 * its one process (the drop-in, the engine's tasks) misses none. */
	if (t->nunreadable && !s->o->only_selected)
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

/* A restore also takes a process left running and parked (an unpark that
 * failed): its unpark alone brings it back. */
static bool parked_running(const cs_session *s, const cs_target *t)
{
	if (s->o->op != CS_OP_RESTORE || t->state != CS_STATE_RUNNING)
		return false;
	cs_park_info pi;
	cs_park_status(t->pid, 2000, &pi);
	return pi.seen && pi.parked;
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
		if (s->t[i].state == want || s->t[i].state == CS_STATE_UNKNOWN || parked_running(s, &s->t[i]))
			s->t[k++] = s->t[i];
	s->n = k;
}

/* The claims of the candidates, all or none, before the driver is asked
 * about any: a question about a process another operation holds would wait
 * behind that operation's calls, where the claim fails at once, naming it.
 * One that another operation holds fails the session whatever its state: a
 * checkpoint of a process that a CRIU dump is locking must not say "left as
 * it was" while the dump may still fail. */
static int claim(cs_session *s, cs_error *err)
{
	for (size_t i = 0; i < s->ncand; i++) {
		const cs_proc *p = cs_ptable_find(&s->table, s->cand[i]);
		int r = cs_claims_add(&s->claims, s->state_fd, p->pid, p->comm, s->o->command, NULL, 0, err);
		if (r == -CS_EPROC)
			continue; /* exited meanwhile: nothing to claim, nothing to do */
		if (r < 0) {
			s->busy_pid = p->pid;
			memcpy(s->busy_comm, p->comm, sizeof(s->busy_comm));
			cs_claims_release(&s->claims);
			return r;
		}
	}
	return 0;
}

/* The candidates that are not targets (not CUDA, or not in the starting
 * state) are let go of at once. */
static void drop_others(cs_session *s)
{
	for (size_t i = 0; i < s->ncand; i++) {
		bool target = false;
		for (size_t k = 0; k < s->n && !target; k++)
			target = s->t[k].pid == s->cand[i];
		if (!target)
			cs_claims_drop(&s->claims, s->cand[i]);
	}
}

static const char *recovery_of(int state)
{
	return state == CS_STATE_CHECKPOINTED ? "restore" : state == CS_STATE_LOCKED ? "unlock" : NULL;
}

/* Park files a holder that died left beside a process that runs, or has
 * exited. */
static void warn_files_left(cs_session *s, const cs_left_behind *b)
{
	char line[1024], fix[CS_LEFT_FIX_MAX];
	cs_park_left_say(b, &s->table, line, sizeof(line), fix, sizeof(fix));
	cs_session_warn(s, "warning: LEFT BEHIND: %s%s%s%s", line, fix[0] ? "; '" : "", fix, fix[0] ? "'" : "");
}

/* Processes that a holder which died left locked or checkpointed: named,
 * with what recovers each, whether or not this session acts on them. Those
 * it claimed itself are named from their records too. */
static void name_left_behind(cs_session *s)
{
	cs_claims_left_behind(s->state_fd, &s->table, !s->o->dry_run, &s->behind, &s->nbehind);
	s->behind_cap = s->nbehind;
	for (size_t i = 0; i < s->claims.n; i++) {
		const cs_claim *c = &s->claims.v[i];
		cs_left_behind b = { .pid = c->pid };
		const cs_proc *p = cs_ptable_find(&s->table, c->pid);
		if (!c->left || !p || cs_grow(&s->behind, &s->behind_cap, s->nbehind + 1, sizeof(b)) < 0)
			continue;
		memcpy(b.comm, p->comm, sizeof(b.comm));
		snprintf(b.holder, sizeof(b.holder), "%.*s", (int)strcspn(c->left, "\n"), c->left);
		s->behind[s->nbehind++] = b;
	}
	for (size_t i = 0; i < s->nbehind; i++) {
		const cs_left_behind *b = &s->behind[i];
		const cs_proc *p = b->pid ? cs_ptable_find(&s->table, b->pid) : NULL;
		int st = p ? p->state : CS_STATE_UNKNOWN;
		char fix[CS_LEFT_FIX_MAX];
		if (b->files_only) {
			warn_files_left(s, b);
			continue;
		}
		const char *how = recovery_of(st);
		if (is_target(s, NULL, b->pid))
			snprintf(fix, sizeof(fix), "this %s acts on it", s->o->command);
		else
			snprintf(fix, sizeof(fix),
				 how ? "recover it with 'cudasnap %s --pid %d%s%s'" : "'cudasnap ps' shows its state",
				 how, (int)b->pid, b->files[0] && st == CS_STATE_CHECKPOINTED ? " --park-from " : "",
				 st == CS_STATE_CHECKPOINTED ? b->files_word : "");
		cs_session_warn(s,
				"warning: process %d (%s) was left %s by %s, which ended in the middle of an "
				"operation; %s",
				(int)b->pid, b->comm, cs_state_name(st) ? cs_state_name(st) : "in an unknown state",
				b->holder, fix);
	}
}

/* A selection that failed ends the session: recorded. */
static int select_failed(cs_session *s, int r, cs_error *err)
{
	cs_session_record(s, r, NULL, err);
	return r;
}

int cs_session_select(cs_session *s, cs_error *err)
{
	int r = cs_scan(NULL, &s->table, err);
	if (r == 0)
		r = find_candidates(s, err);
	if (r == 0 && !s->o->claimed && !s->o->dry_run)
		r = claim(s, err);
	if (r < 0)
		return select_failed(s, r, err);
	cs_classify(&s->table, s->d, scan_opts(s));
	r = cs_select(&s->table, &s->o->sel, takes_monitors(s), &s->t, &s->n, err);
	if (r == 0)
		r = check_privileges(s, err);
	if (r < 0)
		return select_failed(s, r, err);
	keep_relevant(s);
	if (!s->o->claimed && !s->o->dry_run)
		drop_others(s);
	name_left_behind(s);
	return 0;
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

/* Whether a leftover of p counts against --strict: in the selection's scope. */
static bool in_scope(const cs_session *s, const cs_proc *p)
{
	return s->o->scope || cs_selection_covers(&s->after, &s->o->sel, p->pid);
}

/* Leftover device references after a checkpoint: warnings, or with strict
 * a failure that rolls the transaction back. */
static int post_check(void *ctx, cs_target *targets, size_t n, cs_error *err)
{
	cs_session *s = ctx;
	bool strict = s->o->strict;
	cs_error e = { 0 };
	(void)targets, (void)n;
	cs_scan_opts ask = { .ask = is_target, .ask_ctx = s };
	if (cs_discover(&ask, s->d, &s->after, &e) < 0 || cs_verify(&s->after, &s->left, &s->nleft, &e) < 0)
		return strict ?
			cs_error_set(err, CS_ESYS, NULL, "cannot check for leftover device references: %s", e.message) :
			0;
	keep_scoped_leftovers(s);
	for (size_t i = 0; i < s->nleft; i++)
		s->nleft_scope += in_scope(s, s->left[i].proc);
	for (size_t i = 0, used; i < s->nleft; i += used) {
		char line[768];
		/* an error only where --strict fails for it */
		bool fails = strict && in_scope(s, s->left[i].proc);
		cs_verify_line(s->left + i, s->nleft - i, &used, line, sizeof(line));
		cs_session_warn(s, "%s: %s", fails ? "error" : "warning", line);
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

/* A process a holder that died had left behind, and that this session
 * brought back to running (or that is gone), needs its record no more. */
static void settle_claims(cs_session *s)
{
	for (size_t i = 0; i < s->n; i++)
		if (s->t[i].exited || (s->t[i].state == CS_STATE_RUNNING && !s->t[i].abandoned))
			cs_claims_settled(&s->claims, s->t[i].pid);
}

/* Right before each restore the driver is asked for: room on its GPUs. */
static int before_restore(void *ctx, cs_target *t, bool rollback, cs_error *err)
{
	cs_session *s = ctx;
	if (rollback && !t->nneed) /* a checkpoint's rollback: what it just moved */
		cs_gpu_ledger_rollback_needs(&s->ledger, t);
	return cs_gpu_ledger_take(&s->ledger, t, rollback, err);
}

/* Whether t runs the parking interposer though it could not be asked
 * (a tree its engine holds stopped): it may come back parked. */
static bool may_come_back_parked(const cs_target *t)
{
	char path[128];
	return !t->park_seen && park_find_path(t->pid, cs_proc_dir(), path, sizeof(path)) == 0;
}

/* After the driver's restore: a parked process's memory comes back by its
 * unpark afterwards, which stays booked until then (this command's unpark
 * step, or the process's own unpark once its engine lets it run). */
static void restored(void *ctx, cs_target *t, int res)
{
	cs_session *s = ctx;
	if (res == CS_CU_SUCCESS && t->parked)
		cs_gpu_ledger_to_unpark(&s->ledger, t, t->park_bytes, false);
	else if (res == CS_CU_SUCCESS && may_come_back_parked(t))
		cs_gpu_ledger_to_unpark(&s->ledger, t, 0, true);
	else
		cs_gpu_ledger_give(&s->ledger, t, res);
}

/* Right before an unpark: room for what it brings back. */
static int before_unpark(void *ctx, cs_target *t, bool rollback, cs_error *err)
{
	cs_session *s = ctx;
	if (rollback && !t->nneed) /* a checkpoint's rollback: what it just parked */
		cs_gpu_ledger_rollback_needs(&s->ledger, t);
	return cs_gpu_ledger_take_unpark(&s->ledger, t, t->park_bytes, rollback, err);
}

/* An unpark that failed may go on where its interposer did not answer. */
static void unparked(void *ctx, cs_target *t, int res)
{
	cs_session *s = ctx;
	cs_park_info info = { .seen = false };
	if (res != CS_CU_SUCCESS)
		cs_park_status(t->pid, 2000, &info);
	cs_gpu_ledger_unparked(&s->ledger, t, res != CS_CU_SUCCESS && (!info.seen || info.unreachable));
}

static void park_files_at(void *ctx, const cs_target *t, bool park)
{
	cs_session *s = ctx;
	cs_claims_files(&s->claims, t->pid, park ? "park" : "unpark", t->park_dir, t->park_name, t->park_nfiles);
}

/* Restore's checks before the first driver call: the manifest, the device
 * map, and GPU memory for every process (waiting for it when asked). */
static int check_restore(cs_session *s, cs_error *err)
{
	int r = cs_session_plan_restore(s, err);
	return r < 0 ? r : cs_session_check(s, err);
}

static int run(cs_session *s, cs_txn_result *res, cs_error *err);

int cs_session_run(cs_session *s, cs_txn_result *res, cs_error *err)
{
	int rc = run(s, res, err);
	cs_session_record(s, rc, res, err);
	return rc;
}

/* A process a failed checkpoint left parked into files (a park that could
 * not be undone): the manifest is what names them. */
static bool left_in_files(const cs_session *s)
{
	for (size_t i = 0; i < s->n; i++)
		if (s->t[i].parked && s->t[i].park_nfiles && s->t[i].state == CS_STATE_RUNNING)
			return true;
	return false;
}

/* The checks before the first driver call, the transaction, and what is
 * kept after it. */
static int run(cs_session *s, cs_txn_result *res, cs_error *err)
{
	const cs_session_opts *o = s->o;
	memset(res, 0, sizeof(*res));
	cs_txn_opts t = { .op = o->op,
			  .no_park = s->no_park,
			  .park_to = s->no_park ? NULL : s->park_to,
			  .park_keep = o->park_keep,
			  .park_from = o->op == CS_OP_RESTORE ? o->park_from : NULL,
			  .allow_unrestorable = s->allow_unrestorable,
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
		int r = cs_session_check(s, err);
		if (r < 0)
			return r;
		cs_session_note_use(s);
	}
	if (o->op == CS_OP_RESTORE) {
		int r = check_restore(s, err);
		if (r < 0)
			return r;
		t.pairs = s->pairs;
		t.npairs = s->npairs;
	}
	/* Every restore is booked, one that ignores the room too: the
	 * restores that check must count it. */
	double left = s->wait_until - cs_now();
	cs_gpu_ledger_init(&s->ledger, s->d, o->command, cs_now() + (left > 0 ? left : 0), o->interrupted,
			   s->sandbox.pid_ns == CS_PIDNS_HOST, o->warn, o->warn_ctx);
	s->ledger.ignore = s->ignore_gpu_memory;
	s->ledger.orphans.parked = cs_park_parked_now;
	s->ledger_used = true;
	t.before_restore = before_restore;
	t.restored = restored;
	t.before_unpark = before_unpark;
	t.park_files_at = park_files_at;
	t.unparked = unparked;
	t.restore_ctx = s;
	int rc = cs_txn_run(s->d, &t, s->t, s->n, res); /* clears res first */
	res->ran = true;
	if (res->lost)
		cs_session_name_lost(s);
	settle_claims(s);
	if (rc == 0 && checkpoint && res->acted) {
		cs_session_note_gpus(s);
		if (!o->no_manifest)
			cs_session_save_manifest(s, res);
	} else if (checkpoint && !o->no_manifest && left_in_files(s)) {
		cs_session_save_manifest(s, res); /* their restore needs to know where */
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
	free(s->cand);
	free(s->fit);
	free(s->behind);
	free(s->pairs);
	free(s->left);
	free(s->refused);
	cs_history_free(&s->hist);
	cs_ptable_free(&s->table);
	cs_ptable_free(&s->after);
	if (s->ledger_used)
		cs_gpu_ledger_fini(&s->ledger);
	cs_claims_release(&s->claims);
	if (s->state_fd >= 0)
		close(s->state_fd);
	free(s);
}
