/* criu dump: learn the tree's CUDA processes while they run (PAUSE_DEVICES),
 * checkpoint them all as one transaction at the first CHECKPOINT_DEVICES,
 * and return every one to its state before the dump when the dump fails or
 * the tree keeps running (the exit hook). */
#include "plugin.h"
#include "explain.h"
#include "manifest.h"
#include "pool.h"
#include "proc.h"
#include "state.h"
#include "util.h"

#include <dlfcn.h>
#include <fcntl.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

/* A process that holds GPU device files the driver does not know (a child
 * forked after CUDA init, the PyTorch DataLoader shape) keeps them whatever
 * is checkpointed, and CRIU cannot dump it: say so now, naming it. */
static int refuse_holder(pid_t pid)
{
	_cleanup_close_ int pdir = cs_proc_open(cs_proc_dir(), pid);
	cs_stat st;
	if (pdir < 0 || cs_proc_read_stat(pdir, &st) < 0)
		return 0;
	_cleanup_(cs_proc_clearp) cs_proc p = { .pid = pid };
	cs_proc_scan_gpu(pdir, cs_dev_dir(), &p);
	int fds = p.device_fds, maps = p.device_maps;
	if (!fds && !maps)
		return 0;
	bool forked = find_task(st.ppid) != NULL;
	plog(CS_CRIU_LOG_ERROR,
	     "process %d (%s) holds %d GPU device fds and %d device mappings, but the driver "
	     "cannot checkpoint it: %s. CRIU cannot dump it. Fix: create such workers with "
	     "multiprocessing_context=\"spawn\" or \"forkserver\" (or before CUDA is initialized), or stop them "
	     "before the dump",
	     (int)pid, st.comm, fds, maps,
	     forked ? "it was forked from a CUDA process without exec" : "it opened the device files itself");
	return -1;
}

/* The driver's lock waits for the process's own threads to leave the
 * driver, so it can only be taken while they run: here, one process at a
 * time, before CRIU stops each. The exit hook unlocks them if the dump
 * fails. */
static int lock_now(plugin_task *t)
{
	unsigned ms = criu_timeout_s() * 1000;
	double t0 = cs_now();
	int r = cs_cu_lock(cs_plugin.d, t->pid, ms);
	if (r == CS_CU_SUCCESS) {
		t->locked = true;
		plog(CS_CRIU_LOG_INFO, "process %d locked in %.3f s", (int)t->pid, cs_now() - t0);
		return 0;
	}
	cs_error err = { 0 };
	cs_explain_ctx c = { .call = CS_CALL_LOCK,
			     .pid = t->pid,
			     .cls = CS_CLASS_CUDA,
			     .state = CS_STATE_RUNNING,
			     .pid_visible = true,
			     .timeout_ms = ms };
	cs_explain(cs_plugin.d, &c, r, &err);
	plog(CS_CRIU_LOG_ERROR, "%s; %s", err.message, err.hint);
	return -1;
}

int dump_pause(int pid)
{
	pid_t tid;
	if (!cs_plugin.coexistence_checked) {
		cs_plugin.coexistence_checked = true;
		if (check_coexistence(true) < 0)
			return -1;
	}
	if (cs_cu_get_restore_tid(cs_plugin.d, pid, &tid) != CS_CU_SUCCESS)
		return refuse_holder(pid);
	/* Still running here: the last moment it can answer without help. */
	int state;
	int r = cs_cu_get_state(cs_plugin.d, pid, &state);
	if (r != CS_CU_SUCCESS) {
		plog(CS_CRIU_LOG_ERROR, "process %d: the driver gave no state (%s)", pid, cs_cu_name(cs_plugin.d, r));
		return -1;
	}
	plugin_task *t = add_task(pid, tid);
	if (!t)
		return -1;
	t->initial_state = state;
	plog(CS_CRIU_LOG_INFO, "process %d: CUDA, %s, restore thread %d", pid, cs_state_name(state), (int)tid);
	return state == CS_STATE_RUNNING ? lock_now(t) : 0;
}

static bool was_locked(const plugin_task *t)
{
	return t->locked;
}

/* The plugin's own record in the images directory, and CRIU's note that a
 * restore needs the plugin. */
static int record(const cs_target *t, size_t n)
{
	cs_criu_get_image_dir_fn imgdir = (cs_criu_get_image_dir_fn)dlsym(RTLD_DEFAULT, "criu_get_image_dir");
	cs_criu_add_inventory_plugin_fn add =
		(cs_criu_add_inventory_plugin_fn)dlsym(RTLD_DEFAULT, "add_inventory_plugin");
	if (!imgdir || !add) {
		plog(CS_CRIU_LOG_ERROR,
		     "this CRIU exports neither criu_get_image_dir nor add_inventory_plugin; "
		     "cannot record the GPU processes for the restore");
		return -1;
	}
	_cleanup_free_ char *text = cs_manifest_render(t, n, cs_plugin.d, 0);
	cs_error err = { 0 };
	if (!text || cs_state_write(imgdir(), CS_PLUGIN_RECORD, text, strlen(text), &err) < 0) {
		plog(CS_CRIU_LOG_ERROR, "cannot write %s: %s", CS_PLUGIN_RECORD, err.message);
		return -1;
	}
	if (add(CS_PLUGIN_NAME) != 0) {
		plog(CS_CRIU_LOG_ERROR, "cannot record the plugin as required in the inventory");
		return -1;
	}
	return 0;
}

static void note_results(const cs_target *t, size_t n, int rc)
{
	for (size_t i = 0; i < cs_plugin.ntasks; i++)
		cs_plugin.tasks[i].result = rc < 0 && was_locked(&cs_plugin.tasks[i]) ? -1 : 0;
	for (size_t i = 0; i < n; i++) {
		plugin_task *p = find_task(t[i].pid);
		if (p)
			p->checkpointed = rc == 0 && t[i].state == CS_STATE_CHECKPOINTED && !t[i].skipped;
		if (t[i].failed || t[i].rollback_failed)
			plog(CS_CRIU_LOG_ERROR, "process %d (%s): %s", (int)t[i].pid, t[i].comm, t[i].error.message);
	}
}

/* The whole tree at once: every CUDA process that ran when CRIU came. */
static void checkpoint_all(void)
{
	cs_plugin.dumped = true;
	resume_all();
	_cleanup_free_ cs_target *t = NULL;
	size_t n = 0;
	cs_txn_result res;
	cs_error err = { 0 };
	int rc = run_session(CS_OP_CHECKPOINT_LOCKED, was_locked, &t, &n, &res, &err);
	stop_all();
	if (rc < 0)
		plog(CS_CRIU_LOG_ERROR, "checkpoint failed: %s%s%s", err.message, err.hint[0] ? "; " : "", err.hint);
	else if (n)
		plog(CS_CRIU_LOG_INFO, "checkpointed %zu process%s, %.2f GiB in %.3f s", res.acted,
		     res.acted == 1 ? "" : "es", (double)res.bytes / (1 << 30), res.wall_seconds);
	if (rc == 0 && n && record(t, n) < 0)
		rc = -1;
	note_results(t, n, rc);
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

/* One session of the way back; logs and returns how many came back. */
static size_t give_back(cs_op op, bool (*which)(const plugin_task *t), const char *after)
{
	_cleanup_free_ cs_target *t = NULL;
	size_t n = 0;
	cs_txn_result res;
	cs_error err = { 0 };
	if (run_session(op, which, &t, &n, &res, &err) < 0) {
		plog(CS_CRIU_LOG_ERROR,
		     "could not return the processes to running after the %s: %s; recover with "
		     "'cudasnap %s' once CRIU has let them go",
		     after, err.message, cs_op_name(op));
		return 0;
	}
	return res.acted;
}

/* CRIU calls this while it still holds the tree: a failed dump, or one with
 * --leave-running, gives every process back the GPU state it had. */
void dump_exit(int ret)
{
	bool back = ret != 0 || criu_leave_running();
	size_t count = 0;
	for (size_t i = 0; i < cs_plugin.ntasks; i++)
		count += cs_plugin.tasks[i].locked;
	if (!back || count == 0)
		return;
	const char *after = ret ? "failed dump" : "dump (--leave-running)";
	resume_all();
	size_t n = give_back(CS_OP_RESTORE, was_checkpointed, after);
	n += give_back(CS_OP_UNLOCK, only_locked, after);
	stop_all();
	plog(CS_CRIU_LOG_INFO, "%zu process%s back to running after the %s", n, n == 1 ? "" : "es", after);
}
