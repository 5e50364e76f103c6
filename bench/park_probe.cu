// What a process can still do to its own device memory while another process
// holds the driver's checkpoint lock on it: the question that decides how an
// interposer would quiesce a program before it parks its memory.
//
//   nvcc -O2 -arch=sm_90 -o park_probe bench/park_probe.cu -lcuda -lpthread
//   ./park_probe [GiB] [before]   (root, on a GPU machine; one JSON line per step)
//
// A child process maps GIB of VMM memory (cuMemCreate, cuMemMap) and fills
// it; a thread of it waits for orders on a pipe. The parent locks the child
// (cuCheckpointProcessLock) and asks that thread to copy the memory out and
// release it (park): whether the copy runs during the lock, or waits until
// the unlock, is the answer. Then, parked, the child is checkpointed and
// restored by the driver (only its context moves), unlocked, and asked to
// map the memory again at the same address and copy it back (unpark); the
// data is verified. "before": the park is asked for before the lock.
#include <cuda.h>
#include <pthread.h>
#include <stdbool.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

static double now(void)
{
	struct timespec ts;
	clock_gettime(CLOCK_MONOTONIC, &ts);
	return ts.tv_sec + ts.tv_nsec / 1e9;
}

#define CK(x) \
	do { \
		CUresult r_ = (x); \
		if (r_ != CUDA_SUCCESS) { \
			const char *n_ = NULL; \
			cuGetErrorName(r_, &n_); \
			printf("{\"error\": \"%s\", \"at\": \"%s\"}\n", n_ ? n_ : "?", #x); \
			fflush(stdout); \
			_exit(1); \
		} \
	} while (0)

static int order_fd, answer_fd;
static CUcontext ctx;
static CUdeviceptr base;
static size_t size;
static CUmemGenericAllocationHandle handle;
static unsigned char *host;

static CUmemAllocationProp prop(void)
{
	CUmemAllocationProp p;
	memset(&p, 0, sizeof(p));
	p.type = CU_MEM_ALLOCATION_TYPE_PINNED;
	p.location.type = CU_MEM_LOCATION_TYPE_DEVICE;
	p.location.id = 0;
	return p;
}

static void map_memory(void)
{
	CUmemAllocationProp p = prop();
	CK(cuMemCreate(&handle, size, &p, 0));
	CK(cuMemMap(base, size, 0, handle, 0));
	CUmemAccessDesc a;
	memset(&a, 0, sizeof(a));
	a.location = p.location;
	a.flags = CU_MEM_ACCESS_FLAGS_PROT_READWRITE;
	CK(cuMemSetAccess(base, size, &a, 1));
}

// The child's thread: park ('p') or unpark ('u') on order, answering with
// the seconds it took.
static void *worker(void *arg)
{
	(void)arg;
	char c;
	while (read(order_fd, &c, 1) == 1) {
		CK(cuCtxSetCurrent(ctx));
		double t0 = now();
		if (c == 'p') {
			CK(cuMemcpyDtoH(host, base, size));
			CK(cuMemUnmap(base, size));
			CK(cuMemRelease(handle));
		} else {
			map_memory();
			CK(cuMemcpyHtoD(base, host, size));
			double unparked = now(); // the verification is not the unpark's time
			unsigned *check = (unsigned *)malloc(size);
			CK(cuMemcpyDtoH(check, base, size));
			for (size_t i = 0; i < size / 4; i++)
				if (check[i] != 0xC0DA5EED) {
					printf("{\"error\": \"data\", \"at\": %zu}\n", i);
					fflush(stdout);
					_exit(1);
				}
			free(check);
			t0 += now() - unparked;
		}
		double s = now() - t0;
		if (write(answer_fd, &s, sizeof(s)) != sizeof(s))
			_exit(1);
	}
	return NULL;
}

static void child(void)
{
	CUdevice dev;
	CK(cuInit(0));
	CK(cuDeviceGet(&dev, 0));
	CK(cuDevicePrimaryCtxRetain(&ctx, dev));
	CK(cuCtxSetCurrent(ctx));
	CUmemAllocationProp p = prop();
	size_t gran;
	CK(cuMemGetAllocationGranularity(&gran, &p, CU_MEM_ALLOC_GRANULARITY_MINIMUM));
	size = (size + gran - 1) / gran * gran;
	CK(cuMemAddressReserve(&base, size, 0, 0, 0));
	map_memory();
	CK(cuMemsetD32(base, 0xC0DA5EED, size / 4));
	CK(cuCtxSynchronize());
	CK(cuMemHostAlloc((void **)&host, size, 0));
	pthread_t t;
	pthread_create(&t, NULL, worker, NULL);
	double ready = 0;
	if (write(answer_fd, &ready, sizeof(ready)) != sizeof(ready))
		_exit(1);
	pthread_join(t, NULL);
	_exit(0);
}

// Waits at most limit seconds for the child's answer: its seconds, or -1.
static double answer(int fd, double limit)
{
	double until = now() + limit, s = -1;
	while (now() < until) {
		fd_set r;
		FD_ZERO(&r);
		FD_SET(fd, &r);
		struct timeval tv = { 0, 20000 };
		if (select(fd + 1, &r, NULL, NULL, &tv) > 0)
			return read(fd, &s, sizeof(s)) == sizeof(s) ? s : -1;
	}
	return -1;
}

static void step(const char *what, double secs, CUresult r)
{
	const char *n = NULL;
	cuGetErrorName(r, &n);
	printf("{\"step\": \"%s\", \"seconds\": %.3f, \"result\": \"%s\"}\n", what, secs, n ? n : "?");
	fflush(stdout);
}

int main(int argc, char **argv)
{
	double gib = argc > 1 ? atof(argv[1]) : 4;
	setvbuf(stdout, NULL, _IOLBF, 0);
	bool before = argc > 2 && strcmp(argv[2], "before") == 0; // park before the lock
	size = (size_t)(gib * (1ULL << 30));
	int order[2], ans[2];
	if (pipe(order) < 0 || pipe(ans) < 0)
		return 1;
	pid_t pid = fork();
	if (pid == 0) {
		close(order[1]); // the worker ends when the parent closes its end
		close(ans[0]);
		order_fd = order[0];
		answer_fd = ans[1];
		child();
	}
	if (answer(ans[0], 60) < 0) {
		printf("{\"error\": \"the child did not start\"}\n");
		return 1;
	}
	CK(cuInit(0));
	double t0;
	if (before) {
		if (write(order[1], "p", 1) != 1)
			return 1;
		printf("{\"step\": \"park before the lock\", \"seconds\": %.3f}\n", answer(ans[0], 60));
		fflush(stdout);
	}
	t0 = now();
	CUcheckpointLockArgs la;
	memset(&la, 0, sizeof(la));
	la.timeoutMs = 10000;
	CUresult r = cuCheckpointProcessLock(pid, &la);
	step("lock", now() - t0, r);
	// park while locked: does the child's own thread get through?
	if (!before && write(order[1], "p", 1) != 1)
		return 1;
	double park = before ? 0 : answer(ans[0], 5);
	printf("{\"step\": \"park while locked\", \"answered_within_5s\": %s, \"seconds\": %.3f}\n",
	       park >= 0 ? "true" : "false", park);
	fflush(stdout);
	if (park < 0) { // blocked behind the lock: let it through, then lock again
		t0 = now();
		r = cuCheckpointProcessUnlock(pid, NULL);
		step("unlock (park waiting)", now() - t0, r);
		park = answer(ans[0], 60);
		printf("{\"step\": \"park after the unlock\", \"seconds\": %.3f}\n", park);
		t0 = now();
		r = cuCheckpointProcessLock(pid, &la);
		step("lock again", now() - t0, r);
	}
	t0 = now();
	r = cuCheckpointProcessCheckpoint(pid, NULL);
	step("checkpoint (parked)", now() - t0, r);
	t0 = now();
	r = cuCheckpointProcessRestore(pid, NULL);
	step("restore (parked)", now() - t0, r);
	t0 = now();
	r = cuCheckpointProcessUnlock(pid, NULL);
	step("unlock", now() - t0, r);
	if (write(order[1], "u", 1) != 1)
		return 1;
	double unpark = answer(ans[0], 60);
	printf("{\"step\": \"unpark, data verified\", \"seconds\": %.3f, \"gib\": %.2f}\n", unpark, gib);
	fflush(stdout);
	close(order[1]);
	int st = 0;
	for (double until = now() + 30; waitpid(pid, &st, WNOHANG) == 0;) {
		if (now() > until) {
			kill(pid, SIGKILL);
			waitpid(pid, &st, 0);
		}
		usleep(10000);
	}
	return unpark >= 0 && WIFEXITED(st) && WEXITSTATUS(st) == 0 ? 0 : 1;
}
