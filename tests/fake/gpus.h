/* The fake machine's GPUs, named by $FAKECUDA_GPUS. Shared by the driver
 * and the NVML double so both report the same devices. */
#ifndef FAKECUDA_GPUS_H
#define FAKECUDA_GPUS_H

#include <stddef.h>

#include "cuda_api.h"

#define FC_MAX_GPUS 16
#define FC_DEFAULT_GPU "GPU-fa4ec0da-0000-4000-8000-000000000001"

struct fc_gpus {
	int count;
	CUuuid uuid[FC_MAX_GPUS];
};

/* Returns the number of GPUs; malformed entries are skipped with a warning. */
int fc_gpus_load(struct fc_gpus *g);
int fc_gpus_find(const struct fc_gpus *g, const CUuuid *u);
/* Ordinals a process sees under CUDA_VISIBLE_DEVICES (cvd, may be NULL):
 * fills map[ordinal] = index in g and returns how many. */
int fc_gpus_visible(const struct fc_gpus *g, const char *cvd, int *map);
int fc_uuid_parse(const char *s, CUuuid *u);
void fc_uuid_format(const CUuuid *u, char *buf, size_t len);

#endif
