/* The files of a park into files (parkfiles.h). */
#include "parkfiles.h"
#include "proc.h"
#include "util.h"

#include <errno.h>
#include <fcntl.h>
#include <limits.h>
#include <pthread.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <sys/statvfs.h>
#include <unistd.h>

/* A resolved path, without trailing slashes, is the path given: no step of
 * it is a symbolic link, "." or "..". */
static bool plain_path(const char *path)
{
	char real[PATH_MAX], given[PATH_MAX];
	size_t len = strlen(path);
	while (len > 1 && path[len - 1] == '/')
		len--;
	if (path[0] != '/' || len >= sizeof(given) || realpath(path, real) == NULL)
		return false;
	memcpy(given, path, len);
	given[len] = 0;
	return strcmp(real, given) == 0;
}

int cs_park_dir_open(const char *path, cs_error *err)
{
	const char *hint = "Give --park-to an absolute path to a directory of root's (or cudasnap's user's) that "
			   "no other user can write, reached through no symbolic link.";
	if (!plain_path(path))
		return cs_error_set(err, CS_EUSAGE, hint,
				    "--park-to %s: not an absolute path to an existing directory reached without a "
				    "symbolic link",
				    path);
	int fd = open(path, O_RDONLY | O_DIRECTORY | O_NOFOLLOW | O_CLOEXEC);
	struct stat st;
	if (fd < 0 || fstat(fd, &st) != 0) {
		int e = errno;
		if (fd >= 0)
			close(fd);
		return cs_error_set(err, CS_EUSAGE, hint, "--park-to %s: %s", path, strerror(e));
	}
	if ((st.st_uid != 0 && st.st_uid != geteuid()) || (st.st_mode & (S_IWGRP | S_IWOTH))) {
		close(fd);
		return cs_error_set(err, CS_EUSAGE, hint,
				    "--park-to %s: owned by uid %u with mode %04o: another user could replace the "
				    "checkpoint's files in it",
				    path, (unsigned)st.st_uid, (unsigned)(st.st_mode & 07777));
	}
	return fd;
}

long long cs_park_dir_free(int dirfd)
{
	struct statvfs v;
	if (fstatvfs(dirfd, &v) != 0 || v.f_frsize == 0)
		return -1;
	unsigned long long b = (unsigned long long)v.f_bavail * v.f_frsize;
	return b > LLONG_MAX ? LLONG_MAX : (long long)b;
}

unsigned cs_park_files_count(unsigned long long bytes)
{
	unsigned long long pieces = park_pieces(bytes);
	/* 8 files (PARK_FILES_MAX) in flight keep an NVMe device and a
	 * memory-backed file system busy; more cost staging in the process for
	 * nothing. */
	return pieces == 0 ? 1 : pieces < PARK_FILES_MAX ? (unsigned)pieces : PARK_FILES_MAX;
}

unsigned long long cs_park_files_staging(unsigned long long bytes)
{
	return (unsigned long long)cs_park_files_count(bytes) * PARK_LANES * park_files_stage(bytes);
}

void cs_park_files_name(pid_t pid, unsigned long long start_time, char *out, size_t size)
{
	snprintf(out, size, "cudasnap-gpumem.%d.%llu", (int)pid, start_time);
}

void cs_park_files_close(cs_park_files *f)
{
	cs_park_room_end(f); /* its threads use the descriptors */
	for (unsigned i = 0; i < f->n; i++)
		if (f->fd[i] >= 0)
			close(f->fd[i]);
	f->n = 0;
}

/* fn on each of n arguments of size bytes at arg, a thread each (the last
 * in this one, as is any a thread cannot be had for): a file of a
 * memory-backed file system takes or frees its pages in the call, one file
 * at a time (16 GiB of tmpfs took 2 s to remove in one thread). */
static void each_file(unsigned n, void *(*fn)(void *), void *arg, size_t size)
{
	pthread_t th[PARK_FILES_MAX];
	bool started[PARK_FILES_MAX] = { false };
	for (unsigned i = 0; i < n && i < PARK_FILES_MAX; i++) {
		void *a = (char *)arg + i * size;
		started[i] = i + 1 < n && pthread_create(&th[i], NULL, fn, a) == 0;
		if (!started[i])
			fn(a);
	}
	for (unsigned i = 0; i < n && i < PARK_FILES_MAX; i++)
		if (started[i])
			pthread_join(th[i], NULL);
}

typedef struct remove_arg {
	int dirfd;
	char file[160];
} remove_arg;

static void *remove_one(void *p)
{
	remove_arg *r = p;
	unlinkat(r->dirfd, r->file, 0);
	return NULL;
}

void cs_park_files_remove(int dirfd, const char *name, unsigned n)
{
	remove_arg r[PARK_FILES_MAX];
	unsigned count = 0;
	for (unsigned i = 0; i < n && i < PARK_FILES_MAX; i++, count++) {
		r[i].dirfd = dirfd;
		snprintf(r[i].file, sizeof(r[i].file), "%s.%u", name, i);
	}
	each_file(count, remove_one, r, sizeof(r[0]));
	fsync(dirfd);
}

bool cs_park_files_match(int dirfd, const char *name, unsigned n, unsigned long long bytes)
{
	char file[200];
	struct stat st;
	for (unsigned i = 0; i <= n; i++) {
		snprintf(file, sizeof(file), "%s.%u", name, i);
		bool there = fstatat(dirfd, file, &st, AT_SYMLINK_NOFOLLOW) == 0;
		if (i == n)
			return !there;
		if (!there || !S_ISREG(st.st_mode) || !park_file_fits((unsigned long long)st.st_size, bytes, n, i))
			return false;
	}
	return false;
}

int cs_park_from_split(const char *path, char *dir, size_t dsize, char *name, size_t nsize, cs_error *err)
{
	const char *slash = strrchr(path, '/');
	const char *base = slash ? slash + 1 : path;
	size_t dlen = slash ? (size_t)(slash - path) : 0;
	const char *hint = "Give the files' directory and base name as the plugin's log and 'cudasnap history' name "
			   "them: --park-from /path/to/images/cudasnap-gpumem.PID.START";
	if (path[0] != '/' || dlen == 0 || dlen >= dsize)
		return cs_error_set(err, CS_EUSAGE, hint, "--park-from %s: not an absolute path of fitting length",
				    path);
	if (strncmp(base, "cudasnap-gpumem.", 16) != 0 || strlen(base) >= nsize ||
	    strspn(base + 16, "0123456789.") != strlen(base + 16))
		return cs_error_set(err, CS_EUSAGE, hint, "--park-from %s: not the base name of a park's files", path);
	snprintf(dir, dsize, "%.*s", (int)dlen, path);
	snprintf(name, nsize, "%s", base);
	return 0;
}

/* pid's user and group ids, as its /proc/PID/status gives them first
 * (real); -1 when unknown (the files stay cudasnap's). */
static void owner_of(pid_t pid, uid_t *uid, gid_t *gid)
{
	char path[64], buf[4096];
	long u = -1, g = -1;
	snprintf(path, sizeof(path), "%d/status", (int)pid);
	_cleanup_close_ int dfd = open(cs_proc_dir(), O_RDONLY | O_DIRECTORY | O_CLOEXEC);
	if (dfd >= 0 && cs_read_at(dfd, path, buf, sizeof(buf)) >= 0 &&
	    (cs_parse_status_field(buf, "Uid", &u) < 0 || cs_parse_status_field(buf, "Gid", &g) < 0))
		u = g = -1;
	*uid = (uid_t)u;
	*gid = (gid_t)g;
}

/* Each file's room taken before anything is parked, for an interposer
 * that cannot wait for it: parkroom.c's thread per file (one took 5 s for
 * 25 GiB of tmpfs), waited for here; without its pipe (out of
 * descriptors), in this thread, one file after the other. */
static int reserve_all(cs_park_files *f, unsigned long long bytes)
{
	if (cs_park_room_start(f, bytes) == 0)
		return cs_park_room_end(f);
	int rc = 0;
	for (unsigned i = 0; i < f->n && rc == 0; i++)
		rc = cs_park_reserve(f->fd[i], (off_t)park_file_size(bytes, f->n, i), NULL);
	return rc;
}

/* dir has no room for the files (or another failure rc of making them:
 * what, "make" or "reserve the space of"). */
static int no_room(int dirfd, const char *dir, const char *what, const char *file, int rc, unsigned long long bytes,
		   cs_error *err)
{
	long long avail = cs_park_dir_free(dirfd);
	if (rc == ENOSPC || rc == EDQUOT)
		return cs_error_set(err, CS_ESYS, "Free space in it, or give --park-to another directory.",
				    "%s has no room for the %.2f GiB of GPU memory a park into files writes "
				    "there (%.2f GiB free)",
				    dir, (double)bytes / (1 << 30), avail < 0 ? 0.0 : (double)avail / (1 << 30));
	return cs_error_errno(err, CS_ESYS, rc, NULL, "cannot %s %s/%s", what, dir, file);
}

int cs_park_files_reserved(cs_park_files *f, bool failed, int dirfd, const char *dir, const char *name,
			   unsigned long long bytes, cs_error *err)
{
	if (failed)
		cs_park_room_stop(f);
	int rc = cs_park_room_end(f);
	char file[160];
	snprintf(file, sizeof(file), "%s.*", name);
	return rc == 0 ? 0 : no_room(dirfd, dir, "reserve the space of", file, rc, bytes, err) < 0 ? -1 : 0;
}

static int make_failed(int dirfd, const char *dir, const char *name, const char *file, unsigned made, int rc,
		       unsigned long long bytes, cs_park_files *f, cs_error *err)
{
	cs_park_files_close(f);
	cs_park_files_remove(dirfd, name, made);
	if (rc == EEXIST)
		return cs_error_set(err, CS_ESYS,
				    "Files of an earlier park of this process are there: 'cudasnap ps' says whether "
				    "it is parked in them (restore it first) or they were left (by a cudasnap killed "
				    "during a park or an unpark, or by restore --keep: remove them with rm), or give "
				    "another --park-to.",
				    "cannot make %s/%s: %s", dir, file, strerror(rc));
	return no_room(dirfd, dir, "make", file, rc, bytes, err);
}

int cs_park_files_make(int dirfd, const char *dir, const char *name, unsigned n, unsigned long long bytes, bool grow,
		       cs_park_files *f, cs_error *err)
{
	f->n = 0;
	f->room = NULL;
	char file[160];
	for (unsigned i = 0; i < n && i < PARK_FILES_MAX; i++) {
		snprintf(file, sizeof(file), "%s.%u", name, i);
		/* cudasnap's own, 0600: root's park is not readable or writable
		 * by the process's user (who may be the uid a privileged
		 * program dropped to) */
		int fd = openat(dirfd, file, O_RDWR | O_CREAT | O_EXCL | O_NOFOLLOW | O_CLOEXEC, 0600);
		int rc = fd < 0 ? errno : 0;
		if (fd >= 0)
			f->fd[f->n++] = fd;
		if (rc != 0)
			return make_failed(dirfd, dir, name, file, rc == EEXIST ? i : i + 1, rc, bytes, f, err);
	}
	if (grow && cs_park_room_start(f, bytes) == 0) {
		fsync(dirfd); /* the files' names, whatever their space */
		return 0;
	}
	int rc = reserve_all(f, bytes);
	if (rc != 0) {
		snprintf(file, sizeof(file), "%s.*", name);
		return make_failed(dirfd, dir, name, file, f->n, rc, bytes, f, err);
	}
	fsync(dirfd);
	return 0;
}

int cs_park_files_open(int dirfd, const char *dir, const char *name, unsigned n, unsigned long long bytes, pid_t pid,
		       cs_park_files *f, cs_error *err)
{
	f->n = 0;
	f->room = NULL;
	char file[160];
	uid_t uid = (uid_t)-1;
	gid_t gid;
	if (pid > 0)
		owner_of(pid, &uid, &gid);
	const char *hint = "The checkpoint's GPU memory is in these files: bring them back as they were (or the "
			   "process stays checkpointed; nothing else can give its memory back).";
	for (unsigned i = 0; i < n && i < PARK_FILES_MAX; i++) {
		snprintf(file, sizeof(file), "%s.%u", name, i);
		unsigned long long size = park_file_size(bytes, n, i);
		/* non-blocking: a FIFO or a device where a file belongs (images
		 * travel) must not hold the open; refused below */
		int fd = openat(dirfd, file, O_RDONLY | O_NOFOLLOW | O_NONBLOCK | O_NOCTTY | O_CLOEXEC);
		struct stat st;
		if (fd < 0 || fstat(fd, &st) != 0) {
			int e = errno;
			if (fd >= 0)
				close(fd);
			cs_park_files_close(f);
			return cs_error_set(err, CS_ESTATE, hint, "GPU memory file %s/%s: %s", dir, file, strerror(e));
		}
		f->fd[f->n++] = fd;
		/* One name only: a hard link of another file would hand its
		 * content to the process. Made by root, by this user, or by the
		 * process's user (a park of its own): no other user's (the MAC
		 * of each piece, in the process, refuses what was changed). */
		bool owner = st.st_uid == 0 || st.st_uid == geteuid() || st.st_uid == uid;
		const char *bad = !S_ISREG(st.st_mode) ? "not a regular file" :
			st.st_nlink != 1               ? "a hard link (a file of several names)" :
			!owner                         ? "owned by another user" :
			!park_file_fits((unsigned long long)st.st_size, bytes, n, i) ? "of another size" :
										       NULL;
		if (!bad)
			fcntl(fd, F_SETFL, fcntl(fd, F_GETFL) & ~O_NONBLOCK);
		if (bad) {
			cs_park_files_close(f);
			return cs_error_set(err, CS_ESTATE, hint,
					    "GPU memory file %s/%s is %s (%lld bytes, %llu expected)", dir, file, bad,
					    (long long)st.st_size, size);
		}
	}
	return 0;
}
