/* GPU memory from the driver itself, where NVML does not answer.
 *
 * A container given only the "compute" driver capability mounts libcuda
 * but not NVML, and the hook and the drop-in run inside it: there the free
 * memory of a GPU can still be read from the driver (cuMemGetInfo), which
 * needs a context on the GPU. That context is made in a process of its
 * own, never in cudasnap's: a context would make cudasnap a CUDA process
 * that holds device files, and a process that has used the driver cannot
 * hand a fresh one to a forked child. The child's context takes GPU memory
 * of its own while it reads (527 MiB on an H200, driver 580.159.04), so
 * the free memory it reports is that much below the truth: on the safe
 * side, and gone when the child has exited, before the figure is used. */
#ifndef CS_GPUPROBE_H
#define CS_GPUPROBE_H

#include "nvml.h"

#include <stddef.h>
#include <stdint.h>

/* The argument that makes cudasnap's binary the probe. */
#define CS_GPU_PROBE_ARG "__gpu-probe"

/* How long a probe may take before it is killed (cuInit and one context
 * per GPU take well under a second each). */
#define CS_GPU_PROBE_S 20.0

/* The fresh process of the probe: cudasnap's own binary exe, executed as
 * {"cudasnap", arg}, which then calls cs_gpu_probe_main(1). The command
 * line registers itself; the CRIU plugin the installed binary. Without
 * one, cs_gpu_probe fails. */
void cs_gpu_probe_set_exec(const char *exe, const char *arg);

/* Every GPU the driver shows (all of them: CUDA_VISIBLE_DEVICES is not
 * passed on; in PCI bus order, as NVML counts them), each with its UUID,
 * name, total and free memory (memory_known false where the driver did
 * not give it), and persistence, MIG mode and minor number unknown. *gpus
 * is malloc'ed. 0, or <0 with err filled when no answer came (no driver,
 * no fresh process to ask, a timeout, or interrupted, when set, was set:
 * the command is ending). */
/* ctx: bit i, the free memory of the GPU of ordinal i is read (through a
 * context of its own); CS_PROBE_ALL, of every GPU; the others are listed
 * with their identity and total only (no context: nothing taken from a
 * restore in flight there). */
#define CS_PROBE_ALL UINT64_MAX
int cs_gpu_probe(cs_nvml_gpu **gpus, size_t *n, uint64_t ctx, const volatile int *interrupted, cs_error *err);

/* The probe itself, in the fresh process (ctx as above): writes its answer
 * to fd. Returns the exit status for that process. */
int cs_gpu_probe_main(int fd, uint64_t ctx);
/* The probe's one argument after CS_GPU_PROBE_ARG: ctx in hexadecimal,
 * 1 to 16 digits. 0, or -1 for anything else. */
int cs_gpu_probe_ctx_parse(const char *s, uint64_t *ctx);

/* The answer's wire form, read back by cs_gpu_probe (for the fuzzer too):
 * the GPUs it lists, or -EINVAL. */
int cs_gpu_probe_parse(const void *buf, size_t len, cs_nvml_gpu **gpus, size_t *n);

#endif
