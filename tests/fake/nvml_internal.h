#ifndef FAKECUDA_NVML_INTERNAL_H
#define FAKECUDA_NVML_INTERNAL_H

#include "fakecuda.h"
#include "gpus.h"
#include "nvml_api.h"

struct fc_nvml_device {
	int index;
	char uuid[FAKECUDA_UUID_STRLEN];
};

int fc_nvml_initialized(void);
int fc_nvml_count(void);
nvmlDevice_t fc_nvml_device(int index);
/* Fails like NVML when not initialized or when buf is too short. */
nvmlReturn_t fc_nvml_copy_out(const char *s, char *buf, unsigned int length);
/* The GPUs as nvmlInit_v2 found them; device index i is gpus->uuid[i]. */
const struct fc_gpus *fc_nvml_gpus(void);

#endif
