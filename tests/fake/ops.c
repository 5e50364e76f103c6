#include <errno.h>
#include <string.h>
#include <sys/file.h>

#include "internal.h"
#include "proto.h"
#include "vmm.h"

/* The four transitions, run by the restore thread; a failed one leaves the
 * state as it was, as the real driver does. */

static int lock_ready(uint64_t now)
{
	return fc_tgt.active == 0 && fc_streams_idle(-1, now);
}

static CUresult wait_idle(uint64_t deadline)
{
	for (;;) {
		uint64_t now = fc_now_ns();
		if (fc_tgt.shutdown)
			return CUDA_ERROR_DEINITIALIZED;
		if (lock_ready(now))
			return CUDA_SUCCESS;
		if (now >= deadline)
			return CUDA_ERROR_NOT_READY;
		uint64_t wake = fc_streams_wake(-1, now);
		wake = wake < deadline ? wake : deadline;
		fc_wait_until(wake);
	}
}

CUresult fc_op_lock(unsigned int timeout_ms)
{
	CUresult rc = CUDA_ERROR_ILLEGAL_STATE;
	pthread_mutex_lock(&fc_tgt.mu);
	if (fc_tgt.state == CU_PROCESS_STATE_RUNNING) {
		/* new work waits from now on; the lock waits for queued work */
		fc_tgt.lock_pending = 1;
		uint64_t deadline = timeout_ms ? fc_now_ns() + (uint64_t)timeout_ms * 1000000u
					       : UINT64_MAX / 2;
		rc = wait_idle(deadline);
		if (rc == CUDA_SUCCESS)
			fc_tgt.state = CU_PROCESS_STATE_LOCKED;
		fc_tgt.lock_pending = 0;
		pthread_cond_broadcast(&fc_tgt.cv);
	}
	pthread_mutex_unlock(&fc_tgt.mu);
	return rc;
}

CUresult fc_op_checkpoint(int leak_fd, int leak_map)
{
	CUresult rc = CUDA_ERROR_ILLEGAL_STATE;
	pthread_mutex_lock(&fc_tgt.mu);
	if (fc_tgt.state == CU_PROCESS_STATE_LOCKED) {
		rc = CUDA_ERROR_OUT_OF_MEMORY;
		/* every copy first, so that a failed one leaves all as it was */
		int saved = fc_vmm_save() == 0;
		if (saved && fc_devmem_save() != 0) {
			fc_vmm_unsave();
			saved = 0;
		}
		if (saved) {
			fc_vmm_drop();
			fc_devfiles_close(leak_fd, leak_map);
			fc_tgt.state = CU_PROCESS_STATE_CHECKPOINTED;
			rc = CUDA_SUCCESS;
		}
	}
	pthread_mutex_unlock(&fc_tgt.mu);
	return rc;
}

static int same_uuid(const CUuuid *a, const CUuuid *b)
{
	return memcmp(a->bytes, b->bytes, sizeof(a->bytes)) == 0;
}

/* Every GPU the process sees (after CUDA_VISIBLE_DEVICES) must be named, as
 * the real driver wants; the new GPU may be any GPU of the machine. */
static int new_ordinal(const CUcheckpointGpuPair *pairs, unsigned int n, const CUuuid *cur)
{
	int found = -1;
	for (unsigned int i = 0; i < n; i++) {
		if (!same_uuid(&pairs[i].oldUuid, cur))
			continue;
		int idx = fc_gpus_find(&fc_tgt.gpus, &pairs[i].newUuid);
		if (found >= 0 && found != idx)
			return -1;
		found = idx;
	}
	return found;
}

static int compute_map(const CUcheckpointGpuPair *pairs, unsigned int n, int *map)
{
	const struct fc_gpus *g = &fc_tgt.gpus;
	for (unsigned int i = 0; i < n; i++)
		if (fc_gpus_find(g, &pairs[i].oldUuid) < 0 || fc_gpus_find(g, &pairs[i].newUuid) < 0)
			return -1;
	for (int d = 0; d < fc_tgt.ndev; d++) {
		map[d] = n ? new_ordinal(pairs, n, &g->uuid[fc_tgt.map[d]]) : fc_tgt.map[d];
		if (map[d] < 0)
			return -1;
	}
	return 0;
}

/* map: the GPUs the process will see, as compute_map gives them */
static CUresult bring_back(const int *map)
{
	fc_devfiles_set_gpu(map[0]);
	if (fc_devfiles_reopen(fc_tgt.devdir, fc_tgt.devdir_set) != 0) {
		fc_devfiles_close(0, 0);
		return CUDA_ERROR_OPERATING_SYSTEM;
	}
	/* VMM memory on the GPUs its devices are mapped to; the legacy memory on
	 * device 0's. A failed legacy restore puts the VMM memory back on the
	 * host, so that the process stays as its checkpoint left it. */
	int ok = fc_vmm_restore(map) == 0;
	if (ok && fc_devmem_restore(&fc_tgt.gpus.uuid[map[0]]) != 0) {
		if (fc_vmm_save() == 0)
			fc_vmm_drop();
		ok = 0;
	}
	if (!ok) {
		fc_devfiles_close(0, 0);
		return CUDA_ERROR_OUT_OF_MEMORY;
	}
	return CUDA_SUCCESS;
}

/* What the process takes on each GPU it will use: the memory its
 * checkpoint moved there (legacy memory on device 0, VMM memory on the
 * device it was created on), with a context and what the driver needs beyond
 * that while restoring; a GPU that gets no memory needs none. The caller
 * measured the free memory; a GPU it does not know (another FAKECUDA_GPUS)
 * is not judged. */
static int room_for(int gpu, uint64_t need, const struct fc_room *room)
{
	for (uint32_t i = 0; i < room->ngpus && i < FC_MAX_GPUS; i++)
		if (same_uuid(&room->gpu[i].uuid, &fc_tgt.gpus.uuid[gpu]))
			return need <= room->gpu[i].bytes;
	return 1;
}

static int fits(const int *map, const struct fc_room *room)
{
	uint64_t moved[FC_MAX_GPUS] = { 0 };
	moved[map[0]] += fc_devmem_saved();
	for (int d = 0; d < fc_tgt.ndev; d++)
		moved[map[d]] += fc_vmm_saved(d);
	for (int g = 0; g < FC_MAX_GPUS; g++)
		if (moved[g] > 0 && !room_for(g, moved[g] + room->context + room->extra, room))
			return 0;
	return 1;
}

/* Why a checkpointed process is not restored now, or CUDA_SUCCESS with the
 * GPUs it will see in map. Measured (H200, driver 580.159.04): a process
 * that imported another's device memory is refused in every order tried,
 * for ever; a restore without room on the GPU answers 2 at once and the
 * state is gone: every later restore answers 304 at once, whatever the
 * free memory then. Either way the process stays CHECKPOINTED. A process
 * that holds an imported VMM handle is refused with 801 for ever (it
 * cannot release it while checkpointed). */
static CUresult admit(const struct fc_req *req, const struct fc_room *room, int oom, int *map)
{
	if (fc_tgt.destroyed)
		return CUDA_ERROR_OPERATING_SYSTEM;
	if (fc_tgt.ipc_imported || compute_map(req->pairs, req->npairs, map) != 0)
		return CUDA_ERROR_INVALID_VALUE;
	/* driver 580 refuses a VMM handle imported from another process */
	if (fc_vmm_import_held() || fc_pool_import_held())
		return CUDA_ERROR_NOT_SUPPORTED;
	if (oom || !fits(map, room)) {
		fc_tgt.destroyed = 1;
		return CUDA_ERROR_OUT_OF_MEMORY;
	}
	return CUDA_SUCCESS;
}

CUresult fc_op_restore(const struct fc_req *req, int oom, const struct fc_req_fds *fds)
{
	int map[FC_MAX_GPUS];
	CUresult rc = CUDA_ERROR_ILLEGAL_STATE;
	struct fc_room room = req->room;
	/* One admission of the device directory at a time, judged now, with
	 * the memory taken before the next (the lock goes with the fd). */
	if (fds->room >= 0)
		while (flock(fds->room, LOCK_EX) != 0 && errno == EINTR)
			;
	fc_room_admit(&room, fds->proc);
	pthread_mutex_lock(&fc_tgt.mu);
	if (fc_tgt.state == CU_PROCESS_STATE_CHECKPOINTED) {
		rc = admit(req, &room, oom, map);
		if (rc == CUDA_SUCCESS)
			rc = bring_back(map);
		if (rc == CUDA_SUCCESS) {
			memcpy(fc_tgt.map, map, sizeof(map[0]) * (size_t)fc_tgt.ndev);
			fc_tgt.state = CU_PROCESS_STATE_LOCKED;
		}
	}
	pthread_mutex_unlock(&fc_tgt.mu);
	return rc;
}

CUresult fc_op_unlock(void)
{
	CUresult rc = CUDA_ERROR_ILLEGAL_STATE;
	pthread_mutex_lock(&fc_tgt.mu);
	if (fc_tgt.state == CU_PROCESS_STATE_LOCKED) {
		fc_tgt.state = CU_PROCESS_STATE_RUNNING;
		pthread_cond_broadcast(&fc_tgt.cv);
		rc = CUDA_SUCCESS;
	}
	pthread_mutex_unlock(&fc_tgt.mu);
	return rc;
}
