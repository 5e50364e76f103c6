/* Preloaded into a test program (after the interposer): the file I/O of a
 * park into files fails as a full disk or a failing device makes it fail.
 * The file named by CS_IO_FAULT_FILE says, when it exists, "write ERRNO
 * BYTES" or "read ERRNO BYTES": once BYTES have gone to (or come from) the
 * files of parks (cudasnap-gpumem.*), each further pwrite (or pread) of them
 * fails with ERRNO; "slow MS BYTES": each further pwrite takes MS ms more
 * (a slow disk), "slowread MS BYTES" each further pread; "direct ERRNO
 * BYTES": each further transfer of a file open with O_DIRECT fails with
 * ERRNO (a file system that takes the flag but not the transfer). Read at
 * every call, so a test turns faults on and off while the program runs. */
#include <dlfcn.h>
#include <errno.h>
#include <fcntl.h>
#include <stdatomic.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

static atomic_ullong moved[2]; /* written, read */

static bool parked_file(int fd)
{
	char link[64], path[512];
	snprintf(link, sizeof(link), "/proc/self/fd/%d", fd);
	ssize_t n = readlink(link, path, sizeof(path) - 1);
	path[n > 0 ? n : 0] = 0;
	return strstr(path, "/cudasnap-gpumem.") != NULL;
}

/* The errno this call fails with, 0 none (after the wait a "slow" line asks). */
static int fault(int fd, bool write, size_t len)
{
	const char *file = getenv("CS_IO_FAULT_FILE");
	if (file == NULL || !parked_file(fd))
		return 0;
	unsigned long long done = atomic_fetch_add(&moved[!write], len);
	FILE *f = fopen(file, "re");
	char what[16] = "";
	int err = 0;
	unsigned long long after = 0;
	if (f == NULL)
		return 0;
	int got = fscanf(f, "%15s %d %llu", what, &err, &after);
	fclose(f);
	if (got == 3 && strcmp(what, write ? "slow" : "slowread") == 0 && done + len > after && err > 0) {
		usleep((useconds_t)err * 1000);
		return 0;
	}
	bool direct = strcmp(what, "direct") == 0;
	if (got != 3 || (strcmp(what, write ? "write" : "read") != 0 && !direct) || done + len <= after ||
	    (direct && !(fcntl(fd, F_GETFL) & O_DIRECT)))
		return 0;
	atomic_fetch_sub(&moved[!write], len);
	return err;
}

ssize_t pwrite64(int fd, const void *buf, size_t len, off_t off)
{
	static ssize_t (*next)(int, const void *, size_t, off_t);
	if (next == NULL)
		next = (ssize_t(*)(int, const void *, size_t, off_t))dlsym(RTLD_NEXT, "pwrite64");
	int err = fault(fd, true, len);
	if (err) {
		errno = err;
		return -1;
	}
	return next(fd, buf, len, off);
}

ssize_t pread64(int fd, void *buf, size_t len, off_t off)
{
	static ssize_t (*next)(int, void *, size_t, off_t);
	if (next == NULL)
		next = (ssize_t(*)(int, void *, size_t, off_t))dlsym(RTLD_NEXT, "pread64");
	int err = fault(fd, false, len);
	if (err) {
		errno = err;
		return -1;
	}
	return next(fd, buf, len, off);
}
