/* A staged dump: each CUDA process claimed and locked while it still runs
 * (cs_engine_meet), all checkpointed as one transaction at the first
 * cs_engine_checkpoint, and the record written into the images. Nothing
 * here fails a dump of a tree without CUDA: the driver and the state
 * directory wait for the first process that maps the driver. */
#include "engine_int.h"
#include "discover.h"
#include "env.h"
#include "explain.h"
#include "park.h"
#include "pool.h"
#include "proc.h"
#include "state.h"
#include "util.h"

#include <errno.h>
#include <fcntl.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

/* The claims need a directory this process can write: cs_state_open does
 * not see a read-only filesystem under one that exists. */
static int state_open_writable(cs_error *err)
{
	_cleanup_close_ int fd = cs_state_open(err);
	if (fd < 0)
		return fd;
	if (faccessat(fd, ".", W_OK | X_OK, AT_EACCESS) < 0)
		return cs_error_errno(err, CS_ESTATE, errno, NULL, "state directory %s cannot be written",
				      cs_state_dir());
	return TAKE_FD(fd);
}

/* One line: the process that needed the state directory, why it cannot be
 * used, and a fix that reaches the engine, which container engines run
 * without environment. */
static int state_unusable(cs_engine *e, pid_t pid, const char *comm, const char *why)
{
	bool from_env = cs_env_is_given("CUDASNAP_STATE_DIR");
	eng_op_refused(e, pid, comm, "state-dir", why);
	eng_log(e, CS_LOG_ERROR,
		"process %d (%s) maps the GPU driver, so the dump needs cudasnap's state directory, but %s. Fix: set "
		"CUDASNAP_STATE_DIR=<a directory owned by root, mode 0700, on a writable filesystem> in %s (container "
		"engines pass %s no environment)%s%s%s, or make %s such a directory",
		(int)pid, comm, why, cs_config_path(), e->o.engine, from_env ? " and drop it from " : "",
		from_env ? e->o.engine : "", from_env ? "'s environment, which wins over the file" : "",
		cs_state_dir());
	return -1;
}

/* The driver would checkpoint it, but could never restore it: the dump is
 * refused before anything changes, rather than leaving images that cannot
 * come back. */
static int refuse_importer(cs_engine *e, pid_t pid, const cs_proc *p, const char *what)
{
	char why[256];
	snprintf(why, sizeof(why),
		 "it maps device memory that another process shares with it (CUDA IPC: %.150s), which the driver can "
		 "never restore",
		 what);
	eng_op_refused(e, pid, p->comm, "ipc-import", why);
	eng_log(e, CS_LOG_ERROR,
		"process %d (%s) maps device memory that another process shares with it (CUDA IPC: %s): the driver "
		"checkpoints such a process but can never restore it, so the dump is refused before anything "
		"changed. Fix: stop sharing CUDA memory between the container's processes (in PyTorch, do not pass "
		"CUDA tensors through torch.multiprocessing), or set CUDASNAP_ALLOW_UNRESTORABLE=1 in %s to dump "
		"it anyway, knowing that it will not come back",
		(int)pid, p->comm, what, cs_config_path());
	return -1;
}

/* Its interposer started its control socket and does not answer there:
 * left to the driver unasked, an import the interposer carries never comes
 * back, and nothing parks. */
static int refuse_unreachable(cs_engine *e, pid_t pid, const cs_proc *p)
{
	eng_op_refused(e, pid, p->comm, "park-unreachable", cs_park_unreachable_why);
	eng_log(e, CS_LOG_ERROR,
		"process %d (%s) refused before anything changed: %s. Fix: %s (CUDASNAP_ALLOW_UNRESTORABLE=1 in %s)",
		(int)pid, p->comm, cs_park_unreachable_why, cs_park_unreachable_fix, cs_config_path());
	return -1;
}

/* Processes that a dump or command which died in the middle (an engine
 * killed by its own) left locked or checkpointed: named in this dump's log.
 * The driver cannot be asked here, so their state is what 'cudasnap ps'
 * says. */
static void log_left_behind(cs_engine *e)
{
	_cleanup_closedir_ DIR *d = cs_opendir_at(e->state_fd, "claims");
	struct dirent *de = NULL;
	while (d && (de = readdir(d)) && de->d_name[0] == '.')
		;
	_cleanup_(cs_ptable_freep) cs_ptable t = { 0 };
	if (!de || cs_scan(NULL, &t, NULL) < 0)
		return; /* no record at all: nothing to scan /proc for */
	_cleanup_free_ cs_left_behind *b = NULL;
	size_t n = 0;
	cs_claims_left_behind(e->state_fd, &t, false, &b, &n);
	for (size_t i = 0; i < n; i++) {
		const cs_proc *p = b[i].pid ? cs_ptable_find(&t, b[i].pid) : NULL;
		char line[1024], fix[CS_LEFT_FIX_MAX];
		/* not asked: an engine may hold it stopped */
		cs_left_behind_say(&b[i], p ? p->state : CS_STATE_UNKNOWN, -1, line, sizeof(line), fix, sizeof(fix));
		if (b[i].files_only) /* only its park files are left */
			eng_log(e, CS_LOG_WARN, "%s; 'cudasnap ps' says more%s%s", line, fix[0] ? ": " : "", fix);
		else
			eng_log(e, CS_LOG_WARN,
				"process %d (%s) may be left locked or checkpointed: %s ended in the middle of an "
				"operation on it; 'cudasnap ps' shows its state, 'cudasnap restore --pid %d%s%s' or "
				"'cudasnap unlock --pid %d' recovers it",
				(int)b[i].pid, b[i].comm, b[i].holder, (int)b[i].pid,
				b[i].files[0] ? " --park-from " : "", b[i].files_word, (int)b[i].pid);
	}
}

static const char *final_name(cs_engine_final f)
{
	return f == CS_FINAL_ALIVE ? "left running" : f == CS_FINAL_STOPPED ? "left stopped" : "killed";
}

/* The first process of the dump that maps the driver or NVML: whether the
 * driver can checkpoint, then the state directory the claims go into. */
static eng_gpu gpu_start(cs_engine *e, pid_t pid, const char *comm)
{
	int version;
	cs_error err = { 0 };
	eng_op_gpu(e);
	if (eng_probe(e, &version, &err) < 0) {
		snprintf(e->no_driver, sizeof(e->no_driver), "%.250s", err.message);
		eng_log(e, CS_LOG_INFO, "not enabled: %s", err.message);
		return ENG_GPU_NO_DRIVER;
	}
	e->state_fd = state_open_writable(&err);
	if (e->state_fd < 0) {
		state_unusable(e, pid, comm, err.message);
		return ENG_GPU_FAILED;
	}
	eng_log(e, CS_LOG_INFO, "enabled for the dump (driver %d; lock timeout %u s, tree %s after a dump; from %s)",
		version, eng_lock_timeout_s(e), final_name(e->o.final),
		e->o.options_from ? e->o.options_from : "its options");
	log_left_behind(e);
	return ENG_GPU_READY;
}

/* Without a driver that can checkpoint, the engine cannot dump a process's
 * device files and mappings either: refused now, naming it. */
static int refuse_without_driver(cs_engine *e, pid_t pid, const cs_proc *p)
{
	char why[400];
	snprintf(why, sizeof(why), "it holds GPU device files, but no driver here can checkpoint it (%s)",
		 e->no_driver);
	eng_op_refused(e, pid, p->comm, "no-driver", why);
	eng_log(e, CS_LOG_ERROR,
		"process %d (%s) holds %d GPU device fds and %d device mappings, but no driver here can checkpoint "
		"it (%s). %s cannot dump it. Fix: a driver with the checkpoint API (R570 or newer), or "
		"CUDASNAP_LIBCUDA=<its libcuda.so.1> in %s",
		(int)pid, p->comm, p->device_fds, p->device_maps, e->no_driver, e->o.engine, cs_config_path());
	return -1;
}

/* At each process that maps the driver or NVML: 1 to go on and lock it, 0
 * when there is nothing to do, -1 (logged) when the dump fails. */
static int gpu_ready(cs_engine *e, pid_t pid, const cs_proc *p)
{
	if (e->gpu == ENG_GPU_UNASKED)
		e->gpu = gpu_start(e, pid, p->comm);
	if (e->gpu == ENG_GPU_READY)
		return 1;
	if (e->gpu == ENG_GPU_NO_DRIVER)
		return p->device_fds || p->device_maps ? refuse_without_driver(e, pid, p) : 0;
	return -1;
}

/* A process that holds GPU device files the driver does not know (a child
 * forked after CUDA init, the PyTorch DataLoader shape) keeps them whatever
 * is checkpointed, and the engine cannot dump it: say so now, naming it. */
static int refuse_holder(cs_engine *e, pid_t pid, const cs_proc *p, pid_t ppid)
{
	bool forked = eng_find(e, ppid) != NULL;
	const char *how =
		forked ? "it was forked from a CUDA process without exec" : "it opened the device files itself";
	char why[200];
	snprintf(why, sizeof(why), "it holds GPU device files, but the driver cannot checkpoint it: %s", how);
	eng_op_refused(e, pid, p->comm, "device-holder", why);
	eng_log(e, CS_LOG_ERROR,
		"process %d (%s) holds %d GPU device fds and %d device mappings, but the driver "
		"cannot checkpoint it: %s. %s cannot dump it. Fix: create such workers with "
		"multiprocessing_context=\"spawn\" or \"forkserver\" (or before CUDA is initialized), or stop them "
		"before the dump",
		(int)pid, p->comm, p->device_fds, p->device_maps, how, e->o.engine);
	return -1;
}

/* What a call learns of one process while it runs. */
typedef struct pause_reply {
	int rt; /* GetRestoreThreadId */
	pid_t tid;
	int state_rc, state;
	int lock_rc;
	double lock_s;
	cs_error err; /* why the lock failed */
	eng_park_reply pk;
	bool no_room; /* its park (or its importers') would not fit in host memory */
	char room_why[2048];
} pause_reply;

typedef struct pause_arg {
	pid_t pid;
	char comm[64];
	unsigned timeout_s;
	bool park; /* it maps the interposer, and parking is not turned off */
	int images; /* its park goes into files of the images (-1: into host memory) */
	pid_t first[ENG_EARLY_MAX]; /* importers to park before it */
	size_t nfirst;
} pause_arg;

/* A park copies device memory into host memory before the lock, where the
 * checkpoint's check of host memory (at CHECKPOINT_DEVICES) comes too late:
 * the importers parked first and the process itself are judged here. */
static bool park_room(const pause_arg *a, pause_reply *r)
{
	pid_t pids[ENG_EARLY_MAX + 1];
	memcpy(pids, a->first, a->nfirst * sizeof(pid_t));
	pids[a->nfirst] = a->pid;
	r->no_room = !eng_park_fits(pids, a->nfirst + 1, a->images >= 0, r->room_why, sizeof(r->room_why));
	return !r->no_room;
}

/* The driver's lock waits for the process's own threads to leave the
 * driver, so it can only be taken while they run: here, one process at a
 * time, before the engine stops each. */
static int pause_task(void *arg, void **out, size_t *len)
{
	const pause_arg *a = arg;
	pause_reply *r = calloc(1, sizeof(*r));
	_cleanup_(cs_driver_freep) cs_driver *d = NULL;
	if (!r)
		return 1;
	*out = r;
	*len = sizeof(*r);
	if (cs_driver_open(&d, &r->err) < 0)
		return 1;
	r->rt = cs_cu_get_restore_tid(d, a->pid, &r->tid);
	r->state_rc = r->rt == CS_CU_SUCCESS ? cs_cu_get_state(d, a->pid, &r->state) : -1;
	if (r->state_rc != CS_CU_SUCCESS || r->state != CS_STATE_RUNNING)
		return 0;
	unsigned ms = a->timeout_s * 1000;
	int conn = -1;
	cs_target t = { .pid = a->pid };
	snprintf(t.comm, sizeof(t.comm), "%s", a->comm);
	if (a->park) {
		if (!park_room(a, r))
			return 0;
		eng_park_before_lock(d, &t, a->timeout_s, a->first, a->nfirst, a->images, &conn, &r->pk);
	}
	if (r->pk.refused)
		return 0;
	double t0 = cs_now();
	r->lock_rc = cs_cu_lock(d, a->pid, ms);
	r->lock_s = cs_now() - t0;
	eng_park_after_lock(d, &t, a->timeout_s, r->lock_rc, a->images, &conn, &r->pk);
	if (r->lock_rc != CS_CU_SUCCESS) {
		cs_explain_ctx c = { .call = CS_CALL_LOCK,
				     .pid = a->pid,
				     .cls = CS_CLASS_CUDA,
				     .state = CS_STATE_RUNNING,
				     .pid_visible = true,
				     .timeout_ms = ms };
		cs_explain(d, &c, r->lock_rc, &r->err);
	}
	return 0;
}

/* The process as /proc shows it, before any driver call. */
static int scan(pid_t pid, cs_proc *p, cs_stat *st)
{
	_cleanup_close_ int pdir = cs_proc_open(cs_proc_dir(), pid);
	if (pdir < 0 || cs_proc_read_stat(pdir, st) < 0)
		return -1;
	memcpy(p->comm, st->comm, sizeof(p->comm));
	if (cs_proc_scan_gpu(pdir, cs_dev_dir(), p) == 0)
		cs_proc_scan_ipc(pdir, p);
	return 0;
}

/* A process the dump met but could not lock: nothing was done to it, and
 * the dump fails; step -1 when no step was tried. */
static int not_locked(cs_engine *e, pid_t pid, const char *comm, int step, int cu, const char *why)
{
	cs_history_proc *h = eng_op_proc(e, pid, 0, comm);
	if (h) {
		h->outcome = CS_HIST_ROLLED_BACK;
		h->step = step;
		h->cu = cu;
		snprintf(h->why, sizeof(h->why), "%s", why);
	}
	return -1;
}

static int claim(cs_engine *e, pid_t pid, const cs_proc *p)
{
	cs_error err = { 0 };
	if (cs_claims_holds(&e->claims, pid)) /* claimed to park before its exporter */
		return 0;
	if (cs_claims_add(&e->claims, e->state_fd, pid, p->comm, e->o.command, NULL, 0, &err) == 0)
		return 0;
	if (err.status == CS_ESTATE && err.sys) /* the directory, not another holder */
		return state_unusable(e, pid, p->comm, err.message);
	eng_op_refused(e, pid, p->comm, "busy", err.message);
	eng_log(e, CS_LOG_ERROR, "%s; %s", err.message, err.hint);
	return -1;
}

/* CUDA IPC that only parking carries, and it could not park: the driver
 * would give it back never (an importer) or give its importers stale memory
 * (an exporter). Nothing was locked; the dump fails. */
static int refuse_unparked(cs_engine *e, const eng_task *t, const eng_park_reply *r)
{
	char why[400];
	snprintf(why, sizeof(why), "it shares device memory with other processes (CUDA IPC) and could not park: %.300s",
		 r->park_err.message);
	eng_op_refused(e, t->pid, t->comm, "ipc-park", why);
	eng_log(e, CS_LOG_ERROR,
		"process %d (%s) shares device memory with other processes (CUDA IPC) through cudasnap's interposer "
		"but could not park: %s. The driver cannot carry such memory, so the dump is refused before this "
		"process was locked. Fix: dump the processes that share memory together, in one tree",
		(int)t->pid, t->comm, r->park_err.message);
	return -1;
}

/* The lock's answer, once the process is known to be a CUDA process. */
static int locked(cs_engine *e, pid_t pid, const pause_reply *r)
{
	eng_task *t = eng_add(e, pid);
	if (!t || eng_identity(pid, &t->nspid, t->comm, sizeof(t->comm)) < 0)
		return -1;
	cs_history_proc *h = eng_op_proc(e, pid, t->nspid, t->comm);
	t->tid = cs_proc_thread_here(cs_proc_dir(), pid, r->tid);
	char named[48] = "";
	if (t->tid != r->tid) /* the driver answered in the process's own namespace */
		snprintf(named, sizeof(named), " (%d inside)", (int)r->tid);
	eng_log(e, CS_LOG_INFO, "process %d (%s, %d in its namespace): CUDA, %s, restore thread %d%s", (int)pid,
		t->comm, (int)t->nspid, cs_state_name(r->state), (int)t->tid, named);
	if (r->state != CS_STATE_RUNNING) {
		if (h) {
			h->outcome = CS_HIST_LEFT;
			snprintf(h->why, sizeof(h->why), "already %s", cs_state_name(r->state));
		}
		return 0;
	}
	eng_park_note(e, t, h, &r->pk);
	if (r->pk.refused)
		return refuse_unparked(e, t, &r->pk);
	if (r->lock_rc != CS_CU_SUCCESS) {
		eng_log(e, CS_LOG_ERROR, "%s; %s", r->err.message, r->err.hint);
		not_locked(e, pid, t->comm, CS_STEP_LOCK, r->lock_rc, r->err.message);
		if (r->pk.parked)
			eng_park_left(e, t, h);
		return -1;
	}
	t->locked = true;
	if (h) {
		h->timed[CS_STEP_LOCK] = true;
		h->seconds[CS_STEP_LOCK] = r->lock_s;
	}
	eng_log(e, CS_LOG_INFO, "process %d locked in %.3f s", (int)pid, r->lock_s);
	return 0;
}

/* The importers that park before a process are claimed first, as it is. */
static int claim_first(cs_engine *e, const pause_arg *a)
{
	for (size_t i = 0; i < a->nfirst; i++) {
		cs_proc q = { .pid = a->first[i] };
		pid_t nspid;
		if (eng_identity(q.pid, &nspid, q.comm, sizeof(q.comm)) < 0 || claim(e, q.pid, &q) < 0)
			return not_locked(e, a->pid, a->comm, -1, 0, "an importer of its memory could not be claimed");
	}
	return 0;
}

static int lock_task(cs_engine *e, pid_t pid, const cs_proc *p, const cs_park_info *info, pid_t ppid)
{
	if (claim(e, pid, p) < 0)
		return -1;
	_cleanup_free_ void *buf = NULL;
	size_t len;
	char what[96];
	snprintf(what, sizeof(what), "the lock of process %d", (int)pid);
	pause_arg a = { .pid = pid,
			.timeout_s = eng_lock_timeout_s(e),
			.park = p->maps_park && !cs_env_on("CUDASNAP_NO_PARK"),
			.images = e->images };
	snprintf(a.comm, sizeof(a.comm), "%s", p->comm);
	unsigned long long first_bytes[ENG_EARLY_MAX];
	if (a.park && (a.nfirst = eng_park_importers(e, pid, info, a.first, first_bytes, ENG_EARLY_MAX)) > 0 &&
	    claim_first(e, &a) < 0)
		return -1;
	double bound = a.park ? eng_bound_park_lock(a.timeout_s, info->bytes, first_bytes, a.nfirst) :
				eng_bound_lock(a.timeout_s);
	int rc = eng_call(e, what, bound, pause_task, &a, NULL, &buf, &len);
	const pause_reply *r = buf;
	if (rc < 0 || len != sizeof(*r)) {
		eng_log(e, CS_LOG_ERROR, "process %d (%s): the helper process gave no answer", (int)pid, p->comm);
		return not_locked(e, pid, p->comm, CS_STEP_LOCK, 0, "the helper process for its lock gave no answer");
	}
	if (rc != 0) {
		eng_log(e, CS_LOG_ERROR, "process %d (%s): %s; %s", (int)pid, p->comm, r->err.message, r->err.hint);
		return not_locked(e, pid, p->comm, -1, 0, r->err.message);
	}
	if (r->no_room) {
		eng_op_refused(e, pid, p->comm, "memory", r->room_why);
		eng_log(e, CS_LOG_ERROR,
			"%s The dump is refused before process %d (%s) parked its device memory into host memory; "
			"nothing was parked or locked (CUDASNAP_IGNORE_MEMORY=1 in %s skips this check)",
			r->room_why, (int)pid, p->comm, cs_config_path());
		return -1;
	}
	eng_park_note_early(e, pid, p->comm, &r->pk);
	if (r->rt != CS_CU_SUCCESS) /* not a CUDA process: only its device files matter */
		return p->device_fds || p->device_maps ? refuse_holder(e, pid, p, ppid) : 0;
	if (r->state_rc != CS_CU_SUCCESS) {
		eng_log(e, CS_LOG_ERROR, "process %d (%s): the driver gave no state (%s)", (int)pid, p->comm,
			r->state_rc == CS_CU_TIMED_OUT ? "it did not answer in time" : "an error");
		return not_locked(e, pid, p->comm, -1, r->state_rc, "the driver gave no state");
	}
	return locked(e, pid, r);
}

int cs_engine_meet(cs_engine *e, pid_t pid)
{
	e->enabled = true;
	if (cs_grow(&e->tree, &e->treecap, e->ntree + 1, sizeof(pid)) < 0)
		return -1;
	e->tree[e->ntree++] = pid;
	_cleanup_(cs_proc_clearp) cs_proc p = { .pid = pid };
	cs_stat st;
	if (scan(pid, &p, &st) < 0)
		return 0; /* gone: the engine will say so */
	/* Neither the driver nor NVML mapped: no driver call needed. */
	if (!p.maps_libcuda && !p.maps_nvml)
		return p.device_fds || p.device_maps ? refuse_holder(e, pid, &p, st.ppid) : 0;
	int go = gpu_ready(e, pid, &p);
	if (go <= 0)
		return go;
	/* its interposer, asked once while it runs: what it imported, who maps its memory */
	cs_park_info info = { 0 };
	if (p.maps_park)
		cs_park_status(pid, 2000, &info);
	char what[sizeof(p.ipc_import) + 64];
	bool allow = cs_env_on("CUDASNAP_ALLOW_UNRESTORABLE");
	if (!allow && cs_park_unrestorable(&info, p.ipc_import, !cs_env_on("CUDASNAP_NO_PARK"), what, sizeof(what)))
		return refuse_importer(e, pid, &p, what);
	if (!allow && info.unreachable)
		return refuse_unreachable(e, pid, &p);
	return lock_task(e, pid, &p, &info, st.ppid);
}

static bool was_locked(const eng_task *t)
{
	return t->locked;
}

typedef struct checkpoint_arg {
	const cs_engine *e;
	pid_t *pids;
	size_t n;
	int images;
} checkpoint_arg;

/* In the call: the transaction, then the record for the restore. */
static int checkpoint_tasks(void *arg, void **out, size_t *len)
{
	const checkpoint_arg *c = arg;
	eng_run r = { .op = CS_OP_CHECKPOINT_LOCKED,
		      .command = c->e->o.command,
		      .pids = c->pids,
		      .npids = c->n,
		      .claimed = true,
		      .scope = c->e->tree,
		      .nscope = c->e->ntree,
		      .timeout_s = eng_lock_timeout_s(c->e),
		      .images = c->images };
	run_outcome *o = eng_run_session(c->e, &r);
	if (!o)
		return 1;
	*out = o;
	*len = eng_outcome_size(o->n);
	return 0;
}

static void note_outcome(cs_engine *e, const run_outcome *o, bool ok)
{
	for (size_t i = 0; i < e->ntasks; i++)
		e->tasks[i].result = ok ? 0 : e->tasks[i].locked ? -1 : 0;
	for (size_t i = 0; o && i < o->n; i++) {
		eng_task *p = eng_find(e, o->t[i].pid);
		if (p)
			p->checkpointed = o->t[i].state == CS_STATE_CHECKPOINTED;
		if (o->t[i].lost)
			eng_log(e, CS_LOG_ERROR, "process %d (%s) is LOST: %s; its GPU state is gone, restart it",
				(int)o->t[i].pid, o->t[i].comm, o->t[i].lost_why[0] ? o->t[i].lost_why : "it exited");
		else if (o->t[i].failed || o->t[i].rollback_failed)
			eng_log(e, CS_LOG_ERROR, "process %d (%s): %s", (int)o->t[i].pid, o->t[i].comm,
				o->t[i].message);
	}
}

/* The whole tree at once: every CUDA process the dump locked. */
static void checkpoint_all(cs_engine *e, int images)
{
	e->dumped = true;
	checkpoint_arg c = { .e = e, .pids = eng_pids(e, was_locked, &c.n), .images = images };
	_cleanup_free_ pid_t *pids = c.pids;
	if (!pids || c.n == 0) {
		note_outcome(e, NULL, false);
		return;
	}
	_cleanup_free_ void *buf = NULL;
	size_t len = 0;
	int rc = eng_call(e, "the checkpoint", eng_bound_moves(), checkpoint_tasks, &c, was_locked, &buf, &len);
	const run_outcome *o = rc == 0 ? eng_outcome_check(e, buf, len, "the checkpoint") : NULL;
	if (o && o->rc < 0)
		eng_op_fail(e, o->message);
	if (o && o->rc < 0)
		eng_log(e, CS_LOG_ERROR, "checkpoint failed: %s%s%s", o->message, o->hint[0] ? "; " : "", o->hint);
	else if (o)
		eng_log(e, CS_LOG_INFO, "checkpointed %zu process%s, %.2f GiB in %.3f s", o->acted,
			o->acted == 1 ? "" : "es", (double)o->bytes / (1 << 30), o->wall);
	bool ok = o && o->rc == 0 && (!e->o.recorded || e->o.recorded(e->o.ctx) >= 0);
	eng_op_session(e, o, false);
	/* what moved is what the park moved and what the driver moved */
	for (size_t i = 0; o && i < e->ntasks; i++) {
		const eng_task *t = &e->tasks[i];
		cs_history_proc *h = t->parked ? eng_op_proc(e, t->pid, t->nspid, t->comm) : NULL;
		if (h)
			h->bytes += t->park_bytes;
	}
	note_outcome(e, o, ok);
}

int cs_engine_checkpoint(cs_engine *e, int images, pid_t pid)
{
	if (!e->dumped)
		checkpoint_all(e, images);
	eng_task *t = eng_find(e, pid);
	return t ? t->result : 0;
}
