/* criu dump: claim and lock each CUDA process while it still runs
 * (PAUSE_DEVICES), checkpoint them all as one transaction at the first
 * CHECKPOINT_DEVICES, and in the exit hook leave every process as CRIU
 * leaves the tree: back to its state before the dump when the dump failed
 * or the tree keeps running, checkpointed (and said so) when it stays
 * stopped, as it is when CRIU kills it. Every driver call runs in a helper
 * process; CRIU's process only reads /proc, holds the claims and runs the
 * restore threads under its ptrace. */
#include "stages.h"
#include "discover.h"
#include "env.h"
#include "explain.h"
#include "pool.h"
#include "helper.h"
#include "nvml.h"
#include "oplog.h"
#include "probe.h"
#include "proc.h"
#include "restore_thread.h"
#include "session.h"
#include "state.h"
#include "tasks.h"
#include "util.h"

#include <errno.h>
#include <fcntl.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#define COMMAND "criu dump"
/* CRIU's --timeout 0 disables its own; the driver's lock still needs one. */
#define LOCK_TIMEOUT_FOR_ZERO 600

static unsigned lock_timeout_s(void)
{
	unsigned t = cs_plugin.criu.timeout_s;
	return t ? t : LOCK_TIMEOUT_FOR_ZERO;
}

/* Nothing here can fail a dump of a tree without CUDA: CRIU loads the
 * plugin for every dump of the node. The driver and the state directory
 * wait for the first task that maps the driver (dump_gpu_start). */
int dump_init(void)
{
	criu_read_options(&cs_plugin.criu);
	if (criu_check_coexistence(false) < 0)
		return -1;
	/* CRIU chooses how to seize before its first PAUSE_DEVICES (and under
	 * the cgroup freezer would call it for the root task alone), so this
	 * cannot wait for a CUDA task; it cannot fail, and is how CRIU seizes
	 * without --freeze-cgroup. */
	criu_interrupt_only();
	cs_plugin.enabled = true;
	return 0;
}

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

/* One line: the task that needed the state directory, why it cannot be
 * used, and a fix that reaches CRIU under a container engine, which
 * passes it no environment. */
static int state_unusable(pid_t pid, const char *comm, const char *why)
{
	bool from_env = cs_env_is_given("CUDASNAP_STATE_DIR");
	oplog_refused(pid, comm, "state-dir", why);
	plog(CS_CRIU_LOG_ERROR,
	     "process %d (%s) maps the GPU driver, so the dump needs cudasnap's state directory, but %s. Fix: set "
	     "CUDASNAP_STATE_DIR=<a directory owned by root, mode 0700, on a writable filesystem> in %s (container "
	     "engines pass CRIU no environment)%s, or make %s such a directory",
	     (int)pid, comm, why, cs_config_path(),
	     from_env ? " and drop it from CRIU's environment, which wins over the file" : "", cs_state_dir());
	return -1;
}

/* The driver would checkpoint it, but could never restore it: the dump is
 * refused before anything changes, rather than leaving images that cannot
 * come back. */
static int refuse_importer(pid_t pid, const cs_proc *p)
{
	char why[256];
	snprintf(why, sizeof(why),
		 "it maps device memory that another process shares with it (CUDA IPC: %s), which the driver can "
		 "never restore",
		 p->ipc_import);
	oplog_refused(pid, p->comm, "ipc-import", why);
	plog(CS_CRIU_LOG_ERROR,
	     "process %d (%s) maps device memory that another process shares with it (CUDA IPC: %s): the driver "
	     "checkpoints such a process but can never restore it, so the dump is refused before anything "
	     "changed. Fix: stop sharing CUDA memory between the container's processes (in PyTorch, do not pass "
	     "CUDA tensors through torch.multiprocessing), or set CUDASNAP_ALLOW_UNRESTORABLE=1 in %s to dump "
	     "it anyway, knowing that it will not come back",
	     (int)pid, p->comm, p->ipc_import, cs_config_path());
	return -1;
}

/* Processes that a dump or command which died in the middle (a CRIU killed
 * by its engine) left locked or checkpointed: named in this dump's log. The
 * driver cannot be asked here, so their state is what 'cudasnap ps' says. */
static void log_left_behind(void)
{
	_cleanup_closedir_ DIR *d = cs_opendir_at(cs_plugin.state_fd, "claims");
	struct dirent *de = NULL;
	while (d && (de = readdir(d)) && de->d_name[0] == '.')
		;
	_cleanup_(cs_ptable_freep) cs_ptable t = { 0 };
	if (!de || cs_scan(NULL, &t, NULL) < 0)
		return; /* no record at all: nothing to scan /proc for */
	_cleanup_free_ cs_left_behind *b = NULL;
	size_t n = 0;
	cs_claims_left_behind(cs_plugin.state_fd, &t, false, &b, &n);
	for (size_t i = 0; i < n; i++)
		plog(CS_CRIU_LOG_WARN,
		     "process %d (%s) may be left locked or checkpointed: %s ended in the middle of an operation on it; "
		     "'cudasnap ps' shows its state, 'cudasnap restore --pid %d' or 'cudasnap unlock --pid %d' "
		     "recovers it",
		     (int)b[i].pid, b[i].comm, b[i].holder, (int)b[i].pid, (int)b[i].pid);
}

static void log_enabled(int version)
{
	plog(CS_CRIU_LOG_INFO,
	     "enabled for the dump (driver %d; lock timeout %u s, tree %s after a dump; from CRIU's %s)", version,
	     lock_timeout_s(), criu_final_name(cs_plugin.criu.final),
	     cs_plugin.criu.from_options ? "options" : "command line");
}

/* The first task of the dump that maps the driver or NVML: whether the
 * driver can checkpoint (asked in a helper process), then the state
 * directory the claims go into. */
static dump_gpu gpu_start(pid_t pid, const char *comm)
{
	int version;
	cs_error err = { 0 };
	oplog_gpu();
	if (driver_probe(&version, &err) < 0) {
		snprintf(cs_plugin.no_driver, sizeof(cs_plugin.no_driver), "%.250s", err.message);
		plog(CS_CRIU_LOG_INFO, "not enabled: %s", err.message);
		return DUMP_GPU_NO_DRIVER;
	}
	cs_plugin.state_fd = state_open_writable(&err);
	if (cs_plugin.state_fd < 0) {
		state_unusable(pid, comm, err.message);
		return DUMP_GPU_FAILED;
	}
	log_enabled(version);
	log_left_behind();
	return DUMP_GPU_READY;
}

/* Without a driver that can checkpoint, CRIU cannot dump a task's device
 * files and mappings either: refused now, naming it. */
static int refuse_without_driver(pid_t pid, const cs_proc *p)
{
	char why[400];
	snprintf(why, sizeof(why), "it holds GPU device files, but no driver here can checkpoint it (%s)",
		 cs_plugin.no_driver);
	oplog_refused(pid, p->comm, "no-driver", why);
	plog(CS_CRIU_LOG_ERROR,
	     "process %d (%s) holds %d GPU device fds and %d device mappings, but no driver here can checkpoint "
	     "it (%s). CRIU cannot dump it. Fix: a driver with the checkpoint API (R570 or newer), or "
	     "CUDASNAP_LIBCUDA=<its libcuda.so.1> in %s",
	     (int)pid, p->comm, p->device_fds, p->device_maps, cs_plugin.no_driver, cs_config_path());
	return -1;
}

/* At each task that maps the driver or NVML: 1 to go on and lock it, 0 when
 * there is nothing to do, -1 (logged) when the dump fails. */
static int dump_gpu_start(pid_t pid, const cs_proc *p)
{
	if (cs_plugin.gpu == DUMP_GPU_UNASKED)
		cs_plugin.gpu = gpu_start(pid, p->comm);
	if (cs_plugin.gpu == DUMP_GPU_READY)
		return 1;
	if (cs_plugin.gpu == DUMP_GPU_NO_DRIVER)
		return p->device_fds || p->device_maps ? refuse_without_driver(pid, p) : 0;
	return -1;
}

/* A process that holds GPU device files the driver does not know (a child
 * forked after CUDA init, the PyTorch DataLoader shape) keeps them whatever
 * is checkpointed, and CRIU cannot dump it: say so now, naming it. */
static int refuse_holder(pid_t pid, const cs_proc *p, pid_t ppid)
{
	bool forked = find_task(ppid) != NULL;
	char why[200];
	snprintf(why, sizeof(why), "it holds GPU device files, but the driver cannot checkpoint it: %s",
		 forked ? "it was forked from a CUDA process without exec" : "it opened the device files itself");
	oplog_refused(pid, p->comm, "device-holder", why);
	plog(CS_CRIU_LOG_ERROR,
	     "process %d (%s) holds %d GPU device fds and %d device mappings, but the driver "
	     "cannot checkpoint it: %s. CRIU cannot dump it. Fix: create such workers with "
	     "multiprocessing_context=\"spawn\" or \"forkserver\" (or before CUDA is initialized), or stop them "
	     "before the dump",
	     (int)pid, p->comm, p->device_fds, p->device_maps,
	     forked ? "it was forked from a CUDA process without exec" : "it opened the device files itself");
	return -1;
}

/* What a helper learns of one task while it runs. */
typedef struct pause_reply {
	int rt; /* GetRestoreThreadId */
	pid_t tid;
	int state_rc, state;
	int lock_rc;
	double lock_s;
	cs_error err; /* why the lock failed */
} pause_reply;

/* The driver's lock waits for the process's own threads to leave the
 * driver, so it can only be taken while they run: here, one process at a
 * time, before CRIU stops each. */
static int pause_task(void *ctx, void **out, size_t *len)
{
	pid_t pid = *(pid_t *)ctx;
	pause_reply *r = calloc(1, sizeof(*r));
	_cleanup_(cs_driver_freep) cs_driver *d = NULL;
	if (!r)
		return 1;
	*out = r;
	*len = sizeof(*r);
	if (cs_driver_open(&d, &r->err) < 0)
		return 1;
	r->rt = cs_cu_get_restore_tid(d, pid, &r->tid);
	r->state_rc = r->rt == CS_CU_SUCCESS ? cs_cu_get_state(d, pid, &r->state) : -1;
	if (r->state_rc != CS_CU_SUCCESS || r->state != CS_STATE_RUNNING)
		return 0;
	unsigned ms = lock_timeout_s() * 1000;
	double t0 = cs_now();
	r->lock_rc = cs_cu_lock(d, pid, ms);
	r->lock_s = cs_now() - t0;
	if (r->lock_rc != CS_CU_SUCCESS) {
		cs_explain_ctx c = { .call = CS_CALL_LOCK,
				     .pid = pid,
				     .cls = CS_CLASS_CUDA,
				     .state = CS_STATE_RUNNING,
				     .pid_visible = true,
				     .timeout_ms = ms };
		cs_explain(d, &c, r->lock_rc, &r->err);
	}
	return 0;
}

/* The task's processes as /proc shows them, before any driver call. */
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

/* A task the dump met but could not lock: nothing was done to it, and the
 * dump fails; step -1 when no step was tried. */
static int not_locked(pid_t pid, const char *comm, int step, int cu, const char *why)
{
	cs_history_proc *h = oplog_proc(pid, 0, comm);
	if (h) {
		h->outcome = CS_HIST_ROLLED_BACK;
		h->step = step;
		h->cu = cu;
		snprintf(h->why, sizeof(h->why), "%s", why);
	}
	return -1;
}

static int lock_task(pid_t pid, const cs_proc *p, pid_t ppid)
{
	cs_error err = { 0 };
	if (cs_claims_add(&cs_plugin.claims, cs_plugin.state_fd, pid, p->comm, COMMAND, NULL, 0, &err) < 0) {
		if (err.status == CS_ESTATE && err.sys) /* the directory, not another holder */
			return state_unusable(pid, p->comm, err.message);
		oplog_refused(pid, p->comm, "busy", err.message);
		plog(CS_CRIU_LOG_ERROR, "%s; %s", err.message, err.hint);
		return -1;
	}
	_cleanup_free_ void *buf = NULL;
	size_t len;
	char what[96];
	snprintf(what, sizeof(what), "the lock of process %d", (int)pid);
	int rc = helper_run(what, pause_task, &pid, bound_lock(lock_timeout_s()), &buf, &len);
	const pause_reply *r = buf;
	if (rc < 0 || len != sizeof(*r)) {
		plog(CS_CRIU_LOG_ERROR, "process %d (%s): the helper process gave no answer", (int)pid, p->comm);
		return not_locked(pid, p->comm, CS_STEP_LOCK, 0, "the helper process for its lock gave no answer");
	}
	if (rc != 0) {
		plog(CS_CRIU_LOG_ERROR, "process %d (%s): %s; %s", (int)pid, p->comm, r->err.message, r->err.hint);
		return not_locked(pid, p->comm, -1, 0, r->err.message);
	}
	if (r->rt != CS_CU_SUCCESS) /* not a CUDA process: only its device files matter */
		return p->device_fds || p->device_maps ? refuse_holder(pid, p, ppid) : 0;
	if (r->state_rc != CS_CU_SUCCESS) {
		plog(CS_CRIU_LOG_ERROR, "process %d (%s): the driver gave no state (%s)", (int)pid, p->comm,
		     r->state_rc == CS_CU_TIMED_OUT ? "it did not answer in time" : "an error");
		return not_locked(pid, p->comm, -1, r->state_rc, "the driver gave no state");
	}
	plugin_task *t = add_task(pid);
	if (!t || task_identity(pid, &t->nspid, t->comm, sizeof(t->comm)) < 0)
		return -1;
	cs_history_proc *h = oplog_proc(pid, t->nspid, t->comm);
	t->tid = cs_proc_thread_here(cs_proc_dir(), pid, r->tid);
	char named[48] = "";
	if (t->tid != r->tid) /* the driver answered in the process's own namespace */
		snprintf(named, sizeof(named), " (%d inside)", (int)r->tid);
	plog(CS_CRIU_LOG_INFO, "process %d (%s, %d in its namespace): CUDA, %s, restore thread %d%s", (int)pid, t->comm,
	     (int)t->nspid, cs_state_name(r->state), (int)t->tid, named);
	if (r->state != CS_STATE_RUNNING) {
		if (h) {
			h->outcome = CS_HIST_LEFT;
			snprintf(h->why, sizeof(h->why), "already %s", cs_state_name(r->state));
		}
		return 0;
	}
	if (r->lock_rc != CS_CU_SUCCESS) {
		plog(CS_CRIU_LOG_ERROR, "%s; %s", r->err.message, r->err.hint);
		return not_locked(pid, t->comm, CS_STEP_LOCK, r->lock_rc, r->err.message);
	}
	t->locked = true;
	if (h) {
		h->timed[CS_STEP_LOCK] = true;
		h->seconds[CS_STEP_LOCK] = r->lock_s;
	}
	plog(CS_CRIU_LOG_INFO, "process %d locked in %.3f s", (int)pid, r->lock_s);
	return 0;
}

int dump_pause(int pid)
{
	if (!cs_plugin.coexistence_checked) {
		cs_plugin.coexistence_checked = true;
		if (criu_check_coexistence(true) < 0)
			return -1;
	}
	if (note_tree_task(pid) < 0)
		return -1;
	_cleanup_(cs_proc_clearp) cs_proc p = { .pid = pid };
	cs_stat st;
	if (scan(pid, &p, &st) < 0)
		return 0; /* gone: CRIU will say so */
	/* Neither the driver nor NVML mapped: no driver call needed. */
	if (!p.maps_libcuda && !p.maps_nvml)
		return p.device_fds || p.device_maps ? refuse_holder(pid, &p, st.ppid) : 0;
	int go = dump_gpu_start(pid, &p);
	if (go > 0 && p.ipc_import[0] && !cs_env_on("CUDASNAP_ALLOW_UNRESTORABLE"))
		return refuse_importer(pid, &p);
	return go <= 0 ? go : lock_task(pid, &p, st.ppid);
}

static bool was_locked(const plugin_task *t)
{
	return t->locked;
}

typedef struct checkpoint_ctx {
	pid_t *pids;
	size_t n;
} checkpoint_ctx;

/* In the helper: the transaction, then the record for the restore. */
static int checkpoint_tasks(void *ctx, void **out, size_t *len)
{
	const checkpoint_ctx *c = ctx;
	plugin_run r = { .op = CS_OP_CHECKPOINT_LOCKED,
			 .command = COMMAND,
			 .pids = c->pids,
			 .npids = c->n,
			 .claimed = true,
			 .scope = cs_plugin.tree,
			 .nscope = cs_plugin.ntree,
			 .timeout_s = lock_timeout_s() };
	_cleanup_(cs_driver_freep) cs_driver *d = NULL;
	_cleanup_free_ cs_target *t = NULL;
	size_t n = 0;
	run_outcome *o = run_session(&r, &d, &t, &n);
	if (!o)
		return 1;
	*out = o;
	*len = run_outcome_size(o->n);
	if (o->rc < 0 || !o->acted)
		return 0;
	/* NVML names the GPUs for a restore elsewhere: loaded here, in the
	 * helper process, never in CRIU's. */
	_cleanup_free_ cs_nvml_gpu *gpus = NULL;
	size_t ngpus = 0;
	cs_nvml_list(&gpus, &ngpus);
	_cleanup_free_ char *text = cs_manifest_render(t, n, d, o->wall, gpus, ngpus);
	cs_error err = { 0 };
	if (!text || cs_state_write(criu_images_dir(), CS_PLUGIN_RECORD, text, strlen(text), &err) < 0) {
		o->rc = -CS_ESTATE;
		snprintf(o->message, sizeof(o->message), "cannot write %s into the images directory: %.400s",
			 CS_PLUGIN_RECORD, text ? err.message : "out of memory");
	}
	return 0;
}

static void note_outcome(const run_outcome *o)
{
	for (size_t i = 0; i < cs_plugin.ntasks; i++)
		cs_plugin.tasks[i].result = o && o->rc == 0 ? 0 : cs_plugin.tasks[i].locked ? -1 : 0;
	for (size_t i = 0; o && i < o->n; i++) {
		plugin_task *p = find_task(o->t[i].pid);
		if (p)
			p->checkpointed = o->t[i].state == CS_STATE_CHECKPOINTED;
		if (o->t[i].lost)
			plog(CS_CRIU_LOG_ERROR, "process %d (%s) is LOST: %s; its GPU state is gone, restart it",
			     (int)o->t[i].pid, o->t[i].comm, o->t[i].lost_why[0] ? o->t[i].lost_why : "it exited");
		else if (o->t[i].failed || o->t[i].rollback_failed)
			plog(CS_CRIU_LOG_ERROR, "process %d (%s): %s", (int)o->t[i].pid, o->t[i].comm, o->t[i].message);
	}
}

/* The whole tree at once: every CUDA process the plugin locked. */
static void checkpoint_all(void)
{
	cs_plugin.dumped = true;
	checkpoint_ctx c = { .pids = task_pids(was_locked, &c.n) };
	_cleanup_free_ pid_t *pids = c.pids;
	if (!pids || c.n == 0) {
		note_outcome(NULL);
		return;
	}
	_cleanup_free_ void *buf = NULL;
	size_t len = 0;
	int rc = helper_run_resumed(was_locked, "the checkpoint", checkpoint_tasks, &c, bound_moves(), &buf, &len);
	const run_outcome *o = rc == 0 ? run_outcome_check(buf, len, "the checkpoint") : NULL;
	if (o && o->rc < 0)
		oplog_fail(o->message);
	if (o && o->rc < 0)
		plog(CS_CRIU_LOG_ERROR, "checkpoint failed: %s%s%s", o->message, o->hint[0] ? "; " : "", o->hint);
	else if (o)
		plog(CS_CRIU_LOG_INFO, "checkpointed %zu process%s, %.2f GiB in %.3f s", o->acted,
		     o->acted == 1 ? "" : "es", (double)o->bytes / (1 << 30), o->wall);
	if (o && o->rc == 0 && criu_require_plugin() < 0)
		((run_outcome *)buf)->rc = -1;
	oplog_session(o, false);
	note_outcome(o);
}

int dump_checkpoint(int pid)
{
	if (!cs_plugin.dumped)
		checkpoint_all();
	plugin_task *t = find_task(pid);
	return t ? t->result : 0;
}

static bool was_checkpointed(const plugin_task *t)
{
	return t->checkpointed;
}
static bool only_locked(const plugin_task *t)
{
	return t->locked && !t->checkpointed;
}

typedef struct give_back_ctx {
	pid_t *restore, *unlock;
	size_t nrestore, nunlock;
} give_back_ctx;

/* In the helper: both sessions of the way back, their outcomes one after
 * the other. */
static int give_back_tasks(void *ctx, void **out, size_t *len)
{
	const give_back_ctx *c = ctx;
	run_outcome *o[2] = { NULL, NULL };
	for (int k = 0; k < 2; k++) {
		plugin_run r = { .op = k ? CS_OP_UNLOCK : CS_OP_RESTORE,
				 .command = COMMAND,
				 .pids = k ? c->unlock : c->restore,
				 .npids = k ? c->nunlock : c->nrestore,
				 .claimed = true };
		_cleanup_(cs_driver_freep) cs_driver *d = NULL;
		_cleanup_free_ cs_target *t = NULL;
		size_t n;
		o[k] = r.npids ? run_session(&r, &d, &t, &n) : calloc(1, run_outcome_size(0));
	}
	size_t a = o[0] ? run_outcome_size(o[0]->n) : 0, b = o[1] ? run_outcome_size(o[1]->n) : 0;
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

static void name_left_behind(const run_outcome *o, const char *after)
{
	for (size_t i = 0; o && i < o->n; i++)
		if (!o->t[i].done && o->t[i].unrestorable)
			plog(CS_CRIU_LOG_ERROR,
			     "process %d (%s) could not be returned to running after the %s: the driver refuses its "
			     "restore at every try; its GPU state is lost: restart it",
			     (int)o->t[i].pid, o->t[i].comm, after);
		else if (!o->t[i].done)
			plog(CS_CRIU_LOG_ERROR,
			     "process %d (%s) could not be returned to running after the %s (%s): it is %s; recover "
			     "with 'cudasnap %s --pid %d' once CRIU has let it go",
			     (int)o->t[i].pid, o->t[i].comm, after, o->t[i].message[0] ? o->t[i].message : o->message,
			     cs_state_name(o->t[i].state) ? cs_state_name(o->t[i].state) : "in an unknown state",
			     o->t[i].state == CS_STATE_LOCKED ? "unlock" : "restore", (int)o->t[i].pid);
}

/* The way back gave no answer: every process it was to bring back stays
 * named with what recovers it. */
static void left_behind(void)
{
	for (size_t i = 0; i < cs_plugin.ntasks; i++) {
		const plugin_task *t = &cs_plugin.tasks[i];
		cs_history_proc *h = t->locked ? oplog_proc(t->pid, t->nspid, t->comm) : NULL;
		if (!h)
			continue;
		h->outcome = CS_HIST_LEFT_BEHIND;
		snprintf(h->recovery, sizeof(h->recovery), "cudasnap %s --pid %d once CRIU has let it go",
			 t->checkpointed ? "restore" : "unlock", (int)t->pid);
	}
}

/* Every process back to the GPU state it had before the dump; failed: the
 * dump failed, so what comes back is rolled back. */
static void give_back(const char *after, bool failed)
{
	give_back_ctx c = { .restore = task_pids(was_checkpointed, &c.nrestore),
			    .unlock = task_pids(only_locked, &c.nunlock) };
	_cleanup_free_ pid_t *r = c.restore, *u = c.unlock;
	if (!r || !u)
		return;
	_cleanup_free_ void *buf = NULL;
	size_t len = 0;
	int rc = helper_run_resumed(was_locked, "the way back", give_back_tasks, &c, bound_moves(), &buf, &len);
	const run_outcome *o1 = rc == 0 && len >= sizeof(run_outcome) ? buf : NULL;
	size_t first = o1 ? run_outcome_size(o1->n) : 0;
	o1 = o1 ? run_outcome_check(buf, first <= len ? first : len, "the way back") : NULL;
	const run_outcome *o2 = o1 ? run_outcome_check((char *)buf + first, len - first, "the way back") : NULL;
	if (!o1 || !o2) {
		left_behind();
		plog(CS_CRIU_LOG_ERROR,
		     "could not return the processes to running after the %s; recover with 'cudasnap restore' and "
		     "'cudasnap unlock' once CRIU has let them go",
		     after);
		return;
	}
	oplog_session(o1, failed);
	oplog_session(o2, failed);
	name_left_behind(o1, after);
	name_left_behind(o2, after);
	size_t n = o1->acted + o2->acted;
	plog(CS_CRIU_LOG_INFO, "%zu process%s back to running after the %s", n, n == 1 ? "" : "es", after);
}

/* CRIU leaves the tree stopped: the driver cannot be asked now, and the
 * GPU state stays checkpointed until the user resumes the processes. */
static void name_stopped(void)
{
	for (size_t i = 0; i < cs_plugin.ntasks; i++) {
		const plugin_task *t = &cs_plugin.tasks[i];
		cs_history_proc *h = t->locked ? oplog_proc(t->pid, t->nspid, t->comm) : NULL;
		if (h)
			snprintf(h->recovery, sizeof(h->recovery), "kill -CONT %d, then cudasnap %s --pid %d",
				 (int)t->pid, t->checkpointed ? "restore" : "unlock", (int)t->pid);
		if (t->locked)
			plog(CS_CRIU_LOG_WARN,
			     "process %d (%s) is left stopped by CRIU (--leave-stopped) and %s on the GPU: resume it "
			     "with 'kill -CONT %d' and then 'cudasnap %s --pid %d'",
			     (int)t->pid, t->comm, t->checkpointed ? "checkpointed" : "locked", (int)t->pid,
			     t->checkpointed ? "restore" : "unlock", (int)t->pid);
	}
}

/* CRIU calls this while it still holds the tree, before it lets it go or
 * kills it. */
void dump_exit(int ret)
{
	criu_final final = ret ? CRIU_FINAL_ALIVE : cs_plugin.criu.final;
	bool any = false;
	for (size_t i = 0; i < cs_plugin.ntasks; i++)
		any |= cs_plugin.tasks[i].locked;
	if (!any)
		return;
	if (final == CRIU_FINAL_ALIVE)
		give_back(ret ? "failed dump" : "dump (the tree keeps running)", ret != 0);
	else if (final == CRIU_FINAL_STOPPED)
		name_stopped();
}
