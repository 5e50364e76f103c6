#include <errno.h>
#include <stdlib.h>
#include <unistd.h>

#include "vmm.h"

/* What a checkpoint and a restore do with the VMM physical allocations. They
 * run on the restore thread while the process is locked, no call in
 * progress, so the tables are theirs. */

/* Like the legacy memory's copy, the host's own heap, every byte written
 * during the checkpoint call, so that its memory cgroup is charged then. */
int fc_vmm_save(void)
{
	int nphys;
	struct fc_phys **all = fc_vmm_all(&nphys);
	for (int i = 0; i < nphys; i++) {
		struct fc_phys *p = all[i];
		if (p->fd < 0)
			continue;
		p->saved = malloc(p->size);
		if (p->saved == NULL || fc_io_all(p->fd, p->saved, p->size, 0) != 0) {
			fc_vmm_unsave();
			return -1;
		}
	}
	return 0;
}

void fc_vmm_unsave(void)
{
	int nphys;
	struct fc_phys **all = fc_vmm_all(&nphys);
	for (int i = 0; i < nphys; i++) {
		free(all[i]->saved);
		all[i]->saved = NULL;
	}
}

void fc_vmm_drop(void)
{
	int nphys;
	struct fc_phys **all = fc_vmm_all(&nphys);
	for (int i = 0; i < nphys; i++) {
		if (all[i]->saved != NULL) {
			close(all[i]->fd);
			all[i]->fd = -1;
		}
	}
}

uint64_t fc_vmm_saved(int ordinal)
{
	int nphys;
	struct fc_phys **all = fc_vmm_all(&nphys);
	uint64_t bytes = 0;
	for (int i = 0; i < nphys; i++)
		if (all[i]->saved != NULL && all[i]->ordinal == ordinal)
			bytes += all[i]->size;
	return bytes;
}

/* Called with fc_tgt.mu held, by the restore. */
int fc_vmm_restore(const int *map)
{
	int nphys;
	struct fc_phys **all = fc_vmm_all(&nphys);
	int *fds = malloc(sizeof(*fds) * ((size_t)nphys + 1));
	int ok = fds != NULL;
	for (int i = 0; ok && i < nphys; i++)
		fds[i] = -1;
	for (int i = 0; ok && i < nphys; i++) {
		struct fc_phys *p = all[i];
		if (p->saved == NULL)
			continue;
		fds[i] = fc_vmm_memfd(&fc_tgt.gpus.uuid[map[p->ordinal]], p->size);
		ok = fds[i] >= 0 && fc_io_all(fds[i], p->saved, p->size, 1) == 0;
	}
	for (int i = 0; fds != NULL && i < nphys; i++) {
		if (fds[i] < 0)
			continue;
		if (!ok) {
			close(fds[i]);
			continue;
		}
		all[i]->fd = fds[i];
		free(all[i]->saved);
		all[i]->saved = NULL;
	}
	free(fds);
	return ok ? 0 : -1;
}

int fc_vmm_import_held(void)
{
	int nphys;
	struct fc_phys **all = fc_vmm_all(&nphys);
	for (int i = 0; i < nphys; i++)
		if (all[i]->mem != NULL)
			return 1;
	return 0;
}

void fc_vmm_forget(void)
{
	int nphys;
	struct fc_phys **all = fc_vmm_all(&nphys);
	for (int i = 0; i < nphys; i++) {
		if (all[i]->fd >= 0)
			close(all[i]->fd);
		all[i]->fd = -1;
	}
}
