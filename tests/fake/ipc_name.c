#include "ipc.h"

#include <limits.h>
#include <stdio.h>

#include "settings.h"

int fc_ipc_shm_path(char *buf, size_t len, unsigned int uid, int pid)
{
	char setting[PATH_MAX];
	const char *dir = fc_setting("FAKECUDA_SHM_DIR", setting, sizeof(setting));
	/* As driver 580 names it: the exporter's pid in hex, then a counter
	 * (/dev/shm/cuda.shm.0.2d9.1 for pid 729, H200, 2026-12-03). */
	int n = snprintf(buf, len, "%s/cuda.shm.%u.%x.1", dir && *dir ? dir : FC_SHM_DIR, uid, (unsigned)pid);
	return n > 0 && (size_t)n < len ? 0 : -1;
}
