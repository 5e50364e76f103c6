/* A GPU restore that cannot succeed is refused where CRIU still listens:
 * at the restore's init, before CRIU creates any process, the record's
 * processes are judged against this machine's GPUs (the driver destroys a
 * process's checkpointed state when its restore runs out of GPU memory),
 * and a refusal fails 'criu restore' with the images intact. CRIU ignores
 * what RESUME_DEVICES_LATE returns, so a GPU restore that fails after CRIU
 * created the processes ends with them killed: CRIU then fails the restore
 * itself, and no engine takes a container whose GPU state is not back for a
 * restored one. */
#include "restore_room.h"
#include "devmap.h"
#include "env.h"
#include "gpumap.h"
#include "gpuroom.h"
#include "helper.h"
#include "oplog.h"
#include "host.h"
#include "pool.h"
#include "probe.h"
#include "proc.h"
#include "sandbox.h"
#include "tasks.h"
#include "util.h"

#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <signal.h>
#include <sys/wait.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

typedef struct room_reply {
	size_t n, refused;
	int rc; /* 0, or <0 when the check could not be made (message says why) */
	char message[512];
	cs_gpu_room room[];
} room_reply;

static size_t reply_size(size_t n)
{
	return sizeof(room_reply) + n * sizeof(cs_gpu_room);
}

/* The map the restore will use: the settings', else the one that puts the
 * GPUs this machine lacks onto others (any of its GPUs: the processes and
 * their device files do not exist yet). */
static int pairs_for(const cs_manifest *m, const cs_nvml_gpu *gpus, size_t ngpus, cs_gpu_pair **pairs, unsigned *npairs,
		     cs_error *err)
{
	_cleanup_free_ char *automap = NULL;
	const char *map = cs_env("CUDASNAP_DEVICE_MAP");
	if (!map && auto_device_map(m, 0, &automap) < 0)
		return cs_error_set(err, CS_EENV, NULL, "no GPU of this machine can stand in for the recorded ones");
	map = map ? map : automap;
	return map ? cs_devmap_parse(map, gpus, ngpus, pairs, npairs, err) : 0;
}

static void judge(const cs_manifest *m, room_reply *r, bool host)
{
	_cleanup_(cs_nvml_closep) cs_nvml *nv = NULL;
	_cleanup_free_ cs_nvml_gpu *gpus = NULL;
	_cleanup_free_ cs_gpu_pair *pairs = NULL;
	unsigned npairs = 0;
	size_t ngpus = 0;
	cs_error err = { 0 };
	if (cs_nvml_open(&nv, NULL) < 0 || cs_nvml_gpus(nv, &gpus, &ngpus, NULL) < 0)
		ngpus = 0;
	r->rc = pairs_for(m, gpus, ngpus, &pairs, &npairs, &err);
	snprintf(r->message, sizeof(r->message), "%s", err.message);
	r->refused = r->rc < 0 ? 0 : cs_record_judge(m, pairs, npairs, gpus, ngpus, nv, host, r->room);
}

/* In a helper (NVML loads the driver): the judgement, again every half
 * second while it refuses and CUDASNAP_WAIT_MEMORY lasts. */
static int check(void *ctx, void **out, size_t *len)
{
	const cs_manifest *m = ctx;
	room_reply *r = calloc(1, reply_size(m->n));
	if (!r)
		return 1;
	*out = r;
	*len = reply_size(m->n);
	r->n = m->n;
	double wait = 0;
	cs_error err = { 0 };
	if (cs_wait_memory_setting(&wait, &err) < 0) {
		r->rc = -CS_EUSAGE;
		snprintf(r->message, sizeof(r->message), "%s", err.message);
		return 0;
	}
	cs_sandbox sb;
	cs_sandbox_detect(NULL, &sb);
	double until = cs_now() + wait;
	for (bool said = false;; said = true) {
		judge(m, r, sb.pid_ns == CS_PIDNS_HOST);
		if (r->rc < 0 || !r->refused || cs_now() >= until)
			return 0;
		if (!said)
			plog(CS_CRIU_LOG_WARN, "waiting up to %.0f s (CUDASNAP_WAIT_MEMORY) for the GPUs to have room",
			     until - cs_now());
		nanosleep(&(struct timespec){ .tv_nsec = 500000000L }, NULL);
	}
}

int restore_room_check(void)
{
	const cs_manifest *m = &cs_plugin.record;
	if (cs_env_on("CUDASNAP_IGNORE_GPU_MEMORY")) {
		plog(CS_CRIU_LOG_WARN, "CUDASNAP_IGNORE_GPU_MEMORY=1: the GPUs' free memory is not checked");
		return 0;
	}
	double wait = 0;
	cs_wait_memory_setting(&wait, NULL);
	_cleanup_free_ void *buf = NULL;
	size_t len = 0;
	int rc = helper_run("checking the GPUs' memory", check, (void *)m, bound_quick() + wait, &buf, &len);
	const room_reply *r = buf;
	if (rc != 0 || !r || len != reply_size(m->n) || r->n != m->n) {
		plog(CS_CRIU_LOG_WARN, "the GPUs' free memory could not be checked before the restore (see above)");
		return 0; /* the check right before each restore still stands */
	}
	if (r->rc < 0) {
		plog(CS_CRIU_LOG_ERROR, "GPU restore refused before anything was restored: %s", r->message);
		return -1;
	}
	for (size_t i = 0; i < r->n; i++) {
		const cs_gpu_room *x = &r->room[i];
		if (x->verdict == CS_GPU_ROOM_UNKNOWN)
			plog(CS_CRIU_LOG_WARN, "process %s (pid %d in its namespace): not checked: %s", m->e[i].comm,
			     (int)(m->e[i].nspid ? m->e[i].nspid : m->e[i].pid), x->why);
		cs_history_proc *h = oplog_entry(i);
		if (h && (x->verdict == CS_GPU_SHORT || x->verdict == CS_GPU_ABSENT))
			cs_history_refused(h, x->verdict == CS_GPU_SHORT ? "gpu-memory" : "gpu-absent", x->why);
		if (x->verdict == CS_GPU_SHORT || x->verdict == CS_GPU_ABSENT)
			plog(CS_CRIU_LOG_ERROR, "process %s (pid %d in its namespace) cannot be restored here: %s. %s",
			     m->e[i].comm, (int)(m->e[i].nspid ? m->e[i].nspid : m->e[i].pid), x->why, x->fix);
	}
	if (!r->refused)
		return 0;
	char why[400];
	snprintf(why, sizeof(why),
		 "GPU restore REFUSED before CRIU created any process: %zu of the %zu GPU processes would not fit; the "
		 "images are intact and restore once the GPUs have room (CUDASNAP_WAIT_MEMORY=SECONDS in "
		 "/etc/cudasnap/cudasnap.conf waits for it)",
		 r->refused, r->n);
	plog(CS_CRIU_LOG_ERROR, "%s", why);
	oplog_fail(why);
	return -1;
}

/* ---- after a GPU restore that failed ---------------------------------- */

/* Whether pid is gone, or a zombie whose threads are gone too (its parent
 * reaps it): a thread group's leader stays until every thread is reaped. */
static bool done_with(pid_t pid)
{
	char path[64], buf[512];
	snprintf(path, sizeof(path), "%s/%d/stat", cs_proc_dir(), (int)pid);
	cs_stat st;
	ssize_t n = cs_read_at(AT_FDCWD, path, buf, sizeof(buf) - 1);
	if (n <= 0 || cs_parse_stat(buf, (size_t)n, &st) < 0)
		return true;
	if (st.state != 'Z' && st.state != 'X')
		return false;
	snprintf(path, sizeof(path), "%s/%d/task", cs_proc_dir(), (int)pid);
	_cleanup_closedir_ DIR *d = opendir(path);
	size_t tasks = 0;
	for (struct dirent *e; d && (e = readdir(d));)
		tasks += e->d_name[0] != '.';
	return tasks <= 1;
}

/* CRIU's process traces every task (and thread) it restored: one killed
 * while CRIU holds it stays a zombie until its tracer waits for it, and so
 * does the tree's init, which waits for every task of its PID namespace
 * before it dies; CRIU would then wait for that init for ever. So the
 * tracer (this process, in the hook) waits for them, for a few seconds at
 * most. */
static void reap_traced(const pid_t *pids, size_t n)
{
	double until = cs_now() + 5;
	int idle = 0;
	while (cs_now() < until) {
		int status;
		pid_t r = waitpid(-1, &status, __WALL | WNOHANG);
		if (r < 0 && errno == ECHILD)
			return;
		if (r > 0) {
			idle = 0;
			continue;
		}
		bool all = true;
		for (size_t i = 0; i < n && all; i++)
			all = done_with(pids[i]);
		if (all && ++idle >= 3)
			return;
		nanosleep(&(struct timespec){ .tv_nsec = 10000000L }, NULL);
	}
}

/* What became of the restored processes, in the operation's entry: killed
 * (the images are intact), or kept checkpointed. A process whose GPU state
 * is lost stays named so. */
static void note_given_up(const char *why, bool kept)
{
	for (size_t i = 0; i < cs_plugin.ntasks; i++) {
		const plugin_task *t = &cs_plugin.tasks[i];
		cs_history_proc *h = oplog_proc(t->pid, t->nspid, t->comm);
		if (!h || h->outcome == CS_HIST_LOST || h->outcome == CS_HIST_UNRESTORABLE || (kept && t->result == 0))
			continue;
		h->outcome = kept ? CS_HIST_LEFT_BEHIND : CS_HIST_KILLED;
		if (kept)
			snprintf(h->recovery, sizeof(h->recovery), "cudasnap restore --pid %d", (int)t->pid);
		else if (!h->why[0])
			snprintf(h->why, sizeof(h->why), "the GPU restore failed (%s); the images are intact", why);
	}
}

void restore_give_up(const char *why, bool seized)
{
	note_given_up(why, cs_env_on("CUDASNAP_KEEP_FAILED_RESTORE"));
	if (cs_env_on("CUDASNAP_KEEP_FAILED_RESTORE")) {
		plog(CS_CRIU_LOG_ERROR,
		     "the GPU restore failed (%s); the restored processes are KEPT as CUDASNAP_KEEP_FAILED_RESTORE=1 "
		     "asks, though their GPU state is not back",
		     why);
		return;
	}
	_cleanup_free_ pid_t *v = calloc(cs_plugin.ntasks + 2, sizeof(*v));
	size_t killed = 0;
	for (size_t i = 0; v && i < cs_plugin.ntasks; i++)
		if (kill(cs_plugin.tasks[i].pid, SIGKILL) == 0)
			v[killed++] = cs_plugin.tasks[i].pid;
	if (v && cs_plugin.root > 0 && !find_task(cs_plugin.root) && kill(cs_plugin.root, SIGKILL) == 0)
		v[killed++] = cs_plugin.root;
	if (seized && v)
		reap_traced(v, killed);
	plog(CS_CRIU_LOG_ERROR,
	     "the GPU restore failed (%s): %zu restored process%s killed so that the restore fails rather than "
	     "leave processes whose GPU state is not back; the images are intact: restore them again once the "
	     "cause is mended (CUDASNAP_KEEP_FAILED_RESTORE=1 in /etc/cudasnap/cudasnap.conf keeps them instead)",
	     why, killed, killed == 1 ? " is" : "es are");
}
