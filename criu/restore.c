/* criu restore: the first RESUME_DEVICES_LATE restores and unlocks every
 * process of the plugin's record at once. CRIU ignores this hook's result,
 * so a failure is logged as an error naming each process, and the processes
 * stay checkpointed, which 'cudasnap ps' shows and 'cudasnap restore' mends. */
#include "plugin.h"
#include "manifest.h"
#include "state.h"
#include "util.h"

#include <dlfcn.h>
#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

/* The tasks of the record, with their restore threads as they are now. */
static int load_record(void)
{
	cs_criu_get_image_dir_fn imgdir = (cs_criu_get_image_dir_fn)dlsym(RTLD_DEFAULT, "criu_get_image_dir");
	_cleanup_free_ char *buf = NULL;
	cs_error err = { 0 };
	ssize_t len = imgdir ? cs_state_read(imgdir(), CS_PLUGIN_RECORD, CS_MANIFEST_MAX, &buf, &err) : -1;
	cs_manifest m;
	if (len < 0 || !buf || cs_manifest_parse(buf, (size_t)len, &m, &err) < 0) {
		plog(CS_CRIU_LOG_ERROR, "the images need the GPU plugin but its record %s cannot be read: %s",
		     CS_PLUGIN_RECORD, buf || len < 0 ? err.message : "it is missing");
		return -1;
	}
	for (size_t i = 0; i < m.n; i++) {
		plugin_task *t = add_task(m.e[i].pid, 0);
		if (t)
			t->initial_state = CS_STATE_CHECKPOINTED;
	}
	cs_manifest_free(&m);
	return 0;
}

int restore_init(void)
{
	cs_criu_check_and_remove_inventory_plugin_fn listed =
		(cs_criu_check_and_remove_inventory_plugin_fn)dlsym(RTLD_DEFAULT, "check_and_remove_inventory_plugin");
	if (listed && !listed(CS_PLUGIN_NAME, strlen(CS_PLUGIN_NAME)))
		return 0; /* no GPU process in these images */
	cs_error err = { 0 };
	if (cs_driver_open(&cs_plugin.d, &err) < 0) {
		plog(CS_CRIU_LOG_ERROR, "the images hold checkpointed GPU processes, but %s; %s", err.message,
		     err.hint);
		return -1;
	}
	if (load_record() < 0)
		return -1;
	cs_plugin.enabled = true;
	plog(CS_CRIU_LOG_INFO, "enabled for the restore of %zu GPU process%s", cs_plugin.ntasks,
	     cs_plugin.ntasks == 1 ? "" : "es");
	return 0;
}

/* CRIU has just made the processes of the record anew: an entry of the state
 * directory's manifest for one of their pids (the dump's own, when it ran on
 * this machine) describes a process that the dump ended, and would make
 * 'cudasnap restore' refuse the restored one as a reused PID. Such entries
 * are dropped; the record in the images directory gives the order. */
static void forget_dumped_processes(void)
{
	cs_error err = { 0 };
	_cleanup_close_ int dir = cs_state_open(&err);
	_cleanup_close_ int lock = dir >= 0 ? cs_state_lock(dir, "criu restore", &err) : -1;
	_cleanup_free_ char *buf = NULL;
	ssize_t len = lock >= 0 ? cs_state_read(dir, CS_MANIFEST_NAME, CS_MANIFEST_MAX, &buf, &err) : -1;
	if (len == 0 && !buf)
		return;
	_cleanup_(cs_manifest_freep) cs_manifest m = { 0 };
	_cleanup_free_ cs_target *gone = NULL;
	size_t ngone = 0;
	if (len > 0 && cs_manifest_parse(buf, (size_t)len, &m, &err) == 0 &&
	    (gone = calloc(m.n ? m.n : 1, sizeof(*gone)))) {
		/* cs_manifest_prune drops the entries of targets restored to running. */
		for (size_t i = 0; i < m.n; i++) {
			if (!find_task(m.e[i].pid))
				continue;
			cs_target *g = &gone[ngone++];
			g->pid = m.e[i].pid;
			g->start_time = m.e[i].start_time;
			g->done[CS_STEP_RESTORE] = true;
			g->state = CS_STATE_RUNNING;
		}
		if (ngone == 0)
			return;
		size_t left = 0;
		_cleanup_free_ char *rest = cs_manifest_prune(buf, (size_t)len, gone, ngone, &left);
		if (rest && left == 0 && unlinkat(dir, CS_MANIFEST_NAME, 0) == 0)
			return;
		if (rest && left > 0 && cs_state_write(dir, CS_MANIFEST_NAME, rest, strlen(rest), &err) == 0)
			return;
	}
	if (!err.message[0])
		snprintf(err.message, sizeof(err.message), "cannot update it");
	plog(CS_CRIU_LOG_WARN,
	     "the manifest in %s may still name the processes of the dump (%s): should their "
	     "restore fail, restore them with 'cudasnap restore --ignore-manifest'",
	     cs_state_dir(), err.message);
}

static bool any(const plugin_task *t)
{
	(void)t;
	return true;
}

static void restore_all(void)
{
	cs_plugin.restored = true;
	for (size_t i = 0; i < cs_plugin.ntasks; i++) {
		plugin_task *t = &cs_plugin.tasks[i];
		t->result = -1;
		if (cs_cu_get_restore_tid(cs_plugin.d, t->pid, &t->tid) != CS_CU_SUCCESS)
			plog(CS_CRIU_LOG_ERROR, "process %d: the driver does not know it after the restore",
			     (int)t->pid);
	}
	forget_dumped_processes();
	resume_all();
	_cleanup_free_ cs_target *t = NULL;
	size_t n = 0;
	cs_txn_result res;
	cs_error err = { 0 };
	int rc = run_session(CS_OP_RESTORE, any, &t, &n, &res, &err);
	stop_all();
	for (size_t i = 0; i < n; i++) {
		plugin_task *p = find_task(t[i].pid);
		if (p && rc == 0)
			p->result = 0;
		if (rc < 0)
			plog(CS_CRIU_LOG_ERROR,
			     "process %d (%s) is NOT restored on the GPU: it stays %s; run "
			     "'cudasnap restore --pid %d' (see 'cudasnap ps')",
			     (int)t[i].pid, t[i].comm,
			     cs_state_name(t[i].state) ? cs_state_name(t[i].state) : "in an unknown state",
			     (int)t[i].pid);
	}
	if (rc < 0)
		plog(CS_CRIU_LOG_ERROR, "GPU restore FAILED: %s%s%s", err.message, err.hint[0] ? "; " : "", err.hint);
	else
		plog(CS_CRIU_LOG_INFO, "restored %zu process%s, %.2f GiB in %.3f s", res.acted,
		     res.acted == 1 ? "" : "es", (double)res.bytes / (1 << 30), res.wall_seconds);
}

int restore_resume(int pid)
{
	if (!cs_plugin.restored)
		restore_all();
	plugin_task *t = find_task(pid);
	return t ? t->result : 0;
}
