#include "testutil.h"

#include <errno.h>
#include <fcntl.h>
#include <ftw.h>
#include <limits.h>
#include <setjmp.h>
#include <stdarg.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cmocka.h>

static char *xasprintf(const char *fmt, ...) __attribute__((format(printf, 1, 2)));
static char *xasprintf(const char *fmt, ...)
{
	va_list ap;
	char *s = NULL;
	va_start(ap, fmt);
	int n = vasprintf(&s, fmt, ap);
	va_end(ap);
	assert_true(n >= 0);
	return s;
}

char *tu_mkdtemp(void)
{
	const char *tmp = getenv("TMPDIR");
	char *tmpl = xasprintf("%s/cs-unit-XXXXXX", tmp && *tmp ? tmp : "/tmp");
	assert_non_null(mkdtemp(tmpl));
	char *real = realpath(tmpl, NULL);
	assert_non_null(real);
	free(tmpl);
	/* Tests that drop privileges must still be able to walk the tree. */
	assert_int_equal(chmod(real, 0755), 0);
	return real;
}

static int rm_one(const char *path, const struct stat *sb, int flag, struct FTW *ftw)
{
	(void)sb;
	(void)ftw;
	if (flag == FTW_DP || flag == FTW_D || flag == FTW_DNR) {
		rmdir(path);
	} else {
		unlink(path);
	}
	return 0;
}

void tu_rmrf(const char *dir)
{
	if (dir)
		nftw(dir, rm_one, 32, FTW_DEPTH | FTW_PHYS);
}

char *tu_path(const char *dir, const char *rel)
{
	return xasprintf("%s/%s", dir, rel);
}

void tu_mkdirs(const char *dir, const char *rel)
{
	char *p = tu_path(dir, rel);
	for (char *s = p + strlen(dir) + 1;; s++) {
		if (*s == '/' || *s == '\0') {
			char c = *s;
			*s = '\0';
			if (mkdir(p, 0755) < 0 && errno != EEXIST)
				fail_msg("mkdir %s: %s", p, strerror(errno));
			*s = c;
			if (!c)
				break;
		}
	}
	free(p);
}

static void mkparent(const char *dir, const char *rel)
{
	const char *slash = strrchr(rel, '/');
	if (!slash)
		return;
	char *parent = strndup(rel, (size_t)(slash - rel));
	assert_non_null(parent);
	tu_mkdirs(dir, parent);
	free(parent);
}

void tu_write(const char *dir, const char *rel, const void *data, size_t len)
{
	mkparent(dir, rel);
	char *p = tu_path(dir, rel);
	int fd = open(p, O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0644);
	if (fd < 0)
		fail_msg("open %s: %s", p, strerror(errno));
	for (size_t off = 0; off < len;) {
		ssize_t w = write(fd, (const char *)data + off, len - off);
		assert_true(w > 0);
		off += (size_t)w;
	}
	close(fd);
	free(p);
}

void tu_write_str(const char *dir, const char *rel, const char *s)
{
	tu_write(dir, rel, s, strlen(s));
}

void tu_symlink(const char *target, const char *dir, const char *rel)
{
	mkparent(dir, rel);
	char *p = tu_path(dir, rel);
	if (symlink(target, p) < 0)
		fail_msg("symlink %s: %s", p, strerror(errno));
	free(p);
}

char *tu_stat_line(pid_t pid, const char *comm, char state, pid_t ppid, unsigned long long start)
{
	/* Field 8 (tpgid) is -1 as for any process without a terminal, and field
	 * 25 (rsslim) is RLIM_INFINITY: both must not upset the parser. */
	return xasprintf("%d (%s) %c %d %d %d 0 -1 4194560 1520 0 0 0 3 1 0 0 20 0 1 0 %llu "
			 "8478720 896 18446744073709551615 94000000000000 94000000100000 "
			 "140730000000000 0 0 0 0 0 0 0 0 0 17 1 0 0 0 0 0 94000000200000 "
			 "94000000210000 94000001000000 140730000001000 140730000001010 "
			 "140730000001010 140730000002000 0\n",
			 (int)pid, comm, state, (int)ppid, (int)pid, (int)pid, start);
}

void tu_fake_proc(const char *procdir, pid_t pid, pid_t ppid, const char *comm,
		  unsigned long long start, const char *maps)
{
	char rel[64];
	char *line = tu_stat_line(pid, comm, 'S', ppid, start);
	snprintf(rel, sizeof(rel), "%d/stat", (int)pid);
	tu_write_str(procdir, rel, line);
	free(line);
	if (maps) {
		snprintf(rel, sizeof(rel), "%d/maps", (int)pid);
		tu_write_str(procdir, rel, maps);
	}
	snprintf(rel, sizeof(rel), "%d/fd", (int)pid);
	tu_mkdirs(procdir, rel);
}

void tu_fake_fd(const char *procdir, pid_t pid, int fd, const char *target)
{
	char rel[64];
	snprintf(rel, sizeof(rel), "%d/fd/%d", (int)pid, fd);
	tu_symlink(target, procdir, rel);
}

char *tu_fake_devdir(void)
{
	char *dev = tu_mkdtemp();
	tu_write_str(dev, "nvidia0", "");
	tu_write_str(dev, "nvidiactl", "");
	tu_write_str(dev, "nvidia-uvm", "");
	tu_write_str(dev, "nvidia-caps/nvidia-cap1", "");
	return dev;
}

char *tu_maps_line(unsigned long start, unsigned long end, const char *path)
{
	if (!path)
		return xasprintf("%08lx-%08lx rw-p 00000000 00:00 0 \n", start, end);
	return xasprintf("%08lx-%08lx rw-s 00000000 00:05 1234                       %s\n",
			 start, end, path);
}

char *tu_exact(const char *s, size_t len)
{
	char *p = malloc(len ? len : 1);
	assert_non_null(p);
	memcpy(p, s, len);
	return p;
}
