#include "verify.h"

#include <stdio.h>
#include <stdlib.h>

/* The nearest ancestor the driver knows as a CUDA process. */
static pid_t cuda_ancestor(const cs_ptable *t, pid_t pid)
{
	for (pid_t a = cs_ptable_listed_ancestor(t, pid); a > 0; a = cs_ptable_listed_ancestor(t, a)) {
		const cs_proc *p = cs_ptable_find(t, a);
		if (p && p->cls == CS_CLASS_CUDA)
			return a;
	}
	return 0;
}

static void reason(const cs_ptable *t, const cs_proc *p, cs_leftover *l)
{
	const char *state = cs_state_name(p->state);
	switch (p->cls) {
	case CS_CLASS_CUDA:
		if (p->state == CS_STATE_CHECKPOINTED)
			snprintf(l->reason, sizeof(l->reason), "a checkpointed CUDA process that still holds this "
				 "reference (a file it opened itself, outside the CUDA driver)");
		else
			snprintf(l->reason, sizeof(l->reason), "a CUDA process that was not checkpointed (%s)",
				 state ? state : "state unknown");
		return;
	case CS_CLASS_DEVICE_HOLDER:
		l->cuda_ancestor = cuda_ancestor(t, p->pid);
		if (l->cuda_ancestor)
			snprintf(l->reason, sizeof(l->reason), "forked from CUDA process %d without exec (a "
				 "DataLoader-style worker): the driver cannot checkpoint it", (int)l->cuda_ancestor);
		else
			snprintf(l->reason, sizeof(l->reason), "opened the GPU device files itself: the driver "
				 "cannot checkpoint it");
		return;
	default:
		snprintf(l->reason, sizeof(l->reason), "the driver gave no state for it");
	}
}

int cs_verify(const cs_ptable *t, cs_leftover **out, size_t *n)
{
	size_t m = 0;
	for (size_t i = 0; i < t->n; i++)
		m += t->procs[i].nrefs;
	*n = 0;
	*out = calloc(m ? m : 1, sizeof(**out));
	if (!*out)
		return -CS_ESYS;
	for (size_t i = 0; i < t->n; i++) {
		const cs_proc *p = &t->procs[i];
		for (size_t k = 0; k < p->nrefs; k++) {
			cs_leftover *l = &(*out)[(*n)++];
			l->proc = p;
			l->ref = &p->refs[k];
			reason(t, p, l);
		}
	}
	return 0;
}
