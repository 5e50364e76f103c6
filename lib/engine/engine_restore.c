/* A staged restore: the processes come back with the pids they had inside
 * their PID namespace, but under other pids on the host when the namespace
 * is new (a container). Each cs_engine_adopt names one restored process as
 * the engine sees it; it is matched to an entry of the record by the pid
 * it has inside its own namespace (and its command name), and once every
 * entry is matched all are restored at once, onto the recorded GPUs or,
 * when those are not on this machine, onto the ones the processes can use.
 * CRIU ignores what its hook returns, so a GPU restore that fails ends with
 * the restored processes killed (engine_room.c): the engine then fails. */
#include "engine_int.h"
#include "env.h"
#include "gpuledger.h"
#include "gpuroom.h"
#include "inventory.h"
#include "park.h"
#include "park_find.h"
#include "parkfiles.h"
#include "proc.h"
#include "state.h"
#include "util.h"

#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <sys/syscall.h>
#include <unistd.h>

bool cs_engine_images_gpu_part(int images)
{
	_cleanup_free_ char *buf = malloc(CS_INVENTORY_MAX + 1);
	ssize_t len = buf && images >= 0 ? cs_read_at(images, "inventory.img", buf, CS_INVENTORY_MAX + 1) : -1;
	cs_inventory inv;
	if (len < 0 || cs_inventory_parse(buf, (size_t)len, &inv) < 0)
		return true;
	struct stat st;
	bool record = fstatat(images, CS_PLUGIN_RECORD, &st, AT_SYMLINK_NOFOLLOW) == 0;
	return cs_inventory_gpu_part(&inv, CS_PLUGIN_NAME, record);
}

/* The record the dump wrote into the images. */
static int load_record(cs_engine *e, int images)
{
	_cleanup_free_ char *buf = NULL;
	cs_error err = { 0 };
	ssize_t len = images >= 0 ? cs_images_read(images, CS_PLUGIN_RECORD, CS_MANIFEST_MAX, &buf, &err) : -1;
	if (len < 0 || !buf || cs_manifest_parse_as(buf, (size_t)len, "it", NULL, &e->record, &err) < 0) {
		eng_log(e, CS_LOG_ERROR, "the images need the GPU plugin but its record %s cannot be read: %s",
			CS_PLUGIN_RECORD, buf || len < 0 ? err.message : "it is missing");
		return -1;
	}
	return 0;
}

/* Every file a park wrote into the images is there, of its size, before any
 * process exists: one missing or cut short could never give its memory back
 * (what each holds is checked at its unpark). */
static int park_files_here(cs_engine *e)
{
	for (size_t i = 0; i < e->record.n; i++) {
		const cs_manifest_entry *x = &e->record.e[i];
		cs_park_files f = { .n = 0 };
		cs_error err = { 0 };
		if (eng_park_files_open(e, x->park_name, x->park_nfiles, x->park_bytes, &f, &err) == 0) {
			cs_park_files_close(&f);
			continue;
		}
		eng_log(e, CS_LOG_ERROR,
			"GPU restore REFUSED before %s created any process: process %s (pid %d at the dump) parked its "
			"GPU memory into files of the images, and %s; %s",
			e->o.engine, x->comm, (int)x->pid, err.message, err.hint);
		return -1;
	}
	return 0;
}

int cs_engine_import(cs_engine *e, int images)
{
	eng_op_gpu(e);
	if (load_record(e, images) < 0)
		return -1;
	/* kept for the unparks from files of the images, at the engine's exit */
	if (e->images < 0 && images >= 0 && (e->images = fcntl(images, F_DUPFD_CLOEXEC, 0)) >= 0)
		e->own_images = true;
	if (park_files_here(e) < 0)
		return -1;
	eng_op_record(e);
	int version;
	cs_error err = { 0 };
	if (eng_probe(e, &version, &err) < 0) {
		eng_log(e, CS_LOG_ERROR, "the images hold checkpointed GPU processes, but %s; %s", err.message,
			err.hint);
		return -1;
	}
	if (eng_room_check(e) < 0)
		return -1;
	e->enabled = true;
	eng_log(e, CS_LOG_INFO, "enabled for the restore of %zu GPU process%s (driver %d)", e->record.n,
		e->record.n == 1 ? "" : "es", version);
	return 0;
}

/* The pid an entry had inside its own PID namespace (records of earlier
 * versions name only the pid the engine saw). */
static pid_t entry_nspid(const cs_manifest_entry *x)
{
	return x->nspid ? x->nspid : x->pid;
}

static bool entry_taken(const cs_engine *e, size_t k)
{
	for (size_t i = 0; i < e->ntasks; i++)
		if (e->tasks[i].entry == k)
			return true;
	return false;
}

/* The entry a restored process stands for: same pid inside its namespace
 * and same command name, else (a name the process changed) the same pid. */
static long match_entry(const cs_engine *e, pid_t nspid, const char *comm)
{
	const cs_manifest *m = &e->record;
	long by_pid = -1;
	for (size_t k = 0; k < m->n; k++) {
		if (entry_nspid(&m->e[k]) != nspid || entry_taken(e, k))
			continue;
		if (strcmp(m->e[k].comm, comm) == 0)
			return (long)k;
		if (by_pid < 0)
			by_pid = (long)k;
	}
	return by_pid;
}

static void match(cs_engine *e, pid_t pid)
{
	pid_t nspid;
	char comm[64];
	if (eng_identity(pid, &nspid, comm, sizeof(comm)) < 0)
		return;
	long k = match_entry(e, nspid, comm);
	if (k < 0)
		return;
	eng_task *t = eng_add(e, pid);
	if (!t)
		return;
	t->entry = (size_t)k;
	t->nspid = nspid;
	t->result = -1;
	snprintf(t->comm, sizeof(t->comm), "%s", comm);
	cs_history_proc *h = eng_op_entry(e, (size_t)k);
	if (h) {
		h->pid = pid;
		snprintf(h->comm, sizeof(h->comm), "%s", comm);
	}
	e->matched++;
	if (strcmp(e->record.e[k].comm, comm) != 0)
		eng_log(e, CS_LOG_WARN, "process %d (%s) stands for %s of the dump by its pid %d in its namespace",
			(int)pid, comm, e->record.e[k].comm, (int)nspid);
}

typedef struct tids_reply {
	size_t n;
	pid_t tid[];
} tids_reply;

/* In a call: the restore threads, which the engine's process must run. */
static int find_tids(void *arg, void **out, size_t *len)
{
	const cs_engine *e = arg;
	_cleanup_(cs_driver_freep) cs_driver *d = NULL;
	tids_reply *r = calloc(1, sizeof(*r) + e->ntasks * sizeof(pid_t));
	if (!r)
		return 1;
	r->n = e->ntasks;
	*out = r;
	*len = sizeof(*r) + r->n * sizeof(pid_t);
	if (cs_driver_open(&d, NULL) < 0)
		return 1;
	for (size_t i = 0; i < r->n; i++)
		if (cs_cu_get_restore_tid(d, e->tasks[i].pid, &r->tid[i]) != CS_CU_SUCCESS)
			r->tid[i] = 0;
	return 0;
}

static void note_tids(cs_engine *e)
{
	_cleanup_free_ void *buf = NULL;
	size_t len = 0;
	const tids_reply *r = NULL;
	if (eng_call(e, "finding the restore threads", eng_bound_quick(), find_tids, e, NULL, &buf, &len) == 0 &&
	    len >= sizeof(*r))
		r = buf;
	for (size_t i = 0; r && i < e->ntasks && i < r->n; i++) {
		eng_task *t = &e->tasks[i];
		t->tid = cs_proc_thread_here(cs_proc_dir(), t->pid, r->tid[i]);
		if (!t->tid)
			eng_log(e, CS_LOG_ERROR, "process %d (%s): the driver does not know it after the restore",
				(int)t->pid, t->comm);
	}
}

/* The record as it reads today: the matched entries, under the pids and
 * start times the restored processes have now. */
static int translate(const cs_engine *e, cs_manifest *out)
{
	const cs_manifest *m = &e->record;
	*out = *m;
	out->gpus = NULL; /* the record's: out is freed on its own */
	out->ngpus = 0;
	out->e = calloc(e->ntasks + 1, sizeof(*out->e));
	out->n = 0;
	if (!out->e)
		return -1;
	for (size_t i = 0; i < e->ntasks; i++) {
		const eng_task *t = &e->tasks[i];
		cs_manifest_entry *x = &out->e[out->n];
		*x = m->e[t->entry];
		x->pid = t->pid;
		if (cs_proc_start_time(cs_proc_dir(), t->pid, &x->start_time) == 0)
			out->n++;
	}
	return 0;
}

typedef struct restore_arg {
	cs_engine *e;
	const cs_manifest *record; /* translated */
	pid_t *pids;
	size_t n;
} restore_arg;

static int restore_tasks(void *arg, void **out, size_t *len)
{
	const restore_arg *c = arg;
	_cleanup_free_ char *automap = NULL;
	const char *map = cs_env("CUDASNAP_DEVICE_MAP");
	run_outcome *o = NULL;
	if (!map && eng_auto_map(c->e, c->record, c->pids[0], &automap) < 0) {
		o = eng_outcome_error(-CS_EUSAGE, "no GPU of this machine can stand in for the recorded ones");
	} else {
		eng_run r = { .op = CS_OP_RESTORE,
			      .command = c->e->o.command,
			      .pids = c->pids,
			      .npids = c->n,
			      .scope = c->pids,
			      .nscope = c->n,
			      .manifest = c->record,
			      .device_map = map ? map : automap,
			      .images = -1 };
		o = eng_run_session(c->e, &r);
	}
	if (!o)
		return 1;
	*out = o;
	*len = eng_outcome_size(o->n);
	return 0;
}

/* Whether every process came back on the GPU. */
static bool all_done(const cs_engine *e, const run_outcome *o)
{
	for (size_t i = 0; i < e->ntasks; i++)
		if (e->tasks[i].result != 0)
			return false;
	return o && o->rc == 0;
}

static void report(cs_engine *e, const run_outcome *o)
{
	for (size_t i = 0; i < e->ntasks; i++) {
		eng_task *t = &e->tasks[i];
		const task_outcome *x = eng_outcome_of(o, t->pid);
		t->result = o && o->rc == 0 && x && x->done ? 0 : -1;
		int state = x ? x->state : CS_STATE_CHECKPOINTED;
		if (t->result == 0)
			continue;
		if (x && x->unrestorable)
			eng_log(e, CS_LOG_ERROR,
				"process %d (%s) is NOT restored on the GPU, and cannot be: the driver refuses its restore "
				"at every try (it imported another process's device memory). Its GPU state is lost: "
				"restart it",
				(int)t->pid, t->comm);
		else {
			char cmd[400];
			eng_restore_cmd(e, t, cmd, sizeof(cmd));
			eng_log(e, CS_LOG_ERROR,
				"process %d (%s) is NOT restored on the GPU: it stays %s; run '%s' (see 'cudasnap ps')",
				(int)t->pid, t->comm,
				cs_state_name(state) ? cs_state_name(state) : "in an unknown state", cmd);
		}
	}
	if (o && o->rc < 0) {
		char why[600];
		snprintf(why, sizeof(why), "GPU restore FAILED: %s", o->message);
		eng_op_fail(e, why);
	}
	if (!o || o->rc < 0)
		eng_log(e, CS_LOG_ERROR, "GPU restore FAILED: %s%s%s", o ? o->message : "see the lines above",
			o && o->hint[0] ? "; " : "", o ? o->hint : "");
	else
		eng_log(e, CS_LOG_INFO, "restored %zu process%s, %.2f GiB in %.3f s", o->acted,
			o->acted == 1 ? "" : "es", (double)o->bytes / (1 << 30), o->wall);
}

static bool any_task(const eng_task *t)
{
	(void)t;
	return true;
}

/* The engine restores in the foreground (e->o.restore_waits): it waits for
 * the tree to end before its exit hook, where the unparks otherwise run.
 * Each process that runs the interposer gets its unpark now, with its files
 * of the images, left in its control socket and answered once the engine
 * lets it run (one that is not parked answers that it has nothing to do).
 * The restore can no longer fail for it then: one that fails stays parked,
 * its GPU work waiting, and 'cudasnap ps' names it. */
static void queue_unparks(cs_engine *e)
{
	for (size_t i = 0; i < e->ntasks; i++) {
		const eng_task *t = &e->tasks[i];
		char path[128];
		/* one whose interposer started no control socket (CUDASNAP_PARK=0) never parked */
		if (t->result != 0 || park_find_path(t->pid, cs_proc_dir(), path, sizeof(path)) < 0)
			continue;
		const cs_manifest_entry *me = t->entry < e->record.n ? &e->record.e[t->entry] : NULL;
		cs_error err = { 0 };
		char cmd[400];
		eng_restore_cmd(e, t, cmd, sizeof(cmd));
		if (eng_queue_unpark(e, t->pid, me ? me->park_name : "", me ? me->park_nfiles : 0,
				     me ? me->park_bytes : 0, &err) == 0)
			eng_log(e, CS_LOG_INFO,
				"process %d (%s) unparks once %s lets it run, if it comes back parked (%s restores in "
				"the foreground and waits for the tree before this plugin's exit: an unpark that fails "
				"cannot fail the restore then, and 'cudasnap ps' shows the process still parked; "
				"'%s' brings it back; restore with -d to have it checked)",
				(int)t->pid, t->comm, e->o.engine, e->o.engine, cmd);
		else
			eng_log(e, CS_LOG_ERROR,
				"process %d (%s) runs the parking interposer, and its unpark could not be left for it "
				"(%s): if it comes back parked, its GPU work waits until '%s'",
				(int)t->pid, t->comm, err.message, cmd);
	}
}

/* seized: the engine still holds the tree (its hook), so the restore
 * threads must run through its calls; at its exit it has let the tree go. */
static void restore_all(cs_engine *e, bool seized)
{
	e->restored = true;
	_cleanup_(cs_manifest_freep) cs_manifest translated = { 0 };
	restore_arg c = { .e = e, .record = &translated, .pids = calloc(e->ntasks + 1, sizeof(pid_t)) };
	_cleanup_free_ pid_t *pids = c.pids;
	if (!pids || translate(e, &translated) < 0)
		return;
	for (size_t i = 0; i < e->ntasks; i++)
		c.pids[c.n++] = e->tasks[i].pid;
	if (seized)
		note_tids(e);
	_cleanup_free_ void *buf = NULL;
	size_t len = 0;
	double wait = 0;
	cs_wait_memory_setting(&wait, NULL);
	int rc = eng_call(e, "the GPU restore", eng_bound_moves() + wait, restore_tasks, &c, seized ? any_task : NULL,
			  &buf, &len);
	const run_outcome *o = rc == 0 ? eng_outcome_check(e, buf, len, "the GPU restore") : NULL;
	eng_op_session(e, o, false);
	report(e, o);
	if (!all_done(e, o))
		eng_give_up(e, o && o->message[0] ? o->message : "see the lines above", seized);
	else if (seized && e->o.restore_waits)
		queue_unparks(e);
}

/* pid among the processes the engine restored, with a pidfd while the
 * engine still holds it (its pid cannot be taken by another yet). */
static void tree_add(cs_engine *e, pid_t pid)
{
	if (cs_grow(&e->tree, &e->treecap, e->ntree + 1, sizeof(*e->tree)) < 0 ||
	    cs_grow(&e->tree_fd, &e->tree_fdcap, e->ntree + 1, sizeof(*e->tree_fd)) < 0)
		return;
	e->tree_fd[e->ntree] = (int)syscall(SYS_pidfd_open, pid, 0);
	e->tree[e->ntree++] = pid;
}

int cs_engine_adopt(cs_engine *e, pid_t pid)
{
	if (!e->root)
		e->root = pid; /* the engine names the tree's root first */
	tree_add(e, pid);
	if (!e->restored) {
		match(e, pid);
		if (e->matched == e->record.n)
			restore_all(e, true);
	}
	eng_task *t = eng_find(e, pid);
	return t ? t->result : 0;
}

/* One restored process that comes back parked: its unpark, now that it
 * runs. 0 done (or nothing to do), -1 (logged) when it failed. */
static int unpark_one(cs_engine *e, const eng_task *t, bool importers, char *why, size_t size)
{
	cs_park_info info;
	cs_park_status(t->pid, 2000, &info);
	if (info.unreachable) /* just let run: once more, given longer */
		cs_park_status(t->pid, 10000, &info);
	if (info.unreachable) {
		eng_log(e, CS_LOG_ERROR,
			"process %d (%s) runs the parking interposer, whose control socket did not answer within 10 s: "
			"whether its memory is back cannot be told",
			(int)t->pid, t->comm);
		snprintf(why, size, "the interposer of process %d did not answer", (int)t->pid);
		return -1;
	}
	if (!info.seen || !info.parked || (info.imports > 0) != importers)
		return 0;
	cs_target x = { .pid = t->pid };
	snprintf(x.comm, sizeof(x.comm), "%s", t->comm);
	int conn = -1;
	cs_park_answer a = { .ok = false };
	cs_error err = { 0 };
	unsigned ms = eng_lock_timeout_s(e) * 1000;
	/* parked into files of the images: they come with the request */
	const cs_manifest_entry *me = t->entry < e->record.n ? &e->record.e[t->entry] : NULL;
	cs_park_files f = { .n = 0 };
	int rc = me ? eng_park_files_open(e, me->park_name, me->park_nfiles, info.bytes, &f, &err) : 0;
	if (rc == 0)
		rc = cs_park_step(&x, false, &conn, ms, cs_park_answer_s(NULL, info.bytes, ms), &f, &a, &err);
	cs_park_files_close(&f);
	cs_park_close(&conn, false);
	/* Answered: the room its restore left booked for this unpark is
	 * taken (or, the unpark failed, not needed) now. */
	unsigned long long start;
	if ((rc == 0 || a.stage[0] || a.code) && cs_proc_start_time(cs_proc_dir(), t->pid, &start) == 0)
		cs_gpu_ledger_settle(t->pid, start);
	cs_history_proc *h = eng_op_entry(e, t->entry);
	if (rc < 0) { /* the hint is the command line's: what the engine does next follows */
		eng_log(e, CS_LOG_ERROR, "%s", err.message);
		/* Kept (eng_give_up): it runs parked, its GPU work waiting,
		 * its memory where its park put it. */
		if (cs_env_on("CUDASNAP_KEEP_FAILED_RESTORE")) {
			char cmd[400];
			eng_restore_cmd(e, t, cmd, sizeof(cmd));
			eng_log(e, CS_LOG_ERROR,
				"process %d (%s) stays parked, running, its GPU work waiting: '%s' brings it back",
				(int)t->pid, t->comm, cmd);
			if (h) {
				h->outcome = CS_HIST_LEFT_BEHIND;
				eng_restore_cmd(e, t, h->recovery, sizeof(h->recovery));
			}
		}
		snprintf(why, size, "%s", err.message);
		return -1;
	}
	if (h) {
		h->timed[CS_STEP_UNPARK] = true;
		h->seconds[CS_STEP_UNPARK] = a.total_s;
		h->bytes += a.bytes;
	}
	eng_log(e, CS_LOG_INFO, "process %d (%s) unparked %.2f GiB of device memory in %.3f s (copy %.3f s, %.1f GB/s)",
		(int)t->pid, t->comm, (double)a.bytes / (1 << 30), a.total_s, a.copy_s, a.gbps);
	return 0;
}

/* After a restore in the engine's hook, which ran while the engine held the
 * processes stopped: those that come back parked unpark once they run,
 * exporters of CUDA IPC before the importers that map their memory. */
static void unpark_restored(cs_engine *e)
{
	char why[512] = "";
	bool failed = false;
	for (int importers = 0; importers < 2 && !failed; importers++)
		for (size_t i = 0; i < e->ntasks; i++)
			if (e->tasks[i].result == 0 && unpark_one(e, &e->tasks[i], importers, why, sizeof(why)) < 0)
				failed = true;
	if (failed)
		eng_give_up(e, why, false);
}

/* What no adoption matched is named; what was matched but not yet restored
 * (an entry never met) is restored now, the tree running. */
void eng_restore_end(cs_engine *e, int ret)
{
	const cs_manifest *m = &e->record;
	if (ret == 0 && e->restored && !e->o.restore_waits)
		unpark_restored(e);
	if (ret != 0 || e->restored)
		return;
	for (size_t k = 0; k < m->n; k++) {
		if (entry_taken(e, k))
			continue;
		cs_history_proc *h = eng_op_entry(e, k);
		if (h)
			snprintf(h->why, sizeof(h->why),
				 "not among the processes %s restored: its GPU state is not restored", e->o.engine);
		eng_log(e, CS_LOG_ERROR,
			"process %s (pid %d in its namespace at the dump) was not among the processes %s restored: its "
			"GPU state is not restored",
			m->e[k].comm, (int)entry_nspid(&m->e[k]), e->o.engine);
	}
	if (e->matched)
		restore_all(e, false);
}
