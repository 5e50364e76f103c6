/* What the cuda-checkpoint drop-in does before a state-changing action:
 * the claim that keeps two operations off one process (runsc and CRIU's
 * plugin call the drop-in beside cudasnap's own commands), and before a
 * checkpoint the checks that refuse one which would lose the process (host
 * memory, CUDA IPC). Failures keep NVIDIA's line format. */
#include "compat.h"
#include "plan.h"
#include "proc.h"
#include "state.h"
#include "util.h"

#include <fcntl.h>
#include <stdio.h>
#include <string.h>

#define COMMAND "cuda-checkpoint"

static void comm_of(pid_t pid, char *comm, size_t size)
{
	_cleanup_close_ int pdir = cs_proc_open(cs_proc_dir(), pid);
	cs_stat st;
	snprintf(comm, size, "%s", pdir >= 0 && cs_proc_read_stat(pdir, &st) == 0 ? st.comm : "?");
}

/* A warning of the claim (a lock it ignores), in the drop-in's words. */
static void claim_warn(void *ctx, const char *line)
{
	(void)ctx;
	fprintf(stderr, "cuda-checkpoint: %s\n", line);
}

int compat_claim(const compat_args *a, cs_claims *c, pid_t *tgid)
{
	if (cs_tid_to_tgid(cs_proc_dir(), a->pid, tgid) < 0)
		return CLI_GO_ON; /* not a process of this namespace: the driver answers that itself */
	/* Without a usable state directory the pidfd's lock alone keeps others off. */
	_cleanup_close_ int statefd = open(cs_state_dir(), O_RDONLY | O_DIRECTORY | O_NOFOLLOW | O_CLOEXEC);
	char comm[64];
	comm_of(*tgid, comm, sizeof(comm));
	cs_error err = { 0 };
	c->warn = claim_warn;
	if (cs_claims_add(c, statefd, *tgid, comm, COMMAND, NULL, 0, &err) == 0 || err.status == CS_EPROC)
		return CLI_GO_ON;
	compat_fail_line(a, a->op == COMPAT_ACTION ? a->action : CS_CALL_GET_STATE, err.message);
	fprintf(stderr, "cuda-checkpoint: hint: %s\n", err.hint);
	return EXIT_FAILED;
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

int compat_check_checkpoint(cs_driver *d, const compat_args *a, pid_t tgid, int state)
{
	held_lines held = { .len = 0 };
	cs_session_opts o = {
		.op = state == CS_STATE_LOCKED ? CS_OP_CHECKPOINT_LOCKED : CS_OP_CHECKPOINT,
		.command = COMMAND,
		.sel = { .pids = &tgid, .npids = 1 },
		.only_selected = true,
		.claimed = true,
		.dry_run = true,
		.no_manifest = true,
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
	compat_fail_line(a, CS_CALL_CHECKPOINT, err.message);
	fputs(held.text, stderr);
	fprintf(stderr, "cuda-checkpoint: hint: %s\n", err.hint);
	return EXIT_FAILED;
}
