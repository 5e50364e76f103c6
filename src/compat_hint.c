/* The one line cuda-checkpoint mode adds to NVIDIA's output: cudasnap's
 * explanation of a failed driver call. Callers parse at most the first 128
 * bytes of output and the exit status (CRIU's plugin reads stdout and stderr
 * through one pipe, but only logs them on failure); the NVIDIA-format line
 * comes first, so one more stderr line changes nothing for them.
 *
 * Only the target itself (--pid) is ever asked of the driver: any other
 * process may be stopped by the caller (CRIU stops a tree parent first), and
 * the driver would wait for it without bound. The rest comes from /proc. */
#include "compat.h"
#include "proc.h"
#include "sandbox.h"
#include "util.h"

#include <fcntl.h>
#include <stdio.h>
#include <string.h>

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

/* What /proc says about pid, for choosing among the hints. */
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

void compat_hint(cs_driver *d, cs_call call, pid_t pid, int res, unsigned timeout_ms)
{
	char comm[64] = "";
	cs_explain_ctx c = {
		.call = call, .pid = pid, .cls = CS_CLASS_NONE, .state = CS_STATE_UNKNOWN, .timeout_ms = timeout_ms
	};
	describe(&c, res, comm, sizeof(comm));
	if (res == CS_CU_ILLEGAL_STATE)
		cs_cu_get_state(d, pid, &c.state);
	if (res == CS_CU_OPERATING_SYSTEM) {
		cs_sandbox sb;
		cs_sandbox_detect(NULL, &sb);
		c.gvisor = sb.gvisor;
	}
	cs_error err = { 0 };
	cs_explain(d, &c, res, &err);
	if (err.hint[0])
		fprintf(stderr, "cuda-checkpoint: hint: %s\n", err.hint);
}

/* GetRestoreThreadId is the one call the driver answers without the target,
 * so it is safe to make first. A pid it does not know (not CUDA, gone) is no
 * process that could keep a call waiting: the driver answers those at once. */
bool compat_halted(cs_driver *d, pid_t pid, compat_halt *out)
{
	memset(out, 0, sizeof(*out));
	pid_t tid;
	if (cs_cu_get_restore_tid(d, pid, &tid) != CS_CU_SUCCESS)
		return false;
	if (cs_tid_to_tgid(cs_proc_dir(), pid, &out->tgid) < 0)
		return false;
	/* The restore thread, not the process: CRIU's plugin calls with every
	 * other thread ptrace-stopped and only that one resumed. */
	return cs_proc_halt(cs_proc_dir(), out->tgid, tid, &out->info) != CS_HALT_NONE;
}

void compat_halt_hint(const compat_halt *h)
{
	char why[400], comm[72] = "";
	cs_halt_clause(&h->info, h->tgid, why, sizeof(why));
	_cleanup_close_ int pdir = cs_proc_open(cs_proc_dir(), h->tgid);
	cs_stat st;
	if (pdir >= 0 && cs_proc_read_stat(pdir, &st) == 0)
		snprintf(comm, sizeof(comm), " (%s)", st.comm);
	fprintf(stderr,
		"cuda-checkpoint: hint: process %d%s is %s. The driver's calls are answered by the "
		"process's own restore thread, so they would wait until it runs again; nothing was changed.\n",
		(int)h->tgid, comm, why);
}
