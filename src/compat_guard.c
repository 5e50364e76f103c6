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
	compat_history_refused("busy", err.message);
	compat_fail_line(a, a->op == COMPAT_ACTION ? a->action : CS_CALL_GET_STATE, err.message);
	fprintf(stderr, "cuda-checkpoint: hint: %s\n", err.hint);
	return EXIT_FAILED;
}

int compat_check_checkpoint(cs_driver *d, const compat_args *a, pid_t tgid, int state)
{
	return compat_check(d, a, tgid, state == CS_STATE_LOCKED ? CS_OP_CHECKPOINT_LOCKED : CS_OP_CHECKPOINT,
			    CS_CALL_CHECKPOINT);
}
