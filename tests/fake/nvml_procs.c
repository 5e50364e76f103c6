#include <dirent.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>

#include "internal.h"
#include "nvml_internal.h"
#include "procinfo.h"
#include "settings.h"

/* Which processes use a GPU, and how much of its memory: found in /proc
 * (procinfo.c), never by asking the processes, so that a stopped or frozen
 * one never blocks the call, as it does not block the real NVML. A process
 * counts when it is a fake CUDA process (its restore thread) holding device
 * memory on the GPU; a checkpointed one holds none, and an NVML-only one
 * has no context: neither is listed, as nvidia-smi lists neither. */

#define PROC_PID_INIT_INO 0xEFFFFFFCul
/* nvmlProcessInfo_t's instance ids without MIG */
#define NOT_AVAILABLE 0xFFFFFFFFu

struct scan {
	const char *uuid;
	unsigned long long context; /* bytes of a context */
	int na; /* FAKECUDA_NVML_PROC_NA=1: each process listed without its figure */
	nvmlProcessInfo_t *infos;
	unsigned int cap;
	unsigned int found; /* also those beyond cap */
	unsigned long long used;
};

static unsigned long long mib_setting(const char *name)
{
	char buf[32];
	const char *v = fc_setting(name, buf, sizeof(buf));
	unsigned long long mib = v ? strtoull(v, NULL, 10) : 0;
	/* more than any GPU has: the callers clamp to the total */
	return mib < (1ull << 30) ? mib << 20 : 1ull << 50;
}

static void scan_one(int pid, struct scan *s)
{
	struct fc_devmem_info m;
	if (fc_proc_devmem(pid, &m) != 0 || strcmp(m.uuid, s->uuid) != 0 ||
	    fc_find_restore_tid(pid) == 0)
		return;
	unsigned long long bytes = (unsigned long long)m.bytes + s->context;
	/* NVML_VALUE_NOT_AVAILABLE, as NVML lists a process whose figure it
	 * cannot give (the GPU's used memory still counts it). */
	if (s->found < s->cap)
		s->infos[s->found] = (nvmlProcessInfo_t){ (unsigned int)pid, s->na ? ~0ULL : bytes, NOT_AVAILABLE,
							  NOT_AVAILABLE };
	s->found++;
	s->used += bytes;
}

/* Every process of the caller's /proc, named as it names them. */
static void scan_all(struct scan *s)
{
	DIR *d = opendir("/proc");
	struct dirent *de;
	while (d != NULL && (de = readdir(d)) != NULL) {
		char *end;
		long pid = strtol(de->d_name, &end, 10);
		if (pid > 0 && *end == '\0')
			scan_one((int)pid, s);
	}
	if (d != NULL)
		closedir(d);
}

unsigned long long fc_nvml_used(nvmlDevice_t device)
{
	struct scan s = { device->uuid, mib_setting("FAKECUDA_CONTEXT_MIB"), 0, NULL, 0, 0, 0 };
	scan_all(&s);
	return s.used;
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
	char na[8];
	const char *v = fc_setting("FAKECUDA_NVML_PROC_NA", na, sizeof(na));
	struct scan s = { device->uuid, mib_setting("FAKECUDA_CONTEXT_MIB"), v && strcmp(v, "1") == 0, infos, *count,
			  0, 0 };
	scan_all(&s);
	nvmlReturn_t rc = s.found > *count ? NVML_ERROR_INSUFFICIENT_SIZE : NVML_SUCCESS;
	*count = s.found;
	return rc;
}
