/* The checks made before an operation changes anything, and the plan that
 * --dry-run prints from them. */
#include "plan.h"
#include "park.h"
#include "parkfiles.h"
#include "pids.h"
#include "halt.h"
#include "pool.h"
#include "select.h"
#include "session_int.h"
#include "text.h"
#include "util.h"

#include <fcntl.h>
#include <limits.h>
#include <stdarg.h>
#include <sys/stat.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#define GIB (1024.0 * 1024 * 1024)

/* Driver rates measured on the H200 (driver-behavior.md): one process's
 * checkpoint and restore, and what all of them at once reach together. */
#define CKPT_ONE_BPS 1.5e9
#define CKPT_ALL_BPS 8.5e9
#define RESTORE_ONE_BPS 3.0e9
#define RESTORE_ALL_BPS 11.0e9

static bool checkpoints(cs_op op)
{
	return op == CS_OP_CHECKPOINT || op == CS_OP_CHECKPOINT_LOCKED;
}

/* The state a target must be in for the operation to act on it. */
static int start_state(cs_op op)
{
	return op == CS_OP_RESTORE                                  ? CS_STATE_CHECKPOINTED :
		op == CS_OP_UNLOCK || op == CS_OP_CHECKPOINT_LOCKED ? CS_STATE_LOCKED :
								      CS_STATE_RUNNING;
}

#define FIX_IPC \
	"Checkpoint the other processes without it, or stop sharing device memory between processes (in " \
	"PyTorch, do not pass CUDA tensors through torch.multiprocessing); the process that exported the " \
	"memory can be checkpointed alone. --allow-unrestorable (CUDASNAP_ALLOW_UNRESTORABLE=1) checkpoints " \
	"it anyway, knowing that it will not come back."

static bool overridden_memory(const cs_session *s)
{
	return s->ignore_memory;
}

/* The driver checkpoints a process that imported another's device memory,
 * but can never restore it. */
static void check_ipc(const cs_session *s, const cs_proc *p, const cs_park_info *pi, cs_plan_entry *e)
{
	/* Shared memory shows in /proc as a file (so do shared events), or
	 * (between processes that run the parking interposer) only in the
	 * interposer's answer, which counts every import and tells them apart. */
	if (s->o->ipc_judged)
		return;
	char what[sizeof(p->ipc_import) + 64];
	if (!cs_park_unrestorable(pi, p->ipc_import, !s->no_park, what, sizeof(what)))
		return;
	bool allow = s->allow_unrestorable;
	if (e->state == CS_STATE_CHECKPOINTED)
		cs_plan_add_reason(e, "unrestorable", true,
				   "it maps device memory that another process shares with it (CUDA IPC, %s): the driver "
				   "refuses to restore such a process",
				   what);
	else
		cs_plan_set_fix(cs_plan_add_reason(
					e, "ipc-import", !allow,
					"it maps device memory that another process shares with it (CUDA IPC, %s): the "
					"driver checkpoints such a process but can never restore it%s",
					what,
					allow ? " (allowed by --allow-unrestorable: it would not come back)" : ""),
				FIX_IPC);
}

/* A process whose interposer started its control socket but does not
 * answer there would go the driver's way unasked, which never restores an
 * import the interposer carries, and parks nothing. (A restore goes on: a
 * process left checkpointed is worse.) */
static void check_reachable(const cs_session *s, const cs_park_info *pi, cs_plan_entry *e)
{
	if (s->o->ipc_judged || !checkpoints(s->o->op) || !pi->unreachable)
		return;
	bool allow = s->allow_unrestorable;
	cs_plan_set_fix(cs_plan_add_reason(e, "park-unreachable", !allow, "%s%s", cs_park_unreachable_why,
					   allow ? " (allowed by --allow-unrestorable: the driver checkpoints it alone)" :
						   ""),
			cs_park_unreachable_fix);
}

static void check_halt(const cs_proc *p, cs_plan_entry *e)
{
	if (!p->halt)
		return;
	cs_halt_info h = { 0 };
	cs_proc_halt(cs_proc_dir(), p->pid, p->restore_tid, &h);
	char why[400];
	cs_halt_clause(&h, p->pid, why, sizeof(why));
	cs_plan_add_reason(e, cs_halt_name(p->halt), true, "it is %s and cannot answer the driver", why);
}

/* The memory reasons of a target: refused (memory); or its cgroup chain
 * showed no limit where one may exist (memory-unknown, blocking as memory
 * does), or showed only its lower part (memory-unknown, a note); or its GPU
 * memory is unknown (memory-unknown, a note: nothing can be judged). */
static void reason_memory(const cs_session *s, cs_plan_entry *e)
{
	const cs_fit *f = &e->fit;
	bool ignore = overridden_memory(s);
	const char *allowed = ignore ? " (allowed by --ignore-memory)" : "";
	if (f->refused) {
		char fix[sizeof(e->reason[0].fix)];
		snprintf(fix, sizeof(fix),
			 "%.1300s Where swap or overcommit makes room after all, --ignore-memory "
			 "(CUDASNAP_IGNORE_MEMORY=1) skips this check.",
			 f->fix);
		cs_plan_set_fix(cs_plan_add_reason(e, "memory", !ignore, "it %s%s", f->why, allowed), fix);
	} else if (f->known && f->room == CS_ROOM_UNKNOWN) {
		cs_plan_set_fix(cs_plan_add_reason(e, "memory-unknown", !ignore, "it %s%s", f->why, allowed), f->fix);
	} else if (!f->known) {
		cs_plan_add_reason(e, "memory-unknown", false,
				   "its GPU memory cannot be known here (no NVML, or NVML names no process of this PID "
				   "namespace and no GPU figure either), so whether its checkpoint fits in host memory "
				   "is not known");
	}
	if (f->known && f->room == CS_ROOM_PART && f->cg.n)
		cs_plan_add_reason(e, "memory-unknown", false,
				   "its memory cgroup chain could be read only up to %.*s, and it was judged by the limits up "
				   "to there: %s",
				   (int)f->cg.node[f->cg.n - 1].len, f->cg.path, f->cg.problem);
}

/* Memory of the entries that are targets of a checkpoint. */
static void check_memory(cs_session *s, cs_plan_entry *e, size_t n)
{
	_cleanup_free_ cs_fit *f = calloc(n + 1, sizeof(*f));
	_cleanup_free_ const cs_proc **procs = calloc(n + 1, sizeof(const cs_proc *));
	if (!f || !procs)
		return;
	size_t m = 0;
	for (size_t i = 0; i < n; i++) {
		if (!e[i].target)
			continue;
		f[m] = (cs_fit){ .pid = e[i].pid, .off_host = e[i].park_out };
		if (e[i].park_out)
			f[m].staging = cs_park_files_staging(e[i].park_out);
		memcpy(f[m].comm, e[i].comm, sizeof(f[m].comm));
		procs[m++] = cs_ptable_find(&s->table, e[i].pid);
	}
	cs_fit_env_read(&s->fitenv, s->sandbox.pid_ns == CS_PIDNS_HOST);
	cs_fit_measure(f, m, procs, &s->fitenv);
	size_t unknown;
	cs_fit_judge(f, m, &s->fitenv, &unknown);
	for (size_t i = 0, k = 0; i < n; i++) {
		if (!e[i].target)
			continue;
		e[i].fit = f[k++];
		reason_memory(s, &e[i]);
	}
}

static void note_bystander(const cs_session *s, const cs_proc *p, cs_plan_entry *e)
{
	bool strict = s->o->strict;
	if (p->nvml_only)
		cs_plan_add_reason(e, "nvml-only", strict && checkpoints(s->o->op),
				   "it uses NVML only (a monitor): not checkpointed unless named with --pid; its %d device "
				   "file%s stay open%s",
				   p->device_fds, p->device_fds == 1 ? "" : "s",
				   strict ? ", which --strict refuses" : "");
	else if (p->cls == CS_CLASS_CUDA)
		cs_plan_add_reason(e, "not-selected", strict && checkpoints(s->o->op) && p->nrefs,
				   "a CUDA process in the selection's scope that the selection leaves out: its device files "
				   "stay%s",
				   strict && p->nrefs ? ", which --strict refuses" : "");
	else if (p->cls == CS_CLASS_DEVICE_HOLDER)
		cs_plan_add_reason(e, "device-holder", strict && checkpoints(s->o->op),
				   "it holds %d GPU device file%s and %d mapping%s the driver cannot release (forked after "
				   "CUDA init without exec, or it opened them itself)%s",
				   p->device_fds, p->device_fds == 1 ? "" : "s", p->device_maps,
				   p->device_maps == 1 ? "" : "s", strict ? ", which --strict refuses" : "");
}

/* What the process's parking interposer (cudasnap run) says of it, asked
 * once per process: never one that cannot answer, or another operation's. */
static void ask_park(const cs_proc *p, cs_park_info *pi)
{
	memset(pi, 0, sizeof(*pi));
	if (!p->busy && !p->halt && p->maps_park)
		cs_park_status(p->pid, 2000, pi);
}

/* A park into files runs PARK_LANES threads a file in the process, one of
 * them the park's own: where its pids cgroup leaves room for fewer, the
 * park's thread takes the other lanes in turn. */
static void note_park_threads(pid_t pid, const cs_park_info *pi, cs_plan_entry *e)
{
	unsigned want = cs_park_files_count(pi->bytes) * PARK_LANES - 1;
	char where[256];
	long long room = cs_pids_room(pid, where, sizeof(where));
	if (room >= 0 && room < want)
		cs_plan_add_reason(e, "park-threads", false,
				   "its park into files runs %u threads beside the park's own, and the pids.max of "
				   "cgroup %s leaves room for %lld: the park's own thread takes the other lanes in turn "
				   "(slower; the same result)",
				   want, where, room);
}

/* What removes files DIR/NAME.* that hold nothing, as a command to run. */
static const char *remove_hint(const char *dir, const char *name, char *out, size_t size)
{
	char path[PATH_MAX], word[720];
	snprintf(path, sizeof(path), "%s/%s", dir, name);
	if (cs_shell_word(path, word, sizeof(word)))
		snprintf(out, size,
			 "They hold nothing it needs (it is not parked): remove them (rm %s.*), or give another "
			 "--park-to.",
			 word);
	else
		snprintf(out, size,
			 "They hold nothing it needs (it is not parked): remove them, or give another "
			 "--park-to.");
	return out;
}

/* Files of an earlier park of the same process in the directory: a park
 * never writes over them, and the checkpoint is refused before anything
 * changes, saying what they are. */
static void check_files_left(const cs_session *s, const cs_proc *p, const cs_park_info *pi, cs_plan_entry *e)
{
	char name[80], first[96];
	struct stat st;
	cs_park_files_name(p->pid, p->start_time, name, sizeof(name));
	snprintf(first, sizeof(first), "%s.0", name);
	_cleanup_close_ int fd = open(s->park_to, O_RDONLY | O_DIRECTORY | O_NOFOLLOW | O_CLOEXEC);
	if (fd < 0 || fstatat(fd, first, &st, AT_SYMLINK_NOFOLLOW) != 0)
		return;
	if (pi->parked) {
		cs_plan_set_fix(cs_plan_add_reason(e, "park-files-left", true,
						   "it is parked already, its memory perhaps in %s/%s.*: a second "
						   "park into that directory would write over them",
						   s->park_to, name),
				"Restore it first (cudasnap restore --pid N).");
		return;
	}
	char fix[1024];
	cs_plan_set_fix(cs_plan_add_reason(e, "park-files-left", true,
					   "%s/%s.* are left from an earlier park of it: a cudasnap killed "
					   "during a park or an unpark leaves them, and so does restore --keep",
					   s->park_to, name),
			remove_hint(s->park_to, name, fix, sizeof(fix)));
}

/* What the interposer makes of it: its memory parks outside the driver's
 * lock, or it goes the driver's way and why. Never blocks. */
static void note_park(const cs_session *s, const cs_proc *p, const cs_park_info *pi, cs_plan_entry *e)
{
	if (!pi->seen || (s->no_park && s->o->op == CS_OP_CHECKPOINT))
		return;
	double mib = (double)pi->bytes / (1 << 20);
	if (s->o->op == CS_OP_RESTORE && pi->parked)
		cs_plan_add_reason(e, "park", false,
				   "%.1f MiB of its device memory is parked: unparked after the unlock", mib);
	else if (s->o->op == CS_OP_CHECKPOINT && pi->parkable && s->park_to) {
		cs_plan_add_reason(e, "park", false,
				   "runs the parking interposer: %.1f MiB of its device memory parks into %u files of %s "
				   "before the lock",
				   mib, cs_park_files_count(pi->bytes), s->park_to);
		note_park_threads(p->pid, pi, e);
		check_files_left(s, p, pi, e);
	} else if (s->o->op == CS_OP_CHECKPOINT && pi->parkable)
		cs_plan_add_reason(e, "park", false,
				   "runs the parking interposer: %.1f MiB of its device memory parks before the lock",
				   mib);
	else if (s->o->op == CS_OP_CHECKPOINT)
		cs_plan_add_reason(e, "driver-path", false,
				   "runs the parking interposer, but the driver checkpoints all its memory: %s",
				   pi->why[0] ? pi->why : "it cannot be parked");
	char own[256];
	if (s->o->op == CS_OP_CHECKPOINT && pi->parkable && cs_park_own_vmm_say(pi, own, sizeof(own)))
		cs_plan_add_reason(e, "park-own-vmm", false, "%s", own);
}

/* One process of the table; t is its target, NULL when it is none. */
static void fill_entry(const cs_session *s, const cs_proc *p, const cs_target *t, cs_plan_entry *e)
{
	*e = (cs_plan_entry){ .pid = p->pid, .cls = p->cls, .state = t ? t->state : p->state };
	memcpy(e->comm, p->comm, sizeof(e->comm));
	if (!t) {
		note_bystander(s, p, e);
		return;
	}
	if (p->busy)
		cs_plan_add_reason(e, "busy", true, "another operation holds it: %s", p->busy_holder);
	check_halt(p, e);
	e->target = e->state == start_state(s->o->op) || (e->state == CS_STATE_UNKNOWN && !p->busy);
	if (!e->target && !p->busy && cs_state_name(e->state))
		cs_plan_add_reason(e, "already", false, "it is %s: left as it is", cs_state_name(e->state));
	if (!checkpoints(s->o->op) && s->o->op != CS_OP_RESTORE)
		return;
	cs_park_info pi;
	ask_park(p, &pi);
	check_ipc(s, p, &pi, e);
	if (e->target) {
		check_reachable(s, &pi, e);
		note_park(s, p, &pi, e);
		if (s->park_to && pi.seen && pi.parkable && cs_park_wanted(&pi) && s->o->op == CS_OP_CHECKPOINT)
			e->park_out = pi.bytes;
	}
}

/* A park into files writes what every target's park moves into one
 * directory: it must all fit there, before anything changes. */
static void check_park_space(const cs_session *s, cs_plan_entry *e, size_t n)
{
	unsigned long long all = 0;
	for (size_t i = 0; i < n; i++)
		all += e[i].target ? e[i].park_out : 0;
	_cleanup_close_ int fd = open(s->park_to, O_RDONLY | O_DIRECTORY | O_NOFOLLOW | O_CLOEXEC);
	long long avail = fd < 0 ? -1 : cs_park_dir_free(fd);
	if (all == 0 || avail < 0 || (unsigned long long)avail >= all)
		return;
	for (size_t i = 0; i < n; i++)
		if (e[i].target && e[i].park_out)
			cs_plan_set_fix(cs_plan_add_reason(&e[i], "park-space", true,
							   "its park into files writes %.2f GiB into %s, which has "
							   "%.2f GiB free for the %.2f GiB of every process parked there",
							   (double)e[i].park_out / (1 << 30), s->park_to,
							   (double)avail / (1 << 30), (double)all / (1 << 30)),
					"Free space there, or give --park-to a directory with room.");
}

/* Expected driver time: each process alone at its rate, all of them
 * together at most at the aggregate rate. */
static double expected_seconds(const cs_plan *p)
{
	bool ckpt = checkpoints(p->op);
	if (!ckpt && p->op != CS_OP_RESTORE)
		return 0;
	double one = ckpt ? CKPT_ONE_BPS : RESTORE_ONE_BPS, all = ckpt ? CKPT_ALL_BPS : RESTORE_ALL_BPS;
	double slowest = 0;
	for (size_t i = 0; i < p->n; i++)
		if (p->e[i].target && (double)p->e[i].fit.gpu / one > slowest)
			slowest = (double)p->e[i].fit.gpu / one;
	double together = (double)p->gpu_bytes / all;
	return slowest > together ? slowest : together;
}

static void totals(cs_plan *p)
{
	p->go = true;
	for (size_t i = 0; i < p->n; i++) {
		cs_plan_entry *e = &p->e[i];
		for (size_t k = 0; k < e->nreasons; k++)
			e->blocked |= e->reason[k].blocks;
		p->blocked += e->blocked;
		p->go &= !e->blocked;
		if (!e->target)
			continue;
		p->targets++;
		p->gpu_bytes += e->fit.gpu;
		p->host_bytes += e->fit.need;
		p->unknown_memory += (checkpoints(p->op) || p->op == CS_OP_RESTORE) && !e->fit.known;
	}
	p->seconds = expected_seconds(p);
}

int cs_session_plan(cs_session *s, bool everything, cs_plan *out, cs_error *err)
{
	memset(out, 0, sizeof(*out));
	out->op = s->o->op;
	size_t cap = s->n + (everything ? s->table.n : 0) + 1;
	out->e = calloc(cap, sizeof(*out->e));
	if (!out->e)
		return cs_error_set(err, CS_ESYS, NULL, "out of memory");
	for (size_t i = 0; i < s->n; i++) {
		const cs_proc *p = cs_ptable_find(&s->table, s->t[i].pid);
		if (p) /* a target comes from the table */
			fill_entry(s, p, &s->t[i], &out->e[out->n++]);
	}
	for (size_t i = 0; everything && i < s->table.n; i++) {
		const cs_proc *p = &s->table.procs[i];
		bool target = false;
		for (size_t k = 0; k < s->n && !target; k++)
			target = s->t[k].pid == p->pid;
		if (!target && !p->tool && p->cls != CS_CLASS_NONE &&
		    cs_selection_covers(&s->table, &s->o->sel, p->pid) && (p->nrefs || p->cls == CS_CLASS_CUDA))
			fill_entry(s, p, NULL, &out->e[out->n++]);
	}
	if (checkpoints(s->o->op))
		check_memory(s, out->e, out->n);
	if (s->park_to)
		check_park_space(s, out->e, out->n);
	/* Restore's own checks: the manifest (PID reuse), the device map, then
	 * the GPU memory each restore needs. */
	if (s->o->op == CS_OP_RESTORE && s->n && cs_session_plan_restore(s, &out->problem) == 0)
		cs_plan_restore_room(s, out->e, out->n);
	totals(out);
	out->go &= out->problem.status == 0;
	return 0;
}

/* What the real run refuses on its own: the transaction refuses stopped
 * and frozen processes itself, and the claims keep other operations out. */
bool cs_reason_refused_by_check(const cs_reason *r)
{
	static const char *const codes[] = { "memory",     "memory-unknown", "ipc-import",         "park-unreachable",
					     "gpu-memory", "gpu-absent",     "gpu-memory-unknown", "park-space",
					     "gpu-book",   "park-files-left" };
	for (size_t i = 0; r->blocks && i < CS_ARRAY_SIZE(codes); i++)
		if (strcmp(r->code, codes[i]) == 0)
			return true;
	return false;
}

/* Keeps one refusal for cs_session_refusals; one that cannot be kept (out
 * of memory) is still named by its warning. */
static void keep_refusal(cs_session *s, const cs_plan_entry *e, const cs_reason *r, size_t *cap)
{
	if (cs_grow(&s->refused, cap, s->nrefused + 1, sizeof(*s->refused)) < 0)
		return;
	cs_refusal *x = &s->refused[s->nrefused++];
	*x = (cs_refusal){ .pid = e->pid, .reason = *r };
	memcpy(x->comm, e->comm, sizeof(x->comm));
}

const cs_refusal *cs_session_refusals(const cs_session *s, size_t *n)
{
	*n = s->nrefused;
	return s->refused;
}

/* The notes of the memory check that do not refuse, as warnings: a chain
 * judged by its lower part only, or what --ignore-memory let through. */
static void warn_memory_notes(cs_session *s, const cs_plan *p)
{
	for (size_t i = 0; i < p->n; i++)
		for (size_t k = 0; k < p->e[i].nreasons; k++) {
			const cs_reason *x = &p->e[i].reason[k];
			/* An unknown GPU figure is said once for all of them, below. */
			if (!x->blocks && p->e[i].fit.known && strcmp(x->code, "memory-unknown") == 0)
				cs_session_warn(s, "warning: process %d (%s): %s", (int)p->e[i].pid, p->e[i].comm,
						x->text);
		}
}

/* Keeps each target's figures: its deadline, and why it might be lost. */
static int keep_fits(cs_session *s, const cs_plan *p)
{
	s->fit = calloc(p->n + 1, sizeof(*s->fit));
	if (!s->fit)
		return -ENOMEM;
	for (size_t i = 0; i < p->n; i++) {
		if (!p->e[i].target)
			continue;
		s->fit[s->nfit++] = p->e[i].fit;
		for (size_t k = 0; k < s->n; k++)
			if (s->t[k].pid == p->e[i].pid && p->e[i].fit.known == CS_GPU_EXACT)
				s->t[k].gpu_bytes = p->e[i].fit.gpu;
	}
	return 0;
}

static const cs_reason *short_reason(const cs_plan *p, const cs_plan_entry **who)
{
	for (size_t i = 0; i < p->n; i++)
		for (size_t k = 0; k < p->e[i].nreasons; k++)
			if (p->e[i].reason[k].blocks && strcmp(p->e[i].reason[k].code, "gpu-memory") == 0) {
				*who = &p->e[i];
				return &p->e[i].reason[k];
			}
	return NULL;
}

static bool interrupted(const cs_session *s)
{
	return s->o->interrupted && *s->o->interrupted;
}

int cs_plan_wait_room(cs_session *s, cs_plan *p, cs_error *err)
{
	double said = -1e9;
	s->wait_until = cs_now() + s->wait_memory_s;
	for (;;) {
		const cs_plan_entry *who = NULL;
		const cs_reason *r = short_reason(p, &who);
		double now = cs_now();
		if (!r || now >= s->wait_until || interrupted(s))
			return 0;
		if (now - said >= 10) {
			const char *end = strstr(r->text, ". A restore");
			cs_session_warn(s, "waiting up to %.0f s more for GPU memory: process %d (%s) %.*s",
					s->wait_until - now, (int)who->pid, who->comm,
					(int)(end ? end - r->text : (long)strlen(r->text)), r->text);
			said = now;
		}
		nanosleep(&(struct timespec){ .tv_nsec = 500000000L }, NULL);
		cs_plan_free(p);
		int rc = cs_session_plan(s, false, p, err);
		if (rc < 0)
			return rc;
	}
}

int cs_session_check(cs_session *s, cs_error *err)
{
	bool restore = s->o->op == CS_OP_RESTORE;
	if (!checkpoints(s->o->op) && !restore)
		return 0;
	_cleanup_(cs_plan_freep) cs_plan p = { 0 };
	int r = cs_session_plan(s, false, &p, err);
	if (r == 0 && restore && p.problem.status)
		*err = p.problem, r = -p.problem.status;
	if (r == 0 && restore && s->wait_memory_s > 0)
		r = cs_plan_wait_room(s, &p, err);
	if (r == 0 && !restore && keep_fits(s, &p) < 0)
		r = cs_error_set(err, CS_ESYS, NULL, "out of memory");
	if (r < 0)
		return r;
	const cs_plan_entry *first = NULL;
	const cs_reason *why = NULL;
	size_t refused = 0, cap = 0;
	free(s->refused);
	s->refused = NULL;
	s->nrefused = 0;
	for (size_t i = 0; i < p.n; i++)
		for (size_t k = 0; k < p.e[i].nreasons; k++) {
			const cs_reason *x = &p.e[i].reason[k];
			if (!cs_reason_refused_by_check(x))
				continue;
			cs_session_warn(s, "error: process %d (%s) refused: %s", (int)p.e[i].pid, p.e[i].comm, x->text);
			keep_refusal(s, &p.e[i], x, &cap);
			refused++;
			if (!first) {
				first = &p.e[i];
				why = x;
			}
		}
	warn_memory_notes(s, &p);
	if (!refused) {
		if (p.unknown_memory && restore)
			cs_session_warn(s,
					"warning: the GPU memory the restore of %zu process%s needs cannot be known here "
					"(see --dry-run): whether it fits in its GPU's free memory is not checked",
					p.unknown_memory, p.unknown_memory == 1 ? "" : "es");
		else if (p.unknown_memory)
			cs_session_warn(s,
					"warning: the GPU memory of %zu process%s cannot be known here (no NVML, or "
					"NVML names no process of this PID namespace): whether the checkpoint fits in "
					"host memory is not checked",
					p.unknown_memory, p.unknown_memory == 1 ? "" : "es");
		return 0;
	}
	r = cs_error_set(err, CS_EPROC, why->fix, "%s refused; nothing was changed: process %d (%s): %s",
			 cs_op_name(s->o->op), (int)first->pid, first->comm, why->text);
	if (refused > 1) {
		size_t len = strlen(err->message);
		snprintf(err->message + len, sizeof(err->message) - len, " (and %zu more reasons, above)", refused - 1);
	}
	return r;
}

void cs_session_name_lost(cs_session *s)
{
	for (size_t i = 0; i < s->n; i++) {
		cs_target *t = &s->t[i];
		const cs_fit *f = NULL;
		for (size_t k = 0; k < s->nfit && !f; k++)
			f = s->fit[k].pid == t->pid ? &s->fit[k] : NULL;
		if (!t->lost || !f)
			continue;
		for (size_t k = 0; k < f->cg.n; k++) {
			cs_memcg_node now;
			const cs_memcg_node *was = &f->cg.node[k];
			if (was->oom_kills < 0 || cs_memcg_reread(&f->cg, k, &now) < 0 ||
			    now.oom_kills <= was->oom_kills)
				continue;
			snprintf(t->lost_why, sizeof(t->lost_why),
				 "killed by the OOM killer of cgroup %.*s (oom_kill %lld -> %lld) during its %s",
				 (int)was->len, f->cg.path, was->oom_kills, now.oom_kills,
				 s->o->op == CS_OP_CHECKPOINT && !t->done[CS_STEP_LOCK] ? "lock" : "checkpoint");
			break;
		}
	}
}
