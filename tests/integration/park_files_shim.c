/* A test program's shim: preloaded after the interposer into fakecuda-cuapp.
 * PFS_MODE=free_at_park: at the first "status" request line the control
 *   thread allocates PFS_MIB MiB through the (gated) driver; at the "park"
 *   request line it frees it again -- a program thread's cuMemFree that lands
 *   between cudasnap's status and its park, made deterministic.
 * PFS_MODE=alloc_at_park: at the "park" request line it allocates PFS_MIB
 *   MiB: the program holds more at its park than its status said.
 * PFS_MODE=grab: every descriptor received over SCM_RIGHTS that is a park
 *   file (cudasnap-gpumem.*) is dup'ed to fd 900+k (kept: what any thread of
 *   the program can do); once the file PFS_GO exists, a thread
 *   fallocates PFS_MIB MiB in the first one and writes what it got into
 *   PFS_LOG. */
#include <dlfcn.h>
#include <fcntl.h>
#include <pthread.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <unistd.h>

typedef int CUresult;
typedef unsigned long long CUdeviceptr;
static char line[512];
static size_t len;
static int statuses;
static CUdeviceptr mine;

static void logf_(const char *fmt, const char *a, long long b)
{
#pragma GCC diagnostic ignored "-Wformat-nonliteral"
	const char *p = getenv("PFS_LOG");
	FILE *f = p ? fopen(p, "a") : NULL;
	if (!f)
		return;
	fprintf(f, fmt, a, b);
	fclose(f);
}

static void *drv(const char *name)
{
	void *h = dlopen("libcuda.so.1", RTLD_NOW | RTLD_NOLOAD);
	return h ? dlsym(h, name) : NULL;
}

static void on_line(void)
{
	const char *mode = getenv("PFS_MODE");
	bool later = mode && strcmp(mode, "alloc_at_park") == 0;
	if (!mode || (strcmp(mode, "free_at_park") && !later))
		return;
	long mib = getenv("PFS_MIB") ? atol(getenv("PFS_MIB")) : 8;
	if (strncmp(line, later ? "park " : "status", later ? 5 : 6) == 0 && statuses++ == 0) {
		CUresult (*retain)(void **, int) = drv("cuDevicePrimaryCtxRetain");
		CUresult (*set)(void *) = drv("cuCtxSetCurrent");
		CUresult (*alloc)(CUdeviceptr *, size_t) = drv("cuMemAlloc_v2");
		void *ctx = NULL;
		int rc = retain && set && alloc ? retain(&ctx, 0) : -1;
		if (rc == 0)
			rc = set(ctx);
		if (rc == 0)
			rc = alloc(&mine, (size_t)mib << 20);
		logf_("alloc at first %s: rc=%lld\n", later ? "park" : "status", rc);
	} else if (strncmp(line, "park ", 5) == 0 && mine && !later) {
		CUresult (*fr)(CUdeviceptr) = drv("cuMemFree_v2");
		int rc = fr ? fr(mine) : -1;
		mine = 0;
		logf_("free at %s: rc=%lld\n", "park", rc);
	}
}

ssize_t recv(int fd, void *buf, size_t n, int flags)
{
	static ssize_t (*real)(int, void *, size_t, int);
	if (!real)
		real = dlsym(RTLD_NEXT, "recv");
	ssize_t r = real(fd, buf, n, flags);
	if (r == 1 && n == 1) {
		char c = *(char *)buf;
		if (c == '\n') {
			line[len] = 0;
			on_line();
			len = 0;
		} else if (len + 1 < sizeof(line)) {
			line[len++] = c;
		}
	}
	return r;
}

static int grabbed[16], ngrab;

static void *waiter(void *arg)
{
	(void)arg;
	const char *go = getenv("PFS_GO");
	long mib = getenv("PFS_MIB") ? atol(getenv("PFS_MIB")) : 256;
	for (;;) {
		if (go && access(go, F_OK) == 0 && ngrab) {
			struct stat st;
			fstat(grabbed[0], &st);
			int rc = fallocate(grabbed[0], 0, 0, (off_t)mib << 20);
			struct stat st2;
			fstat(grabbed[0], &st2);
			char buf[256];
			snprintf(buf, sizeof(buf),
				 "uid=%d euid=%d file_uid=%d mode=%o nlink=%d size_before=%lld fallocate_rc=%d size_after=%%s%%lld\n",
				 getuid(), geteuid(), st.st_uid, st.st_mode & 0777, (int)st2.st_nlink,
				 (long long)st.st_size, rc);
			logf_(buf, "", (long long)st2.st_size);
			return NULL;
		}
		usleep(100000);
	}
}

ssize_t recvmsg(int fd, struct msghdr *m, int flags)
{
	static ssize_t (*real)(int, struct msghdr *, int);
	if (!real)
		real = dlsym(RTLD_NEXT, "recvmsg");
	ssize_t r = real(fd, m, flags);
	const char *mode = getenv("PFS_MODE");
	if (r > 0 && mode && strcmp(mode, "grab") == 0) {
		for (struct cmsghdr *c = CMSG_FIRSTHDR(m); c; c = CMSG_NXTHDR(m, c)) {
			if (c->cmsg_level != SOL_SOCKET || c->cmsg_type != SCM_RIGHTS)
				continue;
			int got;
			memcpy(&got, CMSG_DATA(c), sizeof(int));
			char link[64], path[512];
			snprintf(link, sizeof(link), "/proc/self/fd/%d", got);
			ssize_t n = readlink(link, path, sizeof(path) - 1);
			path[n > 0 ? n : 0] = 0;
			if (strstr(path, "cudasnap-gpumem.") && ngrab < 16) {
				int d = fcntl(got, F_DUPFD, 900 + ngrab);
				int fl = fcntl(d, F_GETFL);
				grabbed[ngrab++] = d;
				logf_("grabbed %s flags=%llo\n", path, fl);
				if (ngrab == 1) {
					pthread_t t;
					pthread_create(&t, NULL, waiter, NULL);
					pthread_detach(t);
				}
			}
		}
	}
	return r;
}

/* PFS_MODE=release_fail: once every file's thread of a park into files
 * has flushed (fdatasync), the second fault check of the fake driver (the
 * second allocation's cuMemUnmap in release_range) reads PFS_FAULTS
 * instead ("* mem_unmap error=999"), and from then on every pread of a park
 * file fails with EIO: the read-back of the released first allocation
 * fails. */
#include <errno.h>
#include <stdatomic.h>
static atomic_int synced, checks, broken;

int fdatasync(int fd)
{
	static int (*real)(int);
	if (!real)
		real = dlsym(RTLD_NEXT, "fdatasync");
	int r = real(fd);
	const char *mode = getenv("PFS_MODE");
	if (mode && strcmp(mode, "release_fail") == 0)
		atomic_fetch_add(&synced, 1);
	return r;
}

FILE *fopen(const char *path, const char *how)
{
	static FILE *(*real)(const char *, const char *);
	if (!real)
		real = dlsym(RTLD_NEXT, "fopen");
	const char *mode = getenv("PFS_MODE"), *faults = getenv("FAKECUDA_FAULTS");
	int want = getenv("PFS_FILES") ? atoi(getenv("PFS_FILES")) : 3;
	if (mode && strcmp(mode, "release_fail") == 0 && faults && strcmp(path, faults) == 0 &&
	    atomic_load(&synced) >= want && !atomic_load(&broken)) {
		if (atomic_fetch_add(&checks, 1) == 1) {
			atomic_store(&broken, 1);
			logf_("unmap fault armed at fault check %s%lld\n", "#", 2);
			return real(getenv("PFS_FAULTS"), how);
		}
	}
	return real(path, how);
}

ssize_t pread64(int fd, void *buf, size_t n, off_t off)
{
	static ssize_t (*real)(int, void *, size_t, off_t);
	if (!real)
		real = dlsym(RTLD_NEXT, "pread64");
	if (atomic_load(&broken)) {
		char link[64], path[512];
		snprintf(link, sizeof(link), "/proc/self/fd/%d", fd);
		ssize_t k = readlink(link, path, sizeof(path) - 1);
		path[k > 0 ? k : 0] = 0;
		if (strstr(path, "cudasnap-gpumem.")) {
			logf_("pread of %s failed with EIO (%lld)\n", path, (long long)off);
			errno = EIO;
			return -1;
		}
	}
	return real(fd, buf, n, off);
}
