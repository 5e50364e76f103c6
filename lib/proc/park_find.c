/* The control socket of an interposed process, found from /proc without
 * asking anything of the process: its listening unix sockets are the
 * socket inodes among its descriptors, and /proc/PID/net/unix gives the
 * path each was bound to. The name is not guessable. A process that lies
 * here only misleads cudasnap about itself: the path is followed inside
 * its own root without symbolic links, and only the process itself may
 * answer there. */
#include "park_find.h"

#include <dirent.h>
#include <errno.h>
#include <limits.h>
#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/syscall.h>
#include <sys/time.h>
#include <sys/un.h>
#include <unistd.h>

#define NAME_MARK "/.cudasnap-park."
#define MAX_INODES 4096
#define UNIX_TEXT_MAX (8u << 20)

static size_t socket_inodes(const char *proc, pid_t pid, unsigned long *out, size_t cap)
{
	char dir[64];
	snprintf(dir, sizeof(dir), "%s/%d/fd", proc, (int)pid);
	DIR *d = opendir(dir);
	if (d == NULL)
		return 0;
	size_t n = 0;
	struct dirent *e;
	while ((e = readdir(d)) != NULL && n < cap) {
		char link[384], target[64];
		if (e->d_name[0] == '.')
			continue;
		snprintf(link, sizeof(link), "%s/%s", dir, e->d_name);
		ssize_t len = readlink(link, target, sizeof(target) - 1);
		if (len <= 0)
			continue;
		target[len] = 0;
		char *end;
		if (strncmp(target, "socket:[", 8) != 0)
			continue;
		unsigned long ino = strtoul(target + 8, &end, 10);
		if (end != target + 8 && *end == ']')
			out[n++] = ino;
	}
	closedir(d);
	return n;
}

/* The fields of a /proc/PID/net/unix line: "Num RefCount Protocol Flags
 * Type St Inode Path"; 0, or -1 when it is not one. */
static int unix_line(const char *buf, unsigned long *flags, unsigned long *ino, const char **path)
{
	const char *p = buf;
	char *end;
	unsigned long v[7];
	for (int i = 0; i < 7; i++) {
		p += strspn(p, " ");
		v[i] = strtoul(p, &end, i < 4 ? 16 : i == 6 ? 10 : 16);
		if (end == p || (i == 0 && *end != ':'))
			return -1;
		p = end + (i == 0);
	}
	*flags = v[3];
	*ino = v[6];
	p += strspn(p, " ");
	*path = p;
	return 0;
}

int park_find_in_unix(const char *text, const unsigned long *inodes, size_t n, char *path, size_t size)
{
	for (const char *line = text; line && *line;) {
		const char *end = strchr(line, '\n');
		size_t len = end ? (size_t)(end - line) : strlen(line);
		char buf[512];
		unsigned long flags, ino;
		const char *at;
		if (len < sizeof(buf)) {
			memcpy(buf, line, len);
			buf[len] = 0;
			/* a listening socket (__SO_ACCEPTCON) bound under our name */
			if (unix_line(buf, &flags, &ino, &at) == 0 && (flags & 0x10000) && at[0] == '/' &&
			    strstr(at, NAME_MARK)) {
				for (size_t i = 0; i < n; i++)
					if (inodes[i] == ino && strlen(at) < size) {
						snprintf(path, size, "%s", at);
						return 0;
					}
			}
		}
		line = end ? end + 1 : NULL;
	}
	return -1;
}

char *park_find_read_text(const char *file, size_t max)
{
	int fd = open(file, O_RDONLY | O_CLOEXEC);
	if (fd < 0)
		return NULL;
	size_t cap = 65536, len = 0;
	char *buf = malloc(cap);
	if (buf == NULL) {
		close(fd);
		return NULL;
	}
	for (;;) {
		if (len + 1 >= cap) {
			char *nb = cap < max ? realloc(buf, cap * 2) : NULL;
			if (nb == NULL)
				break;
			buf = nb;
			cap *= 2;
		}
		ssize_t r = read(fd, buf + len, cap - 1 - len);
		if (r < 0 && errno == EINTR)
			continue;
		if (r <= 0)
			break;
		len += (size_t)r;
	}
	close(fd);
	buf[len] = 0;
	return buf;
}

#define LIB_NAME "/libcudasnap-park.so"

bool park_find_is_lib(const char *path, size_t len)
{
	size_t n = sizeof(LIB_NAME) - 1;
	return len >= n && memcmp(path + len - n, LIB_NAME, n) == 0;
}

bool park_find_mapped(pid_t pid, const char *proc)
{
	char file[64];
	snprintf(file, sizeof(file), "%s/%d/maps", proc, (int)pid);
	FILE *f = fopen(file, "re");
	if (f == NULL)
		return false;
	char *line = NULL;
	size_t cap = 0;
	ssize_t len;
	bool found = false;
	while (!found && (len = getline(&line, &cap, f)) > 0) {
		if (line[len - 1] == '\n')
			len--;
		found = park_find_is_lib(line, (size_t)len);
	}
	free(line);
	fclose(f);
	return found;
}

int park_find_path(pid_t pid, const char *proc, char *path, size_t size)
{
	/* Only a process that maps the interposer has a control socket: the
	 * others never cost a read of their namespace's socket list. */
	if (!park_find_mapped(pid, proc))
		return -1;
	unsigned long *inodes = malloc(MAX_INODES * sizeof(*inodes));
	if (inodes == NULL)
		return -1;
	size_t n = socket_inodes(proc, pid, inodes, MAX_INODES);
	int rc = -1;
	if (n) {
		char file[64];
		snprintf(file, sizeof(file), "%s/%d/net/unix", proc, (int)pid);
		char *text = park_find_read_text(file, UNIX_TEXT_MAX);
		if (text)
			rc = park_find_in_unix(text, inodes, n, path, size);
		free(text);
	}
	free(inodes);
	return rc;
}

int park_find_connect(pid_t pid, const char *proc, int timeout_ms)
{
	char path[256];
	if (park_find_path(pid, proc, path, sizeof(path)) != 0)
		return -1;
	return park_find_connect_path(pid, proc, path, timeout_ms);
}

/* The socket file at path inside the tree rootfd (a process's root), opened
 * O_PATH without following a symbolic link: every component but the last a
 * directory, the last a socket, none of them "." or "..". The process
 * chooses the path, and may have put a link there to another process's
 * socket (or to anything else): nothing but its own socket file is
 * reached. -1 otherwise. */
static int open_socket_in(int rootfd, const char *path)
{
	int cur = fcntl(rootfd, F_DUPFD_CLOEXEC, 0);
	const char *p = path;
	while (cur >= 0) {
		p += strspn(p, "/");
		size_t len = strcspn(p, "/");
		char name[256];
		bool last = p[len] == 0;
		if (len == 0 || len >= sizeof(name))
			break;
		memcpy(name, p, len);
		name[len] = 0;
		if (strcmp(name, ".") == 0 || strcmp(name, "..") == 0)
			break;
		int next = openat(cur, name, O_PATH | O_NOFOLLOW | O_CLOEXEC);
		close(cur);
		struct stat st;
		if (next < 0 || fstat(next, &st) != 0 || !(last ? S_ISSOCK(st.st_mode) : S_ISDIR(st.st_mode))) {
			if (next >= 0)
				close(next);
			return -1;
		}
		if (last)
			return next;
		cur = next;
		p += len;
	}
	if (cur >= 0)
		close(cur);
	return -1;
}

/* The uids (real, effective, saved, filesystem) of pid, from its status
 * under proc; -1 when they cannot be read. */
static int uids_of(pid_t pid, const char *proc, uid_t uids[4])
{
	char file[64], text[4096];
	snprintf(file, sizeof(file), "%s/%d/status", proc, (int)pid);
	int fd = open(file, O_RDONLY | O_CLOEXEC);
	if (fd < 0)
		return -1;
	ssize_t n = read(fd, text, sizeof(text) - 1);
	close(fd);
	if (n <= 0)
		return -1;
	text[n] = 0;
	const char *p = strstr(text, "\nUid:");
	if (p == NULL)
		return -1;
	p += 5;
	for (int i = 0; i < 4; i++) {
		char *end;
		errno = 0;
		unsigned long v = strtoul(p, &end, 10);
		if (end == p || errno || v > (uid_t)-1)
			return -1;
		uids[i] = (uid_t)v;
		p = end;
	}
	return 0;
}

bool park_find_listener_is(int conn, pid_t pid, const char *proc)
{
	struct ucred cr;
	socklen_t len = sizeof(cr);
	uid_t uids[4];
	if (getsockopt(conn, SOL_SOCKET, SO_PEERCRED, &cr, &len) != 0 || cr.pid != pid || uids_of(pid, proc, uids) != 0)
		return false;
	for (int i = 0; i < 4; i++)
		if (cr.uid == uids[i])
			return true;
	return false;
}

int park_find_connect_path(pid_t pid, const char *proc, const char *path, int timeout_ms)
{
	/* Through the process's own root: it may be in another mount namespace. */
	char root[64];
	snprintf(root, sizeof(root), "%s/%d/root", proc, (int)pid);
	int rootfd = open(root, O_PATH | O_DIRECTORY | O_CLOEXEC);
	if (rootfd < 0)
		return -1;
	int opath = open_socket_in(rootfd, path);
	close(rootfd);
	if (opath < 0)
		return -1;
	struct sockaddr_un a = { .sun_family = AF_UNIX };
	snprintf(a.sun_path, sizeof(a.sun_path), "/proc/self/fd/%d", opath);
	int fd = socket(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0);
	if (fd >= 0) {
		struct timeval tv = { .tv_sec = timeout_ms / 1000, .tv_usec = (suseconds_t)(timeout_ms % 1000) * 1000 };
		setsockopt(fd, SOL_SOCKET, SO_RCVTIMEO, &tv, sizeof(tv));
		setsockopt(fd, SOL_SOCKET, SO_SNDTIMEO, &tv, sizeof(tv));
		/* Whoever listens there must be the process itself, under its own
		 * credentials: a socket file can also be a hard link to another
		 * process's, or a forked child's inherited one. */
		if (connect(fd, (struct sockaddr *)&a, sizeof(a)) != 0 || !park_find_listener_is(fd, pid, proc)) {
			close(fd);
			fd = -1;
		}
	}
	close(opath);
	return fd;
}

/* The key out of sock, the interposer's key socket taken from it: its one
 * message peeked, left for the next. 0, or -1. */
static int key_from(int sock, unsigned char *key)
{
	unsigned char msg[sizeof(PARK_KEY_MAGIC) - 1 + PARK_KEY_LEN + 1];
	int type = 0, domain = 0;
	socklen_t tl = sizeof(type), dl = sizeof(domain);
	if (getsockopt(sock, SOL_SOCKET, SO_TYPE, &type, &tl) != 0 || type != SOCK_SEQPACKET ||
	    getsockopt(sock, SOL_SOCKET, SO_DOMAIN, &domain, &dl) != 0 || domain != AF_UNIX)
		return -1;
	ssize_t n = recv(sock, msg, sizeof(msg), MSG_PEEK | MSG_DONTWAIT | MSG_TRUNC);
	int rc = n == (ssize_t)sizeof(msg) - 1 && memcmp(msg, PARK_KEY_MAGIC, sizeof(PARK_KEY_MAGIC) - 1) == 0 ? 0 : -1;
	if (rc == 0)
		memcpy(key, msg + sizeof(PARK_KEY_MAGIC) - 1, PARK_KEY_LEN);
	explicit_bzero(msg, sizeof(msg));
	return rc;
}

/* The number of the key's socket in the process, as its marker says: the
 * marker taken itself (descriptor n of the process pidfd stands for), for
 * a file of that name may be anything the process made, a FIFO that never
 * opens included; only a sealed memfd is read. -errno (ENOENT: not one). */
static int key_fd_of(int pidfd, int n)
{
	char text[32];
	struct stat st;
	int fd = (int)syscall(SYS_pidfd_getfd, pidfd, n, 0);
	if (fd < 0)
		return -errno;
	int seals = fcntl(fd, F_GET_SEALS);
	ssize_t len = fstat(fd, &st) == 0 && S_ISREG(st.st_mode) && seals >= 0 && (seals & F_SEAL_WRITE) &&
			st.st_size < (off_t)sizeof(text) ?
		pread(fd, text, sizeof(text) - 1, 0) :
		-1;
	close(fd);
	if (len <= 3 || strncmp(text, "fd=", 3) != 0)
		return -ENOENT;
	text[len] = 0;
	char *end;
	long v = strtol(text + 3, &end, 10);
	return v >= 0 && v < 1 << 30 && *end == '\n' ? (int)v : -ENOENT;
}

/* The key through the process pidfd stands for, whose marker is its
 * descriptor n: the key's socket taken with pidfd_getfd, which takes
 * ptrace attach access (Yama's ptrace_scope 1: its ancestors, and root with
 * CAP_SYS_PTRACE). Read access is not enough: a socket is not opened again
 * through /proc/PID/fd. 0, or -errno. */
static int read_key(int pidfd, int n, unsigned char *key)
{
	if (pidfd < 0)
		return -ENOSYS;
	int k = key_fd_of(pidfd, n);
	if (k < 0)
		return k;
	int sock = (int)syscall(SYS_pidfd_getfd, pidfd, k, 0);
	if (sock < 0)
		return -errno;
	int rc = key_from(sock, key) == 0 ? 0 : -EINVAL;
	close(sock);
	return rc;
}

/* The key's marker among pid's descriptors, and the key read into key
 * (when not NULL): 0, or -errno (EPERM, EACCES: no attach access; ENOENT:
 * none). The pidfd is opened first: should pid end and its number be
 * reused, what is taken through it is not the key, and is seen not to be. */
static int find_key(pid_t pid, const char *proc, unsigned char *key)
{
	char dir[64];
	int pidfd = -1;
	/* a /proc of another PID namespace numbers other processes than
	 * pidfd_open does: no key through it */
	if (key != NULL && strcmp(proc, "/proc") == 0)
		pidfd = (int)syscall(SYS_pidfd_open, pid, 0);
	snprintf(dir, sizeof(dir), "%s/%d/fd", proc, (int)pid);
	DIR *d = opendir(dir);
	if (d == NULL) {
		if (pidfd >= 0)
			close(pidfd);
		return -ENOENT;
	}
	int rc = -ENOENT;
	struct dirent *e;
	while (rc != 0 && (e = readdir(d)) != NULL) {
		char link[384], target[128];
		if (e->d_name[0] == '.')
			continue;
		snprintf(link, sizeof(link), "%s/%s", dir, e->d_name);
		ssize_t len = readlink(link, target, sizeof(target) - 1);
		if (len <= 0)
			continue;
		target[len] = 0;
		if (strcmp(target, "/memfd:" PARK_KEY_NAME " (deleted)") == 0)
			rc = key ? read_key(pidfd, (int)strtol(e->d_name, NULL, 10), key) : 0;
	}
	closedir(d);
	if (pidfd >= 0)
		close(pidfd);
	return rc;
}

int park_find_key(pid_t pid, const char *proc, unsigned char key[PARK_KEY_LEN])
{
	return find_key(pid, proc, key);
}

bool park_find_started(pid_t pid, const char *proc)
{
	return find_key(pid, proc, NULL) == 0;
}

/* A lock line reads "lock:\t1: OFDLCK ADVISORY  READ -1 MAJ:MIN:INO START END";
 * the mark is an OFD lock of one byte in the interposer's range. */
static unsigned long long tag_of_line(const char *line, size_t len)
{
	char buf[256];
	if (len >= sizeof(buf) || strncmp(line, "lock:", 5) != 0)
		return 0;
	memcpy(buf, line, len);
	buf[len] = 0;
	if (strstr(buf, " OFDLCK ") == NULL)
		return 0;
	char *end = buf + len;
	while (end > buf && end[-1] == ' ')
		end--;
	*end = 0;
	char *last = strrchr(buf, ' ');
	if (last == NULL)
		return 0;
	*last = 0;
	char *first = strrchr(buf, ' ');
	if (first == NULL)
		return 0;
	char *e1, *e2;
	errno = 0;
	unsigned long long a = strtoull(first + 1, &e1, 10), b = strtoull(last + 1, &e2, 10);
	if (errno || *e1 || *e2 || e1 == first + 1 || e2 == last + 1 || a != b || (a & PARK_TAG_MASK) != PARK_TAG_BASE)
		return 0;
	return a & ~PARK_TAG_MASK;
}

unsigned long long park_tag_in_fdinfo(const char *text)
{
	for (const char *p = text; *p;) {
		size_t len = strcspn(p, "\n");
		unsigned long long serial = tag_of_line(p, len);
		if (serial)
			return serial;
		p += len + (p[len] == '\n');
	}
	return 0;
}

unsigned long long park_stat_start(const char *text, size_t len)
{
	const char *end = text + len, *p = NULL;
	for (const char *c = text; c < end; c++)
		if (*c == ')')
			p = c + 1; /* the last ')': the name may hold any byte */
	/* fields after the name: 3 state ... 22 starttime */
	for (int field = 3; p && field < 22; field++) {
		while (p < end && *p == ' ')
			p++;
		while (p < end && *p != ' ' && *p != '\n')
			p++;
		if (p >= end || *p != ' ')
			return 0;
	}
	if (p == NULL)
		return 0;
	p++;
	unsigned long long v = 0;
	const char *digits = p;
	for (; p < end && *p >= '0' && *p <= '9' && v <= (ULLONG_MAX - 9) / 10; p++)
		v = v * 10 + (unsigned long long)(*p - '0');
	/* a number cut by the end of what was read, or none, says nothing */
	return p > digits && p < end && (*p == ' ' || *p == '\n') ? v : 0;
}

int park_send_fd(int conn, const void *msg, size_t len, int fd, int flags)
{
	struct iovec io = { (void *)msg, len };
	union {
		char buf[CMSG_SPACE(sizeof(int))];
		struct cmsghdr align;
	} u;
	struct msghdr m = { .msg_iov = &io, .msg_iovlen = 1 };
	if (fd >= 0) {
		m.msg_control = u.buf;
		m.msg_controllen = sizeof(u.buf);
		struct cmsghdr *c = CMSG_FIRSTHDR(&m);
		c->cmsg_level = SOL_SOCKET;
		c->cmsg_type = SCM_RIGHTS;
		c->cmsg_len = CMSG_LEN(sizeof(int));
		memcpy(CMSG_DATA(c), &fd, sizeof(int));
	}
	return sendmsg(conn, &m, MSG_NOSIGNAL | flags) == (ssize_t)len ? 0 : -1;
}
