#include "util.h"

#include <fcntl.h>
#include <limits.h>
#include <stdint.h>
#include <string.h>

int cs_grow(void *v, size_t *cap, size_t need, size_t sz)
{
	void **pp = v;
	if (need <= *cap)
		return 0;
	size_t ncap = *cap ? *cap : 8;
	while (ncap < need) {
		if (ncap > SIZE_MAX / 2 / sz)
			return -ENOMEM;
		ncap *= 2;
	}
	void *p = realloc(*pp, ncap * sz);
	if (!p)
		return -ENOMEM;
	*pp = p;
	*cap = ncap;
	return 0;
}

int cs_parse_long(const char *s, long min, long max, long *out)
{
	if (!s || !*s)
		return -EINVAL;
	for (const char *c = s; *c; c++)
		if ((*c < '0' || *c > '9') && !(c == s && *c == '-'))
			return -EINVAL;
	errno = 0;
	char *end;
	long v = strtol(s, &end, 10);
	if (*end || end == s)
		return -EINVAL;
	if (errno == ERANGE || v < min || v > max)
		return -ERANGE;
	*out = v;
	return 0;
}

DIR *cs_fdopendir(int fd)
{
	_cleanup_close_ int owned = fd;
	DIR *d = fdopendir(owned);
	if (d)
		TAKE_FD(owned); /* d closes it */
	return d;
}

DIR *cs_opendir_at(int dirfd, const char *path)
{
	int fd = openat(dirfd, path, O_RDONLY | O_DIRECTORY | O_CLOEXEC);
	return fd < 0 ? NULL : cs_fdopendir(fd);
}

FILE *cs_fopen_at(int dirfd, const char *path)
{
	_cleanup_close_ int fd = openat(dirfd, path, O_RDONLY | O_CLOEXEC);
	if (fd < 0)
		return NULL;
	FILE *f = fdopen(fd, "r");
	if (f)
		TAKE_FD(fd); /* f closes it */
	return f;
}

ssize_t cs_read_at(int dirfd, const char *name, char *buf, size_t size)
{
	if (size == 0)
		return -EINVAL;
	_cleanup_close_ int fd = openat(dirfd, name, O_RDONLY | O_CLOEXEC | O_NOCTTY);
	if (fd < 0)
		return -errno;
	size_t len = 0;
	while (len + 1 < size) {
		ssize_t r = read(fd, buf + len, size - 1 - len);
		if (r < 0) {
			if (errno == EINTR)
				continue;
			return -errno;
		}
		if (r == 0)
			break;
		len += (size_t)r;
	}
	buf[len] = '\0';
	return (ssize_t)len;
}

int cs_write_all(int fd, const void *data, size_t len)
{
	for (const char *p = data; len;) {
		ssize_t w = write(fd, p, len);
		if (w < 0 && errno == EINTR)
			continue;
		if (w < 0)
			return -errno;
		if (w == 0)
			return -EIO;
		p += w;
		len -= (size_t)w;
	}
	return 0;
}
