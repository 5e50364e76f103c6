#include "state.h"
#include "util.h"

#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/file.h>
#include <sys/stat.h>

#define HINT_STATE "Set CUDASNAP_STATE_DIR to a directory owned by root (or you) with mode 0700."

const char *cs_state_dir(void)
{
	const char *e = getenv("CUDASNAP_STATE_DIR");
	return e && *e ? e : "/run/cudasnap";
}

static int check_dir(int fd, const char *path, cs_error *err)
{
	struct stat st;
	if (fstat(fd, &st) < 0)
		return cs_error_errno(err, CS_ESTATE, errno, HINT_STATE, "cannot stat state directory %s", path);
	if (st.st_uid != 0 && st.st_uid != geteuid())
		return cs_error_set(err, CS_ESTATE, HINT_STATE,
				    "state directory %s is owned by uid %u, not root or the caller", path,
				    (unsigned)st.st_uid);
	if (st.st_mode & (S_IWGRP | S_IWOTH))
		return cs_error_set(err, CS_ESTATE, HINT_STATE,
				    "state directory %s is writable by group or others (mode %04o)", path,
				    (unsigned)(st.st_mode & 07777));
	return 0;
}

int cs_state_open(cs_error *err)
{
	const char *path = cs_state_dir();
	if (mkdir(path, 0700) < 0 && errno != EEXIST)
		return cs_error_errno(err, CS_ESTATE, errno, HINT_STATE, "cannot create state directory %s", path);
	int fd = open(path, O_RDONLY | O_DIRECTORY | O_NOFOLLOW | O_CLOEXEC);
	if (fd < 0)
		return cs_error_errno(err, CS_ESTATE, errno == ELOOP || errno == ENOTDIR ? ELOOP : errno, HINT_STATE,
				      "cannot open state directory %s (a symlink is refused)", path);
	int r = check_dir(fd, path, err);
	if (r < 0) {
		close(fd);
		return r;
	}
	return fd;
}

int cs_state_lock(int dirfd, const char *command, cs_error *err)
{
	int fd = openat(dirfd, "lock", O_RDWR | O_CREAT | O_NOFOLLOW | O_CLOEXEC, 0600);
	if (fd < 0) {
		int e = errno;
		return cs_error_errno(err, CS_ESTATE, e, HINT_STATE, "cannot open the lock file in %s%s",
				      cs_state_dir(), e == ELOOP ? " (it is a symlink, which is refused)" : "");
	}
	if (flock(fd, LOCK_EX | LOCK_NB) < 0) {
		int e = errno;
		char who[128] = "";
		ssize_t n = pread(fd, who, sizeof(who) - 1, 0);
		who[n > 0 ? n : 0] = '\0';
		who[strcspn(who, "\n")] = '\0';
		close(fd);
		if (e == EWOULDBLOCK)
			return cs_error_set(err, CS_ESTATE, "Wait for it to finish; only one checkpoint, restore, "
					    "lock or unlock runs at a time.",
					    "another cudasnap is running (%s)", who[0] ? who : "unknown process");
		return cs_error_errno(err, CS_ESTATE, e, NULL, "cannot lock %s/lock", cs_state_dir());
	}
	char line[128];
	int len = snprintf(line, sizeof(line), "pid %d, '%s'\n", (int)getpid(), command);
	if (ftruncate(fd, 0) < 0 || pwrite(fd, line, (size_t)len, 0) != len) {
		/* The lock is held; failing to describe it is not fatal. */
	}
	return fd;
}

static int write_all(int fd, const char *data, size_t len)
{
	while (len) {
		ssize_t w = write(fd, data, len);
		if (w < 0 && errno == EINTR)
			continue;
		if (w < 0)
			return -errno;
		data += w;
		len -= (size_t)w;
	}
	return 0;
}

int cs_state_write(int dirfd, const char *name, const char *data, size_t len, cs_error *err)
{
	char tmp[256];
	snprintf(tmp, sizeof(tmp), ".%s.%d.tmp", name, (int)getpid());
	unlinkat(dirfd, tmp, 0);
	_cleanup_close_ int fd = openat(dirfd, tmp, O_WRONLY | O_CREAT | O_EXCL | O_NOFOLLOW | O_CLOEXEC, 0600);
	if (fd < 0)
		return cs_error_errno(err, CS_ESTATE, errno, HINT_STATE, "cannot create %s/%s", cs_state_dir(), tmp);
	int r = write_all(fd, data, len);
	if (r == 0 && fsync(fd) < 0)
		r = -errno;
	if (r == 0 && renameat(dirfd, tmp, dirfd, name) < 0)
		r = -errno;
	if (r < 0) {
		unlinkat(dirfd, tmp, 0);
		return cs_error_errno(err, CS_ESTATE, -r, NULL, "cannot write %s/%s", cs_state_dir(), name);
	}
	fsync(dirfd);
	return 0;
}

ssize_t cs_state_read(int dirfd, const char *name, size_t max, char **out, cs_error *err)
{
	*out = NULL;
	_cleanup_close_ int fd = openat(dirfd, name, O_RDONLY | O_NOFOLLOW | O_CLOEXEC);
	if (fd < 0) {
		int e = errno;
		if (e == ENOENT)
			return -ENOENT;
		return cs_error_errno(err, CS_ESTATE, e, "Remove it; a symlink is refused.", "cannot open %s/%s%s",
				      cs_state_dir(), name, e == ELOOP ? " (it is a symlink, which is refused)" : "");
	}
	struct stat st;
	if (fstat(fd, &st) < 0 || !S_ISREG(st.st_mode))
		return cs_error_set(err, CS_ESTATE, "Remove it.", "%s/%s is not a regular file", cs_state_dir(), name);
	if ((size_t)st.st_size > max)
		return cs_error_set(err, CS_ESTATE, "Remove it; it was not written by cudasnap.",
				    "%s/%s is too large (%lld bytes)", cs_state_dir(), name, (long long)st.st_size);
	char *buf = malloc((size_t)st.st_size + 1);
	if (!buf)
		return cs_error_set(err, CS_ESYS, NULL, "out of memory");
	ssize_t n = pread(fd, buf, (size_t)st.st_size, 0);
	if (n < 0) {
		free(buf);
		return cs_error_errno(err, CS_ESTATE, errno, NULL, "cannot read %s/%s", cs_state_dir(), name);
	}
	buf[n] = '\0';
	*out = buf;
	return n;
}
