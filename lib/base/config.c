#include "config.h"
#include "util.h"

#include <errno.h>
#include <fcntl.h>
#include <limits.h>
#include <stdarg.h>
#include <stdio.h>
#include <string.h>
#include <unistd.h>

static bool is_blank(char c)
{
	return c == ' ' || c == '\t' || c == '\r';
}

static bool is_name_char(char c)
{
	return (c >= 'A' && c <= 'Z') || (c >= 'a' && c <= 'z') || (c >= '0' && c <= '9') || c == '_';
}

static void trim(const char **s, size_t *len)
{
	while (*len && is_blank(**s))
		(*s)++, (*len)--;
	while (*len && is_blank((*s)[*len - 1]))
		(*len)--;
}

/* One line without its newline. */
static void parse_line(const char *s, size_t len, unsigned no, cs_config_fn fn, cs_config_bad_fn bad, void *ctx)
{
	trim(&s, &len);
	if (len == 0 || s[0] == '#')
		return;
	const char *eq = memchr(s, '=', len);
	const char *name = s, *value = eq ? eq + 1 : NULL;
	size_t nlen = eq ? (size_t)(eq - s) : 0, vlen = eq ? len - nlen - 1 : 0;
	trim(&name, &nlen);
	trim(&value, &vlen);
	bool ok = eq && nlen > 0 && !memchr(s, '\0', len);
	for (size_t i = 0; ok && i < nlen; i++)
		ok = is_name_char(name[i]);
	if (!ok) {
		if (bad)
			bad(ctx, no);
		return;
	}
	fn(ctx, name, nlen, value, vlen, no);
}

void cs_config_parse(const char *text, size_t len, cs_config_fn fn, cs_config_bad_fn bad, void *ctx)
{
	unsigned no = 1;
	for (size_t at = 0; at < len; no++) {
		const char *nl = memchr(text + at, '\n', len - at);
		size_t end = nl ? (size_t)(nl - text) : len;
		parse_line(text + at, end - at, no, fn, bad, ctx);
		at = end + 1;
	}
}

/* ---- opening the file ------------------------------------------------- */

__attribute__((format(printf, 4, 5))) static int refuse(char *why, size_t size, int err, const char *fmt, ...)
{
	va_list ap;
	va_start(ap, fmt);
	vsnprintf(why, size, fmt, ap);
	va_end(ap);
	return err;
}

/* Writes path into out[PATH_MAX] as an absolute path without "", "." or
 * ".." components. Dropping "name/.." is exact only because every
 * directory on the path will be refused if it is a symbolic link. */
static int absolute(const char *path, char *out, char *why, size_t size)
{
	char joined[2 * PATH_MAX], cwd[PATH_MAX];
	if (path[0] != '/' && !getcwd(cwd, sizeof(cwd)))
		return refuse(why, size, -errno, "%s is relative, and the current directory's path cannot be found: %s",
			      path, strerror(errno));
	int n = path[0] == '/' ? snprintf(joined, sizeof(joined), "%s", path) :
				 snprintf(joined, sizeof(joined), "%s/%s", cwd, path);
	if (n < 0 || (size_t)n >= sizeof(joined))
		return refuse(why, size, -ENAMETOOLONG, "the path of the file is too long");
	size_t o = 0;
	for (const char *p = joined; *p;) {
		size_t len = strcspn(p, "/");
		if (len == 2 && p[0] == '.' && p[1] == '.') {
			while (o > 0 && out[--o] != '/')
				;
		} else if (len > 0 && !(len == 1 && p[0] == '.')) {
			if (o + 1 + len >= PATH_MAX)
				return refuse(why, size, -ENAMETOOLONG, "the path of the file is too long");
			out[o++] = '/';
			memcpy(out + o, p, len);
			o += len;
		}
		p += len + (p[len] == '/');
	}
	out[o] = '\0';
	if (o == 0)
		return refuse(why, size, -EISDIR, "%s names the root directory, not a file", path);
	return 0;
}

/* Whether what fd refers to (path, for the reason) may say what the file
 * says: only root and the caller may have chosen it. */
static int trusted(int fd, bool dir, const char *path, struct stat *st, char *why, size_t size)
{
	if (fstat(fd, st) < 0)
		return refuse(why, size, -errno, "%s cannot be examined: %s", path, strerror(errno));
	if (S_ISLNK(st->st_mode))
		return refuse(why, size, -ELOOP, "%s is a symbolic link", path);
	if (dir && !S_ISDIR(st->st_mode))
		return refuse(why, size, -ENOTDIR, "%s is not a directory", path);
	if (!dir && !S_ISREG(st->st_mode))
		return refuse(why, size, -EINVAL, "%s is not a regular file", path);
	if (st->st_uid != 0 && st->st_uid != geteuid())
		return refuse(why, size, -EPERM, "%s is owned by uid %u, not root or the caller", path,
			      (unsigned)st->st_uid);
	if (dir && (st->st_mode & S_IWOTH) && (st->st_mode & S_ISVTX))
		return refuse(why, size, -EPERM,
			      "%s is writable by others (the sticky bit does not stop anyone from creating the next "
			      "name in it)",
			      path);
	if (st->st_mode & (S_IWGRP | S_IWOTH))
		return refuse(why, size, -EPERM, "%s is writable by group or others", path);
	if (!dir && (size_t)st->st_size > CS_CONFIG_MAX)
		return refuse(why, size, -EFBIG, "%s is larger than %u KiB", path, CS_CONFIG_MAX >> 10);
	return 0;
}

/* Opens the directory name below dir, and checks it (full is its path, for
 * the reasons); -ENOENT with why "" when it does not exist. */
static int open_dir(int dir, const char *name, const char *full, char *why, size_t size)
{
	/* O_PATH | O_NOFOLLOW opens a symbolic link itself: trusted() sees it. */
	_cleanup_close_ int fd = openat(dir, name, O_PATH | O_NOFOLLOW | O_CLOEXEC);
	struct stat st;
	if (fd < 0)
		return errno == ENOENT ? -ENOENT :
					 refuse(why, size, -errno, "%s cannot be opened: %s", full, strerror(errno));
	int r = trusted(fd, true, full, &st, why, size);
	return r < 0 ? r : TAKE_FD(fd);
}

/* A directory refused matters only when the file is there: where there is
 * none, nothing is read either way, and doctor has nothing to warn about. */
static int unless_absent(int r, const char *full, char *why)
{
	struct stat st;
	if (why[0] && stat(full, &st) < 0 && errno == ENOENT) {
		why[0] = '\0';
		return -ENOENT;
	}
	return r;
}

int cs_config_open(const char *path, struct stat *st, char *why, size_t size)
{
	char full[PATH_MAX];
	why[0] = '\0';
	int r = absolute(path, full, why, size);
	if (r < 0)
		return r;
	_cleanup_close_ int dir = open("/", O_PATH | O_DIRECTORY | O_CLOEXEC);
	if (dir < 0)
		return refuse(why, size, -errno, "/ cannot be opened: %s", strerror(errno));
	if ((r = trusted(dir, true, "/", st, why, size)) < 0)
		return unless_absent(r, full, why);
	char *name = full + 1;
	for (char *slash; (slash = strchr(name, '/')); name = slash + 1) {
		_cleanup_close_ int above = TAKE_FD(dir);
		*slash = '\0'; /* full is now the directory's path */
		dir = open_dir(above, name, full, why, size);
		*slash = '/';
		if (dir < 0)
			return unless_absent(dir, full, why);
	}
	/* O_NONBLOCK: a FIFO put there must not hang the open; it is then refused. */
	_cleanup_close_ int fd = openat(dir, name, O_RDONLY | O_NOFOLLOW | O_NONBLOCK | O_NOCTTY | O_CLOEXEC);
	if (fd < 0 && errno == ELOOP)
		return refuse(why, size, -ELOOP, "%s is a symbolic link", full);
	if (fd < 0)
		return errno == ENOENT ? -ENOENT :
					 refuse(why, size, -errno, "%s cannot be opened: %s", full, strerror(errno));
	if ((r = trusted(fd, false, full, st, why, size)) < 0)
		return r;
	return TAKE_FD(fd);
}
