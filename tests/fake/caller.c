#include <errno.h>
#include <fcntl.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "internal.h"
#include "procinfo.h"
#include "proto.h"
#include "settings.h"

/* The caller half: the six checkpoint calls as a tool such as cudasnap makes
 * them. Everything is local to the call, so any number of threads may call
 * at once; the target's restore thread serializes calls on one process.
 * Five of them wait for the target's answer however long it takes (a stopped
 * target answers once it runs again: no timeout here, as in the real
 * driver); GetRestoreThreadId answers from /proc. */

struct target {
	unsigned long pidns;
	int tgid;       /* in the target's own pid namespace */
	int local_tgid; /* in the caller's */
};

static CUresult resolve(int pid, struct target *t)
{
	char path[64];
	struct stat st;
	if (pid <= 0)
		return CUDA_ERROR_OPERATING_SYSTEM;
	snprintf(path, sizeof(path), "/proc/%d", pid);
	if (stat(path, &st) != 0)
		return CUDA_ERROR_OPERATING_SYSTEM;
	/* the real driver answers the same when it may not ptrace the target */
	if (geteuid() != 0 && st.st_uid != geteuid())
		return CUDA_ERROR_OPERATING_SYSTEM;
	/* pid may be any thread of the target, as with the real driver; the
	 * socket is named by what the target calls itself */
	if (fc_proc_tgid(pid, &t->tgid, &t->local_tgid) != 0)
		return CUDA_ERROR_OPERATING_SYSTEM;
	t->pidns = fc_pidns(pid);
	if (t->pidns != 0)
		return CUDA_SUCCESS;
	/* a zombie has no namespaces left, and no restore thread either */
	return errno == ENOENT ? CUDA_ERROR_NOT_INITIALIZED : CUDA_ERROR_OPERATING_SYSTEM;
}

/* Without persistence mode a restore needs the caller's own driver context. */
static int restore_permitted(void)
{
	char buf[32];
	const char *env = fc_setting("FAKECUDA_PERSISTENCE", buf, sizeof(buf));
	if (env == NULL || atoi(env) != 0)
		return 1;
	pthread_mutex_lock(&fc_tgt.mu);
	int inited = fc_tgt.cuda_inited;
	pthread_mutex_unlock(&fc_tgt.mu);
	return inited;
}

static CUresult call(int pid, struct fc_req *req, int32_t *value)
{
	struct target t;
	struct fc_rsp rsp;
	int fd;
	CUresult rc = resolve(pid, &t);
	if (rc == CUDA_SUCCESS)
		rc = fc_connect_target(t.local_tgid, t.pidns, t.tgid, &fd);
	if (rc != CUDA_SUCCESS)
		return rc;
	if (req->op == FC_OP_RESTORE && !restore_permitted()) {
		close(fd);
		return CUDA_ERROR_NOT_PERMITTED;
	}
	struct fc_req_fds fds = { -1, -1 };
	if (req->op == FC_OP_RESTORE) {
		fds.room = fc_room_file();
		fds.proc = fds.room >= 0 ? open("/proc", O_RDONLY | O_DIRECTORY | O_CLOEXEC) : -1;
		fc_measure_room(&req->room);
	}
	req->magic = FC_MAGIC;
	/* a target that dies before answering closes the connection */
	if (fc_send_req(fd, req, sizeof(*req), &fds) != 0 || fc_read_all(fd, &rsp, sizeof(rsp)) != 0)
		rsp.result = CUDA_ERROR_OPERATING_SYSTEM;
	else if (value)
		*value = rsp.value;
	if (fds.room >= 0)
		close(fds.room);
	if (fds.proc >= 0)
		close(fds.proc);
	close(fd);
	return rsp.result;
}

static int all_zero(const void *p, size_t n)
{
	const unsigned char *b = p;
	for (size_t i = 0; i < n; i++)
		if (b[i])
			return 0;
	return 1;
}

CUresult cuCheckpointProcessGetState(int pid, CUprocessState *state)
{
	struct fc_req req = { .op = FC_OP_GET_STATE };
	int32_t v = 0;
	if (state == NULL)
		return CUDA_ERROR_INVALID_VALUE;
	CUresult rc = call(pid, &req, &v);
	if (rc == CUDA_SUCCESS)
		*state = (CUprocessState)v;
	return rc;
}

/* Faults on get_restore_tid act here, since the call never reaches the
 * target; their counts are therefore kept per caller process. */
static CUresult restore_tid_faults(const struct target *t)
{
	struct fc_fault_hit hit;
	fc_faults_check(FC_OP_GET_RESTORE_TID, t->tgid, 0, &hit);
	if (hit.delay_ms)
		fc_sleep_ms(hit.delay_ms);
	/* "the target dies during the call", from outside: it cannot _exit
	 * itself for a call it never sees */
	if (hit.exit_now) {
		kill(t->local_tgid, SIGKILL);
		return CUDA_ERROR_OPERATING_SYSTEM;
	}
	return hit.error;
}

CUresult cuCheckpointProcessGetRestoreThreadId(int pid, int *tid)
{
	struct target t;
	if (tid == NULL)
		return CUDA_ERROR_INVALID_VALUE;
	CUresult rc = resolve(pid, &t);
	if (rc != CUDA_SUCCESS)
		return rc;
	int found = fc_find_restore_tid(pid);
	/* never initialized, a child forked without exec: no restore thread */
	if (found == 0)
		return CUDA_ERROR_NOT_INITIALIZED;
	rc = restore_tid_faults(&t);
	if (rc == CUDA_SUCCESS)
		*tid = found;
	return rc;
}

CUresult cuCheckpointProcessLock(int pid, CUcheckpointLockArgs *args)
{
	struct fc_req req = { .op = FC_OP_LOCK };
	if (args && (args->reserved0 || !all_zero(args->reserved1, sizeof(args->reserved1))))
		return CUDA_ERROR_INVALID_VALUE;
	req.timeout_ms = args ? args->timeoutMs : 0;
	return call(pid, &req, NULL);
}

CUresult cuCheckpointProcessCheckpoint(int pid, CUcheckpointCheckpointArgs *args)
{
	struct fc_req req = { .op = FC_OP_CHECKPOINT };
	if (args && !all_zero(args, sizeof(*args)))
		return CUDA_ERROR_INVALID_VALUE;
	return call(pid, &req, NULL);
}

CUresult cuCheckpointProcessRestore(int pid, CUcheckpointRestoreArgs *args)
{
	struct fc_req req = { .op = FC_OP_RESTORE };
	if (args && (!all_zero(args->reserved, sizeof(args->reserved)) || args->reserved1 ||
		     args->gpuPairsCount > FC_MAX_PAIRS ||
		     (args->gpuPairsCount && args->gpuPairs == NULL)))
		return CUDA_ERROR_INVALID_VALUE;
	if (args && args->gpuPairsCount) {
		req.npairs = args->gpuPairsCount;
		memcpy(req.pairs, args->gpuPairs, sizeof(req.pairs[0]) * req.npairs);
	}
	return call(pid, &req, NULL);
}

CUresult cuCheckpointProcessUnlock(int pid, CUcheckpointUnlockArgs *args)
{
	struct fc_req req = { .op = FC_OP_UNLOCK };
	if (args && !all_zero(args, sizeof(*args)))
		return CUDA_ERROR_INVALID_VALUE;
	return call(pid, &req, NULL);
}
