/* What the cuda-checkpoint drop-in keeps of a checkpoint, and checks before
 * a restore: the size its checkpoint moved and the GPUs it used, in the
 * state directory's manifest, so that a later restore (by the drop-in, or
 * by cudasnap restore) is refused where a GPU has no room for it: a restore
 * that runs out of GPU memory destroys the process's checkpointed state for
 * good. Failures keep NVIDIA's line format. */
#include "compat.h"
#include "manifest.h"
#include "nvml.h"
#include "plan.h"
#include "proc.h"
#include "sandbox.h"
#include "select.h"
#include "state.h"
#include "util.h"

#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#define COMMAND "cuda-checkpoint"

static unsigned long long rss_of(pid_t pid)
{
	char path[64], buf[4096];
	long kb;
	snprintf(path, sizeof(path), "%s/%d/status", cs_proc_dir(), (int)pid);
	if (cs_read_at(AT_FDCWD, path, buf, sizeof(buf)) < 0 || cs_parse_status_field(buf, "VmRSS", &kb) < 0)
		return 0;
	return (unsigned long long)kb * 1024;
}

void compat_note_before(pid_t tgid, cs_target *t)
{
	memset(t, 0, sizeof(*t));
	_cleanup_close_ int pdir = tgid > 0 ? cs_proc_open(cs_proc_dir(), tgid) : -1;
	cs_stat st;
	cs_proc_ident id = { 0 };
	if (pdir < 0 || cs_proc_read_stat(pdir, &st) < 0)
		return;
	t->pid = tgid;
	t->start_time = st.start_time;
	snprintf(t->comm, sizeof(t->comm), "%s", st.comm);
	if (cs_proc_read_ident(pdir, tgid, &id) == 0)
		t->nspid = id.nspid;
	cs_visible_devices(tgid, t->visible_devices, sizeof(t->visible_devices));
	t->rss_before = rss_of(tgid);
	cs_proc p = { .pid = tgid };
	cs_proc_scan_gpu(pdir, cs_dev_dir(), &p);
	_cleanup_(cs_nvml_closep) cs_nvml *nv = NULL;
	_cleanup_free_ cs_nvml_gpu *gpus = NULL;
	size_t ngpus = 0;
	if (cs_nvml_open(&nv, NULL) < 0 || cs_nvml_gpus(nv, &gpus, &ngpus, NULL) < 0)
		ngpus = 0;
	cs_sandbox sb;
	cs_sandbox_detect(NULL, &sb);
	cs_target_note_use(t, &p, nv, gpus, ngpus, sb.pid_ns == CS_PIDNS_HOST);
	cs_target_note_gpus(t, gpus, ngpus);
	free(p.refs);
}

void compat_record(const cs_driver *d, cs_target *t, double seconds)
{
	if (t->pid <= 0)
		return;
	t->rss_after = rss_of(t->pid);
	t->bytes = t->rss_after > t->rss_before ? t->rss_after - t->rss_before : 0;
	t->state = CS_STATE_CHECKPOINTED;
	t->done[CS_STEP_CHECKPOINT] = true;
	t->seq[CS_STEP_CHECKPOINT] = 1;
	t->seconds[CS_STEP_CHECKPOINT] = seconds;
	/* Best effort, and silent: NVIDIA's binary prints nothing on success,
	 * and leaves nothing behind, so the drop-in creates no state directory
	 * (cudasnap's own commands and the CRIU plugin do). A restore without
	 * the record counts the process's resident memory instead. */
	_cleanup_close_ int statefd = cs_state_open_existing(NULL);
	if (statefd >= 0)
		cs_manifest_record(statefd, COMMAND, t, 1, d, seconds, NULL);
}

void compat_forget(pid_t tgid)
{
	cs_target t = { .pid = tgid };
	_cleanup_close_ int pdir = tgid > 0 ? cs_proc_open(cs_proc_dir(), tgid) : -1;
	cs_stat st;
	if (pdir < 0 || cs_proc_read_stat(pdir, &st) < 0)
		return;
	t.start_time = st.start_time;
	_cleanup_close_ int statefd = cs_state_open_existing(NULL);
	if (statefd >= 0)
		cs_manifest_drop(statefd, COMMAND, &t, NULL);
}

/* The check's own lines, held until NVIDIA's line is out: callers of
 * NVIDIA's binary take the first line of stderr as the reason. */
typedef struct held_lines {
	char text[8192];
	size_t len;
} held_lines;

static void hold_line(void *ctx, const char *line)
{
	held_lines *h = ctx;
	size_t left = sizeof(h->text) - h->len;
	int n = snprintf(h->text + h->len, left, "cuda-checkpoint: %s\n", line);
	if (n > 0)
		h->len += (size_t)n < left ? (size_t)n : left - 1;
}

int compat_check(cs_driver *d, const compat_args *a, pid_t tgid, cs_op op, cs_call call)
{
	held_lines held = { .len = 0 };
	cs_session_opts o = {
		.op = op,
		.command = COMMAND,
		.sel = { .pids = &tgid, .npids = 1 },
		.only_selected = true,
		.claimed = true,
		.dry_run = true,
		.no_manifest = true,
		.device_map = op == CS_OP_RESTORE ? a->device_map : NULL,
		.warn = hold_line,
		.warn_ctx = &held,
	};
	_cleanup_(cs_session_freep) cs_session *s = NULL;
	cs_error err = { 0 };
	int r = cs_session_open(&s, d, &o, &err);
	if (r == 0)
		r = cs_session_select(s, &err);
	if (r == 0)
		r = cs_session_check(s, &err);
	if (r == 0 || err.status != CS_EPROC) {
		fputs(held.text, stderr);
		return CLI_GO_ON; /* what the check could not read, the driver's own call will tell */
	}
	size_t n = 0;
	const cs_refusal *v = cs_session_refusals(s, &n);
	compat_history_refused(n ? v[0].reason.code : "refused", err.message);
	compat_fail_line(a, call, err.message);
	fputs(held.text, stderr);
	fprintf(stderr, "cuda-checkpoint: hint: %s\n", err.hint);
	return EXIT_FAILED;
}
