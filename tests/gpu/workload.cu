// A CUDA program for the real-GPU tests: fills N GiB of device memory with a
// pattern and re-verifies it on SIGUSR1; optionally keeps long kernels running
// (lock timeouts) or forks a child after CUDA init (the DataLoader shape).
#include <cuda_runtime.h>
#include <pthread.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/prctl.h>
#include <unistd.h>

#define CHECK(x) do { cudaError_t e_ = (x); if (e_ != cudaSuccess) { \
	fprintf(stderr, "workload %d: %s: %s\n", getpid(), #x, cudaGetErrorString(e_)); exit(1); } } while (0)

__device__ __host__ static unsigned long long pattern(unsigned long long i, unsigned long long seed)
{
	unsigned long long x = (i + 1) * 0x9E3779B97F4A7C15ull ^ seed;
	x ^= x >> 31;
	return x * 0xBF58476D1CE4E5B9ull;
}

__global__ void fill(unsigned long long *p, size_t n, unsigned long long seed)
{
	for (size_t i = blockIdx.x * (size_t)blockDim.x + threadIdx.x; i < n; i += (size_t)gridDim.x * blockDim.x)
		p[i] = pattern(i, seed);
}

__global__ void check(const unsigned long long *p, size_t n, unsigned long long seed, unsigned long long *bad)
{
	unsigned long long local = 0;
	for (size_t i = blockIdx.x * (size_t)blockDim.x + threadIdx.x; i < n; i += (size_t)gridDim.x * blockDim.x)
		local += p[i] != pattern(i, seed);
	if (local)
		atomicAdd(bad, local);
}

__global__ void spin(long long cycles)
{
	long long start = clock64();
	while (clock64() - start < cycles) {
	}
}

static long kernel_ms;

static void *kernel_loop(void *arg)
{
	(void)arg;
	cudaStream_t s;
	CHECK(cudaStreamCreateWithFlags(&s, cudaStreamNonBlocking));
	int khz;
	CHECK(cudaDeviceGetAttribute(&khz, cudaDevAttrClockRate, 0));
	for (;;) {
		spin<<<1, 1, 0, s>>>((long long)khz * kernel_ms);
		CHECK(cudaStreamSynchronize(s));
	}
	return NULL;
}

static void write_file(const char *dir, const char *ext, const char *text)
{
	char path[512], tmp[520];
	snprintf(path, sizeof(path), "%s/%d.%s", dir, getpid(), ext);
	snprintf(tmp, sizeof(tmp), "%s.tmp", path);
	FILE *f = fopen(tmp, "w");
	if (!f || fputs(text, f) < 0 || fclose(f) != 0 || rename(tmp, path) != 0) {
		perror(path);
		exit(1);
	}
}

int main(int argc, char **argv)
{
	double gib = 1;
	const char *dir = "/tmp";
	bool fork_child = false;
	for (int i = 1; i < argc; i++) {
		if (!strcmp(argv[i], "--gib") && i + 1 < argc) gib = atof(argv[++i]);
		else if (!strcmp(argv[i], "--dir") && i + 1 < argc) dir = argv[++i];
		else if (!strcmp(argv[i], "--kernel-ms") && i + 1 < argc) kernel_ms = atol(argv[++i]);
		else if (!strcmp(argv[i], "--fork-child")) fork_child = true;
		else { fprintf(stderr, "usage: workload [--gib G] [--dir D] [--kernel-ms MS] [--fork-child]\n"); return 2; }
	}
	sigset_t set;
	sigemptyset(&set);
	sigaddset(&set, SIGUSR1);
	sigaddset(&set, SIGTERM);
	sigaddset(&set, SIGINT);
	pthread_sigmask(SIG_BLOCK, &set, NULL);
	size_t n = (size_t)(gib * (1ull << 30)) / 8;
	unsigned long long seed = (unsigned long long)getpid() * 7919, *p, *bad;
	CHECK(cudaMalloc(&p, n * 8));
	CHECK(cudaMalloc(&bad, 8));
	fill<<<1024, 256>>>(p, n, seed);
	CHECK(cudaDeviceSynchronize());
	if (fork_child) {
		pid_t c = fork();
		if (c == 0) {
			prctl(PR_SET_PDEATHSIG, SIGTERM);
			write_file(dir, "ready", "forked\n");
			for (;;)
				pause();
		}
	}
	if (kernel_ms > 0) {
		pthread_t th;
		pthread_create(&th, NULL, kernel_loop, NULL);
	}
	write_file(dir, "ready", "cuda\n");
	for (;;) {
		int sig;
		sigwait(&set, &sig);
		if (sig != SIGUSR1)
			return 0;
		CHECK(cudaMemset(bad, 0, 8));
		check<<<1024, 256>>>(p, n, seed, bad);
		unsigned long long nbad = 0;
		CHECK(cudaMemcpy(&nbad, bad, 8, cudaMemcpyDeviceToHost));
		char text[128];
		if (nbad)
			snprintf(text, sizeof(text), "fail %llu of %zu words differ\n", nbad, n);
		else
			snprintf(text, sizeof(text), "ok %zu bytes\n", n * 8);
		write_file(dir, "verify", text);
	}
}
