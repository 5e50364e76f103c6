/* A single call's beginning and end (lib/onecall/onecall.h): its process, its
 * claim, whether the process can answer at all, the questions, and what a
 * failed driver call is said to mean. */
#include "onecall_int.h"
#include "proc.h"
#include "sandbox.h"
#include "state.h"

#include <fcntl.h>
#include <stdio.h>
#include <string.h>

/* Whether o names a call that may change the process. */
static bool changes_process(const cs_onecall_opts *o)
{
	return o->toggle || (o->call != CS_CALL_GET_STATE && o->call != CS_CALL_GET_TID);
}

int cs_onecall_refuse(cs_onecall *oc, cs_onecall_refusal *why, const char *code, const cs_error *err,
		      const char *history_why)
{
	snprintf(why->code, sizeof(why->code), "%s", code);
	why->err = *err;
	cs_onecall_history_refused(oc, code, history_why ? history_why : err->message);
	return -(err->status ? err->status : CS_EPROC);
}

/* The command of pid for the claim's record, "?" when /proc does not say. */
static void comm_of(pid_t pid, char *comm, size_t size)
{
	_cleanup_close_ int pdir = cs_proc_open(cs_proc_dir(), pid);
	cs_stat st;
	snprintf(comm, size, "%s", pdir >= 0 && cs_proc_read_stat(pdir, &st) == 0 ? st.comm : "?");
}

/* A process that this namespace does not show is not claimed: the driver
 * answers such a pid itself, at once. One that exits meanwhile neither. */
static int claim(cs_onecall *oc, cs_onecall_refusal *why)
{
	if (oc->tgid <= 0)
		return 0;
	/* Without a usable state directory the pidfd's lock alone keeps others off. */
	_cleanup_close_ int statefd = open(cs_state_dir(), O_RDONLY | O_DIRECTORY | O_NOFOLLOW | O_CLOEXEC);
	char comm[64];
	comm_of(oc->tgid, comm, sizeof(comm));
	cs_error err = { 0 };
	if (cs_claims_add(&oc->claims, statefd, oc->tgid, comm, oc->o.command, NULL, 0, &err) == 0 ||
	    err.status == CS_EPROC)
		return 0;
	return cs_onecall_refuse(oc, why, "busy", &err, NULL);
}

/* Every call but GetRestoreThreadId waits, without bound and whatever the
 * lock timeout, while the target's restore thread cannot run; NVIDIA's
 * binary hangs there. GetRestoreThreadId is answered by the driver itself,
 * so it is safe to make first. A pid it does not know (not CUDA, gone) is
 * no process that could keep a call waiting: the driver answers those at
 * once. */
static int refuse_halted(cs_onecall *oc, cs_onecall_refusal *why)
{
	pid_t tid, tgid;
	if (cs_cu_get_restore_tid(oc->d, oc->o.pid, &tid) != CS_CU_SUCCESS)
		return 0;
	if (cs_tid_to_tgid(cs_proc_dir(), oc->o.pid, &tgid) < 0)
		return 0;
	/* The restore thread, not the process: CRIU's plugin calls with every
	 * other thread ptrace-stopped and only that one resumed. */
	if (cs_proc_halt(cs_proc_dir(), tgid, tid, &why->halt) == CS_HALT_NONE)
		return 0;
	why->tgid = tgid;
	_cleanup_close_ int pdir = cs_proc_open(cs_proc_dir(), tgid);
	cs_stat st;
	if (pdir >= 0 && cs_proc_read_stat(pdir, &st) == 0) {
		why->comm_known = true;
		snprintf(why->comm, sizeof(why->comm), "%s", st.comm);
	}
	cs_error err = { 0 };
	cs_error_set(&err, CS_EPROC, NULL, "the process is %s and cannot answer", cs_halt_name(why->halt.halt));
	return cs_onecall_refuse(oc, why, cs_halt_name(why->halt.halt), &err, NULL);
}

int cs_onecall_open(cs_onecall **out, cs_driver *d, const cs_onecall_opts *o, cs_onecall_refusal *why)
{
	memset(why, 0, sizeof(*why));
	*out = NULL;
	_cleanup_(cs_onecall_freep) cs_onecall *oc = calloc(1, sizeof(*oc));
	if (!oc)
		return cs_error_set(&why->err, CS_ESYS, NULL, "out of memory");
	oc->d = d;
	oc->o = *o;
	cs_claims_init(&oc->claims);
	oc->claims.warn = o->warn;
	oc->claims.warn_ctx = o->warn_ctx;
	bool changes = changes_process(o);
	int r = 0;
	if (changes) {
		/* Begun before the claim: a call refused for it is an operation too. */
		cs_onecall_history_begin(oc);
		if (cs_tid_to_tgid(cs_proc_dir(), o->pid, &oc->tgid) < 0)
			oc->tgid = 0;
		r = claim(oc, why);
		cs_onecall_history_target(oc);
	}
	if (r == 0 && (o->toggle || o->call != CS_CALL_GET_TID))
		r = refuse_halted(oc, why);
	*out = TAKE_PTR(oc);
	return r;
}

void cs_onecall_free(cs_onecall *oc)
{
	if (!oc)
		return;
	cs_claims_release(&oc->claims);
	if (oc->ledger)
		cs_gpu_ledger_fini(oc->ledger);
	free(oc->ledger);
	cs_history_free(&oc->rec.h);
	free(oc->gpus);
	free(oc->pairs);
	free(oc);
}

int cs_onecall_get_state(cs_onecall *oc, int *state)
{
	return cs_cu_get_state(oc->d, oc->o.pid, state);
}

int cs_onecall_get_restore_tid(cs_onecall *oc, pid_t *tid)
{
	return cs_cu_get_restore_tid(oc->d, oc->o.pid, tid);
}

/* A device holder whose parent loaded the driver library or holds device
 * files was forked from a CUDA process after init (a parent checkpointed
 * meanwhile holds no device file but still maps libcuda). */
static bool parent_uses_gpu(pid_t ppid)
{
	if (ppid <= 0)
		return false;
	_cleanup_close_ int pdir = cs_proc_open(cs_proc_dir(), ppid);
	if (pdir < 0)
		return false;
	_cleanup_(cs_proc_clearp) cs_proc p = { .pid = ppid };
	cs_proc_scan_gpu(pdir, cs_dev_dir(), &p);
	return p.maps_libcuda || p.nrefs > 0;
}

/* What /proc says about the process, for choosing among the hints. */
static void describe(cs_explain_ctx *c, int res, char *comm, size_t commsize)
{
	pid_t tgid;
	c->pid_visible = cs_tid_to_tgid(cs_proc_dir(), c->pid, &tgid) == 0;
	if (!c->pid_visible)
		return;
	_cleanup_close_ int pdir = cs_proc_open(cs_proc_dir(), tgid);
	cs_stat st;
	if (pdir < 0 || cs_proc_read_stat(pdir, &st) < 0)
		return;
	snprintf(comm, commsize, "%s", st.comm);
	c->comm = comm;
	if (res != CS_CU_NOT_INITIALIZED)
		return;
	_cleanup_(cs_proc_clearp) cs_proc p = { .pid = tgid };
	cs_proc_scan_gpu(pdir, cs_dev_dir(), &p);
	if (p.nrefs) {
		c->cls = CS_CLASS_DEVICE_HOLDER;
		c->forked_child = parent_uses_gpu(st.ppid);
	}
}

void cs_onecall_failed(cs_onecall *oc, cs_call call, int res, cs_error *err)
{
	char why[256];
	snprintf(why, sizeof(why), "%s failed: %s (%s)", cs_call_name(call), cs_cu_string(oc->d, res),
		 cs_cu_name(oc->d, res));
	cs_onecall_history_failed(oc, why);
	char comm[64] = "";
	cs_explain_ctx c = { .call = call,
			     .pid = oc->o.pid,
			     .cls = CS_CLASS_NONE,
			     .state = CS_STATE_UNKNOWN,
			     .timeout_ms = oc->o.timeout_ms };
	describe(&c, res, comm, sizeof(comm));
	if (res == CS_CU_ILLEGAL_STATE)
		cs_cu_get_state(oc->d, oc->o.pid, &c.state);
	if (res == CS_CU_OPERATING_SYSTEM) {
		cs_sandbox sb;
		cs_sandbox_detect(NULL, &sb);
		c.gvisor = sb.gvisor;
	}
	cs_explain(oc->d, &c, res, err);
}
