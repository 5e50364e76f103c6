#include <stdio.h>
#include <string.h>

#include "gpus.h"
#include "test_util.h"

#define GPU_A "GPU-aaaaaaaa-1111-4111-8111-000000000001"
#define GPU_B "GPU-bbbbbbbb-2222-4222-8222-000000000002"
#define GPU_X "GPU-eeeeeeee-9999-4999-8999-000000000009"

static CUresult restore_with(const struct drv *d, int pid, const char *const *uuids, int n)
{
	CUcheckpointGpuPair pairs[4];
	CUcheckpointRestoreArgs ra;
	memset(&ra, 0, sizeof(ra));
	for (int i = 0; i < n; i++) {
		fc_uuid_parse(uuids[2 * i], &pairs[i].oldUuid);
		fc_uuid_parse(uuids[2 * i + 1], &pairs[i].newUuid);
	}
	ra.gpuPairs = pairs;
	ra.gpuPairsCount = (unsigned int)n;
	return d->restore(pid, &ra);
}

static void cycle_rest(const struct env *e, const struct drv *d, int pid,
		       const char *const *uuids, int n, const char *gpu)
{
	char line[256], want[128];
	check(restore_with(d, pid, uuids, n) == 0 && d->unlock(pid, NULL) == 0,
	      "restore with %d pair(s) covering every GPU, unlock", n);
	ask_verify(e, pid, line, sizeof(line), 3000);
	snprintf(want, sizeof(want), "ok bytes=1048576 gpu=%s", gpu);
	check(strcmp(line, want) == 0, "verify after the remap: '%s'", line);
}

static void lock_checkpoint(const struct drv *d, int pid)
{
	CUresult lock = d->lock(pid, NULL);
	CUresult ckpt = d->checkpoint(pid, NULL);
	check(lock == 0 && ckpt == 0, "lock + checkpoint -> %d, %d", lock, ckpt);
}

static void cycle(const struct env *e, const struct drv *d, int pid, const char *const *uuids,
		  int n, const char *gpu)
{
	lock_checkpoint(d, pid);
	cycle_rest(e, d, pid, uuids, n, gpu);
}

/* Only the GPUs a process sees must be mapped, but it may move to any. */
static void test_remap_visible(const struct env *e, const struct drv *d)
{
	static const char *const args[] = { NULL };
	static const char *const env[] = { "FAKECUDA_GPUS=" GPU_A "," GPU_B,
					   "CUDA_VISIBLE_DEVICES=1", NULL };
	static const char *const b_to_a[] = { GPU_B, GPU_A };
	static const char *const a_to_b[] = { GPU_A, GPU_B };
	struct ready r;
	pid_t pid = app_start_ready(e, args, env, &r);
	if (pid < 0)
		return;
	lock_checkpoint(d, pid);
	check(restore_with(d, pid, a_to_b, 1) == 1,
	      "CUDA_VISIBLE_DEVICES=1: a map without the visible GPU -> 1");
	cycle_rest(e, d, pid, b_to_a, 1, GPU_A);
	check(app_stop(pid) == 0, "app exits cleanly");
}

void test_remap(const struct env *e, const struct drv *d)
{
	static const char *const args[] = { NULL };
	static const char *const unknown[] = { GPU_A, GPU_X, GPU_B, GPU_B };
	static const char *const partial[] = { GPU_A, GPU_A };
	static const char *const identity[] = { GPU_A, GPU_A, GPU_B, GPU_B };
	static const char *const swap[] = { GPU_A, GPU_B, GPU_B, GPU_A };
	struct ready r;
	static const char *const env[] = { "FAKECUDA_GPUS=" GPU_A "," GPU_B, NULL };
	pid_t pid = app_start_ready(e, args, env, &r);
	if (pid < 0)
		return;
	lock_checkpoint(d, pid);
	check(restore_with(d, pid, unknown, 2) == 1 &&
		      state_of(d, pid) == CU_PROCESS_STATE_CHECKPOINTED,
	      "restore mapping to an unknown UUID -> 1, still CHECKPOINTED");
	check(restore_with(d, pid, partial, 1) == 1 &&
		      state_of(d, pid) == CU_PROCESS_STATE_CHECKPOINTED,
	      "restore with a map missing a visible GPU -> 1, still CHECKPOINTED");
	check(d->restore(pid, NULL) == 0 && d->unlock(pid, NULL) == 0,
	      "then a restore without a map succeeds");
	cycle(e, d, pid, identity, 2, GPU_A);
	cycle(e, d, pid, swap, 2, GPU_B);
	check(app_stop(pid) == 0, "app exits cleanly");
	test_remap_visible(e, d);
}
