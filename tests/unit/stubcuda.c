/* A scripted libcuda.so.1 for unit tests of the transaction engine: it keeps
 * a state per pid, logs every call, fails the calls it is told to, and runs
 * a test's callback before answering, so that a test can change the world
 * (e.g. a fake /proc) between two driver calls. Loaded by cs_driver_open
 * through $CUDASNAP_LIBCUDA; the test reaches stub_* through dlopen of the
 * same path. */
#include <stddef.h>
#include <string.h>

#include "stubcuda.h"

static struct {
	int pid, state;
} procs[STUB_MAX_PROCS];
static size_t nprocs;
static stub_call log_[STUB_MAX_CALLS];
static size_t nlog;
static struct {
	int op, pid, result;
} fails[8];
static size_t nfails;
static stub_hook hook;

void stub_reset(void)
{
	nprocs = nlog = nfails = 0;
	hook = NULL;
}

void stub_add(int pid, int state)
{
	if (nprocs < STUB_MAX_PROCS)
		procs[nprocs++] = (typeof(procs[0])){ pid, state };
}

void stub_fail(int op, int pid, int result)
{
	if (nfails < sizeof(fails) / sizeof(fails[0]))
		fails[nfails++] = (typeof(fails[0])){ op, pid, result };
}

void stub_set_hook(stub_hook h)
{
	hook = h;
}

size_t stub_log(const stub_call **calls)
{
	*calls = log_;
	return nlog;
}

static int *state_of(int pid)
{
	for (size_t i = 0; i < nprocs; i++)
		if (procs[i].pid == pid)
			return &procs[i].state;
	return NULL;
}

/* Logs the call, runs the hook, and answers: a scripted failure, 304 for an
 * unknown pid, 401 in the wrong state, else success with the new state. */
static int call(int op, int pid, int need, int next)
{
	if (nlog < STUB_MAX_CALLS)
		log_[nlog++] = (stub_call){ op, pid };
	if (hook)
		hook(op, pid);
	for (size_t i = 0; i < nfails; i++)
		if (fails[i].op == op && fails[i].pid == pid)
			return fails[i].result;
	int *s = state_of(pid);
	if (!s)
		return 304;
	if (need >= 0 && *s != need)
		return 401;
	if (next >= 0)
		*s = next;
	return 0;
}

int cuDriverGetVersion(int *v);
int cuInit(unsigned flags);
int cuCheckpointProcessGetState(int pid, int *state);
int cuCheckpointProcessGetRestoreThreadId(int pid, int *tid);
int cuCheckpointProcessLock(int pid, void *args);
int cuCheckpointProcessCheckpoint(int pid, void *args);
int cuCheckpointProcessRestore(int pid, void *args);
int cuCheckpointProcessUnlock(int pid, void *args);

int cuDriverGetVersion(int *v)
{
	*v = 13000;
	return 0;
}

int cuInit(unsigned flags)
{
	(void)flags;
	return 0;
}

int cuCheckpointProcessGetState(int pid, int *state)
{
	int r = call(STUB_GET_STATE, pid, -1, -1);
	if (r == 0)
		*state = *state_of(pid);
	return r;
}

int cuCheckpointProcessGetRestoreThreadId(int pid, int *tid)
{
	*tid = pid;
	return state_of(pid) ? 0 : 304;
}

int cuCheckpointProcessLock(int pid, void *args)
{
	(void)args;
	return call(STUB_LOCK, pid, 0, 1);
}

int cuCheckpointProcessCheckpoint(int pid, void *args)
{
	(void)args;
	return call(STUB_CHECKPOINT, pid, 1, 2);
}

int cuCheckpointProcessRestore(int pid, void *args)
{
	(void)args;
	return call(STUB_RESTORE, pid, 2, 1);
}

int cuCheckpointProcessUnlock(int pid, void *args)
{
	(void)args;
	return call(STUB_UNLOCK, pid, 1, 0);
}
