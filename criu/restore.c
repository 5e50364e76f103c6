/* criu restore: the processes come back with the pids they had inside their
 * PID namespace, but under other pids on the host when the namespace is new
 * (a container). Each RESUME_DEVICES_LATE names one restored task as CRIU
 * sees it; the plugin matches it to an entry of its record by the pid the
 * process has inside its own namespace (and its command name), and once
 * every entry is matched restores them all at once, onto the recorded GPUs
 * or, when those are not on this machine, onto the ones the processes can
 * use. CRIU ignores this hook's result, so a failure is logged as an error
 * naming each process, which stays checkpointed ('cudasnap restore' mends
 * it). */
#include "stages.h"
#include "env.h"
#include "gpumap.h"
#include "gpuroom.h"
#include "helper.h"
#include "oplog.h"
#include "probe.h"
#include "proc.h"
#include "restore_room.h"
#include "restore_thread.h"
#include "session.h"
#include "state.h"
#include "tasks.h"
#include "util.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

/* The record the dump wrote into the images. */
static int load_record(void)
{
	_cleanup_free_ char *buf = NULL;
	cs_error err = { 0 };
	int dir = criu_images_dir();
	ssize_t len = dir >= 0 ? cs_state_read(dir, CS_PLUGIN_RECORD, CS_MANIFEST_MAX, &buf, &err) : -1;
	if (len < 0 || !buf || cs_manifest_parse_as(buf, (size_t)len, "it", NULL, &cs_plugin.record, &err) < 0) {
		plog(CS_CRIU_LOG_ERROR, "the images need the GPU plugin but its record %s cannot be read: %s",
		     CS_PLUGIN_RECORD, buf || len < 0 ? err.message : "it is missing");
		return -1;
	}
	return 0;
}

int restore_init(void)
{
	if (criu_check_coexistence(false) < 0)
		return -1;
	if (!criu_images_need_plugin())
		return 0; /* no GPU process in these images */
	oplog_gpu();
	if (load_record() < 0)
		return -1;
	oplog_record(&cs_plugin.record);
	int version;
	cs_error err = { 0 };
	if (driver_probe(&version, &err) < 0) {
		plog(CS_CRIU_LOG_ERROR, "the images hold checkpointed GPU processes, but %s; %s", err.message,
		     err.hint);
		return -1;
	}
	if (restore_room_check() < 0)
		return -1;
	cs_plugin.enabled = true;
	plog(CS_CRIU_LOG_INFO, "enabled for the restore of %zu GPU process%s (driver %d)", cs_plugin.record.n,
	     cs_plugin.record.n == 1 ? "" : "es", version);
	return 0;
}

/* The pid an entry had inside its own PID namespace (records of earlier
 * versions name only the pid CRIU saw). */
static pid_t entry_nspid(const cs_manifest_entry *e)
{
	return e->nspid ? e->nspid : e->pid;
}

static bool entry_taken(size_t k)
{
	for (size_t i = 0; i < cs_plugin.ntasks; i++)
		if (cs_plugin.tasks[i].entry == k)
			return true;
	return false;
}

/* The entry a restored task stands for: same pid inside its namespace and
 * same command name, else (a name the process changed) the same pid. */
static long match_entry(pid_t nspid, const char *comm)
{
	const cs_manifest *m = &cs_plugin.record;
	long by_pid = -1;
	for (size_t k = 0; k < m->n; k++) {
		if (entry_nspid(&m->e[k]) != nspid || entry_taken(k))
			continue;
		if (strcmp(m->e[k].comm, comm) == 0)
			return (long)k;
		if (by_pid < 0)
			by_pid = (long)k;
	}
	return by_pid;
}

static void match(pid_t pid)
{
	pid_t nspid;
	char comm[64];
	if (task_identity(pid, &nspid, comm, sizeof(comm)) < 0)
		return;
	long k = match_entry(nspid, comm);
	if (k < 0)
		return;
	plugin_task *t = add_task(pid);
	if (!t)
		return;
	t->entry = (size_t)k;
	t->nspid = nspid;
	t->result = -1;
	snprintf(t->comm, sizeof(t->comm), "%s", comm);
	cs_history_proc *h = oplog_entry((size_t)k);
	if (h) {
		h->pid = pid;
		snprintf(h->comm, sizeof(h->comm), "%s", comm);
	}
	cs_plugin.matched++;
	if (strcmp(cs_plugin.record.e[k].comm, comm) != 0)
		plog(CS_CRIU_LOG_WARN, "process %d (%s) stands for %s of the dump by its pid %d in its namespace",
		     (int)pid, comm, cs_plugin.record.e[k].comm, (int)nspid);
}

typedef struct tids_reply {
	size_t n;
	pid_t tid[];
} tids_reply;

/* In a helper: the restore threads, which CRIU's process must run. */
static int find_tids(void *ctx, void **out, size_t *len)
{
	(void)ctx;
	_cleanup_(cs_driver_freep) cs_driver *d = NULL;
	tids_reply *r = calloc(1, sizeof(*r) + cs_plugin.ntasks * sizeof(pid_t));
	if (!r)
		return 1;
	r->n = cs_plugin.ntasks;
	*out = r;
	*len = sizeof(*r) + r->n * sizeof(pid_t);
	if (cs_driver_open(&d, NULL) < 0)
		return 1;
	for (size_t i = 0; i < r->n; i++)
		if (cs_cu_get_restore_tid(d, cs_plugin.tasks[i].pid, &r->tid[i]) != CS_CU_SUCCESS)
			r->tid[i] = 0;
	return 0;
}

static void note_tids(void)
{
	_cleanup_free_ void *buf = NULL;
	size_t len = 0;
	const tids_reply *r = NULL;
	if (helper_run("finding the restore threads", find_tids, NULL, bound_quick(), &buf, &len) == 0 &&
	    len >= sizeof(*r))
		r = buf;
	for (size_t i = 0; r && i < cs_plugin.ntasks && i < r->n; i++) {
		plugin_task *t = &cs_plugin.tasks[i];
		t->tid = cs_proc_thread_here(cs_proc_dir(), t->pid, r->tid[i]);
		if (!t->tid)
			plog(CS_CRIU_LOG_ERROR, "process %d (%s): the driver does not know it after the restore",
			     (int)t->pid, t->comm);
	}
}

/* The record as it reads today: the matched entries, under the pids and
 * start times the restored processes have now. */
static int translate(cs_manifest *out)
{
	const cs_manifest *m = &cs_plugin.record;
	*out = *m;
	out->gpus = NULL; /* the record's: out is freed on its own */
	out->ngpus = 0;
	out->e = calloc(cs_plugin.ntasks + 1, sizeof(*out->e));
	out->n = 0;
	if (!out->e)
		return -1;
	for (size_t i = 0; i < cs_plugin.ntasks; i++) {
		const plugin_task *t = &cs_plugin.tasks[i];
		cs_manifest_entry *e = &out->e[out->n];
		*e = m->e[t->entry];
		e->pid = t->pid;
		if (cs_proc_start_time(cs_proc_dir(), t->pid, &e->start_time) == 0)
			out->n++;
	}
	return 0;
}

typedef struct restore_ctx {
	const cs_manifest *record; /* translated */
	pid_t *pids;
	size_t n;
} restore_ctx;

static int restore_tasks(void *ctx, void **out, size_t *len)
{
	const restore_ctx *c = ctx;
	_cleanup_free_ char *automap = NULL;
	const char *map = cs_env("CUDASNAP_DEVICE_MAP");
	if (!map && auto_device_map(c->record, c->pids[0], &automap) < 0) {
		run_outcome *o = calloc(1, run_outcome_size(0));
		if (!o)
			return 1;
		o->rc = -CS_EUSAGE;
		snprintf(o->message, sizeof(o->message), "no GPU of this machine can stand in for the recorded ones");
		*out = o;
		*len = run_outcome_size(0);
		return 0;
	}
	plugin_run r = { .op = CS_OP_RESTORE,
			 .command = "criu restore",
			 .pids = c->pids,
			 .npids = c->n,
			 .scope = c->pids,
			 .nscope = c->n,
			 .manifest = c->record,
			 .device_map = map ? map : automap };
	_cleanup_(cs_driver_freep) cs_driver *d = NULL;
	_cleanup_free_ cs_target *t = NULL;
	size_t n;
	run_outcome *o = run_session(&r, &d, &t, &n);
	if (!o)
		return 1;
	*out = o;
	*len = run_outcome_size(o->n);
	return 0;
}

/* Whether every task came back on the GPU. */
static bool all_done(const run_outcome *o)
{
	for (size_t i = 0; i < cs_plugin.ntasks; i++)
		if (cs_plugin.tasks[i].result != 0)
			return false;
	return o && o->rc == 0;
}

static void report(const run_outcome *o)
{
	for (size_t i = 0; i < cs_plugin.ntasks; i++) {
		plugin_task *t = &cs_plugin.tasks[i];
		const task_outcome *x = NULL;
		for (size_t k = 0; o && k < o->n; k++)
			if (o->t[k].pid == t->pid)
				x = &o->t[k];
		t->result = o && o->rc == 0 && x && x->done ? 0 : -1;
		if (t->result == 0)
			continue;
		int state = x ? x->state : CS_STATE_CHECKPOINTED;
		if (x && x->unrestorable) {
			plog(CS_CRIU_LOG_ERROR,
			     "process %d (%s) is NOT restored on the GPU, and cannot be: the driver refuses its restore "
			     "at every try (it imported another process's device memory). Its GPU state is lost: "
			     "restart it",
			     (int)t->pid, t->comm);
			continue;
		}
		plog(CS_CRIU_LOG_ERROR,
		     "process %d (%s) is NOT restored on the GPU: it stays %s; run 'cudasnap restore --pid %d' "
		     "(see 'cudasnap ps')",
		     (int)t->pid, t->comm, cs_state_name(state) ? cs_state_name(state) : "in an unknown state",
		     (int)t->pid);
	}
	if (o && o->rc < 0) {
		char why[600];
		snprintf(why, sizeof(why), "GPU restore FAILED: %s", o->message);
		oplog_fail(why);
	}
	if (!o || o->rc < 0)
		plog(CS_CRIU_LOG_ERROR, "GPU restore FAILED: %s%s%s", o ? o->message : "see the lines above",
		     o && o->hint[0] ? "; " : "", o ? o->hint : "");
	else
		plog(CS_CRIU_LOG_INFO, "restored %zu process%s, %.2f GiB in %.3f s", o->acted,
		     o->acted == 1 ? "" : "es", (double)o->bytes / (1 << 30), o->wall);
}

static bool any_task(const plugin_task *t)
{
	(void)t;
	return true;
}

/* seized: CRIU still holds the tree (RESUME_DEVICES_LATE), so the restore
 * threads must be run by us; at the exit hook CRIU has let it go. */
static void restore_all(bool seized)
{
	cs_plugin.restored = true;
	_cleanup_(cs_manifest_freep) cs_manifest translated = { 0 };
	restore_ctx c = { .record = &translated, .pids = calloc(cs_plugin.ntasks + 1, sizeof(pid_t)) };
	_cleanup_free_ pid_t *pids = c.pids;
	if (!pids || translate(&translated) < 0)
		return;
	for (size_t i = 0; i < cs_plugin.ntasks; i++)
		c.pids[c.n++] = cs_plugin.tasks[i].pid;
	if (seized)
		note_tids();
	_cleanup_free_ void *buf = NULL;
	size_t len = 0;
	double wait = 0;
	cs_wait_memory_setting(&wait, NULL);
	int rc = helper_run_resumed(seized ? any_task : NULL, "the GPU restore", restore_tasks, &c,
				    bound_moves() + wait, &buf, &len);
	const run_outcome *o = rc == 0 ? run_outcome_check(buf, len, "the GPU restore") : NULL;
	oplog_session(o, false);
	report(o);
	if (!all_done(o))
		restore_give_up(o && o->message[0] ? o->message : "see the lines above", seized);
}

int restore_resume(int pid)
{
	if (!cs_plugin.root)
		cs_plugin.root = pid; /* CRIU names the tree's root first */
	if (!cs_plugin.restored) {
		match(pid);
		if (cs_plugin.matched == cs_plugin.record.n)
			restore_all(true);
	}
	plugin_task *t = find_task(pid);
	return t ? t->result : 0;
}

/* What no RESUME_DEVICES_LATE matched is named; what was matched but not
 * yet restored (an entry never met) is restored now, the tree running. */
void restore_exit(int ret)
{
	const cs_manifest *m = &cs_plugin.record;
	if (ret != 0 || cs_plugin.restored)
		return;
	for (size_t k = 0; k < m->n; k++) {
		cs_history_proc *h = entry_taken(k) ? NULL : oplog_entry(k);
		if (h)
			snprintf(h->why, sizeof(h->why),
				 "not among the processes CRIU restored: its GPU state is not restored");
		if (!entry_taken(k))
			plog(CS_CRIU_LOG_ERROR,
			     "process %s (pid %d in its namespace at the dump) was not among the processes CRIU "
			     "restored: its GPU state is not restored",
			     m->e[k].comm, (int)entry_nspid(&m->e[k]));
	}
	if (cs_plugin.matched)
		restore_all(false);
}
