#include "ipc.h"

#include <limits.h>
#include <stdio.h>

#include "settings.h"

int fc_ipc_shm_path(char *buf, size_t len, unsigned int uid, int pid)
{
	return fc_ipc_file_path(buf, len, uid, pid, 1);
}

int fc_ipc_file_path(char *buf, size_t len, unsigned int uid, int pid, unsigned int n)
{
	char setting[PATH_MAX];
	const char *dir = fc_setting("FAKECUDA_SHM_DIR", setting, sizeof(setting));
	/* As driver 580 names it: the exporter's pid in hex, then a counter
	 * (/dev/shm/cuda.shm.0.2d9.1 for pid 729, H200, 2026-12-03). */
	int w = snprintf(buf, len, "%s/cuda.shm.%u.%x.%u", dir && *dir ? dir : FC_SHM_DIR, uid, (unsigned)pid, n);
	return w > 0 && (size_t)w < len ? 0 : -1;
}
