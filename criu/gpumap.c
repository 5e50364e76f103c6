#include "gpumap.h"
#include "host.h"
#include "nvml.h"
#include "util.h"

#include <fcntl.h>
#include <limits.h>
#include <stdio.h>
#include <string.h>

/* Distinct UUIDs of the record, in the order first seen. */
static size_t recorded_gpus(const cs_manifest *m, char (*out)[CS_GPU_UUID_STRLEN], size_t max)
{
	size_t n = 0;
	for (size_t i = 0; i < m->n; i++)
		for (const char *g = m->e[i].gpus; *g;) {
			size_t len = strcspn(g, ",");
			bool seen = len != CS_GPU_UUID_STRLEN - 1;
			for (size_t k = 0; k < n && !seen; k++)
				seen = strncasecmp(out[k], g, len) == 0;
			if (!seen && n < max)
				snprintf(out[n++], CS_GPU_UUID_STRLEN, "%.*s", (int)len, g);
			g += len + (g[len] == ',');
		}
	return n;
}

static const cs_nvml_gpu *here(const cs_nvml_gpu *gpus, size_t n, const char *uuid)
{
	for (size_t i = 0; i < n; i++)
		if (strcasecmp(gpus[i].uuid, uuid) == 0)
			return &gpus[i];
	return NULL;
}

/* Whether the container of sample has its device file (/dev/nvidia<minor>,
 * or under CUDASNAP_DEV_DIR). */
static bool has_device_file(const cs_nvml_gpu *g, pid_t sample)
{
	char path[PATH_MAX];
	snprintf(path, sizeof(path), "%s/%d/root%s/nvidia%d", cs_proc_dir(), (int)sample, cs_dev_dir(), g->minor);
	return g->minor >= 0 && access(path, F_OK) == 0;
}

/* Picks the next GPU left for an absent one; -1 when none is. */
static long next_free(const bool *taken, size_t ngpus, size_t *next)
{
	while (*next < ngpus && taken[*next])
		(*next)++;
	return *next < ngpus ? (long)(*next)++ : -1;
}

int auto_device_map(const cs_manifest *m, pid_t sample, char **map)
{
	*map = NULL;
	char rec[64][CS_GPU_UUID_STRLEN];
	size_t nrec = recorded_gpus(m, rec, CS_ARRAY_SIZE(rec));
	_cleanup_free_ cs_nvml_gpu *gpus = NULL;
	size_t ngpus = 0, absent = 0;
	cs_nvml_list(&gpus, &ngpus);
	for (size_t i = 0; i < nrec; i++)
		absent += !here(gpus, ngpus, rec[i]);
	if (!ngpus || !absent)
		return 0;
	_cleanup_free_ bool *taken = calloc(ngpus, sizeof(*taken));
	if (!taken)
		return -1;
	/* The GPUs whose device files the processes have; none found (device
	 * files elsewhere, minor numbers unknown): any GPU of this machine. */
	size_t usable = 0;
	for (size_t i = 0; i < ngpus; i++)
		usable += !(taken[i] = !has_device_file(&gpus[i], sample));
	if (!usable)
		memset(taken, 0, ngpus * sizeof(*taken));
	/* A recorded GPU that is here keeps itself, and nobody else gets it. */
	for (size_t i = 0; i < nrec; i++) {
		const cs_nvml_gpu *g = here(gpus, ngpus, rec[i]);
		if (g)
			taken[g - gpus] = true;
	}
	char text[64 * 2 * CS_GPU_UUID_STRLEN] = "";
	size_t len = 0, next = 0;
	for (size_t i = 0; i < nrec; i++) {
		const cs_nvml_gpu *g = here(gpus, ngpus, rec[i]);
		long pick = g ? g - gpus : next_free(taken, ngpus, &next);
		if (pick < 0) {
			plog(CS_CRIU_LOG_ERROR,
			     "%zu of the %zu GPUs the dump's processes used %s not on this machine (%s first), and "
			     "the restored processes can use too few of its GPUs to stand in for them; give the "
			     "container more GPUs, or set CUDASNAP_DEVICE_MAP in /etc/cudasnap/cudasnap.conf",
			     absent, nrec, absent == 1 ? "is" : "are", rec[i]);
			return -1;
		}
		const cs_nvml_gpu *to = &gpus[pick];
		len += (size_t)snprintf(text + len, sizeof(text) - len, "%s%s=%s", i ? "," : "", rec[i], to->uuid);
		if (!g)
			plog(CS_CRIU_LOG_INFO,
			     "%s, which the dump's processes used, is not on this machine: restoring onto %s (GPU %u, "
			     "%s); set CUDASNAP_DEVICE_MAP in /etc/cudasnap/cudasnap.conf to choose",
			     rec[i], to->uuid, to->index,
			     usable ? "whose device file the restored processes have" : "a GPU of this machine");
	}
	*map = strdup(text);
	return *map ? 0 : -1;
}
