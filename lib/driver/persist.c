#include "persist.h"

bool cs_gpus_persistent(const cs_nvml_gpu *gpus, size_t ngpus)
{
	bool on = ngpus > 0;
	for (size_t i = 0; i < ngpus; i++)
		on = on && gpus[i].persistence == 1;
	return on;
}

int cs_restore_init(cs_driver *d, const cs_nvml_gpu *gpus, size_t ngpus)
{
	if (cs_gpus_persistent(gpus, ngpus))
		return CS_CU_SUCCESS;
	return cs_cu_init(d);
}
