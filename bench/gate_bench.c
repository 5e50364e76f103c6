/* The cost of one driver call, with and without the parking interposer in
 * front of the driver: a cheap call (cuCtxGetCurrent) made by name (as code
 * linked with -lcuda makes it) and through the pointer cuGetProcAddress
 * hands out (as the CUDA runtime makes it), on 1 and on 2 threads at once.
 * Prints one line per case: '<how> threads=<n> ns_per_call=<x>', the best of
 * five runs. bench/gate.sh runs it side by side. Built against the driver
 * double (tests/fake), whose cuCtxGetCurrent is a few instructions, so that
 * the difference is the gate's. */
#include <dlfcn.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <time.h>

typedef int CUresult;
typedef struct CUctx_st *CUcontext;
typedef CUresult (*get_fn)(CUcontext *);
typedef CUresult (*proc_fn)(const char *, void **, int, unsigned long long, int *);

CUresult cuCtxGetCurrent(CUcontext *ctx);

#define CALLS 20000000L

static get_fn by_pointer;
static int use_pointer;
static pthread_barrier_t start;

static double now(void)
{
	struct timespec ts;
	clock_gettime(CLOCK_MONOTONIC, &ts);
	return ts.tv_sec + ts.tv_nsec / 1e9;
}

static void *run(void *arg)
{
	double *ns = arg;
	CUcontext c;
	get_fn f = use_pointer ? by_pointer : cuCtxGetCurrent;
	pthread_barrier_wait(&start);
	double t0 = now();
	for (long i = 0; i < CALLS; i++)
		f(&c);
	*ns = (now() - t0) * 1e9 / CALLS;
	return NULL;
}

static double once(int threads)
{
	pthread_t t[2];
	double ns[2] = { 0, 0 }, worst = 0;
	pthread_barrier_init(&start, NULL, (unsigned)threads);
	for (int i = 0; i < threads; i++)
		pthread_create(&t[i], NULL, run, &ns[i]);
	for (int i = 0; i < threads; i++) {
		pthread_join(t[i], NULL);
		worst = ns[i] > worst ? ns[i] : worst;
	}
	pthread_barrier_destroy(&start);
	return worst;
}

int main(void)
{
	void *lib = dlopen("libcuda.so.1", RTLD_NOW | RTLD_NOLOAD);
	proc_fn get = lib ? (proc_fn)dlsym(lib, "cuGetProcAddress_v2") : NULL;
	if (get == NULL || get("cuCtxGetCurrent", (void **)&by_pointer, 12080, 0, NULL) != 0) {
		fprintf(stderr, "gate-bench: no driver\n");
		return 2;
	}
	for (use_pointer = 0; use_pointer < 2; use_pointer++) {
		for (int threads = 1; threads <= 2; threads++) {
			double best = 1e9;
			for (int round = 0; round < 5; round++) {
				double ns = once(threads);
				best = ns < best ? ns : best;
			}
			printf("%s threads=%d ns_per_call=%.2f\n", use_pointer ? "procaddr" : "by-name", threads, best);
		}
	}
	return 0;
}
