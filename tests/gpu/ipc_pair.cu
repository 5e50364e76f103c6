// Two CUDA processes that share device memory, for the real-GPU tests of
// cudasnap's CUDA IPC refusal: an exporter fills a buffer and publishes it,
// an importer maps it and reads it. Both keep a context of their own and
// re-verify on SIGUSR1 (DIR/<pid>.verify: "ok ..." or "fail ...").
//
//   ipc_pair export --dir D [--mib M] [--vmm]
//   ipc_pair import --dir D [--vmm] [--close]
//
// Without --vmm the legacy runtime API is used (cudaIpcGetMemHandle /
// cudaIpcOpenMemHandle, what torch.multiprocessing does); with --vmm the
// driver's virtual memory API with a POSIX file descriptor handle, passed
// over a unix socket. --close closes the imported mapping once it was read,
// keeping the process's own context.
#include <cuda.h>
#include <cuda_runtime.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <sys/un.h>
#include <unistd.h>

#define CHECK(x) do { cudaError_t e_ = (x); if (e_ != cudaSuccess) { \
	fprintf(stderr, "ipc_pair %d: %s: %s\n", getpid(), #x, cudaGetErrorString(e_)); exit(1); } } while (0)
#define CHECKD(x) do { CUresult r_ = (x); if (r_ != CUDA_SUCCESS) { const char *s_ = "?"; \
	cuGetErrorString(r_, &s_); fprintf(stderr, "ipc_pair %d: %s: %s\n", getpid(), #x, s_); exit(1); } } while (0)

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

static void write_file(const char *dir, const char *name, const void *data, size_t len)
{
	char path[512], tmp[520];
	snprintf(path, sizeof(path), "%s/%s", dir, name);
	snprintf(tmp, sizeof(tmp), "%s.tmp", path);
	FILE *f = fopen(tmp, "w");
	if (!f || fwrite(data, 1, len, f) != len || fclose(f) != 0 || rename(tmp, path) != 0) {
		perror(path);
		exit(1);
	}
}

static void note(const char *dir, const char *ext, const char *text)
{
	char name[64];
	snprintf(name, sizeof(name), "%d.%s", getpid(), ext);
	write_file(dir, name, text, strlen(text));
}

static unsigned long long count_bad(const unsigned long long *p, size_t n, unsigned long long seed)
{
	unsigned long long *bad;
	CHECK(cudaMalloc(&bad, sizeof(*bad)));
	CHECK(cudaMemset(bad, 0, sizeof(*bad)));
	check<<<1024, 256>>>(p, n, seed, bad);
	unsigned long long h = 0;
	CHECK(cudaMemcpy(&h, bad, sizeof(h), cudaMemcpyDeviceToHost));
	CHECK(cudaFree(bad));
	return h;
}

/* Waits for SIGUSR1 (verify) or SIGTERM (exit). */
static void serve(const char *dir, const unsigned long long *p, size_t n, unsigned long long seed)
{
	sigset_t set;
	sigemptyset(&set);
	sigaddset(&set, SIGUSR1);
	sigaddset(&set, SIGTERM);
	sigprocmask(SIG_BLOCK, &set, NULL);
	for (;;) {
		int sig;
		sigwait(&set, &sig);
		if (sig != SIGUSR1)
			exit(0);
		char line[128];
		unsigned long long bad = p ? count_bad(p, n, seed) : 0;
		snprintf(line, sizeof(line), "%s bad=%llu bytes=%zu\n", bad ? "fail" : "ok", bad, n * 8);
		note(dir, "verify", line);
	}
}

static const char *sock_path(const char *dir, char *buf, size_t size)
{
	snprintf(buf, size, "%s/vmm.sock", dir);
	return buf;
}

static void send_fd_forever(const char *dir, int fd)
{
	char path[512];
	int s = socket(AF_UNIX, SOCK_STREAM, 0);
	struct sockaddr_un a = { .sun_family = AF_UNIX };
	snprintf(a.sun_path, sizeof(a.sun_path), "%s", sock_path(dir, path, sizeof(path)));
	unlink(a.sun_path);
	if (s < 0 || bind(s, (struct sockaddr *)&a, sizeof(a)) < 0 || listen(s, 8) < 0) {
		perror("vmm socket");
		exit(1);
	}
	if (fork() == 0) { /* a plain helper hands the fd out; it never touches CUDA */
		for (;;) {
			int c = accept(s, NULL, NULL);
			if (c < 0)
				continue;
			char byte = 0, ctl[CMSG_SPACE(sizeof(int))];
			struct iovec iov = { &byte, 1 };
			struct msghdr m = { .msg_iov = &iov, .msg_iovlen = 1, .msg_control = ctl, .msg_controllen = sizeof(ctl) };
			struct cmsghdr *c0 = CMSG_FIRSTHDR(&m);
			c0->cmsg_level = SOL_SOCKET;
			c0->cmsg_type = SCM_RIGHTS;
			c0->cmsg_len = CMSG_LEN(sizeof(int));
			memcpy(CMSG_DATA(c0), &fd, sizeof(int));
			sendmsg(c, &m, 0);
			close(c);
		}
	}
	close(s);
	close(fd); /* the helper holds it: no device file left open here */
}

static int recv_fd(const char *dir)
{
	char path[512];
	int s = socket(AF_UNIX, SOCK_STREAM, 0);
	struct sockaddr_un a = { .sun_family = AF_UNIX };
	snprintf(a.sun_path, sizeof(a.sun_path), "%s", sock_path(dir, path, sizeof(path)));
	if (s < 0 || connect(s, (struct sockaddr *)&a, sizeof(a)) < 0) {
		perror("vmm connect");
		exit(1);
	}
	char byte, ctl[CMSG_SPACE(sizeof(int))];
	struct iovec iov = { &byte, 1 };
	struct msghdr m = { .msg_iov = &iov, .msg_iovlen = 1, .msg_control = ctl, .msg_controllen = sizeof(ctl) };
	if (recvmsg(s, &m, 0) <= 0 || !CMSG_FIRSTHDR(&m)) {
		fprintf(stderr, "ipc_pair: no fd received\n");
		exit(1);
	}
	int fd;
	memcpy(&fd, CMSG_DATA(CMSG_FIRSTHDR(&m)), sizeof(int));
	close(s);
	return fd;
}

static size_t vmm_granule(CUmemAllocationProp *prop)
{
	size_t g = 0;
	CHECKD(cuMemGetAllocationGranularity(&g, prop, CU_MEM_ALLOC_GRANULARITY_MINIMUM));
	return g;
}

static unsigned long long *vmm_map(CUmemGenericAllocationHandle h, size_t size)
{
	CUdeviceptr va;
	CHECKD(cuMemAddressReserve(&va, size, 0, 0, 0));
	CHECKD(cuMemMap(va, size, 0, h, 0));
	CUmemAccessDesc acc = {};
	acc.location.type = CU_MEM_LOCATION_TYPE_DEVICE;
	acc.location.id = 0;
	acc.flags = CU_MEM_ACCESS_FLAGS_PROT_READWRITE;
	CHECKD(cuMemSetAccess(va, size, &acc, 1));
	return (unsigned long long *)va;
}

static CUmemAllocationProp vmm_prop(void)
{
	CUmemAllocationProp prop = {};
	prop.type = CU_MEM_ALLOCATION_TYPE_PINNED;
	prop.location.type = CU_MEM_LOCATION_TYPE_DEVICE;
	prop.location.id = 0;
	prop.requestedHandleTypes = CU_MEM_HANDLE_TYPE_POSIX_FILE_DESCRIPTOR;
	return prop;
}

int main(int argc, char **argv)
{
	const char *dir = NULL;
	size_t mib = 1024;
	bool vmm = false, close_after = false, exporter;
	if (argc < 2 || (strcmp(argv[1], "export") && strcmp(argv[1], "import"))) {
		fprintf(stderr, "usage: ipc_pair export|import --dir D [--mib M] [--vmm] [--close]\n");
		return 2;
	}
	exporter = strcmp(argv[1], "export") == 0;
	for (int i = 2; i < argc; i++) {
		if (!strcmp(argv[i], "--dir") && i + 1 < argc) dir = argv[++i];
		else if (!strcmp(argv[i], "--mib") && i + 1 < argc) mib = strtoul(argv[++i], NULL, 10);
		else if (!strcmp(argv[i], "--vmm")) vmm = true;
		else if (!strcmp(argv[i], "--close")) close_after = true;
		else { fprintf(stderr, "ipc_pair: unknown option %s\n", argv[i]); return 2; }
	}
	if (!dir)
		return 2;
	unsigned long long seed = 0x5eed;
	CHECK(cudaFree(0)); /* a context of its own */
	CHECKD(cuInit(0));
	size_t bytes = mib << 20, n;
	unsigned long long *p = NULL;
	if (exporter && !vmm) {
		CHECK(cudaMalloc(&p, bytes));
		n = bytes / 8;
		fill<<<1024, 256>>>(p, n, seed);
		CHECK(cudaDeviceSynchronize());
		cudaIpcMemHandle_t h;
		CHECK(cudaIpcGetMemHandle(&h, p));
		write_file(dir, "handle", &h, sizeof(h));
		write_file(dir, "size", &bytes, sizeof(bytes));
	} else if (exporter) {
		CUmemAllocationProp prop = vmm_prop();
		size_t g = vmm_granule(&prop);
		bytes = (bytes + g - 1) / g * g;
		CUmemGenericAllocationHandle h;
		CHECKD(cuMemCreate(&h, bytes, &prop, 0));
		p = vmm_map(h, bytes);
		n = bytes / 8;
		fill<<<1024, 256>>>(p, n, seed);
		CHECK(cudaDeviceSynchronize());
		int fd = -1;
		CHECKD(cuMemExportToShareableHandle(&fd, h, CU_MEM_HANDLE_TYPE_POSIX_FILE_DESCRIPTOR, 0));
		write_file(dir, "size", &bytes, sizeof(bytes));
		send_fd_forever(dir, fd);
	} else {
		char path[512];
		snprintf(path, sizeof(path), "%s/size", dir);
		FILE *f = fopen(path, "r");
		if (!f || fread(&bytes, sizeof(bytes), 1, f) != 1) {
			perror(path);
			return 1;
		}
		fclose(f);
		n = bytes / 8;
		if (!vmm) {
			cudaIpcMemHandle_t h;
			snprintf(path, sizeof(path), "%s/handle", dir);
			f = fopen(path, "r");
			if (!f || fread(&h, sizeof(h), 1, f) != 1) {
				perror(path);
				return 1;
			}
			fclose(f);
			CHECK(cudaIpcOpenMemHandle((void **)&p, h, cudaIpcMemLazyEnablePeerAccess));
		} else {
			int fd = recv_fd(dir);
			CUmemGenericAllocationHandle h;
			CHECKD(cuMemImportFromShareableHandle(&h, (void *)(uintptr_t)fd,
							      CU_MEM_HANDLE_TYPE_POSIX_FILE_DESCRIPTOR));
			close(fd);
			p = vmm_map(h, bytes);
		}
		unsigned long long bad = count_bad(p, n, seed);
		if (bad) {
			fprintf(stderr, "ipc_pair: imported memory differs (%llu words)\n", bad);
			return 1;
		}
		if (close_after && !vmm) {
			CHECK(cudaIpcCloseMemHandle(p));
			p = NULL;
		}
		if (close_after && vmm) {
			CHECKD(cuMemUnmap((CUdeviceptr)p, bytes));
			p = NULL;
		}
		/* Memory of its own, so that it stays a CUDA process with a context. */
		void *own;
		CHECK(cudaMalloc(&own, 64 << 20));
	}
	note(dir, "ready", exporter ? "exporter\n" : p ? "importer\n" : "importer-closed\n");
	serve(dir, p, n, seed);
	return 0;
}
