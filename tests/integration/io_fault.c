/* Preloaded into a test program (after the interposer): the file I/O of a
 * park into files fails as a full disk or a failing device makes it fail.
 * The file named by CS_IO_FAULT_FILE says, when it exists, "write ERRNO
 * BYTES" or "read ERRNO BYTES": once BYTES have gone to (or come from) the
 * files of parks (cudasnap-gpumem.*), each further pwrite (or pread) of them
 * fails with ERRNO; "slow MS BYTES": each further pwrite takes MS ms more
 * (a slow disk), "slowread MS BYTES" each further pread; "direct ERRNO
 * BYTES": each further transfer of a file open with O_DIRECT fails with
 * ERRNO (a file system that takes the flag but not the transfer).
 * Preloaded into cudasnap, the reservation of the files' space:
 * "fallocate ERRNO BYTES" fails each fallocate once BYTES are reserved,
 * "slowroom MS BYTES" makes each one past BYTES take MS ms more, and in the
 * program each pwrite then fails with EFBIG where it would land past the
 * file's size (beyond what cudasnap reserved). Each call takes the first
 * line of a kind it knows (a line of each kind may be there). Read at every
 * call, so a test turns faults on and off while the program runs. */
#include <dlfcn.h>
#include <errno.h>
#include <fcntl.h>
#include <stdatomic.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

static atomic_ullong moved[3]; /* written, read, reserved */

static bool parked_file(int fd)
{
	char link[64], path[512];
	snprintf(link, sizeof(link), "/proc/self/fd/%d", fd);
	ssize_t n = readlink(link, path, sizeof(path) - 1);
	path[n > 0 ? n : 0] = 0;
	return strstr(path, "/cudasnap-gpumem.") != NULL;
}

/* The fault file's first line whose word is one of words (a list of
 * space-separated words): 3 when it has one. */
static int rule(const char *words, char what[16], int *err, unsigned long long *after)
{
	const char *file = getenv("CS_IO_FAULT_FILE");
	FILE *f = file ? fopen(file, "re") : NULL;
	char line[128];
	int got = 0;
	while (f && got != 3 && fgets(line, sizeof(line), f)) {
		got = sscanf(line, "%15s %d %llu", what, err, after);
		char padded[20];
		snprintf(padded, sizeof(padded), " %s ", what);
		char list[128];
		snprintf(list, sizeof(list), " %s ", words);
		if (got == 3 && strstr(list, padded) == NULL)
			got = 0;
	}
	if (f)
		fclose(f);
	return got;
}

/* The errno a reservation of len bytes fails with, 0 none (after the wait a
 * "slowroom" line asks). */
static int room_fault(int fd, off_t len)
{
	char what[16] = "";
	int err = 0;
	unsigned long long after = 0;
	if (!parked_file(fd))
		return 0;
	unsigned long long done = atomic_fetch_add(&moved[2], (unsigned long long)len);
	if (rule("fallocate slowroom", what, &err, &after) != 3 || done + (unsigned long long)len <= after)
		return 0;
	if (strcmp(what, "slowroom") == 0 && err > 0)
		usleep((useconds_t)err * 1000);
	if (strcmp(what, "fallocate") != 0)
		return 0;
	atomic_fetch_sub(&moved[2], (unsigned long long)len);
	return err;
}

/* A write of the program past the file's size while a "slowroom" line is
 * there: where cudasnap has not reserved yet (cudasnap's own writes, which
 * reserve, are not asked about). */
static bool past_room(int fd, size_t len, off_t off)
{
	if (strcmp(program_invocation_short_name, "cudasnap") == 0)
		return false;
	char what[16] = "";
	int err = 0;
	unsigned long long after = 0;
	struct stat st;
	return parked_file(fd) && rule("slowroom", what, &err, &after) == 3 && fstat(fd, &st) == 0 &&
		off + (off_t)len > st.st_size;
}

static int reserve(const char *name, int fd, int mode, off_t off, off_t len)
{
	int (*next)(int, int, off_t, off_t) = (int (*)(int, int, off_t, off_t))dlsym(RTLD_NEXT, name);
	int err = room_fault(fd, len);
	if (err) {
		errno = err;
		return -1;
	}
	return next(fd, mode, off, len);
}

/* Both of glibc's names (off_t is 64 bits either way on x86-64). */
int fallocate_plain(int fd, int mode, off_t off, off_t len) __asm__("fallocate");
int fallocate_plain(int fd, int mode, off_t off, off_t len)
{
	return reserve("fallocate", fd, mode, off, len);
}

int fallocate_64(int fd, int mode, off_t off, off_t len) __asm__("fallocate64");
int fallocate_64(int fd, int mode, off_t off, off_t len)
{
	return reserve("fallocate64", fd, mode, off, len);
}

/* The errno this call fails with, 0 none (after the wait a "slow" line asks). */
static int fault(int fd, bool write, size_t len)
{
	if (getenv("CS_IO_FAULT_FILE") == NULL || !parked_file(fd))
		return 0;
	unsigned long long done = atomic_fetch_add(&moved[!write], len);
	char what[16] = "";
	int err = 0;
	unsigned long long after = 0;
	int got = rule(write ? "write slow direct" : "read slowread direct", what, &err, &after);
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
	int err = past_room(fd, len, off) ? EFBIG : fault(fd, true, len);
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
