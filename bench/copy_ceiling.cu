// Copy ceilings of this machine, to compare checkpoint and restore with:
// device-to-host and host-to-device, pinned and pageable, GB/s.
#include <cuda_runtime.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#define CHECK(x) do { cudaError_t e_ = (x); if (e_ != cudaSuccess) { \
	fprintf(stderr, "%s: %s\n", #x, cudaGetErrorString(e_)); exit(1); } } while (0)

static double timed(void *dst, const void *src, size_t n, cudaMemcpyKind kind)
{
	cudaEvent_t a, b;
	CHECK(cudaEventCreate(&a));
	CHECK(cudaEventCreate(&b));
	float best = 1e30f;
	for (int rep = 0; rep < 3; rep++) {
		CHECK(cudaEventRecord(a));
		CHECK(cudaMemcpy(dst, src, n, kind));
		CHECK(cudaEventRecord(b));
		CHECK(cudaEventSynchronize(b));
		float ms;
		CHECK(cudaEventElapsedTime(&ms, a, b));
		if (ms < best)
			best = ms;
	}
	return (double)n / (best / 1e3) / 1e9;
}

int main(int argc, char **argv)
{
	size_t n = (size_t)(argc > 1 ? atof(argv[1]) : 4) * (1ull << 30);
	void *dev, *pinned, *pageable = malloc(n);
	CHECK(cudaMalloc(&dev, n));
	CHECK(cudaMallocHost(&pinned, n));
	memset(pageable, 1, n); /* touch every page: a first-touch fault is not a copy */
	memset(pinned, 1, n);
	CHECK(cudaMemset(dev, 2, n));
	printf("copy_ceiling_gbps pinned_d2h=%.2f pinned_h2d=%.2f pageable_d2h=%.2f pageable_h2d=%.2f bytes=%zu\n",
	       timed(pinned, dev, n, cudaMemcpyDeviceToHost), timed(dev, pinned, n, cudaMemcpyHostToDevice),
	       timed(pageable, dev, n, cudaMemcpyDeviceToHost), timed(dev, pageable, n, cudaMemcpyHostToDevice), n);
	return 0;
}
