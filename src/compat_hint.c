/* What cuda-checkpoint mode says beyond NVIDIA's own line: cudasnap's hint
 * after a failed driver call or a refusal. Callers parse at most the first
 * 128 bytes of output and the exit status (CRIU's plugin reads stdout and
 * stderr through one pipe, but only logs them on failure); the NVIDIA-format
 * line comes first, so the lines after it change nothing for them. */
#include "compat.h"

#include <stdio.h>
#include <string.h>

void compat_warn(void *ctx, const char *line)
{
	(void)ctx;
	fprintf(stderr, "cuda-checkpoint: %s\n", line);
}

/* The checks' own lines, said after NVIDIA's line when they refuse: callers
 * of NVIDIA's binary take the first line of stderr as the reason. */
void compat_held(const cs_onecall_refusal *why)
{
	char text[8192] = "";
	size_t len = 0;
	for (const char *l = why->held; l < why->held + why->nheld; l += strlen(l) + 1) {
		size_t left = sizeof(text) - len;
		int n = snprintf(text + len, left, "cuda-checkpoint: %s\n", l);
		if (n > 0)
			len += (size_t)n < left ? (size_t)n : left - 1;
	}
	fputs(text, stderr);
}

/* A halted target: why, and how it runs again. */
static void halt_hint(const cs_onecall_refusal *why)
{
	char clause[400], comm[72] = "";
	cs_halt_clause(&why->halt, why->tgid, clause, sizeof(clause));
	if (why->comm_known)
		snprintf(comm, sizeof(comm), " (%s)", why->comm);
	fprintf(stderr,
		"cuda-checkpoint: hint: process %d%s is %s. The driver's calls are answered by the "
		"process's own restore thread, so they would wait until it runs again; nothing was changed.\n",
		(int)why->tgid, comm, clause);
}

/* --toggle of a process that is neither running nor checkpointed. */
static void state_hint(int state)
{
	fprintf(stderr, "cuda-checkpoint: hint: %s\n",
		state == CS_STATE_LOCKED ?
			"The process is locked (by another caller, or by a step that failed half-way): "
			"'--action unlock' resumes it, '--action checkpoint' completes the checkpoint." :
			"The driver reports that checkpointing this process failed; it cannot be toggled. "
			"Run 'cudasnap doctor' and check the kernel log (dmesg).");
}

int compat_refused(const compat_args *a, cs_call call, const cs_onecall_refusal *why)
{
	/* The options, not the process: cudasnap's own lines, as for a usage error. */
	if (why->options)
		return compat_fail("cuda-checkpoint: %s%s%s", why->err.message,
				   why->err.hint[0] ? "\ncuda-checkpoint: hint: " : "", why->err.hint);
	compat_fail_line(a, call, why->err.message);
	compat_held(why);
	if (why->halt.halt != CS_HALT_NONE)
		halt_hint(why);
	else if (strcmp(why->code, "state") == 0)
		state_hint(why->state);
	else
		fprintf(stderr, "cuda-checkpoint: hint: %s\n", why->err.hint);
	if (why->unlocked)
		fprintf(stderr, "cuda-checkpoint: process %d was unlocked again, so that it keeps running\n",
			(int)a->pid);
	return EXIT_FAILED;
}

int compat_call_failed(const compat_call *c, cs_call call, int res)
{
	cs_error err = { 0 };
	cs_onecall_failed(c->oc, call, res, &err);
	compat_fail_line(c->a, call, cs_cu_string(c->d, res));
	if (err.hint[0])
		fprintf(stderr, "cuda-checkpoint: hint: %s\n", err.hint);
	return EXIT_FAILED;
}
