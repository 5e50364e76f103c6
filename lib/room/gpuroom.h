/* GPU memory before a restore.
 *
 * The driver restores a process's GPU memory onto the GPU it is restored
 * onto; a restore that runs out of memory there answers
 * CUDA_ERROR_OUT_OF_MEMORY and destroys the process's checkpointed state for
 * good: every later restore answers CUDA_ERROR_OPERATING_SYSTEM (driver
 * 580.159.04 on the H200, NVIDIA's own binary alike). Nothing but not asking
 * protects it, so the driver is never asked to restore a process onto a GPU
 * whose free memory cannot take it: the set is judged before anything
 * changes (processes restored onto one GPU add up), and each process again
 * right before its own call, against what the others in flight take. */
#ifndef CS_GPUROOM_H
#define CS_GPUROOM_H

#include "cudasnap.h"
#include "nvml.h"


/* What a restore needs on the GPU beyond what the checkpoint moved (the
 * growth of the process's resident memory): on the H200 with driver
 * 580.159.04 (2026-12-03, bench/gpu_restore_probe.py) the GPU's used memory
 * after the restore, and its peak during it, exceeded what moved by 71.4 MiB
 * for 1, 4 and 16 GiB alike; a restore with 52 MiB more free than moved ran
 * out of memory, one with 244 MiB more went through. Counted twice: 144 MiB. */
#define CS_RESTORE_EXTRA (144ULL << 20)

/* Fills t->need, t->nneed and t->need_bound: for each GPU t used at its
 * checkpoint (t->use; when its record does not say, each GPU it saw), the
 * GPU it restores onto (through pairs) and what its restore needs there:
 * its memory there, or when that is not known apart all of bytes (what
 * its checkpoint moved), plus CS_RESTORE_EXTRA. bytes 0 and not
 * t->gpu_bytes_known (no record of its size): bounded by its resident and
 * swapped memory now, which hold its checkpointed data (need_bound). */
void cs_restore_needs(cs_target *t, unsigned long long bytes, const cs_gpu_pair *pairs, unsigned npairs,
		      const cs_nvml_gpu *gpus, size_t ngpus);

/* The GPU of gpus whose UUID is uuid (case-insensitive), or NULL. */
const cs_nvml_gpu *cs_gpu_by_uuid(const cs_nvml_gpu *gpus, size_t n, const char *uuid);

/* The judgement of one target against the GPUs of this machine. */
typedef enum cs_gpu_verdict {
	CS_GPU_FITS = 0,
	CS_GPU_SHORT, /* a GPU it restores onto has too little free memory */
	CS_GPU_ABSENT, /* a GPU it restores onto is not on this machine */
	CS_GPU_ROOM_UNKNOWN, /* no GPU list or memory figure: no room, as far as is known */
	CS_GPU_NONE, /* it needs no GPU memory */
} cs_gpu_verdict;

typedef struct cs_gpu_room {
	int verdict; /* cs_gpu_verdict */
	char why[720];
	char fix[720];
} cs_gpu_room;

/* Judges targets t[0..n) restored together: on every GPU, the needs of the
 * targets restored onto it add up against its free memory (gpus, as NVML
 * or the driver read it). Fills room[i] for each; nv (may be NULL) names
 * who holds a GPU that is short, by process where host_pidns (NVML's pids
 * are this namespace's). Returns how many are refused: short, absent, or
 * whose room cannot be known (which is no room). */
size_t cs_restore_judge(const cs_target *const *t, size_t n, const cs_nvml_gpu *gpus, size_t ngpus, cs_nvml *nv,
			bool host_pidns, cs_gpu_room *room);

/* The reason code of a verdict that refuses ("gpu-memory", "gpu-absent",
 * "gpu-memory-unknown"), "" for the others. */
const char *cs_gpu_verdict_code(int verdict);

/* Who holds a GPU's memory, for the words of a refusal: "pid 12 (python3)
 * 3.20 GiB, ..." (host_pidns), else how many processes of other PID
 * namespaces hold how much. "" when NVML does not say. */
void cs_gpu_holders_text(cs_nvml *nv, const cs_nvml_gpu *g, bool host_pidns, char *buf, size_t size);

/* Why a room is not known, and what to do: unknown is no room. */
#define CS_ROOM_NO_GPUS "neither NVML nor the driver lists a GPU here, so no GPU's free memory can be read"
#define CS_ROOM_MIG \
	"GPU %u (%s) is in MIG mode: the free memory of the MIG instance it restores onto cannot be told apart " \
	"from the whole GPU's"
#define CS_ROOM_UNKNOWN_FIX \
	"Nothing was changed: the process stays checkpointed with its data. Make the GPUs' free memory readable " \
	"(NVML, libnvidia-ml.so.1, comes with the driver's 'utility' capability in containers), or accept the " \
	"risk with --ignore-gpu-memory (CUDASNAP_IGNORE_GPU_MEMORY=1): a restore that runs out of GPU memory " \
	"destroys the process's checkpointed state."

/* This machine's GPUs with their memory, for a judgement of room: NVML's
 * list, else, where NVML lists none, the driver's (cs_gpu_probe: its
 * figures are read from a context of the probe's own, on the GPUs of ctx
 * only; the others' free memory is not known). *nv: NVML, present or not
 * (close it). *gpus is malloc'ed; empty when neither answers, and then why
 * (may be NULL) says what each said. Returns whether the list is the
 * driver's. A judgement before a restore's booking uses
 * cs_room_gpus_booked (gpunode.h), which reads free memory only where no
 * restore in flight needs it. */
bool cs_room_gpus(cs_nvml **nv, cs_nvml_gpu **gpus, size_t *n, uint64_t ctx, char *why, size_t size);

/* CUDASNAP_WAIT_MEMORY (whole seconds, at most CS_WAIT_MEMORY_MAX) into
 * *out when it is set; CS_EUSAGE (err filled) when it is not a number. */
int cs_wait_memory_setting(double *out, cs_error *err);

/* Before the processes of record m exist (the start of a CRIU restore, or
 * 'cudasnap inspect' of its images): its entries as targets t[0..m->n)
 * without a process (pid 0; nspid, comm, the GPUs they saw and used and
 * the bytes moved, from the record), each with its needs on the GPUs pairs
 * map its GPUs to (cs_restore_needs). */
struct cs_manifest;
void cs_record_targets(const struct cs_manifest *m, const cs_gpu_pair *pairs, unsigned npairs, const cs_nvml_gpu *gpus,
		       size_t ngpus, cs_target *t);
/* Those targets judged as cs_restore_judge judges; room has m->n entries. */
size_t cs_record_judge(const struct cs_manifest *m, const cs_gpu_pair *pairs, unsigned npairs, const cs_nvml_gpu *gpus,
		       size_t ngpus, cs_nvml *nv, bool host_pidns, cs_gpu_room *room);

#endif
