/* --device-map OLD=NEW,...: GPU pairs for restore, checked before the driver sees them. */
#ifndef CS_DEVMAP_H
#define CS_DEVMAP_H

#include "cudasnap.h"
#include "nvml.h"

/* Each side is a GPU UUID (GPU-xxxxxxxx-xxxx-xxxx-xxxx-xxxxxxxxxxxx) or an
 * index into gpus (NVML order). *pairs is malloc'd. */
int cs_devmap_parse(const char *spec, const cs_nvml_gpu *gpus, size_t ngpus, cs_gpu_pair **pairs, unsigned *npairs,
		    cs_error *err);
/* The map's form alone (OLD=NEW pairs of UUIDs or indices, no GPU mapped
 * twice), before anything else happens: indices are not looked up. */
int cs_devmap_check(const char *spec, cs_error *err);
/* Rejects a map that leaves out a GPU the target can see: the GPUs named by
 * its CUDA_VISIBLE_DEVICES (indices or UUID prefixes), or every GPU. Returns
 * 1 when coverage could not be decided (no GPU list), 0 when covered. */
int cs_devmap_covers(const cs_gpu_pair *pairs, unsigned npairs, const char *visible, const cs_nvml_gpu *gpus,
		     size_t ngpus, const cs_target *t, cs_error *err);

/* The same against the GPUs the target saw at its checkpoint (t->gpus, as
 * the manifest recorded them), which is what the driver needs mapped, also
 * when the restore runs on a machine without them. */
int cs_devmap_covers_recorded(const cs_gpu_pair *pairs, unsigned npairs, const cs_nvml_gpu *gpus, size_t ngpus,
			      const cs_target *t, cs_error *err);

/* The GPUs a process with this CUDA_VISIBLE_DEVICES sees, in its order
 * (every GPU when unset or empty); returns how many were stored in out. */
size_t cs_visible_gpus(const char *visible, const cs_nvml_gpu *gpus, size_t ngpus, const cs_nvml_gpu **out, size_t max);

#endif
