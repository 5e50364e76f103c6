/* Binding to libcuda.so.1, loaded with dlopen so that the binary runs (and
 * explains itself) on machines without an NVIDIA driver. */
#include "cudasnap.h"
#include "cuda_abi.h"
#include "bounded.h"
#include "env.h"
#include "util.h"

#include <dlfcn.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

struct cs_driver {
	void *handle;
	bool loaded;
	bool initialized;
	int version;
	char path[256];
	cs_error error;
	cu_init_fn init;
	cu_version_fn get_version;
	cu_errstr_fn err_name, err_string;
	cu_get_state_fn get_state;
	cu_get_tid_fn get_tid;
	cu_lock_fn lock;
	cu_ckpt_fn checkpoint;
	cu_restore_fn restore;
	cu_unlock_fn unlock;
	cs_limits limits;
};

#define HINT_INSTALL \
	"Install the NVIDIA driver R570 or newer, or make libcuda.so.1 visible here " \
	"(in containers the NVIDIA container toolkit mounts it); set CUDASNAP_LIBCUDA to its path if it " \
	"lives elsewhere."
#define HINT_UPGRADE \
	"The checkpoint API needs NVIDIA driver R570 (CUDA 12.8) or newer; " \
	"remapping GPUs at restore needs R580. Upgrade the driver."

static int resolve(cs_driver *d, const char *name, void **slot, cs_error *err)
{
	dlerror();
	*slot = dlsym(d->handle, name);
	if (*slot)
		return 0;
	return cs_error_set(err, CS_EENV, HINT_UPGRADE,
			    "the NVIDIA driver library %s has no symbol %s (driver version %d.%d)", d->path, name,
			    d->version / 1000, d->version % 1000 / 10);
}

static int load_symbols(cs_driver *d, cs_error *err)
{
	struct {
		const char *name;
		void **slot;
	} optional[] = {
		{ "cuGetErrorName", (void **)&d->err_name },
		{ "cuGetErrorString", (void **)&d->err_string },
		{ "cuInit", (void **)&d->init },
	}, required[] = {
		{ "cuCheckpointProcessGetState", (void **)&d->get_state },
		{ "cuCheckpointProcessGetRestoreThreadId", (void **)&d->get_tid },
		{ "cuCheckpointProcessLock", (void **)&d->lock },
		{ "cuCheckpointProcessCheckpoint", (void **)&d->checkpoint },
		{ "cuCheckpointProcessRestore", (void **)&d->restore },
		{ "cuCheckpointProcessUnlock", (void **)&d->unlock },
	};
	for (size_t i = 0; i < CS_ARRAY_SIZE(optional); i++)
		*optional[i].slot = dlsym(d->handle, optional[i].name);
	if (!d->init)
		return resolve(d, "cuInit", (void **)&d->init, err);
	for (size_t i = 0; i < CS_ARRAY_SIZE(required); i++) {
		int r = resolve(d, required[i].name, required[i].slot, err);
		if (r < 0)
			return r;
	}
	return 0;
}

static int load(cs_driver *d, cs_error *err)
{
	const char *env = cs_env("CUDASNAP_LIBCUDA");
	snprintf(d->path, sizeof(d->path), "%s", env ? env : "libcuda.so.1");
	d->handle = dlopen(d->path, RTLD_NOW | RTLD_LOCAL);
	if (!d->handle)
		return cs_error_set(err, CS_EENV, HINT_INSTALL, "cannot load the NVIDIA driver library %s: %s", d->path,
				    dlerror());
	int r = resolve(d, "cuDriverGetVersion", (void **)&d->get_version, err);
	if (r < 0)
		return r;
	if (d->get_version(&d->version) != 0)
		return cs_error_set(err, CS_EENV, HINT_INSTALL,
				    "the NVIDIA driver library %s does not report its version", d->path);
	if (d->version < CS_DRIVER_MIN_VERSION)
		return cs_error_set(err, CS_EENV, HINT_UPGRADE,
				    "the NVIDIA driver supports CUDA %d.%d; the checkpoint API needs CUDA 12.8 "
				    "(driver R570) or newer",
				    d->version / 1000, d->version % 1000 / 10);
	return load_symbols(d, err);
}

int cs_driver_open(cs_driver **out, cs_error *err)
{
	cs_driver *d = calloc(1, sizeof(*d));
	*out = d;
	if (!d)
		return cs_error_set(err, CS_ESYS, NULL, "out of memory");
	d->limits = (cs_limits){ .quick_s = 10, .lock_grace_s = 5, .stop_grace_s = 1.5, .rollback_grace_s = 2.5 };
	int r = load(d, &d->error);
	if (r < 0) {
		if (err)
			*err = d->error;
		return r;
	}
	d->loaded = true;
	return 0;
}

void cs_driver_free(cs_driver *d)
{
	if (!d)
		return;
	/* libcuda is never unloaded: its threads may outlive dlclose. */
	free(d);
}

bool cs_driver_loaded(const cs_driver *d)
{
	return d && d->loaded;
}
int cs_driver_version(const cs_driver *d)
{
	return d ? d->version : 0;
}
const char *cs_driver_path(const cs_driver *d)
{
	return d ? d->path : "";
}
const cs_error *cs_driver_error(const cs_driver *d)
{
	return d ? &d->error : NULL;
}
bool cs_driver_can_remap(const cs_driver *d)
{
	return cs_driver_loaded(d) && d->version >= CS_DRIVER_REMAP_VERSION;
}

void cs_driver_set_limits(cs_driver *d, const cs_limits *l)
{
	if (d)
		d->limits = *l;
}

const cs_limits *cs_driver_limits(const cs_driver *d)
{
	return &d->limits;
}

unsigned cs_driver_abandoned(void)
{
	return cs_bounded_abandoned();
}

double cs_move_deadline(const cs_driver *d, unsigned long long bytes)
{
	if (d && d->limits.move_s > 0)
		return d->limits.move_s < CS_MOVE_DEADLINE_MAX ? d->limits.move_s : CS_MOVE_DEADLINE_MAX;
	double gib = bytes && bytes <= CS_GPU_BYTES_MAX ? (double)bytes / (1024.0 * 1024 * 1024) : 141;
	double s = 60 + 2 * gib;
	return s < CS_MOVE_DEADLINE_MAX ? s : CS_MOVE_DEADLINE_MAX;
}

/* One call as the worker thread runs it: everything it needs is copied in,
 * so that a call given up on never reads the caller's memory. */
typedef struct cu_call {
	int (*run)(struct cu_call *c);
	void *fn;
	int pid;
	int out;
	unsigned timeout_ms;
	unsigned npairs;
	CUcheckpointGpuPair pairs[64];
} cu_call;

static int run_call(void *copy)
{
	cu_call *c = copy;
	return c->run(c);
}

static int run_init(cu_call *c)
{
	return ((cu_init_fn)c->fn)(0);
}
static int run_get_state(cu_call *c)
{
	return ((cu_get_state_fn)c->fn)(c->pid, &c->out);
}
static int run_get_tid(cu_call *c)
{
	return ((cu_get_tid_fn)c->fn)(c->pid, &c->out);
}
static int run_lock(cu_call *c)
{
	CUcheckpointLockArgs args;
	memset(&args, 0, sizeof(args));
	args.timeoutMs = c->timeout_ms;
	return ((cu_lock_fn)c->fn)(c->pid, &args);
}
static int run_checkpoint(cu_call *c)
{
	return ((cu_ckpt_fn)c->fn)(c->pid, NULL);
}
static int run_restore(cu_call *c)
{
	if (c->npairs == 0)
		return ((cu_restore_fn)c->fn)(c->pid, NULL);
	CUcheckpointRestoreArgs args;
	memset(&args, 0, sizeof(args));
	args.gpuPairs = c->pairs;
	args.gpuPairsCount = c->npairs;
	return ((cu_restore_fn)c->fn)(c->pid, &args);
}
static int run_unlock(cu_call *c)
{
	return ((cu_unlock_fn)c->fn)(c->pid, NULL);
}

static int bounded(cs_driver *d, cu_call *c, double seconds)
{
	return cs_bounded_call(run_call, c, sizeof(*c), seconds, d->limits.interrupted, d->limits.stop_grace_s);
}

/* Without a driver every call answers as if the library never initialized. */
#define NEED_DRIVER(d) \
	do { \
		if (!cs_driver_loaded(d)) \
			return CS_CU_NOT_INITIALIZED; \
	} while (0)

int cs_cu_init(cs_driver *d)
{
	NEED_DRIVER(d);
	cu_call c = { .run = run_init, .fn = (void *)d->init };
	int r = bounded(d, &c, d->limits.quick_s);
	if (r == 0)
		d->initialized = true;
	return r;
}

int cs_cu_get_state(cs_driver *d, pid_t pid, int *state)
{
	return cs_cu_get_state_by(d, pid, d ? d->limits.quick_s : 0, state);
}

int cs_cu_get_state_by(cs_driver *d, pid_t pid, double seconds, int *state)
{
	*state = CS_STATE_UNKNOWN;
	NEED_DRIVER(d);
	cu_call c = { .run = run_get_state, .fn = (void *)d->get_state, .pid = (int)pid };
	int r = bounded(d, &c, seconds);
	if (r == 0)
		*state = c.out;
	return r;
}

int cs_cu_get_restore_tid(cs_driver *d, pid_t pid, pid_t *tid)
{
	*tid = 0;
	NEED_DRIVER(d);
	cu_call c = { .run = run_get_tid, .fn = (void *)d->get_tid, .pid = (int)pid };
	int r = bounded(d, &c, d->limits.quick_s);
	if (r == 0)
		*tid = (pid_t)c.out;
	return r;
}

int cs_cu_lock(cs_driver *d, pid_t pid, unsigned timeout_ms)
{
	NEED_DRIVER(d);
	cu_call c = { .run = run_lock, .fn = (void *)d->lock, .pid = (int)pid, .timeout_ms = timeout_ms };
	/* The lock timeout bounds the wait for GPU work, not for a process
	 * that cannot answer: the grace covers the rest. */
	return bounded(d, &c, timeout_ms ? timeout_ms / 1000.0 + d->limits.lock_grace_s : 0);
}

int cs_cu_checkpoint_by(cs_driver *d, pid_t pid, double seconds)
{
	NEED_DRIVER(d);
	cu_call c = { .run = run_checkpoint, .fn = (void *)d->checkpoint, .pid = (int)pid };
	return bounded(d, &c, seconds);
}

int cs_cu_checkpoint(cs_driver *d, pid_t pid)
{
	return cs_cu_checkpoint_by(d, pid, cs_move_deadline(d, 0));
}

int cs_cu_restore_by(cs_driver *d, pid_t pid, const cs_gpu_pair *pairs, unsigned npairs, double seconds)
{
	NEED_DRIVER(d);
	cu_call c = { .run = run_restore, .fn = (void *)d->restore, .pid = (int)pid };
	if (npairs > CS_ARRAY_SIZE(c.pairs))
		return CS_CU_INVALID_VALUE;
	for (unsigned i = 0; i < npairs; i++) {
		memcpy(c.pairs[i].oldUuid, pairs[i].old_uuid, 16);
		memcpy(c.pairs[i].newUuid, pairs[i].new_uuid, 16);
	}
	c.npairs = npairs;
	return bounded(d, &c, seconds);
}

int cs_cu_restore(cs_driver *d, pid_t pid, const cs_gpu_pair *pairs, unsigned npairs)
{
	return cs_cu_restore_by(d, pid, pairs, npairs, cs_move_deadline(d, 0));
}

int cs_cu_unlock(cs_driver *d, pid_t pid)
{
	NEED_DRIVER(d);
	cu_call c = { .run = run_unlock, .fn = (void *)d->unlock, .pid = (int)pid };
	return bounded(d, &c, d->limits.quick_s);
}

/* Names and texts of the codes cudasnap meets, for when no driver answers. */
static const struct {
	int code;
	const char *name, *text;
} known[] = {
	{ 0, "CUDA_SUCCESS", "no error" },
	{ 1, "CUDA_ERROR_INVALID_VALUE", "invalid argument" },
	{ 2, "CUDA_ERROR_OUT_OF_MEMORY", "out of memory" },
	{ 3, "CUDA_ERROR_NOT_INITIALIZED", "initialization error" },
	{ 100, "CUDA_ERROR_NO_DEVICE", "no CUDA-capable device is detected" },
	{ 101, "CUDA_ERROR_INVALID_DEVICE", "invalid device ordinal" },
	{ 304, "CUDA_ERROR_OPERATING_SYSTEM", "OS call failed or operation not supported on this OS" },
	{ 401, "CUDA_ERROR_ILLEGAL_STATE", "the operation cannot be performed in the present state" },
	{ 500, "CUDA_ERROR_NOT_FOUND", "named symbol not found" },
	{ 600, "CUDA_ERROR_NOT_READY", "device not ready" },
	{ 800, "CUDA_ERROR_NOT_PERMITTED", "operation not permitted" },
	{ 801, "CUDA_ERROR_NOT_SUPPORTED", "operation not supported" },
	{ 999, "CUDA_ERROR_UNKNOWN", "unknown error" },
	{ CS_CU_TIMED_OUT, "CUDASNAP_CALL_TIMED_OUT", "the driver did not answer before the deadline" },
	{ CS_CU_INTERRUPTED, "CUDASNAP_CALL_INTERRUPTED", "a signal ended the wait for the driver" },
	{ CS_CU_NO_ROOM, "CUDASNAP_NO_GPU_ROOM", "not asked: the GPU has no room for it" },
	{ CS_CU_PARK_FAILED, "CUDASNAP_PARK_FAILED", "the parking interposer could not do it" },
};

static const char *fallback(int res, bool name)
{
	for (size_t i = 0; i < CS_ARRAY_SIZE(known); i++)
		if (known[i].code == res)
			return name ? known[i].name : known[i].text;
	return name ? "CUDA_ERROR_UNRECOGNIZED" : "unrecognized error code";
}

const char *cs_cu_name(const cs_driver *d, int res)
{
	const char *s = NULL;
	if (res >= 0 && cs_driver_loaded(d) && d->err_name && d->err_name(res, &s) == 0 && s)
		return s;
	return fallback(res, true);
}

const char *cs_cu_string(const cs_driver *d, int res)
{
	const char *s = NULL;
	if (res >= 0 && cs_driver_loaded(d) && d->err_string && d->err_string(res, &s) == 0 && s)
		return s;
	return fallback(res, false);
}

const char *cs_state_name(int state)
{
	static const char *const names[] = { "running", "locked", "checkpointed", "failed" };
	if (state < 0 || state > 3)
		return NULL;
	return names[state];
}

int cs_state_parse(const char *word)
{
	for (int s = 0; s <= 3; s++)
		if (strcmp(word, cs_state_name(s)) == 0)
			return s;
	return CS_STATE_UNKNOWN;
}
