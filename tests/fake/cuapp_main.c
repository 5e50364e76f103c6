#include <getopt.h>
#include <pthread.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/prctl.h>
#include <time.h>
#include <unistd.h>

#include "cuapp.h"

static const char usage_text[] = "fakecuda-cuapp: a CUDA application on the driver API, reached as the CUDA\n"
				 "runtime reaches it (dlopen libcuda.so.1, cuGetProcAddress).\n"
				 "\n"
				 "  --alloc-mib N     one cuMemAlloc of N MiB (repeatable)\n"
				 "  --allocs K        K allocations of each --alloc-mib size (1)\n"
				 "  --vmm-mib N       N MiB (rounded up to the granularity) that the program\n"
				 "                    maps itself: reserve, create, map, set access (repeatable)\n"
				 "  --small-kib N     one small cuMemAlloc of N KiB\n"
				 "  --seed S          pattern seed (the pid)\n"
				 "  --interval-ms MS  a kernel and a sampled check every MS ms (100)\n"
				 "  --kernel-ms MS    the kernels' length (5)\n"
				 "  --ipc-export FILE write the IPC handle of the first allocation to FILE\n"
				 "  --ipc-import FILE open the handle in FILE (waiting for it) and check that\n"
				 "                    memory against --peer-seed S\n"
				 "  --ipc-event       with --ipc-export, also share an interprocess event\n"
				 "                    recorded after the fill; with --ipc-import, wait on it\n"
				 "                    before using the memory, keep it, and wait at each check\n"
				 "  --vmm-share FILE  export the first --vmm-mib allocation as a POSIX fd and\n"
				 "                    write 'PID FD' to FILE\n"
				 "  --vmm-import FILE import that fd (pidfd_getfd), map it and check it against\n"
				 "                    --peer-seed S (give the same --vmm-mib as the exporter)\n"
				 "  --retain          retain the handle of the first --alloc-mib allocation's\n"
				 "                    memory (cuMemRetainAllocationHandle) and keep it\n"
				 "  --retain-share FILE  retain it, export it as a POSIX fd, release the handle\n"
				 "                    and write 'PID FD' to FILE (as NCCL registers a buffer)\n"
				 "  --cuda-version V  the CUDA version it gives cuGetProcAddress (12080)\n"
				 "\n"
				 "Prints 'ready pid=<pid> allocs=<n> bytes=<n> addrs=<hex,...>' once filled.\n"
				 "SIGUSR2: forks a child (no exec) that sleeps until the process ends.\n"
				 "SIGUSR1: checks every byte (an import is mapped again first), prints\n"
				 "'verify ok bytes=<n>' or 'verify FAILED <where>'. SIGTERM, SIGINT: exit 0\n"
				 "when every check passed, else 1.\n";

static pthread_mutex_t mu = PTHREAD_MUTEX_INITIALIZER;
static pthread_cond_t cv = PTHREAD_COND_INITIALIZER;
static int verify_requests;
static int stopping;
static int failed;

static void fail(const char *why)
{
	pthread_mutex_lock(&mu);
	if (!failed)
		fprintf(stderr, "fakecuda-cuapp: check failed: %s\n", why);
	failed = 1;
	pthread_mutex_unlock(&mu);
}

static int parse_u(const char *s, unsigned long long max, unsigned long long *out)
{
	char *end;
	unsigned long long v = strtoull(s, &end, 0);
	if (*s == '\0' || *s == '-' || *end != '\0' || v > max) {
		fprintf(stderr, "fakecuda-cuapp: bad number '%s'\n", s);
		return -1;
	}
	*out = v;
	return 0;
}

static int parse(int argc, char **argv, struct cuapp *app)
{
	static const struct option opts[] = {
		{ "alloc-mib", 1, NULL, 'a' },  { "allocs", 1, NULL, 'k' },     { "vmm-mib", 1, NULL, 'v' },
		{ "small-kib", 1, NULL, 's' },  { "seed", 1, NULL, 'S' },       { "interval-ms", 1, NULL, 'i' },
		{ "kernel-ms", 1, NULL, 'K' },  { "ipc-export", 1, NULL, 'e' }, { "ipc-import", 1, NULL, 'I' },
		{ "peer-seed", 1, NULL, 'P' },  { "ipc-event", 0, NULL, 'E' },  { "vmm-share", 1, NULL, 'x' },
		{ "vmm-import", 1, NULL, 'X' }, { "retain", 0, NULL, 'r' },     { "retain-share", 1, NULL, 'R' },
		{ "help", 0, NULL, 'h' },       { "cuda-version", 1, NULL, 'V' }, { NULL, 0, NULL, 0 },
	};
	unsigned long long v = 0;
	int c;
	app->seed = (uint64_t)getpid();
	app->allocs_each = 1;
	app->interval_ms = 100;
	app->kernel_ms = 5;
	while ((c = getopt_long(argc, argv, "h", opts, NULL)) != -1) {
		if (c == 'h' || c == '?') {
			fputs(usage_text, c == 'h' ? stdout : stderr);
			return c == 'h' ? 1 : -1;
		}
		if (!strchr("eIExXrR", c) && parse_u(optarg, 1ull << 40, &v) != 0)
			return -1;
		if ((c == 'a' && app->nalloc_opts == CUAPP_MAX_ALLOCS) ||
		    (c == 'v' && app->nvmm_opts == CUAPP_MAX_ALLOCS))
			return -1;
		switch (c) {
		case 'a': app->alloc_bytes[app->nalloc_opts++] = (size_t)v << 20; break;
		case 'k': app->allocs_each = (unsigned int)v; break;
		case 'v': app->vmm_bytes[app->nvmm_opts++] = (size_t)v << 20; break;
		case 's': app->small_bytes = (size_t)v << 10; break;
		case 'S': app->seed = v; break;
		case 'i': app->interval_ms = (unsigned int)v; break;
		case 'K': app->kernel_ms = (unsigned int)v; break;
		case 'e': app->ipc_export = optarg; break;
		case 'I': app->ipc_import = optarg; break;
		case 'P': app->peer_seed = v; break;
		case 'E': app->ipc_event = 1; break;
		case 'x': app->vmm_share = optarg; break;
		case 'X': app->vmm_import = optarg; break;
		case 'r': app->retain = 1; break;
		case 'R': app->retain_share = optarg; break;
		case 'V': cuapp_cuda_version = (int)v; break;
		}
	}
	if (optind != argc || app->nalloc_opts * (unsigned long long)app->allocs_each > CUAPP_MAX_ALLOCS) {
		fputs(usage_text, stderr);
		return -1;
	}
	return 0;
}

static int setup(struct cuapp *app)
{
	struct cu *cu = &app->cu;
	CUdevice dev;
	if (cuapp_load(cu) != 0 || cuapp_failed(cu, cu->init(0), "cuInit") ||
	    cuapp_failed(cu, cu->device_get(&dev, 0), "cuDeviceGet") ||
	    cuapp_failed(cu, cu->retain(&cu->ctx, dev), "cuDevicePrimaryCtxRetain") ||
	    cuapp_failed(cu, cu->ctx_set(cu->ctx), "cuCtxSetCurrent") || cuapp_allocate(app) != 0)
		return -1;
	if (app->ipc_export != NULL && cuapp_ipc_export(app) != 0)
		return -1;
	if ((app->vmm_share && cuapp_vmm_share(app) != 0) || (app->vmm_import && cuapp_vmm_import(app) != 0))
		return -1;
	if ((app->retain || app->retain_share) && cuapp_retain(app) != 0)
		return -1;
	return app->ipc_import != NULL ? cuapp_ipc_import(app) : 0;
}

static void print_ready(const struct cuapp *app)
{
	size_t bytes = 0;
	printf("ready pid=%d allocs=%d", (int)getpid(), app->n);
	for (int i = 0; i < app->n; i++)
		bytes += app->a[i].bytes;
	printf(" bytes=%zu addrs=", bytes);
	for (int i = 0; i < app->n; i++)
		printf("%s0x%llx", i ? "," : "", app->a[i].ptr);
	printf("\n");
	fflush(stdout);
}

/* A kernel, then a page at the start, one at a place that moves with each
 * round, and the last page of every allocation. */
static void sample(struct cuapp *app, unsigned long round)
{
	char why[256];
	unsigned int ms = app->kernel_ms;
	void *params[] = { &ms };
	CUresult rc = app->cu.launch(NULL, 1, 1, 1, 1, 1, 1, 0, NULL, params, NULL);
	if (rc != CU_OK) {
		snprintf(why, sizeof(why), "cuLaunchKernel -> %d", rc);
		fail(why);
	}
	for (int i = 0; i < app->n; i++) {
		const struct cuapp_alloc *a = &app->a[i];
		size_t page = a->bytes < 4096 ? a->bytes / 8 * 8 : 4096;
		size_t places[3] = { 0, (round * 7919 * 4096) % (a->bytes - page + 1) / 8 * 8, a->bytes - page };
		for (int p = 0; p < 3; p++)
			if (cuapp_check(app, a, places[p], page, why, sizeof(why)) != 0)
				fail(why);
	}
	if ((rc = app->cu.sync()) != CU_OK) {
		snprintf(why, sizeof(why), "cuCtxSynchronize -> %d", rc);
		fail(why);
	}
}

static void verify_all(struct cuapp *app)
{
	char why[256];
	size_t bytes = 0;
	if (app->event && cuapp_event_verify(app, why, sizeof(why)) != 0) {
		fail(why);
		printf("verify FAILED %s\n", why);
		fflush(stdout);
		return;
	}
	if (app->vmm_import && cuapp_vmm_remap(app, why, sizeof(why)) != 0) {
		fail(why);
		printf("verify FAILED %s\n", why);
		fflush(stdout);
		return;
	}
	for (int i = 0; i < app->n; i++) {
		if (cuapp_check(app, &app->a[i], 0, app->a[i].bytes / 8 * 8, why, sizeof(why)) != 0) {
			fail(why);
			printf("verify FAILED %s\n", why);
			fflush(stdout);
			return;
		}
		bytes += app->a[i].bytes;
	}
	printf("verify ok bytes=%zu\n", bytes);
	fflush(stdout);
}

/* The work runs off the main thread, which must still see SIGTERM while a
 * call blocks (the process locked or checkpointed). The context is the
 * thread's own, made current as the runtime does on each thread. */
static void *worker(void *arg)
{
	struct cuapp *app = arg;
	if (cuapp_failed(&app->cu, app->cu.ctx_set(app->cu.ctx), "cuCtxSetCurrent (worker)"))
		fail("no context on the worker thread");
	for (unsigned long round = 0;; round++) {
		struct timespec until;
		clock_gettime(CLOCK_REALTIME, &until);
		until.tv_sec += app->interval_ms / 1000;
		until.tv_nsec += (long)(app->interval_ms % 1000) * 1000000L;
		if (until.tv_nsec >= 1000000000L) {
			until.tv_sec++;
			until.tv_nsec -= 1000000000L;
		}
		pthread_mutex_lock(&mu);
		while (verify_requests == 0 && !stopping && pthread_cond_timedwait(&cv, &mu, &until) == 0)
			;
		if (stopping) {
			pthread_mutex_unlock(&mu);
			return NULL;
		}
		int verify = verify_requests > 0;
		verify_requests = 0;
		pthread_mutex_unlock(&mu);
		if (verify)
			verify_all(app);
		else
			sample(app, round);
	}
	return NULL;
}

/* A child forked without exec, as a data loader's worker is: it holds
 * copies of every descriptor the process had, and sleeps until its parent
 * is gone. */
static void fork_sleeper(void)
{
	pid_t parent = getpid();
	if (fork() != 0)
		return;
	prctl(PR_SET_PDEATHSIG, SIGKILL);
	if (getppid() != parent)
		_exit(0);
	for (;;)
		pause();
}

int main(int argc, char **argv)
{
	static struct cuapp app;
	sigset_t set;
	pthread_t t;
	int sig;
	int rc = parse(argc, argv, &app);
	if (rc != 0)
		return rc > 0 ? 0 : 2;
	sigemptyset(&set);
	sigaddset(&set, SIGUSR1);
	sigaddset(&set, SIGUSR2);
	sigaddset(&set, SIGTERM);
	sigaddset(&set, SIGINT);
	pthread_sigmask(SIG_BLOCK, &set, NULL);
	if (setup(&app) != 0)
		return 2;
	print_ready(&app);
	if (pthread_create(&t, NULL, worker, &app) != 0)
		return 2;
	while (sigwait(&set, &sig) == 0 && (sig == SIGUSR1 || sig == SIGUSR2)) {
		if (sig == SIGUSR2) {
			fork_sleeper();
			continue;
		}
		pthread_mutex_lock(&mu);
		verify_requests++;
		pthread_cond_signal(&cv);
		pthread_mutex_unlock(&mu);
	}
	/* The worker may be blocked in the driver (the process locked or
	 * checkpointed): it is waited for a while only, and then the process
	 * ends without running exit handlers on a thread still in the driver. */
	struct timespec until;
	pthread_mutex_lock(&mu);
	stopping = 1;
	pthread_cond_signal(&cv);
	pthread_mutex_unlock(&mu);
	clock_gettime(CLOCK_REALTIME, &until);
	until.tv_sec += 2;
	int joined = pthread_timedjoin_np(t, NULL, &until) == 0;
	pthread_mutex_lock(&mu);
	rc = failed;
	pthread_mutex_unlock(&mu);
	if (!joined)
		_exit(rc ? 1 : 0);
	return rc ? 1 : 0;
}
