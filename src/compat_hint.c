/* The one line cuda-checkpoint mode adds to NVIDIA's output: cudasnap's
 * explanation of a failed driver call. Callers parse at most the first 128
 * bytes of output and the exit status (CRIU's plugin reads stdout and stderr
 * through one pipe, but only logs them on failure); the NVIDIA-format line
 * comes first, so one more stderr line changes nothing for them. */
#include "compat.h"
#include "proc.h"
#include "sandbox.h"
#include "util.h"

#include <fcntl.h>
#include <stdio.h>
#include <string.h>

/* What /proc says about pid, for choosing among the hints. */
static void describe(cs_driver *d, cs_explain_ctx *c, int res, char *comm, size_t commsize)
{
	pid_t tgid;
	c->pid_visible = cs_tid_to_tgid(cs_proc_dir(), c->pid, &tgid) == 0;
	if (!c->pid_visible)
		return;
	char path[64];
	snprintf(path, sizeof(path), "%s/%d", cs_proc_dir(), (int)tgid);
	_cleanup_close_ int pdir = open(path, O_RDONLY | O_DIRECTORY | O_CLOEXEC);
	cs_stat st;
	if (pdir < 0 || cs_proc_read_stat(pdir, &st) < 0)
		return;
	snprintf(comm, commsize, "%s", st.comm);
	c->comm = comm;
	if (res != CS_CU_NOT_INITIALIZED)
		return;
	cs_proc p = { .pid = tgid };
	cs_proc_scan_fds(pdir, cs_dev_dir(), &p);
	cs_proc_scan_maps(pdir, cs_dev_dir(), &p);
	if (p.nrefs) {
		int state;
		c->cls = CS_CLASS_DEVICE_HOLDER;
		c->forked_child = cs_cu_get_state(d, st.ppid, &state) == CS_CU_SUCCESS;
	}
	cs_proc_clear(&p);
}

void compat_hint(cs_driver *d, cs_call call, pid_t pid, int res, unsigned timeout_ms)
{
	char comm[64] = "";
	cs_explain_ctx c = { .call = call, .pid = pid, .cls = CS_CLASS_NONE, .state = CS_STATE_UNKNOWN,
			     .timeout_ms = timeout_ms };
	describe(d, &c, res, comm, sizeof(comm));
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
