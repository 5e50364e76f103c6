#include "ipc.h"

#include <limits.h>
#include <stdio.h>

#include "settings.h"

int fc_ipc_shm_path(char *buf, size_t len, unsigned int uid, int pid)
{
	char setting[PATH_MAX];
	const char *dir = fc_setting("FAKECUDA_SHM_DIR", setting, sizeof(setting));
	int n = snprintf(buf, len, "%s/cuda.shm.%u.%d", dir && *dir ? dir : FC_SHM_DIR, uid, pid);
	return n > 0 && (size_t)n < len ? 0 : -1;
}
