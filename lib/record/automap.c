#include "automap.h"
#include "env.h"
#include "util.h"

#include <fcntl.h>
#include <limits.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>
#include <unistd.h>

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
	if (sample <= 0 || g->minor < 0)
		return false;
	snprintf(path, sizeof(path), "%s/%d/root%s/nvidia%d", cs_proc_dir(), (int)sample, cs_dev_dir(), g->minor);
	return access(path, F_OK) == 0;
}

/* Picks the next GPU left for an absent one; -1 when none is. */
static long next_free(const bool *taken, size_t ngpus, size_t *next)
{
	while (*next < ngpus && taken[*next])
		(*next)++;
	return *next < ngpus ? (long)(*next)++ : -1;
}

int cs_automap_make(const cs_manifest *m, const cs_nvml_gpu *gpus, size_t ngpus, pid_t sample, cs_automap *a)
{
	*a = (cs_automap){ 0 };
	char rec[CS_AUTOMAP_GPUS][CS_GPU_UUID_STRLEN];
	a->nrecorded = recorded_gpus(m, rec, CS_ARRAY_SIZE(rec));
	for (size_t i = 0; i < a->nrecorded; i++)
		a->nabsent += !here(gpus, ngpus, rec[i]);
	if (!ngpus || !a->nabsent)
		return 0;
	_cleanup_free_ bool *taken = calloc(ngpus, sizeof(*taken));
	if (!taken)
		return -ENOMEM;
	/* The GPUs whose device files the processes have; none found (device
	 * files elsewhere, minor numbers unknown, no process yet): any GPU of
	 * this machine. */
	size_t usable = 0;
	for (size_t i = 0; i < ngpus; i++)
		usable += !(taken[i] = !has_device_file(&gpus[i], sample));
	if (!usable)
		memset(taken, 0, ngpus * sizeof(*taken));
	a->by_device_file = usable > 0;
	/* A recorded GPU that is here keeps itself, and nobody else gets it. */
	for (size_t i = 0; i < a->nrecorded; i++) {
		const cs_nvml_gpu *g = here(gpus, ngpus, rec[i]);
		if (g)
			taken[g - gpus] = true;
	}
	char text[CS_AUTOMAP_GPUS * 2 * CS_GPU_UUID_STRLEN] = "";
	size_t len = 0, next = 0;
	for (size_t i = 0; i < a->nrecorded; i++) {
		const cs_nvml_gpu *g = here(gpus, ngpus, rec[i]);
		long pick = g ? g - gpus : next_free(taken, ngpus, &next);
		if (!g) {
			cs_stand_in *s = &a->stand_in[a->nstand_in++];
			snprintf(s->absent, sizeof(s->absent), "%s", rec[i]);
			s->onto = pick < 0 ? NULL : &gpus[pick];
		}
		if (pick < 0)
			return -ENOSPC;
		len += (size_t)snprintf(text + len, sizeof(text) - len, "%s%s=%s", i ? "," : "", rec[i],
					gpus[pick].uuid);
	}
	a->map = strdup(text);
	return a->map ? 0 : -ENOMEM;
}

void cs_automap_free(cs_automap *a)
{
	free(a->map);
	a->map = NULL;
}
