#include "verify.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

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
	if (p->nvml_only && p->state != CS_STATE_CHECKPOINTED) {
		snprintf(l->reason, sizeof(l->reason),
			 "it uses NVML only (a monitor such as nvidia-smi, DCGM or a health probe), which is "
			 "checkpointed only when named with --pid; newer runsc saves such idle clients, CRIU and "
			 "older runsc cannot");
		return;
	}
	switch (p->cls) {
	case CS_CLASS_CUDA:
		if (p->state == CS_STATE_CHECKPOINTED)
			snprintf(l->reason, sizeof(l->reason),
				 "a checkpointed CUDA process that still holds this "
				 "reference (a file it opened itself, outside the CUDA driver)");
		else
			snprintf(l->reason, sizeof(l->reason), "a CUDA process that was not checkpointed (%s)",
				 p->halt       ? cs_halt_name(p->halt) :
					 state ? state :
						 "state unknown");
		return;
	case CS_CLASS_DEVICE_HOLDER:
		l->cuda_ancestor = cuda_ancestor(t, p->pid);
		if (p->cu_result == -1 && p->maps_libcuda) {
			/* Outside the operation, the driver was not asked: only /proc speaks. */
			snprintf(l->reason, sizeof(l->reason),
				 "not part of this operation (the driver was not asked about it): a CUDA process of its "
				 "own is checkpointed when selected too (--pid, --tree)%s",
				 l->cuda_ancestor ? "; one forked from a CUDA process without exec (a DataLoader-style "
						    "worker) cannot be" :
						    "");
			return;
		}
		if (l->cuda_ancestor)
			snprintf(l->reason, sizeof(l->reason),
				 "forked from CUDA process %d without exec (a "
				 "DataLoader-style worker): the driver cannot checkpoint it; workers made with "
				 "multiprocessing_context=\"spawn\" or \"forkserver\", or started before CUDA is "
				 "initialized, can be checkpointed",
				 (int)l->cuda_ancestor);
		else
			snprintf(l->reason, sizeof(l->reason),
				 "opened the GPU device files itself: the driver "
				 "cannot checkpoint it");
		return;
	default: snprintf(l->reason, sizeof(l->reason), "the driver gave no state for it");
	}
}

int cs_verify(const cs_ptable *t, cs_leftover **out, size_t *n, cs_error *err)
{
	size_t m = 0;
	for (size_t i = 0; i < t->n; i++)
		m += t->procs[i].nrefs;
	*n = 0;
	*out = calloc(m ? m : 1, sizeof(**out));
	if (!*out)
		return cs_error_set(err, CS_ESYS, NULL, "out of memory listing %zu device references", m);
	for (size_t i = 0; i < t->n; i++) {
		const cs_proc *p = &t->procs[i];
		/* cudasnap's own processes come and go; they are never part of a workload. */
		if (p->tool)
			continue;
		for (size_t k = 0; k < p->nrefs; k++) {
			cs_leftover *l = &(*out)[(*n)++];
			l->proc = p;
			l->ref = &p->refs[k];
			reason(t, p, l);
		}
	}
	return 0;
}

static void add_file(char *files, size_t size, const char *path)
{
	const char *base = strrchr(path, '/');
	base = base ? base + 1 : path;
	for (const char *f = files; (f = strstr(f, base)); f += strlen(base))
		if ((f == files || f[-1] == ' ') && (f[strlen(base)] == ',' || f[strlen(base)] == '\0'))
			return;
	size_t len = strlen(files);
	snprintf(files + len, size - len, "%s%s", len ? ", " : "", base);
}

void cs_verify_line(const cs_leftover *l, size_t n, size_t *used, char *buf, size_t size)
{
	const cs_proc *p = l[0].proc;
	int fds = 0, maps = 0, bare = 0;
	char files[160] = "";
	size_t k = 0;
	for (; k < n && l[k].proc == p; k++) {
		fds += l[k].ref->kind == CS_REF_FD;
		maps += l[k].ref->kind == CS_REF_MAP;
		bare += l[k].ref->kind == CS_REF_MAP && !l[k].ref->fd_open;
		add_file(files, sizeof(files), l[k].ref->path);
	}
	*used = k;
	char without[48] = "";
	if (bare)
		snprintf(without, sizeof(without), " (%d without an open fd)", bare);
	/* one the driver was not asked about, that maps the driver and was not
	 * forked from a CUDA process: a CUDA process the selection left out,
	 * not a device holder */
	bool unasked_cuda =
		p->cls == CS_CLASS_DEVICE_HOLDER && p->cu_result == -1 && p->maps_libcuda && !l[0].cuda_ancestor;
	snprintf(buf, size, "%d (%s, %s) holds %d fd%s and %d mapping%s%s of %s: %s", (int)p->pid, p->comm,
		 unasked_cuda ? "cuda, not selected" : cs_class_name(p->cls), fds, fds == 1 ? "" : "s", maps,
		 maps == 1 ? "" : "s", without, files, l[0].reason);
}

void cs_unreadable_line(const cs_ptable *t, char *buf, size_t size)
{
	if (size == 0)
		return;
	buf[0] = '\0';
	if (t->nunreadable == 0)
		return;
	size_t len = (size_t)snprintf(buf, size, "cannot read %zu process%s as uid %u:", t->nunreadable,
				      t->nunreadable == 1 ? "" : "es", (unsigned)geteuid());
	/* The reason once, at the first process that has it; the line stays short. */
	enum { SHOWN = 20 };
	for (size_t i = 0; i < t->nunreadable && i < SHOWN && len < size; i++) {
		int e = t->unreadable[i].errnum;
		bool first = true;
		for (size_t k = 0; k < i && first; k++)
			first = t->unreadable[k].errnum != e;
		len += (size_t)snprintf(buf + len, size - len, "%s %d%s%s%s", i ? "," : "", (int)t->unreadable[i].pid,
					first ? " (" : "", first ? strerror(e) : "", first ? ")" : "");
	}
	if (t->nunreadable > SHOWN && len < size)
		snprintf(buf + len, size - len, " and %zu more", t->nunreadable - SHOWN);
}
