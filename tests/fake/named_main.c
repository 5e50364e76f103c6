#include <dlfcn.h>
#include <execinfo.h>
#include <getopt.h>
#include <link.h>
#include <linux/filter.h>
#include <linux/seccomp.h>
#include <pthread.h>
#include <signal.h>
#include <stdatomic.h>
#include <stddef.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/prctl.h>
#include <sys/syscall.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#include "cuda_vmm_api.h"
#include "fakecuda.h"
#include "named.h"

static const char usage_text[] =
	"fakecuda-named: gets its memory as the CUDA runtime does (cuGetProcAddress), and\n"
	"writes, launches, synchronizes and reads it back through driver functions\n"
	"reached another way.\n"
	"\n"
	"  --via MODE        name (linked calls), dlsym, default (RTLD_DEFAULT), next\n"
	"                    (RTLD_NEXT), procaddr:VERSION, procaddr1:VERSION\n"
	"                    (cuGetProcAddress), lib[-lazy][-deepbind][-next][-default]\n"
	"                    [-unlisted] (libfakecuda-probe.so; unlisted: its -new.so,\n"
	"                    whose copy is a driver function the interposer does not know),\n"
	"                    lib-nextdlsym (the library looks dlsym up with RTLD_NEXT: the\n"
	"                    C library's), realdlsym (the C library's dlsym by dlvsym),\n"
	"                    libcdlsym (by a handle of the C library), swap:FILE (loads\n"
	"                    and unloads libfakecuda-swapa.so once FILE exists, then\n"
	"                    its function from libfakecuda-swapb.so, loaded in its place)\n"
	"  --alloc-mib N     its memory (8); --alloc-bytes B: exactly B bytes\n"
	"  --interval-ms MS  between two rounds of the worker (1)\n"
	"  --probe PATH      the probe library (beside this program)\n"
	"  --idle            no worker\n"
	"  --load PATH       a thread loads PATH once SIGUSR2 comes\n"
	"  --phdr-call       once SIGUSR2 comes, a thread calls dl_iterate_phdr over and\n"
	"                    over, whose callback calls the driver (cuCtxGetCurrent, from\n"
	"                    cuGetProcAddress) while it holds the loader's list of objects;\n"
	"                    prints 'phdr started'; the next SIGUSR2 stops it: 'phdr done\n"
	"                    calls=<n> failed=<n>'\n"
	"  --hold            GPU work waits on a host word that a thread sets after a\n"
	"                    driver call, once SIGUSR2 comes (implies --idle)\n"
	"  --other-ms MS     one kernel of MS ms on device 1 once set up (--idle)\n"
	"  --created-ms MS   one kernel of MS ms in a context it creates on device 1\n"
	"                    (cuCtxCreate, by name; --idle)\n"
	"  --free-test       frees its memory from device 1's context while device 0\n"
	"                    runs a kernel of 300 ms; prints 'free ms=<n> rc=<rc>' and\n"
	"                    'range rc=<rc>', exits\n"
	"  --attrs           prints 'attrs range_size=<n> range_start=<hex> rdma=<n>\n"
	"                    addr_range=<n> addr_base=<hex>' for its memory\n"
	"  --no-socket       forbids itself socket(2) (seccomp, killed) before allocating\n"
	"  --late-filter     installs a seccomp filter (that allows everything) once ready\n"
	"  --dlmopen-driver  loads a second copy of the driver in a namespace of its own\n"
	"  --reuse-tid       once SIGUSR2 comes, a thread is cancelled inside\n"
	"                    cuCtxSynchronize (make it last with the fault 'sync delay=...')\n"
	"                    and a thread that never calls the driver gets its id; prints\n"
	"                    'reuse tid=<n> again=<0|1> set=<0|1>' (--idle)\n"
	"  --fiber           calls the driver from the first frame of a makecontext stack\n"
	"                    with a guard page above it (by name and from\n"
	"                    cuGetProcAddress); prints 'fiber ok' or 'fiber FAILED <why>', exits\n"
	"  --pool-share FILE exports a memory pool's descriptor, 'PID FD' into FILE\n"
	"  --pool-import FILE imports that pool (--idle)\n"
	"  --self-call       on SIGUSR2, the driver calls one of its own functions from a\n"
	"                    thread of its own (fakecuda_self_call); prints 'selfcall\n"
	"                    rc=<rc> ms=<n>'\n"
	"  --fork-call       on SIGUSR2, forks a child that calls the driver\n"
	"                    (cuDriverGetVersion) and exits; prints 'forkcall rc=<its exit\n"
	"                    status, -1 when it did not end within 2 s>'\n"
	"  --fork-call=range the child asks cuMemGetAddressRange of its parent's memory;\n"
	"                    its exit status is the answer\n"
	"  --storm SECONDS   a thread signals the main thread every few microseconds,\n"
	"                    whose handler calls the driver, while the main thread calls\n"
	"                    it over and over (both through cuGetProcAddress's pointer);\n"
	"                    prints 'storm ok calls=<n> signals=<n>' or 'storm FAILED', exits\n"
	"  --unwind          a signal comes while it waits in cuCtxSynchronize (from\n"
	"                    cuGetProcAddress; make it last with the fault 'sync delay=...'): prints\n"
	"                    'unwind main=<yes|no> frames=<n>', whether a backtrace taken\n"
	"                    there reaches main; exits\n"
	"\n"
	"Prints 'ready pid=<pid> bytes=<n> addr=<hex>'. SIGUSR1: prints 'verify ok\n"
	"bytes=<n>' or 'verify FAILED <why>'. SIGTERM: exit 0 when every round passed.\n";

#define PAGE (64u << 10)
#define VERSION 12080

struct opts {
	const char *via, *probe, *pool_share, *pool_import, *load;
	size_t bytes;
	unsigned interval_ms, other_ms, created_ms;
	int idle, hold, free_test, attrs, no_socket, late_filter, dlmopen_driver, unwind, storm, self_call, fork_call, phdr;
	int fiber, reuse_tid;
	int fork_range;
};

static struct opts o = { .via = "name", .bytes = 8u << 20, .interval_ms = 1 };
static cu_get_proc_fn get;
static CUcontext ctx0;
static CUdeviceptr mem;
static size_t pages;
static unsigned long *expected; /* the round each page was last written in */
static struct named_fns fns;
static pthread_mutex_t mu = PTHREAD_MUTEX_INITIALIZER;
static pthread_cond_t cv = PTHREAD_COND_INITIALIZER;
static int verify_requests, stopping, failed, released;
static volatile uint32_t *host_word;

static void fail(const char *why)
{
	pthread_mutex_lock(&mu);
	if (!failed)
		fprintf(stderr, "fakecuda-named: FAILED %s\n", why);
	failed = 1;
	pthread_mutex_unlock(&mu);
}

static void *rt(const char *name)
{
	void *f = NULL;
	CUdriverProcAddressQueryResult st;
	if (get(name, &f, VERSION, 0, &st) != CU_OK || f == NULL) {
		fprintf(stderr, "fakecuda-named: no %s\n", name);
		exit(2);
	}
	return f;
}

static uint64_t word(unsigned long round, size_t page, size_t k)
{
	uint64_t x = (uint64_t)round * 0x9e3779b97f4a7c15ull ^ (page << 32) ^ k;
	x = (x ^ (x >> 30)) * 0xbf58476d1ce4e5b9ull;
	return x ^ (x >> 31);
}

static void pattern(uint64_t *buf, unsigned long round, size_t page)
{
	for (size_t k = 0; k < PAGE / 8; k++)
		buf[k] = word(round, page, k);
}

static int check_page(size_t p, unsigned long round, uint64_t *buf, uint64_t *want, char *why, size_t len)
{
	CUresult rc = fns.dtoh(buf, mem + p * PAGE, PAGE);
	if (rc != CU_OK) {
		snprintf(why, len, "read of page %zu -> %d", p, rc);
		return -1;
	}
	pattern(want, round, p);
	if (memcmp(buf, want, PAGE) != 0) {
		snprintf(why, len, "page %zu does not hold round %lu", p, round);
		return -1;
	}
	return 0;
}

static void verify(uint64_t *buf, uint64_t *want)
{
	char why[128];
	for (size_t p = 0; p < pages; p++) {
		pthread_mutex_lock(&mu);
		unsigned long r = expected[p];
		pthread_mutex_unlock(&mu);
		if (check_page(p, r, buf, want, why, sizeof(why)) != 0) {
			fail(why);
			printf("verify FAILED %s\n", why);
			fflush(stdout);
			return;
		}
	}
	printf("verify ok bytes=%zu\n", pages * PAGE);
	fflush(stdout);
}

static void round_of_work(unsigned long r, uint64_t *buf, uint64_t *want)
{
	char why[128];
	size_t p = r % pages;
	unsigned ms = 1;
	void *params[] = { &ms };
	pattern(buf, r, p);
	CUresult rc = fns.htod(mem + p * PAGE, buf, PAGE);
	if (rc != CU_OK) {
		snprintf(why, sizeof(why), "write of page %zu -> %d", p, rc);
		fail(why);
		return;
	}
	pthread_mutex_lock(&mu);
	expected[p] = r;
	pthread_mutex_unlock(&mu);
	if ((rc = fns.launch(NULL, 1, 1, 1, 1, 1, 1, 0, NULL, params, NULL)) != CU_OK || (rc = fns.sync()) != CU_OK) {
		snprintf(why, sizeof(why), "launch or sync -> %d", rc);
		fail(why);
	} else if (check_page(p, r, buf, want, why, sizeof(why)) != 0) {
		fail(why);
	}
}

static void *worker(void *arg)
{
	(void)arg;
	static uint64_t buf[PAGE / 8], want[PAGE / 8];
	cu_ctx_set_fn set = (cu_ctx_set_fn)rt("cuCtxSetCurrent");
	if (set(ctx0) != CU_OK)
		fail("no context on the worker");
	for (unsigned long r = 1;; r++) {
		pthread_mutex_lock(&mu);
		int verify_now = verify_requests > 0, stop = stopping;
		verify_requests = 0;
		pthread_mutex_unlock(&mu);
		if (stop)
			return NULL;
		if (verify_now)
			verify(buf, want);
		else if (!o.idle)
			round_of_work(r, buf, want);
		struct timespec ts = { 0, (long)o.interval_ms * 1000000L };
		nanosleep(&ts, NULL);
	}
}

/* --hold: sets the host word once released, after a driver call (which a
 * closed gate holds). */
static void *holder(void *arg)
{
	(void)arg;
	cu_ctx_get_fn ctx_get = (cu_ctx_get_fn)rt("cuCtxGetCurrent");
	pthread_mutex_lock(&mu);
	while (!released && !stopping)
		pthread_cond_wait(&cv, &mu);
	pthread_mutex_unlock(&mu);
	CUcontext c;
	ctx_get(&c);
	*host_word = 1;
	printf("released\n");
	fflush(stdout);
	return NULL;
}

/* --fork-call: a child forked while the parent may be parked calls the
 * driver and exits. */
static int fork_call(void)
{
	CUresult (*version)(int *) = NULL;
	*(void **)&version = rt("cuDriverGetVersion");
	cu_mem_range_fn range = (cu_mem_range_fn)rt("cuMemGetAddressRange");
	pid_t child = fork();
	if (child == 0) {
		int v = 0;
		CUdeviceptr base;
		size_t size;
		if (o.fork_range)
			_exit((int)range(&base, &size, mem) & 0xff);
		_exit(version(&v) == CU_OK ? 0 : 1);
	}
	for (int i = 0; child > 0 && i < 200; i++) {
		int st;
		if (waitpid(child, &st, WNOHANG) == child)
			return WIFEXITED(st) ? WEXITSTATUS(st) : 128;
		struct timespec ts = { 0, 10000000L };
		nanosleep(&ts, NULL);
	}
	if (child > 0) {
		kill(child, SIGKILL);
		waitpid(child, NULL, 0);
	}
	return -1;
}

/* --phdr-call: the program's own dl_iterate_phdr, whose callback calls the
 * driver while the thread holds the lock of the loader's list of objects;
 * a millisecond in it and a tenth out (others waiting for the lock get
 * it then), round after round. */
static atomic_int phdr_stop;
static long phdr_calls, phdr_failed;
static cu_ctx_get_fn phdr_get;

static int phdr_callback(struct dl_phdr_info *info, size_t size, void *arg)
{
	(void)info, (void)size, (void)arg;
	struct timespec ts = { 0, 1000000L };
	nanosleep(&ts, NULL);
	CUcontext c = NULL;
	phdr_failed += phdr_get(&c) != CU_OK;
	phdr_calls++;
	return 1;
}

static void *phdr_caller(void *arg)
{
	(void)arg;
	printf("phdr started\n");
	fflush(stdout);
	while (!atomic_load(&phdr_stop)) {
		dl_iterate_phdr(phdr_callback, NULL);
		struct timespec ts = { 0, 100000L };
		nanosleep(&ts, NULL);
	}
	printf("phdr done calls=%ld failed=%ld\n", phdr_calls, phdr_failed);
	fflush(stdout);
	return NULL;
}

/* Starts the thread, or stops it and waits for it. */
static void phdr_toggle(void)
{
	static pthread_t t;
	static int running;
	if (running) {
		atomic_store(&phdr_stop, 1);
		pthread_join(t, NULL);
		running = 0;
		return;
	}
	phdr_get = (cu_ctx_get_fn)rt("cuCtxGetCurrent");
	atomic_store(&phdr_stop, 0);
	running = pthread_create(&t, NULL, phdr_caller, NULL) == 0;
}

/* --load: a thread loads a library, whose constructor runs while that
 * thread holds the dynamic linker's lock. */
static void *loader(void *arg)
{
	(void)arg;
	printf("load started\n");
	fflush(stdout);
	void *h = dlopen(o.load, RTLD_NOW);
	printf("load done %s\n", h ? "ok" : dlerror());
	fflush(stdout);
	return NULL;
}

static int parse(int argc, char **argv)
{
	static const struct option opts[] = {
		{ "via", 1, NULL, 'v' },         { "alloc-mib", 1, NULL, 'm' },
		{ "alloc-bytes", 1, NULL, 'b' }, { "interval-ms", 1, NULL, 'i' },
		{ "probe", 1, NULL, 'p' },       { "idle", 0, NULL, 'I' },
		{ "hold", 0, NULL, 'H' },        { "other-ms", 1, NULL, 'o' },
		{ "free-test", 0, NULL, 'f' },   { "attrs", 0, NULL, 'a' },
		{ "no-socket", 0, NULL, 'n' },   { "late-filter", 0, NULL, 'Z' }, { "dlmopen-driver", 0, NULL, 'Y' }, { "fiber", 0, NULL, 'B' }, { "reuse-tid", 0, NULL, 'R' },   { "help", 0, NULL, 'h' },
		{ "pool-share", 1, NULL, 's' },  { "pool-import", 1, NULL, 'P' },
		{ "unwind", 0, NULL, 'u' },      { "storm", 1, NULL, 'S' },
		{ "self-call", 0, NULL, 'c' },   { "fork-call", 2, NULL, 'F' },
		{ "created-ms", 1, NULL, 'C' },  { "load", 1, NULL, 'L' },
		{ "phdr-call", 0, NULL, 'D' },   { NULL, 0, NULL, 0 },
	};
	int c;
	while ((c = getopt_long(argc, argv, "h", opts, NULL)) != -1) {
		switch (c) {
		case 'v': o.via = optarg; break;
		case 'm': o.bytes = (size_t)strtoull(optarg, NULL, 0) << 20; break;
		case 'b': o.bytes = (size_t)strtoull(optarg, NULL, 0); break;
		case 'i': o.interval_ms = (unsigned)strtoul(optarg, NULL, 0); break;
		case 'p': o.probe = optarg; break;
		case 'I': o.idle = 1; break;
		case 'H': o.hold = o.idle = 1; break;
		case 'o': o.other_ms = (unsigned)strtoul(optarg, NULL, 0), o.idle = 1; break;
		case 'f': o.free_test = 1; break;
		case 'a': o.attrs = 1; break;
		case 'n': o.no_socket = 1; break;
		case 'Z': o.late_filter = 1; break;
		case 'B': o.fiber = 1; break;
		case 'R': o.reuse_tid = o.idle = 1; break;
		case 'Y': o.dlmopen_driver = 1; break;
		case 's': o.pool_share = optarg; break;
		case 'P': o.pool_import = optarg, o.idle = 1; break;
		case 'u': o.unwind = 1; break;
		case 'S': o.storm = atoi(optarg); break;
		case 'c': o.self_call = o.idle = 1; break;
		case 'F': o.fork_call = o.idle = 1, o.fork_range = optarg && strcmp(optarg, "range") == 0; break;
		case 'C': o.created_ms = (unsigned)strtoul(optarg, NULL, 0), o.idle = 1; break;
		case 'L': o.load = optarg; break;
		case 'D': o.phdr = 1; break;
		default: fputs(usage_text, c == 'h' ? stdout : stderr); return c == 'h' ? 1 : -1;
		}
	}
	return optind == argc && o.bytes >= PAGE ? 0 : -1;
}

static void install_filter(const struct sock_fprog *prog)
{
	if (prctl(PR_SET_NO_NEW_PRIVS, 1, 0, 0, 0) != 0 || prctl(PR_SET_SECCOMP, SECCOMP_MODE_FILTER, prog) != 0) {
		perror("fakecuda-named: seccomp");
		exit(2);
	}
}

/* A filter that forbids nothing: the program has one now, all the same. */
static void late_filter(void)
{
	struct sock_filter f[] = { BPF_STMT(BPF_RET | BPF_K, SECCOMP_RET_ALLOW) };
	struct sock_fprog prog = { 1, f };
	install_filter(&prog);
}

static void forbid_socket(void)
{
	struct sock_filter f[] = {
		BPF_STMT(BPF_LD | BPF_W | BPF_ABS, offsetof(struct seccomp_data, nr)),
		BPF_JUMP(BPF_JMP | BPF_JEQ | BPF_K, SYS_socket, 0, 1),
		BPF_STMT(BPF_RET | BPF_K, SECCOMP_RET_KILL_PROCESS),
		BPF_STMT(BPF_RET | BPF_K, SECCOMP_RET_ALLOW),
	};
	struct sock_fprog prog = { sizeof(f) / sizeof(f[0]), f };
	install_filter(&prog);
}

static CUcontext context(CUdevice dev)
{
	CUresult (*retain)(CUcontext *, CUdevice) = NULL;
	*(void **)&retain = rt("cuDevicePrimaryCtxRetain");
	CUcontext c = NULL;
	if (retain(&c, dev) != CU_OK) {
		fprintf(stderr, "fakecuda-named: no context on device %d\n", dev);
		exit(2);
	}
	return c;
}

static void setup(void)
{
	void *handle = dlopen("libcuda.so.1", RTLD_NOW | RTLD_NOLOAD);
	if (handle == NULL || (*(void **)&get = dlsym(handle, "cuGetProcAddress_v2")) == NULL) {
		fprintf(stderr, "fakecuda-named: no driver: %s\n", dlerror());
		exit(2);
	}
	CUresult (*init)(unsigned) = NULL;
	*(void **)&init = rt("cuInit");
	if (init(0) != CU_OK)
		exit(2);
	ctx0 = context(0);
	((cu_ctx_set_fn)rt("cuCtxSetCurrent"))(ctx0);
	if (o.no_socket)
		forbid_socket();
	if (((cu_mem_alloc_fn)rt("cuMemAlloc"))(&mem, o.bytes) != CU_OK) {
		fprintf(stderr, "fakecuda-named: cuMemAlloc failed\n");
		exit(2);
	}
	char probe[4200];
	if (o.probe == NULL) {
		ssize_t n = readlink("/proc/self/exe", probe, sizeof(probe) - 32);
		char *slash = n > 0 ? (probe[n] = 0, strrchr(probe, '/')) : NULL;
		if (slash)
			strcpy(slash + 1, "libfakecuda-probe.so");
		o.probe = probe;
	}
	if (named_via(o.via, handle, get, o.probe, &fns) != 0)
		exit(2);
	pages = o.bytes / PAGE;
	expected = calloc(pages, sizeof(*expected));
	static uint64_t buf[PAGE / 8];
	for (size_t p = 0; p < pages; p++) {
		pattern(buf, 0, p);
		if (((cu_htod_fn)rt("cuMemcpyHtoD"))(mem + p * PAGE, buf, PAGE) != CU_OK)
			exit(2);
	}
}

static void hold(void)
{
	static uint32_t page[1024] __attribute__((aligned(4096)));
	CUresult (*reg)(void *, size_t, unsigned) = NULL;
	*(void **)&reg = rt("cuMemHostRegister");
	named_wait_fn wait = (named_wait_fn)rt("cuStreamWaitValue32");
	host_word = page;
	unsigned ms = 1;
	void *params[] = { &ms };
	if (reg(page, sizeof(page), 0) != CU_OK || wait(NULL, (CUdeviceptr)(uintptr_t)page, 1, 0) != CU_OK ||
	    ((named_launch_fn)rt("cuLaunchKernel"))(NULL, 1, 1, 1, 1, 1, 1, 0, NULL, params, NULL) != CU_OK)
		exit(2);
	pthread_t t;
	pthread_create(&t, NULL, holder, NULL);
}

static void other_device(void)
{
	cu_ctx_set_fn set = (cu_ctx_set_fn)rt("cuCtxSetCurrent");
	unsigned ms = o.other_ms;
	void *params[] = { &ms };
	if (set(context(1)) != CU_OK ||
	    ((named_launch_fn)rt("cuLaunchKernel"))(NULL, 1, 1, 1, 1, 1, 1, 0, NULL, params, NULL) != CU_OK ||
	    set(ctx0) != CU_OK)
		exit(2);
}

/* --created-ms: a context the program creates itself (its device's primary
 * context never retained) runs a kernel. */
static void created_context(void)
{
	CUcontext c = NULL;
	unsigned ms = o.created_ms;
	void *params[] = { &ms };
	if (cuCtxCreate_v2(&c, 0, 1) != CU_OK ||
	    ((named_launch_fn)rt("cuLaunchKernel"))(NULL, 1, 1, 1, 1, 1, 1, 0, NULL, params, NULL) != CU_OK ||
	    ((cu_ctx_set_fn)rt("cuCtxSetCurrent"))(ctx0) != CU_OK)
		exit(2);
}

static double now(void)
{
	struct timespec ts;
	clock_gettime(CLOCK_MONOTONIC, &ts);
	return ts.tv_sec + ts.tv_nsec / 1e9;
}

static int free_test(void)
{
	unsigned ms = 300;
	void *params[] = { &ms };
	if (((named_launch_fn)rt("cuLaunchKernel"))(NULL, 1, 1, 1, 1, 1, 1, 0, NULL, params, NULL) != CU_OK ||
	    ((cu_ctx_set_fn)rt("cuCtxSetCurrent"))(context(1)) != CU_OK)
		return 2;
	double t0 = now();
	CUresult rc = ((cu_mem_free_fn)rt("cuMemFree"))(mem);
	printf("free ms=%d rc=%d\n", (int)((now() - t0) * 1000), rc);
	CUdeviceptr base;
	size_t size;
	printf("range rc=%d\n", ((cu_mem_range_fn)rt("cuMemGetAddressRange"))(&base, &size, mem));
	return 0;
}

/* --unwind: the backtrace of the main thread, taken by a signal handler
 * while the thread waits inside the driver (through the gate). */
static volatile int unwound_main = -1, unwound_frames;

static void on_prof(int sig)
{
	(void)sig;
	void *pcs[64];
	int n = backtrace(pcs, 64), seen = 0;
	for (int i = 0; i < n; i++) {
		Dl_info info;
		seen |= dladdr(pcs[i], &info) != 0 && info.dli_sname && strcmp(info.dli_sname, "main") == 0;
	}
	unwound_frames = n;
	unwound_main = seen;
}

static void *poke(void *arg)
{
	struct timespec ts = { 0, 100000000L };
	nanosleep(&ts, NULL);
	pthread_kill(*(pthread_t *)arg, SIGPROF);
	return NULL;
}

static int unwind(void)
{
	void *warm[4];
	backtrace(warm, 4); /* loads the unwinder before the signal */
	signal(SIGPROF, on_prof);
	pthread_t self = pthread_self(), t;
	pthread_create(&t, NULL, poke, &self);
	CUresult rc = ((cu_ctx_sync_fn)rt("cuCtxSynchronize"))();
	pthread_join(t, NULL);
	printf("unwind main=%s frames=%d rc=%d\n", unwound_main == 1 ? "yes" : "no", unwound_frames, rc);
	return 0;
}

/* --storm: gated calls from a signal handler land at every point of the
 * main thread's gated calls; each must return where it was called from,
 * with the driver's answer. */
static cu_ctx_get_fn storm_get;
static volatile long storm_signals, storm_bad;
static volatile int storm_stop;

static void on_storm(int sig)
{
	(void)sig;
	CUcontext c = NULL;
	if (storm_get(&c) != CU_OK || c != ctx0)
		storm_bad++;
	storm_signals++;
}

static void *storm_sender(void *arg)
{
	pthread_t main_thread = *(pthread_t *)arg;
	while (!storm_stop) {
		pthread_kill(main_thread, SIGPROF);
		struct timespec ts = { 0, 5000 };
		nanosleep(&ts, NULL);
	}
	return NULL;
}

static int storm(void)
{
	storm_get = (cu_ctx_get_fn)rt("cuCtxGetCurrent");
	struct sigaction sa = { .sa_handler = on_storm, .sa_flags = SA_RESTART };
	sigaction(SIGPROF, &sa, NULL);
	pthread_t self = pthread_self(), t;
	pthread_create(&t, NULL, storm_sender, &self);
	long calls = 0, bad = 0;
	for (double until = now() + o.storm; now() < until;) {
		for (int i = 0; i < 1000; i++, calls++) {
			CUcontext c = NULL;
			if (storm_get(&c) != CU_OK || c != ctx0)
				bad++;
		}
	}
	storm_stop = 1;
	pthread_join(t, NULL);
	printf("storm %s calls=%ld signals=%ld\n", bad || storm_bad ? "FAILED" : "ok", calls, storm_signals);
	return 0;
}

static void attrs(void)
{
	size_t range_size = 0, addr_range = 0;
	CUdeviceptr range_start = 0, base = 0;
	int rdma = -1;
	cu_ptr_attr_fn attr = (cu_ptr_attr_fn)rt("cuPointerGetAttribute");
	attr(&range_size, CU_POINTER_ATTRIBUTE_RANGE_SIZE, mem + 5);
	attr(&range_start, CU_POINTER_ATTRIBUTE_RANGE_START_ADDR, mem + 5);
	attr(&rdma, 15 /* IS_GPU_DIRECT_RDMA_CAPABLE */, mem);
	((cu_mem_range_fn)rt("cuMemGetAddressRange"))(&base, &addr_range, mem + 5);
	printf("attrs range_size=%zu range_start=0x%llx rdma=%d addr_range=%zu addr_base=0x%llx\n", range_size,
	       range_start, rdma, addr_range, base);
}

int main(int argc, char **argv)
{
	int rc = parse(argc, argv);
	if (rc != 0)
		return rc > 0 ? 0 : 2;
	sigset_t set;
	sigemptyset(&set);
	sigaddset(&set, SIGUSR1);
	sigaddset(&set, SIGUSR2);
	sigaddset(&set, SIGTERM);
	sigaddset(&set, SIGINT);
	pthread_sigmask(SIG_BLOCK, &set, NULL);
	setup();
	if (o.free_test)
		return free_test();
	if (o.unwind)
		return unwind();
	if (o.fiber)
		return named_fiber(rt);
	if (o.storm)
		return storm();
	if ((o.pool_share && named_pool_share(rt, o.pool_share) != 0) ||
	    (o.pool_import && named_pool_import(rt, o.pool_import) != 0))
		return 2;
	if (o.attrs)
		attrs();
	if (o.hold)
		hold();
	if (o.other_ms)
		other_device();
	if (o.created_ms)
		created_context();
	if (o.late_filter)
		late_filter();
	/* a plugin linked with the driver, loaded with LM_ID_NEWLM */
	if (o.dlmopen_driver && dlmopen(LM_ID_NEWLM, "libcuda.so.1", RTLD_NOW) == NULL) {
		fprintf(stderr, "fakecuda-named: dlmopen: %s\n", dlerror());
		return 2;
	}
	printf("ready pid=%d bytes=%zu addr=0x%llx\n", (int)getpid(), o.bytes, mem);
	fflush(stdout);
	pthread_t t;
	if (pthread_create(&t, NULL, worker, NULL) != 0)
		return 2;
	int sig;
	while (sigwait(&set, &sig) == 0 && (sig == SIGUSR1 || sig == SIGUSR2)) {
		if (sig == SIGUSR2 && o.load) {
			pthread_t lt;
			if (pthread_create(&lt, NULL, loader, NULL) == 0)
				pthread_detach(lt);
			continue;
		}
		if (sig == SIGUSR2 && o.phdr) {
			phdr_toggle();
			continue;
		}
		if (sig == SIGUSR2 && o.fork_call) {
			printf("forkcall rc=%d\n", fork_call());
			fflush(stdout);
			continue;
		}
		if (sig == SIGUSR2 && o.reuse_tid) {
			if (named_reuse_tid(rt) != 0)
				return 2;
			continue;
		}
		if (sig == SIGUSR2 && o.self_call) {
			unsigned ms = 0;
			CUresult src = fakecuda_self_call(2000, &ms);
			printf("selfcall rc=%d ms=%u\n", src, ms);
			fflush(stdout);
			continue;
		}
		pthread_mutex_lock(&mu);
		verify_requests += sig == SIGUSR1;
		released |= sig == SIGUSR2;
		pthread_cond_broadcast(&cv);
		pthread_mutex_unlock(&mu);
	}
	pthread_mutex_lock(&mu);
	stopping = 1;
	pthread_cond_broadcast(&cv);
	rc = failed;
	pthread_mutex_unlock(&mu);
	struct timespec until;
	clock_gettime(CLOCK_REALTIME, &until);
	until.tv_sec += 2;
	if (pthread_timedjoin_np(t, NULL, &until) != 0)
		_exit(rc ? 1 : 0);
	return rc ? 1 : 0;
}
