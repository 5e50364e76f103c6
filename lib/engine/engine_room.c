/* A staged restore's GPUs: a GPU restore that cannot succeed is refused
 * where the engine still listens, at the import, before it creates any
 * process: the record's processes are judged against this machine's GPUs
 * (the driver destroys a process's checkpointed state when its restore runs
 * out of GPU memory), and a refusal fails the restore with the images
 * intact. A GPU restore that fails after the engine created the processes
 * ends with them killed, so that the engine fails the restore itself and no
 * container whose GPU state is not back passes for a restored one. */
#include "engine_int.h"
#include "automap.h"
#include "devmap.h"
#include "env.h"
#include "gpunode.h"
#include "gpuroom.h"
#include "nvml.h"
#include "park.h"
#include "pool.h"
#include "sandbox.h"
#include "util.h"

#include <errno.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/syscall.h>
#include <time.h>
#include <unistd.h>

int eng_auto_map(cs_engine *e, const cs_manifest *m, pid_t sample, char **map)
{
	*map = NULL;
	_cleanup_free_ cs_nvml_gpu *gpus = NULL;
	size_t ngpus = 0;
	cs_nvml_list(&gpus, &ngpus);
	_cleanup_(cs_automap_freep) cs_automap a = { 0 };
	int r = cs_automap_make(m, gpus, ngpus, sample, &a);
	if (r == -ENOSPC)
		eng_log(e, CS_LOG_ERROR,
			"%zu of the %zu GPUs the dump's processes used %s not on this machine (%s first), and "
			"the restored processes can use too few of its GPUs to stand in for them; give the "
			"container more GPUs, or set CUDASNAP_DEVICE_MAP in %s",
			a.nabsent, a.nrecorded, a.nabsent == 1 ? "is" : "are", a.stand_in[a.nstand_in - 1].absent,
			cs_config_path());
	if (r < 0)
		return -1;
	for (size_t i = 0; i < a.nstand_in; i++) {
		const cs_nvml_gpu *to = a.stand_in[i].onto;
		eng_log(e, CS_LOG_INFO,
			"%s, which the dump's processes used, is not on this machine: restoring onto %s (GPU %u, "
			"%s); set CUDASNAP_DEVICE_MAP in %s to choose",
			a.stand_in[i].absent, to->uuid, to->index,
			a.by_device_file ? "whose device file the restored processes have" : "a GPU of this machine",
			cs_config_path());
	}
	*map = TAKE_PTR(a.map);
	return 0;
}

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
static int pairs_for(cs_engine *e, const cs_nvml_gpu *gpus, size_t ngpus, cs_gpu_pair **pairs, unsigned *npairs,
		     cs_error *err)
{
	_cleanup_free_ char *automap = NULL;
	const char *map = cs_env("CUDASNAP_DEVICE_MAP");
	if (!map && eng_auto_map(e, &e->record, 0, &automap) < 0)
		return cs_error_set(err, CS_EENV, NULL, "no GPU of this machine can stand in for the recorded ones");
	map = map ? map : automap;
	return map ? cs_devmap_parse(map, gpus, ngpus, pairs, npairs, err) : 0;
}

static void judge(cs_engine *e, room_reply *r, bool host)
{
	_cleanup_(cs_nvml_closep) cs_nvml *nv = NULL;
	_cleanup_free_ cs_nvml_gpu *gpus = NULL;
	_cleanup_free_ cs_gpu_pair *pairs = NULL;
	unsigned npairs = 0;
	size_t ngpus = 0;
	cs_error err = { 0 };
	cs_room_gpus_booked(NULL, cs_park_parked_now, &nv, &gpus, &ngpus, NULL, 0);
	r->rc = pairs_for(e, gpus, ngpus, &pairs, &npairs, &err);
	snprintf(r->message, sizeof(r->message), "%s", err.message);
	r->refused = r->rc < 0 ? 0 : cs_record_judge(&e->record, pairs, npairs, gpus, ngpus, nv, host, r->room);
}

/* In a call (NVML loads the driver): the judgement, again every half
 * second while it refuses and CUDASNAP_WAIT_MEMORY lasts. */
static int check(void *arg, void **out, size_t *len)
{
	cs_engine *e = arg;
	const cs_manifest *m = &e->record;
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
		judge(e, r, sb.pid_ns == CS_PIDNS_HOST);
		if (r->rc < 0 || !r->refused || cs_now() >= until)
			return 0;
		if (!said)
			eng_log(e, CS_LOG_WARN, "waiting up to %.0f s (CUDASNAP_WAIT_MEMORY) for the GPUs to have room",
				until - cs_now());
		nanosleep(&(struct timespec){ .tv_nsec = 500000000L }, NULL);
	}
}

static pid_t nspid_of(const cs_manifest_entry *x)
{
	return x->nspid ? x->nspid : x->pid;
}

/* Each process's verdict, in the log and the operation's entry. */
static void name_verdicts(cs_engine *e, const room_reply *r)
{
	const cs_manifest *m = &e->record;
	for (size_t i = 0; i < r->n; i++) {
		const cs_gpu_room *x = &r->room[i];
		bool refused =
			x->verdict == CS_GPU_SHORT || x->verdict == CS_GPU_ABSENT || x->verdict == CS_GPU_ROOM_UNKNOWN;
		cs_history_proc *h = refused ? eng_op_entry(e, i) : NULL;
		if (h)
			cs_history_refused(h, cs_gpu_verdict_code(x->verdict), x->why);
		if (refused)
			eng_log(e, CS_LOG_ERROR, "process %s (pid %d in its namespace) cannot be restored here: %s. %s",
				m->e[i].comm, (int)nspid_of(&m->e[i]), x->why, x->fix);
	}
}

int eng_room_check(cs_engine *e)
{
	const cs_manifest *m = &e->record;
	if (cs_env_on("CUDASNAP_IGNORE_GPU_MEMORY")) {
		eng_log(e, CS_LOG_WARN, "CUDASNAP_IGNORE_GPU_MEMORY=1: the GPUs' free memory is not checked");
		return 0;
	}
	double wait = 0;
	cs_wait_memory_setting(&wait, NULL);
	_cleanup_free_ void *buf = NULL;
	size_t len = 0;
	int rc = eng_call(e, "checking the GPUs' memory", eng_bound_quick() + wait, check, e, NULL, &buf, &len);
	const room_reply *r = buf;
	if (rc != 0 || !r || len != reply_size(m->n) || r->n != m->n) {
		eng_log(e, CS_LOG_WARN, "the GPUs' free memory could not be checked before the restore (see above)");
		return 0; /* the check right before each restore still stands */
	}
	if (r->rc < 0) {
		eng_log(e, CS_LOG_ERROR, "GPU restore refused before anything was restored: %s", r->message);
		return -1;
	}
	name_verdicts(e, r);
	if (!r->refused)
		return 0;
	char why[400];
	snprintf(why, sizeof(why),
		 "GPU restore REFUSED before %s created any process: %zu of the %zu GPU processes would not fit; the "
		 "images are intact and restore once the GPUs have room (CUDASNAP_WAIT_MEMORY=SECONDS in %s waits "
		 "for it)",
		 e->o.engine, r->refused, r->n, cs_config_path());
	eng_log(e, CS_LOG_ERROR, "%s", why);
	eng_op_fail(e, why);
	return -1;
}

/* What became of the restored processes, in the operation's entry: killed
 * (the images are intact), or kept checkpointed. A process whose GPU state
 * is lost stays named so. */
static void note_given_up(cs_engine *e, const char *why, bool kept)
{
	for (size_t i = 0; i < e->ntasks; i++) {
		const eng_task *t = &e->tasks[i];
		cs_history_proc *h = eng_op_proc(e, t->pid, t->nspid, t->comm);
		if (!h || h->outcome == CS_HIST_LOST || h->outcome == CS_HIST_UNRESTORABLE || (kept && t->result == 0))
			continue;
		h->outcome = kept ? CS_HIST_LEFT_BEHIND : CS_HIST_KILLED;
		if (kept)
			eng_restore_cmd(e, t, h->recovery, sizeof(h->recovery));
		else if (!h->why[0])
			snprintf(h->why, sizeof(h->why), "the GPU restore failed (%s); the images are intact", why);
	}
}

/* Kills what the engine restored: every process of the tree (as CRIU's own
 * failure does where the root is not a PID namespace's init, whose end
 * takes the others with it; the tasks and the root are among them, adopted
 * first), each through the pidfd opened while the engine held it, so that a
 * pid taken by another since is left alone; a task or the root by pid where
 * no pidfd was had. Their pids into v. */
static size_t kill_tree(cs_engine *e, pid_t *v)
{
	size_t killed = 0;
	for (size_t i = 0; i < e->ntree; i++) {
		pid_t pid = e->tree[i];
		int fd = e->tree_fd[i];
		bool sent = fd >= 0 ? syscall(SYS_pidfd_send_signal, fd, SIGKILL, NULL, 0) == 0 :
				      (pid == e->root || eng_find(e, pid)) && kill(pid, SIGKILL) == 0;
		if (sent)
			v[killed++] = pid;
	}
	return killed;
}

void eng_give_up(cs_engine *e, const char *why, bool seized)
{
	bool keep = cs_env_on("CUDASNAP_KEEP_FAILED_RESTORE");
	note_given_up(e, why, keep);
	if (keep) {
		eng_log(e, CS_LOG_ERROR,
			"the GPU restore failed (%s); the restored processes are KEPT as CUDASNAP_KEEP_FAILED_RESTORE=1 "
			"asks, though their GPU state is not back",
			why);
		return;
	}
	e->killed = true;
	_cleanup_free_ pid_t *v = calloc(e->ntree + 1, sizeof(*v));
	size_t killed = v ? kill_tree(e, v) : 0;
	if (seized && v && e->o.reap)
		e->o.reap(e->o.ctx, v, killed);
	eng_log(e, CS_LOG_ERROR,
		"the GPU restore failed (%s): %zu restored process%s killed so that the restore fails rather than "
		"leave processes whose GPU state is not back; the images are intact: restore them again once the "
		"cause is mended (CUDASNAP_KEEP_FAILED_RESTORE=1 in %s keeps them instead)",
		why, killed, killed == 1 ? " is" : "es are", cs_config_path());
}
