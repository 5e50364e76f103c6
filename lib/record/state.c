#include "state.h"
#include "env.h"
#include "proc.h"
#include "util.h"

#include <ctype.h>
#include <fcntl.h>
#include <limits.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/file.h>
#include <sys/stat.h>
#include <sys/sysmacros.h>
#include <time.h>

#define HINT_STATE "Set CUDASNAP_STATE_DIR to a directory owned by root (or you) with mode 0700."

const char *cs_state_dir(void)
{
	const char *e = cs_env("CUDASNAP_STATE_DIR");
	return e ? e : "/run/cudasnap";
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
	return cs_state_open_existing(err);
}

int cs_state_open_existing(cs_error *err)
{
	const char *path = cs_state_dir();
	_cleanup_close_ int fd = open(path, O_RDONLY | O_DIRECTORY | O_NOFOLLOW | O_CLOEXEC);
	if (fd < 0)
		return cs_error_errno(err, CS_ESTATE, errno == ELOOP || errno == ENOTDIR ? ELOOP : errno, HINT_STATE,
				      "cannot open state directory %s (a symlink is refused)", path);
	int r = check_dir(fd, path, err);
	if (r < 0)
		return r;
	return TAKE_FD(fd);
}

/* Naming the process that holds the lock. The owner line alone is not
 * enough: a second command started together with the first can find the
 * lock taken before the owner line is written. The kernel knows the holder
 * at once, through /proc/locks. */
#define HOLDER_SIZE 128
/* A command line is cut to this many bytes: the message stays one line. */
#define HOLDER_CMD_SIZE 80
/* How long to wait for the owner line of a holder /proc/locks cannot name. */
#define OWNER_TRIES 10
#define OWNER_WAIT_NS 10000000L

/* Whether "MAJ:MIN:INODE" of /proc/locks (device numbers in hex, the inode
 * in decimal) names the file st describes. */
static bool lock_dev_matches(const char *s, const struct stat *st)
{
	char *end;
	if (!isxdigit((unsigned char)*s))
		return false;
	unsigned long maj = strtoul(s, &end, 16);
	if (*end != ':' || !isxdigit((unsigned char)end[1]))
		return false;
	unsigned long min = strtoul(end + 1, &end, 16);
	if (*end != ':' || !isdigit((unsigned char)end[1]))
		return false;
	unsigned long long ino = strtoull(end + 1, &end, 10);
	return *end == '\0' && maj == major(st->st_dev) && min == minor(st->st_dev) &&
		ino == (unsigned long long)st->st_ino;
}

/* Whether a line of /proc/locks is a held flock on the file st describes;
 * sets *pid to its holder. "ID: [-> ]TYPE MODE RW PID MAJ:MIN:INODE START END";
 * "->" marks a waiter, not a holder. The line is cut into words. */
static bool lock_line_matches(char *line, const struct stat *st, pid_t *pid)
{
	char *word[6], *save = NULL, *w = strtok_r(line, " \t\n", &save);
	size_t n = 0;
	for (; w && n < CS_ARRAY_SIZE(word); w = strtok_r(NULL, " \t\n", &save))
		word[n++] = w;
	long p;
	if (n < CS_ARRAY_SIZE(word) || strcmp(word[1], "FLOCK") != 0 || cs_parse_long(word[4], 1, INT_MAX, &p) < 0 ||
	    !lock_dev_matches(word[5], st))
		return false;
	*pid = (pid_t)p;
	return true;
}

size_t cs_state_lock_holders(int fd, pid_t *out, size_t max)
{
	struct stat st;
	char path[PATH_MAX];
	snprintf(path, sizeof(path), "%s/locks", cs_proc_dir());
	if (fstat(fd, &st) < 0)
		return 0;
	_cleanup_fclose_ FILE *f = fopen(path, "re");
	if (!f)
		return 0;
	char line[256];
	pid_t pid;
	size_t n = 0;
	while (n < max && fgets(line, sizeof(line), f))
		if (lock_line_matches(line, &st, &pid))
			out[n++] = pid;
	return n;
}

pid_t cs_state_lock_holder(int fd)
{
	pid_t pid;
	return cs_state_lock_holders(fd, &pid, 1) ? pid : 0;
}

/* "pid N, 'prog args...'" from /proc/N/cmdline, argv[0] without its
 * directory, cut short and with control bytes replaced; false when the
 * command line cannot be read or is empty (a zombie). */
static bool describe_pid(pid_t pid, char *who, size_t size)
{
	char path[PATH_MAX], raw[HOLDER_CMD_SIZE * 2], cmd[HOLDER_CMD_SIZE];
	snprintf(path, sizeof(path), "%s/%d/cmdline", cs_proc_dir(), (int)pid);
	ssize_t len = cs_read_at(AT_FDCWD, path, raw, sizeof(raw)), n = len;
	while (n > 0 && raw[n - 1] == '\0')
		n--;
	if (n <= 0)
		return false;
	for (ssize_t i = 0; i < n; i++)
		if (raw[i] == '\0')
			raw[i] = ' ';
	raw[n] = '\0';
	size_t arg0 = strcspn(raw, " ");
	const char *base = raw;
	for (size_t i = 0; i < arg0; i++)
		if (raw[i] == '/')
			base = raw + i + 1;
	cs_sanitize(cmd, sizeof(cmd), base, strlen(base));
	bool cut = strlen(base) >= sizeof(cmd) || (size_t)len >= sizeof(raw) - 1;
	snprintf(who, size, "pid %d, '%s%s'", (int)pid, cmd, cut ? "..." : "");
	return true;
}

/* The owner line cudasnap writes after taking the lock; false when empty,
 * or when it names another process than pid (> 0), the holder found in
 * /proc/locks: then it was left by an earlier holder. */
static bool read_owner(int fd, pid_t pid, char *who, size_t size)
{
	char line[HOLDER_SIZE];
	ssize_t n = pread(fd, line, sizeof(line) - 1, 0);
	line[n > 0 ? n : 0] = '\0';
	line[strcspn(line, "\n")] = '\0';
	if (!line[0])
		return false;
	char *end;
	if (pid > 0 && (strncmp(line, "pid ", 4) != 0 || strtol(line + 4, &end, 10) != pid || *end != ','))
		return false;
	cs_sanitize(who, size, line, strlen(line));
	return true;
}

/* Fills who with the best description of the holder of fd's lock: its
 * command line, else its owner line, else (the holder has only just taken
 * the lock) the owner line once written, else its pid or "unknown process". */
static void describe_holder(int fd, char *who, size_t size)
{
	pid_t pid = cs_state_lock_holder(fd);
	if (pid > 0 && describe_pid(pid, who, size))
		return;
	for (int i = 0; i < OWNER_TRIES; i++) {
		if (read_owner(fd, pid, who, size))
			return;
		if (i + 1 < OWNER_TRIES)
			nanosleep(&(struct timespec){ .tv_nsec = OWNER_WAIT_NS }, NULL);
	}
	if (pid > 0)
		snprintf(who, size, "pid %d", (int)pid);
	else
		snprintf(who, size, "unknown process");
}

void cs_state_describe_holder(int fd, char *who, size_t size)
{
	describe_holder(fd, who, size);
}

bool cs_state_describe_pid(pid_t pid, char *who, size_t size)
{
	return describe_pid(pid, who, size);
}

int cs_state_open_file(int dirfd, const char *name, int flags, mode_t mode, const char **why)
{
	const char *ignored = "";
	why = why ? why : &ignored;
	*why = "";
	_cleanup_close_ int fd = openat(dirfd, name, flags | O_NOFOLLOW | O_NONBLOCK | O_CLOEXEC, mode);
	if (fd < 0) {
		if (errno == ELOOP)
			*why = "it is a symlink, which is refused";
		return -errno;
	}
	struct stat st;
	if (fstat(fd, &st) < 0)
		return -errno;
	if (!S_ISREG(st.st_mode)) {
		*why = "it is not a regular file";
		return -EINVAL;
	}
	/* No name left: removed since it was opened (a claim's holder removes
	 * its record as it lets go), which the caller opens again. */
	if (st.st_nlink == 0)
		return -ESTALE;
	if (st.st_nlink > 1) {
		*why = "it is a hard link (it has more than one name), which is refused";
		return -EMLINK;
	}
	if (st.st_uid != 0 && st.st_uid != geteuid()) {
		*why = "it is owned by another user than root or the caller";
		return -EPERM;
	}
	return TAKE_FD(fd);
}

int cs_state_take_lock(int fd)
{
	if (flock(fd, LOCK_EX | LOCK_NB) < 0)
		return -errno;
	return 0;
}

void cs_state_write_owner(int fd, const char *command)
{
	char line[128];
	int len = snprintf(line, sizeof(line), "pid %d, '%s'\n", (int)getpid(), command);
	if (ftruncate(fd, 0) < 0 || pwrite(fd, line, (size_t)len, 0) != len) {
		/* The lock is held; failing to describe it is not fatal. */
	}
}

int cs_state_lock(int dirfd, const char *command, double wait_s, cs_error *err)
{
	const char *why;
	_cleanup_close_ int fd = cs_state_open_file(dirfd, "lock", O_RDWR | O_CREAT, 0600, &why);
	if (fd < 0)
		return cs_error_errno(err, CS_ESTATE, -fd, why[0] ? "Remove it: cudasnap makes it again." : HINT_STATE,
				      "cannot open the lock file %s/lock%s%s%s", cs_state_dir(), why[0] ? " (" : "",
				      why, why[0] ? ")" : "");
	/* Holders keep it for a file write: waiting a little is enough. */
	int r;
	struct timespec nap = { .tv_nsec = 10000000L };
	for (long naps = 0; (r = cs_state_take_lock(fd)) == -EWOULDBLOCK && naps < (long)(wait_s * 100); naps++)
		nanosleep(&nap, NULL);
	if (r == -EWOULDBLOCK) {
		char who[HOLDER_SIZE];
		describe_holder(fd, who, sizeof(who));
		return cs_error_set(err, CS_ESTATE, "Wait for it to finish.",
				    "%s/lock is held by another cudasnap (%s)", cs_state_dir(), who);
	}
	if (r < 0)
		return cs_error_errno(err, CS_ESTATE, -r, NULL, "cannot lock %s/lock", cs_state_dir());
	cs_state_write_owner(fd, command);
	return TAKE_FD(fd);
}

int cs_state_write(int dirfd, const char *name, const char *data, size_t len, cs_error *err)
{
	char tmp[256];
	snprintf(tmp, sizeof(tmp), ".%s.%d.tmp", name, (int)getpid());
	unlinkat(dirfd, tmp, 0);
	_cleanup_close_ int fd = openat(dirfd, tmp, O_WRONLY | O_CREAT | O_EXCL | O_NOFOLLOW | O_CLOEXEC, 0600);
	if (fd < 0)
		return cs_error_errno(err, CS_ESTATE, errno, HINT_STATE, "cannot create %s/%s", cs_state_dir(), tmp);
	int r = cs_write_all(fd, data, len);
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

/* The rest of a read of the file fd (named where/name in messages),
 * bounded by max. */
static ssize_t read_bounded(int fd, const char *where, const char *name, size_t max, char **out, cs_error *err)
{
	struct stat st;
	if (fstat(fd, &st) < 0)
		return cs_error_errno(err, CS_ESTATE, errno, NULL, "cannot read %s/%s", where, name);
	if ((size_t)st.st_size > max)
		return cs_error_set(err, CS_ESTATE, "Remove it; it was not written by cudasnap.",
				    "%s/%s is too large (%lld bytes)", where, name, (long long)st.st_size);
	_cleanup_free_ char *buf = malloc((size_t)st.st_size + 1);
	if (!buf)
		return cs_error_set(err, CS_ESYS, NULL, "out of memory");
	ssize_t n = pread(fd, buf, (size_t)st.st_size, 0);
	if (n < 0)
		return cs_error_errno(err, CS_ESTATE, errno, NULL, "cannot read %s/%s", where, name);
	buf[n] = '\0';
	*out = TAKE_PTR(buf);
	return n;
}

ssize_t cs_state_read(int dirfd, const char *name, size_t max, char **out, cs_error *err)
{
	*out = NULL;
	const char *why;
	_cleanup_close_ int fd = cs_state_open_file(dirfd, name, O_RDONLY, 0, &why);
	if (fd == -ENOENT)
		return 0; /* absent: *out stays NULL */
	if (fd < 0)
		return cs_error_errno(err, CS_ESTATE, -fd,
				      "Remove it; cudasnap writes a regular file of its own there.",
				      "cannot open %s/%s%s%s%s", cs_state_dir(), name, why[0] ? " (" : "", why,
				      why[0] ? ")" : "");
	return read_bounded(fd, cs_state_dir(), name, max, out, err);
}

ssize_t cs_images_read(int dirfd, const char *name, size_t max, char **out, cs_error *err)
{
	*out = NULL;
	_cleanup_close_ int fd = openat(dirfd, name, O_RDONLY | O_NOFOLLOW | O_NONBLOCK | O_CLOEXEC);
	if (fd < 0 && errno == ENOENT)
		return 0;
	if (fd < 0)
		return cs_error_errno(err, CS_ESTATE, errno, NULL, "cannot open the images' %s%s", name,
				      errno == ELOOP ? " (it is a symlink, which is refused)" : "");
	struct stat st;
	if (fstat(fd, &st) < 0 || !S_ISREG(st.st_mode))
		return cs_error_set(err, CS_ESTATE, NULL, "the images' %s is not a regular file", name);
	return read_bounded(fd, "the images", name, max, out, err);
}
