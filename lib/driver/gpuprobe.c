#include "gpuprobe.h"
#include "env.h"
#include "pool.h"
#include "text.h"
#include "util.h"

#include <dlfcn.h>
#include <errno.h>
#include <fcntl.h>
#include <poll.h>
#include <signal.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/wait.h>
#include <time.h>

/* The most GPUs one probe reports. */
#define PROBE_MAX 64
#define PROBE_MAGIC "CSPROBE2"

typedef struct probe_head {
	char magic[8];
	uint32_t count;
	/* cppcheck-suppress unusedStructMember ; keeps the GPUs that follow at their alignment */
	uint32_t pad;
} probe_head;

typedef struct probe_gpu {
	char uuid[48];
	char name[96];
	uint64_t total, free;
	uint32_t known;
	int32_t error; /* the first CUresult that was not success, 0 */
	uint32_t mig; /* the driver shows a MIG instance of it */
	/* cppcheck-suppress unusedStructMember ; no hole at the end */
	uint32_t pad;
} probe_gpu;

typedef struct probe_answer {
	probe_head h;
	probe_gpu g[PROBE_MAX];
} probe_answer;

/* The answer is written and read as these bytes, with no hole between. */
_Static_assert(offsetof(probe_answer, g) == sizeof(probe_head), "probe answer layout");

static const char *probe_exe, *probe_arg;

void cs_gpu_probe_set_exec(const char *exe, const char *arg)
{
	probe_exe = exe;
	probe_arg = arg;
}

/* ---- in the fresh process ----------------------------------------------- */

typedef int (*cu_int_fn)(unsigned);
typedef int (*cu_count_fn)(int *);
typedef int (*cu_dev_fn)(int *, int);
typedef int (*cu_uuid_fn)(unsigned char *, int);
typedef int (*cu_name_fn)(char *, int, int);
typedef int (*cu_total_fn)(size_t *, int);
typedef int (*cu_retain_fn)(void **, int);
typedef int (*cu_release_fn)(int);
typedef int (*cu_set_fn)(void *);
typedef int (*cu_info_fn)(size_t *, size_t *);

typedef struct probe_api {
	cu_int_fn init;
	cu_count_fn count;
	cu_dev_fn get;
	cu_uuid_fn uuid, uuid_v1;
	cu_name_fn name;
	cu_total_fn total;
	cu_retain_fn retain;
	cu_release_fn release;
	cu_set_fn set;
	cu_info_fn info;
} probe_api;

static bool load_api(void *h, probe_api *a)
{
	*(void **)&a->init = dlsym(h, "cuInit");
	*(void **)&a->count = dlsym(h, "cuDeviceGetCount");
	*(void **)&a->get = dlsym(h, "cuDeviceGet");
	*(void **)&a->uuid_v1 = dlsym(h, "cuDeviceGetUuid");
	*(void **)&a->uuid = dlsym(h, "cuDeviceGetUuid_v2");
	if (!a->uuid)
		a->uuid = a->uuid_v1;
	*(void **)&a->name = dlsym(h, "cuDeviceGetName");
	*(void **)&a->total = dlsym(h, "cuDeviceTotalMem_v2");
	*(void **)&a->retain = dlsym(h, "cuDevicePrimaryCtxRetain");
	*(void **)&a->release = dlsym(h, "cuDevicePrimaryCtxRelease_v2");
	*(void **)&a->set = dlsym(h, "cuCtxSetCurrent");
	*(void **)&a->info = dlsym(h, "cuMemGetInfo_v2");
	return a->init && a->count && a->get && a->uuid && a->retain && a->release && a->set && a->info;
}

static void note_error(probe_gpu *g, int rc)
{
	if (rc != 0 && g->error == 0)
		g->error = rc;
}

/* Without NVML, MIG shows in the driver itself: a device that is a MIG
 * instance has a MIG UUID (cuDeviceGetUuid_v2) other than its GPU's
 * (cuDeviceGetUuid), and its name ends in its profile ("... MIG 1g.10gb").
 * The GPU is then named by its own UUID, as NVML and the records name it. */
static void probe_mig(const probe_api *a, int dev, const unsigned char *u2, probe_gpu *g)
{
	unsigned char u1[16];
	if (strstr(g->name, " MIG ") != NULL)
		g->mig = 1;
	if (a->uuid_v1 && a->uuid_v1 != a->uuid && g->uuid[0] && a->uuid_v1(u1, dev) == 0 &&
	    memcmp(u1, u2, sizeof(u1)) != 0) {
		g->mig = 1;
		cs_gpu_uuid_format(u1, g->uuid);
	}
}

/* One GPU: its identity, then its free memory through a context that is
 * released before the next GPU is asked, so that only one exists at once. */
static void probe_one(const probe_api *a, int ordinal, bool memory, probe_gpu *g)
{
	int dev = 0;
	unsigned char u[16];
	note_error(g, a->get(&dev, ordinal));
	int rc = a->uuid(u, dev);
	note_error(g, rc);
	if (rc == 0)
		cs_gpu_uuid_format(u, g->uuid);
	if (a->name)
		note_error(g, a->name(g->name, (int)sizeof(g->name) - 1, dev));
	probe_mig(a, dev, u, g);
	size_t total = 0, free = 0, total2 = 0;
	if (a->total && a->total(&total, dev) == 0)
		g->total = total;
	if (!memory)
		return;
	void *ctx = NULL;
	rc = a->retain(&ctx, dev);
	note_error(g, rc);
	if (rc != 0)
		return;
	rc = a->set(ctx);
	if (rc == 0)
		rc = a->info(&free, &total2);
	note_error(g, rc);
	if (rc == 0) {
		g->free = free;
		g->total = total2 ? total2 : g->total;
		g->known = 1;
	}
	a->set(NULL);
	a->release(dev);
}

int cs_gpu_probe_ctx_parse(const char *s, uint64_t *ctx)
{
	size_t len = strspn(s, "0123456789abcdef");
	if (len == 0 || len > 16 || s[len])
		return -1;
	*ctx = strtoull(s, NULL, 16);
	return 0;
}

int cs_gpu_probe_main(int fd, uint64_t ctx)
{
	/* Every GPU (CUDA_VISIBLE_DEVICES is the caller's, not the machine's),
	 * in PCI bus order, as NVML counts them. */
	unsetenv("CUDA_VISIBLE_DEVICES");
	setenv("CUDA_DEVICE_ORDER", "PCI_BUS_ID", 1);
	static probe_answer ans;
	memset(&ans, 0, sizeof(ans));
	memcpy(ans.h.magic, PROBE_MAGIC, sizeof(ans.h.magic));
	const char *path = cs_env("CUDASNAP_LIBCUDA");
	void *h = dlopen(path ? path : "libcuda.so.1", RTLD_NOW | RTLD_LOCAL);
	probe_api a = { 0 };
	int count = 0;
	if (!h || !load_api(h, &a) || a.init(0) != 0 || a.count(&count) != 0)
		return 1;
	ans.h.count = (uint32_t)(count < 0 ? 0 : count > PROBE_MAX ? PROBE_MAX : count);
	for (uint32_t i = 0; i < ans.h.count; i++)
		probe_one(&a, (int)i, ctx == CS_PROBE_ALL || (ctx >> i) & 1, &ans.g[i]);
	size_t len = sizeof(ans.h) + ans.h.count * sizeof(ans.g[0]);
	for (size_t off = 0; off < len;) {
		ssize_t w = write(fd, (const char *)&ans + off, len - off);
		if (w < 0 && errno == EINTR)
			continue;
		if (w <= 0)
			return 1;
		off += (size_t)w;
	}
	return 0;
}

/* ---- in cudasnap ---------------------------------------------------------- */

int cs_gpu_probe_parse(const void *buf, size_t len, cs_nvml_gpu **gpus, size_t *n)
{
	probe_head h;
	*gpus = NULL;
	*n = 0;
	if (len < sizeof(h))
		return -EINVAL;
	memcpy(&h, buf, sizeof(h));
	if (memcmp(h.magic, PROBE_MAGIC, sizeof(h.magic)) != 0 || h.count > PROBE_MAX ||
	    len != sizeof(h) + h.count * sizeof(probe_gpu))
		return -EINVAL;
	_cleanup_free_ cs_nvml_gpu *out = calloc(h.count + 1, sizeof(*out));
	if (!out)
		return -ENOMEM;
	for (uint32_t i = 0; i < h.count; i++) {
		probe_gpu g;
		memcpy(&g, (const char *)buf + sizeof(h) + i * sizeof(g), sizeof(g));
		g.uuid[sizeof(g.uuid) - 1] = g.name[sizeof(g.name) - 1] = '\0';
		cs_nvml_gpu *x = &out[i];
		/* MIG off is not told apart from a driver that does not say */
		*x = (cs_nvml_gpu){
			.index = i, .persistence = -1, .mig = g.mig ? 1 : -1, .minor = -1, .error = g.error
		};
		snprintf(x->uuid, sizeof(x->uuid), "%s", g.uuid);
		cs_sanitize(x->name, sizeof(x->name), g.name, strlen(g.name));
		x->memory_known = g.known && g.free <= g.total;
		if (x->memory_known) {
			x->memory_total = g.total;
			x->memory_free = g.free;
			x->memory_used = g.total - g.free;
		}
	}
	*gpus = TAKE_PTR(out);
	*n = h.count;
	return 0;
}

/* In the child, between fork and exec: async-signal-safe calls only. */
static void child(int out, char *ctx)
{
	int null = open("/dev/null", O_RDWR | O_CLOEXEC);
	if (dup2(out, 1) < 0 || (null >= 0 && (dup2(null, 0) < 0 || dup2(null, 2) < 0)))
		_exit(126);
	execv(probe_exe, (char *[]){ (char *)"cudasnap", (char *)probe_arg, ctx, NULL });
	_exit(127);
}

/* Reads the child's whole answer until it closes the pipe, by deadline. */
static ssize_t read_answer(int fd, probe_answer *ans, double deadline, const volatile int *interrupted)
{
	size_t got = 0;
	for (;;) {
		double left = deadline - cs_now();
		if (left <= 0)
			return -ETIMEDOUT;
		if (interrupted && *interrupted)
			return -EINTR;
		struct pollfd p = { .fd = fd, .events = POLLIN };
		/* a tenth of a second at a time: a signal that asks the command
		 * to end is seen within that */
		int r = poll(&p, 1, left > 0.1 ? 100 : (int)(left * 1000) + 1);
		if (r < 0 && errno == EINTR)
			continue;
		if (r <= 0)
			continue;
		ssize_t n = read(fd, (char *)ans + got, sizeof(*ans) - got);
		if (n < 0 && errno == EINTR)
			continue;
		if (n <= 0)
			return n < 0 ? -errno : (ssize_t)got;
		got += (size_t)n;
		if (got == sizeof(*ans))
			return (ssize_t)got;
	}
}

/* Waits for the child until deadline, then kills it and waits a little
 * more: a child the kernel cannot end (stuck in the driver) is left
 * behind rather than waited for without bound. */
static void reap(pid_t pid, double deadline)
{
	int st;
	bool killed = false;
	while (waitpid(pid, &st, WNOHANG) == 0) {
		if (!killed && cs_now() >= deadline) {
			kill(pid, SIGKILL);
			killed = true;
			deadline = cs_now() + 5;
		} else if (killed && cs_now() >= deadline) {
			return;
		}
		nanosleep(&(struct timespec){ .tv_nsec = 5000000L }, NULL);
	}
}

int cs_gpu_probe(cs_nvml_gpu **gpus, size_t *n, uint64_t ctx, const volatile int *interrupted, cs_error *err)
{
	*gpus = NULL;
	*n = 0;
	if (!probe_exe || access(probe_exe, X_OK) < 0)
		return cs_error_set(err, CS_EENV, NULL, "no cudasnap binary to ask the driver from (%s)",
				    probe_exe ? probe_exe : "none registered");
	_cleanup_free_ probe_answer *ans = malloc(sizeof(*ans));
	int p[2];
	if (!ans || pipe2(p, O_CLOEXEC) < 0)
		return cs_error_errno(err, CS_ESYS, errno ? errno : ENOMEM, NULL, "cannot start the GPU memory probe");
	/* Only cudasnap's own binary, with a fixed argument and a number made
	 * here: nothing read from a process or a file reaches the exec. */
	char arg[20];
	snprintf(arg, sizeof(arg), "%llx", (unsigned long long)ctx);
	pid_t pid = fork();
	if (pid == 0)
		child(p[1], arg);
	close(p[1]);
	_cleanup_close_ int rd = p[0];
	if (pid < 0)
		return cs_error_errno(err, CS_ESYS, errno, NULL, "cannot start the GPU memory probe");
	double deadline = cs_now() + CS_GPU_PROBE_S;
	ssize_t len = read_answer(rd, ans, deadline, interrupted);
	reap(pid, len == -ETIMEDOUT || len == -EINTR ? cs_now() : deadline);
	if (len == -ETIMEDOUT)
		return cs_error_set(err, CS_EENV, NULL, "the driver did not answer the GPU memory probe within %.0f s",
				    CS_GPU_PROBE_S);
	if (len == -EINTR)
		return cs_error_set(err, CS_EENV, NULL, "the GPU memory probe was given up on: the command is ending");
	if (len <= 0 || cs_gpu_probe_parse(ans, (size_t)len, gpus, n) < 0)
		return cs_error_set(err, CS_EENV, NULL,
				    "the driver gave no GPU list to the memory probe (no driver library, cuInit failed, "
				    "or no GPU)");
	return 0;
}
