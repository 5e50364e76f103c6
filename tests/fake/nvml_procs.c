#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>

#include "gpumem.h"
#include "nvml_internal.h"
#include "settings.h"

/* Which processes use a GPU, and how much of its memory: the processes that
 * gpumem.c finds in the caller's /proc. */

#define PROC_PID_INIT_INO 0xEFFFFFFCul
/* nvmlProcessInfo_t's instance ids without MIG */
#define NOT_AVAILABLE 0xFFFFFFFFu
/* NVML_VALUE_NOT_AVAILABLE, the usedGpuMemory of a process NVML may not see */
#define VALUE_NOT_AVAILABLE (~0ull)

struct scan {
	const char *uuid;
	int hide_memory; /* FAKECUDA_NVML_PROC_NA */
	nvmlProcessInfo_t *infos;
	unsigned int cap;
	unsigned int found; /* also those beyond cap */
};

static void list_one(const struct fc_gpu_user *u, void *arg)
{
	struct scan *s = arg;
	if (strcmp(u->uuid, s->uuid) != 0)
		return;
	unsigned long long bytes = s->hide_memory ? VALUE_NOT_AVAILABLE : u->bytes;
	if (s->found < s->cap)
		s->infos[s->found] = (nvmlProcessInfo_t){ (unsigned int)u->pid, bytes,
							  NOT_AVAILABLE, NOT_AVAILABLE };
	s->found++;
}

/* NVML names processes by their pids in the initial pid namespace, which the
 * double knows only when the caller is there: then they are its /proc's.
 * FAKECUDA_HOST_PIDNS names another namespace to stand for the initial one
 * (tests run in pid namespaces of their own). */
static int in_host_pidns(void)
{
	char buf[32];
	struct stat st;
	const char *v = fc_setting("FAKECUDA_HOST_PIDNS", buf, sizeof(buf));
	unsigned long host = v && *v ? strtoul(v, NULL, 0) : PROC_PID_INIT_INO;
	return stat("/proc/self/ns/pid", &st) == 0 && st.st_ino == host;
}

/* The real NVML gives NVML_VALUE_NOT_AVAILABLE for processes it may not
 * look into (some containers, vGPU); the device's used memory still counts
 * them. */
static int memory_hidden(void)
{
	char buf[32];
	const char *v = fc_setting("FAKECUDA_NVML_PROC_NA", buf, sizeof(buf));
	return v != NULL && atoi(v) != 0;
}

/* NVML's two calls: *count 0 and infos NULL (or any count too small) ->
 * NVML_ERROR_INSUFFICIENT_SIZE with the count needed (NVML_SUCCESS when
 * there is none), then a big enough array -> the processes and their count. */
nvmlReturn_t nvmlDeviceGetComputeRunningProcesses_v3(nvmlDevice_t device, unsigned int *count,
						     nvmlProcessInfo_t *infos)
{
	if (!fc_nvml_initialized())
		return NVML_ERROR_UNINITIALIZED;
	if (device == NULL || count == NULL || (infos == NULL && *count != 0))
		return NVML_ERROR_INVALID_ARGUMENT;
	if (!in_host_pidns())
		return NVML_ERROR_NOT_SUPPORTED;
	struct scan s = { device->uuid, memory_hidden(), infos, *count, 0 };
	fc_gpu_users(list_one, &s);
	nvmlReturn_t rc = s.found > *count ? NVML_ERROR_INSUFFICIENT_SIZE : NVML_SUCCESS;
	*count = s.found;
	return rc;
}
