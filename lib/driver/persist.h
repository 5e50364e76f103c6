/* What a restore needs from the caller: the driver's restore path reaches the
 * GPUs through the persistence daemon when persistence mode is on, and
 * through the caller's own driver state otherwise. */
#ifndef CS_PERSIST_H
#define CS_PERSIST_H

#include "cudasnap.h"
#include "nvml.h"

/* Whether every GPU reports persistence mode on; false when the list is
 * empty (NVML absent), since that is unknown. */
bool cs_gpus_persistent(const cs_nvml_gpu *gpus, size_t ngpus);
/* Calls cuInit unless every GPU is in persistence mode. A restore from a
 * caller that did neither fails ("operation not permitted") and can leave the
 * target unrestorable. Returns cuInit's CUresult, or CS_CU_SUCCESS when it was
 * not needed. */
int cs_restore_init(cs_driver *d, const cs_nvml_gpu *gpus, size_t ngpus);

#endif
