/* A small binding to NVML (libnvidia-ml.so.1), loaded with dlopen: the GPUs
 * of this machine, their persistence and MIG modes and memory use. A machine
 * without NVML is not an error here; the binding just says why it is absent. */
#ifndef CS_NVML_H
#define CS_NVML_H

#include "cudasnap.h"
#include "util.h"

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <sys/types.h>

/* NVML's own buffer sizes (NVML_DEVICE_UUID_V2_BUFFER_SIZE, ...). */
#define CS_NVML_UUID_SIZE 96
#define CS_NVML_NAME_SIZE 96
#define CS_NVML_VERSION_SIZE 80

/* "GPU-" + 8-4-4-4-12 hex digits + NUL */
#define CS_GPU_UUID_STRLEN 41

typedef struct cs_nvml cs_nvml;

typedef struct cs_nvml_gpu {
	unsigned index; /* NVML's index (PCI bus order) */
	char uuid[CS_NVML_UUID_SIZE];
	char name[CS_NVML_NAME_SIZE];
	int persistence; /* 1 on, 0 off, -1 unknown */
	int mig; /* 1 enabled, 0 disabled, -1 unknown or no MIG */
	int minor; /* its device file is /dev/nvidia<minor>; -1 unknown */
	bool memory_known;
	unsigned long long memory_total, memory_used, memory_free; /* bytes */
	int error; /* first NVML error met on this GPU, 0 if none */
} cs_nvml_gpu;

/* Loads NVML ($CUDASNAP_LIBNVML or libnvidia-ml.so.1) and initializes it.
 * Always stores an object in *out (free with cs_nvml_close) and returns 0;
 * returns <0 only when out of memory. cs_nvml_present() tells whether NVML
 * answered, cs_nvml_error() why not. */
int cs_nvml_open(cs_nvml **out, cs_error *err);
/* nvmlShutdown when initialized; the library itself stays loaded. */
void cs_nvml_close(cs_nvml *n);
CS_DEFINE_CLEANUP(cs_nvml, cs_nvml_close)
bool cs_nvml_present(const cs_nvml *n);
const char *cs_nvml_path(const cs_nvml *n);
const cs_error *cs_nvml_error(const cs_nvml *n);
/* e.g. "580.159.04"; "" when unknown. */
const char *cs_nvml_driver_version(const cs_nvml *n);
/* Whether this NVML can report MIG mode at all. */
bool cs_nvml_has_mig(const cs_nvml *n);
/* nvmlErrorString, with a fallback when NVML is absent. */
const char *cs_nvml_strerror(const cs_nvml *n, int ret);

/* Every GPU NVML reports, in index order; *gpus is malloc'ed (free it).
 * Per-GPU failures are recorded in each entry, not returned. */
int cs_nvml_gpus(cs_nvml *n, cs_nvml_gpu **gpus, size_t *count, cs_error *err);
/* Reads again the memory figures of the GPU of NVML index g->index into g
 * (memory_known false when NVML does not answer). */
void cs_nvml_gpu_memory(cs_nvml *n, cs_nvml_gpu *g);
/* Opens NVML, lists the GPUs and closes it again: an empty list (*gpus NULL)
 * when NVML is absent or does not answer. */
void cs_nvml_list(cs_nvml_gpu **gpus, size_t *count);

/* GPU memory of one process, summed over the GPUs, as NVML reports it. Its
 * pid is a PID of the initial PID namespace (nvidia-smi's). */
typedef struct cs_nvml_proc {
	pid_t pid;
	unsigned long long bytes;
	/* NVML listed it on some GPU without a figure (NVML_VALUE_NOT_AVAILABLE):
	 * it holds GPU memory, and bytes counts only the GPUs that gave one. */
	bool unknown;
} cs_nvml_proc;

/* Opens NVML, lists the processes that hold GPU memory (those listed
 * without a figure marked unknown), closes it; *out is malloc'ed. Returns
 * whether NVML answered for every GPU (then a process missing from the
 * list holds no GPU memory); the list is empty when NVML is absent, too
 * old or does not answer. */
bool cs_nvml_proc_list(cs_nvml_proc **out, size_t *count);

/* NVML_VALUE_NOT_AVAILABLE: the used memory of a process NVML may not see. */
#define CS_NVML_NOT_AVAILABLE (~0ULL)

/* The processes that hold memory on the GPU of NVML index idx, each with
 * its memory there (CS_NVML_NOT_AVAILABLE where NVML does not say); their
 * pids are the initial PID namespace's. *out is malloc'd. 0, or <0 when
 * NVML did not answer (*out NULL). */
int cs_nvml_holders(cs_nvml *n, unsigned idx, cs_nvml_proc **out, size_t *count);

/* "GPU-xxxxxxxx-xxxx-xxxx-xxxx-xxxxxxxxxxxx" (hex in either case, nothing
 * before or after) -> 16 bytes. Returns 0, or -EINVAL for anything else. */
int cs_gpu_uuid_parse(const char *s, uint8_t out[16]);
/* The inverse, in lowercase; out must hold CS_GPU_UUID_STRLEN bytes. */
void cs_gpu_uuid_format(const uint8_t in[16], char out[CS_GPU_UUID_STRLEN]);

#endif
