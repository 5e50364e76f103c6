#include "proc.h"
#include "park_find.h"
#include "util.h"

#include <dirent.h>
#include <fcntl.h>
#include <limits.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>

static bool vanished(int e)
{
	return e == ENOENT || e == ESRCH;
}

/* Parses an unsigned decimal at *p, advancing it. */
static bool take_ull(const char **p, const char *end, unsigned long long *v)
{
	const char *s = *p;
	unsigned long long x = 0;
	if (s >= end || *s < '0' || *s > '9')
		return false;
	while (s < end && *s >= '0' && *s <= '9') {
		unsigned d = (unsigned)(*s - '0');
		if (x > (ULLONG_MAX - d) / 10)
			return false;
		x = x * 10 + d;
		s++;
	}
	*p = s;
	*v = x;
	return true;
}

static bool take_ll(const char **p, const char *end, long long *v)
{
	bool neg = *p < end && **p == '-';
	if (neg)
		(*p)++;
	unsigned long long u;
	if (!take_ull(p, end, &u) || u > LLONG_MAX)
		return false;
	*v = neg ? -(long long)u : (long long)u;
	return true;
}

int cs_parse_stat(const char *buf, size_t len, cs_stat *out)
{
	const char *end = buf + len;
	const char *open = memchr(buf, '(', len);
	const char *close = NULL;
	for (const char *c = end; c > buf; c--)
		if (c[-1] == ')') {
			close = c - 1;
			break;
		}
	if (!open || !close || close < open)
		return -EINVAL;
	memset(out, 0, sizeof(*out));
	const char *p = buf;
	long long pid;
	if (!take_ll(&p, open, &pid) || pid <= 0 || pid > INT_MAX || p + 1 != open || *p != ' ')
		return -EINVAL;
	out->pid = (pid_t)pid;
	cs_sanitize(out->comm, sizeof(out->comm), open + 1, (size_t)(close - open - 1));
	p = close + 1;
	/* Fields after comm: 3 state, 4 ppid, ..., 22 starttime. */
	for (int field = 3; field <= 22; field++) {
		if (p >= end || *p != ' ')
			return -EINVAL;
		p++;
		if (field == 3) {
			if (p >= end)
				return -EINVAL;
			out->state = *p++;
			continue;
		}
		long long v;
		if (!take_ll(&p, end, &v))
			return -EINVAL;
		if (field == 4) {
			if (v < 0 || v > INT_MAX)
				return -EINVAL;
			out->ppid = (pid_t)v;
		} else if (field == 9) {
			out->flags = (unsigned long)v;
		} else if (field == 22) {
			/* A line cut inside the field would give a shorter number. */
			if (v < 0 || p >= end || (*p != ' ' && *p != '\n'))
				return -EINVAL;
			out->start_time = (unsigned long long)v;
		}
	}
	return 0;
}

/* The text after "Key:" on the first line that starts with it, up to the
 * line's end; false when no line does. */
static bool status_line(const char *buf, const char *key, const char **start, const char **end)
{
	size_t klen = strlen(key);
	for (const char *line = buf; line && *line;) {
		if (strncmp(line, key, klen) == 0 && line[klen] == ':') {
			*start = line + klen + 1;
			*end = *start + strcspn(*start, "\n");
			return true;
		}
		line = strchr(line, '\n');
		if (line)
			line++;
	}
	return false;
}

int cs_parse_status_field(const char *buf, const char *key, long *out)
{
	const char *p, *end;
	if (!status_line(buf, key, &p, &end))
		return -ENOENT;
	while (*p == ' ' || *p == '\t')
		p++;
	long long v;
	if (!take_ll(&p, end, &v) || v < LONG_MIN || v > LONG_MAX)
		return -EINVAL;
	*out = (long)v;
	return 0;
}

int cs_parse_status_nth(const char *buf, const char *key, int idx, int base, unsigned long long *out)
{
	const char *p, *end;
	unsigned long long v = 0;
	if (!status_line(buf, key, &p, &end))
		return -ENOENT;
	for (int i = 0; i <= idx; i++) {
		while (p < end && (*p == ' ' || *p == '\t'))
			p++;
		/* strtoull would also take a sign, blanks and a 0x */
		size_t digits = base == 16 ? strspn(p, "0123456789abcdefABCDEF") : strspn(p, "0123456789");
		if (digits == 0 || p + digits > end)
			return -EINVAL;
		errno = 0;
		char *stop;
		v = strtoull(p, &stop, base);
		if (errno || stop != p + digits)
			return -EINVAL;
		p = stop;
	}
	*out = v;
	return 0;
}

int cs_parse_status_last(const char *buf, const char *key, long *out)
{
	const char *p, *end;
	if (!status_line(buf, key, &p, &end))
		return -ENOENT;
	long long v = 0;
	bool any = false;
	for (;;) {
		while (p < end && (*p == ' ' || *p == '\t'))
			p++;
		if (p == end)
			break;
		if (!take_ll(&p, end, &v) || v < LONG_MIN || v > LONG_MAX || (p < end && *p != ' ' && *p != '\t'))
			return -EINVAL;
		any = true;
	}
	if (!any)
		return -EINVAL;
	*out = (long)v;
	return 0;
}

static bool take_hex(const char **p, const char *end, unsigned long *v)
{
	const char *s = *p;
	unsigned long x = 0;
	int n = 0;
	for (; s < end; s++, n++) {
		int d = *s >= '0' && *s <= '9' ? *s - '0' : *s >= 'a' && *s <= 'f' ? *s - 'a' + 10 : -1;
		if (d < 0)
			break;
		if (x > (ULONG_MAX >> 4))
			return false;
		x = (x << 4) | (unsigned long)d;
	}
	if (n == 0)
		return false;
	*p = s;
	*v = x;
	return true;
}

/* Skips one space-delimited field followed by spaces. */
static bool skip_field(const char **p, const char *end)
{
	const char *s = *p;
	if (s >= end || *s == ' ')
		return false;
	while (s < end && *s != ' ')
		s++;
	while (s < end && *s == ' ')
		s++;
	*p = s;
	return true;
}

/* "MAJ:MIN INODE " (device numbers in hex, the inode in decimal), the
 * fields at dev and ino, ino's ending before end: the mapped file. */
static bool parse_file_id(const char *dev, const char *ino, const char *end, cs_map_entry *out)
{
	const char *p = dev;
	unsigned long maj, min;
	if (!take_hex(&p, ino, &maj) || p >= ino || *p++ != ':' || !take_hex(&p, ino, &min) || p >= ino || *p != ' ')
		return false;
	unsigned long long v = 0;
	for (p = ino; p < end && *p >= '0' && *p <= '9'; p++) {
		unsigned long long d = (unsigned long long)(*p - '0');
		if (v > ULLONG_MAX / 10 || v * 10 > ULLONG_MAX - d)
			return false;
		v = v * 10 + d;
	}
	if (p == ino || (p < end && *p != ' '))
		return false;
	out->dev_major = maj;
	out->dev_minor = min;
	out->ino = v;
	return true;
}

int cs_parse_maps_line(const char *line, size_t len, cs_map_entry *out)
{
	const char *p = line, *end = line + len;
	if (!take_hex(&p, end, &out->start) || p >= end || *p++ != '-' || !take_hex(&p, end, &out->end) || p >= end ||
	    *p++ != ' ')
		return -EINVAL;
	/* perms, offset, dev, inode */
	const char *field[4];
	for (int i = 0; i < 4; i++) {
		field[i] = p;
		if (!skip_field(&p, end))
			return -EINVAL;
	}
	out->path = p;
	out->path_len = (size_t)(end - p);
	out->has_id = parse_file_id(field[2], field[3], p, out);
	return 0;
}

const char *cs_environ_get(const char *buf, size_t len, const char *name)
{
	size_t nlen = strlen(name);
	for (size_t i = 0; i < len;) {
		const char *e = buf + i;
		size_t elen = strnlen(e, len - i);
		if (elen > nlen && memcmp(e, name, nlen) == 0 && e[nlen] == '=' && i + elen < len)
			return e + nlen + 1;
		i += elen + 1;
	}
	return NULL;
}

/* devdir/nvidia* and the MIG capability files in devdir/nvidia-caps/. */
bool cs_path_is_device(const char *path, size_t len, const char *devdir)
{
	size_t dlen = strlen(devdir);
	while (dlen > 0 && devdir[dlen - 1] == '/')
		dlen--;
	if (len <= dlen + 7 || memcmp(path, devdir, dlen) != 0 || memcmp(path + dlen, "/nvidia", 7) != 0)
		return false;
	const char *rest = path + dlen + 1;
	size_t rlen = len - dlen - 1;
	const char *slash = memchr(rest, '/', rlen);
	if (!slash)
		return true;
	size_t caps = strlen("nvidia-caps/");
	return rlen > caps && memcmp(rest, "nvidia-caps/", caps) == 0 && !memchr(rest + caps, '/', rlen - caps);
}

static bool basename_starts(const char *path, size_t len, const char *prefix)
{
	const char *base = path;
	for (size_t i = 0; i < len; i++)
		if (path[i] == '/')
			base = path + i + 1;
	size_t blen = len - (size_t)(base - path), plen = strlen(prefix);
	return blen >= plen && memcmp(base, prefix, plen) == 0;
}

bool cs_path_is_libcuda(const char *path, size_t len)
{
	return basename_starts(path, len, "libcuda.so");
}

bool cs_path_is_cuda_ipc(const char *path, size_t len)
{
	static const char prefix[] = "/dev/shm/cuda.shm.";
	return len > sizeof(prefix) - 1 && memcmp(path, prefix, sizeof(prefix) - 1) == 0;
}

int cs_path_gpu_minor(const char *path)
{
	const char *b = strrchr(path, '/');
	b = b ? b + 1 : path;
	if (strncmp(b, "nvidia", 6) != 0 || b[6] == '\0')
		return -1;
	int minor = 0;
	for (const char *c = b + 6; *c; c++) {
		if (*c < '0' || *c > '9' || minor > 255)
			return -1;
		minor = minor * 10 + (*c - '0');
	}
	return minor;
}

bool cs_path_is_nvml(const char *path, size_t len)
{
	return basename_starts(path, len, "libnvidia-ml.so");
}

int cs_proc_read_stat(int pdir, cs_stat *out)
{
	char buf[1024];
	ssize_t n = cs_read_at(pdir, "stat", buf, sizeof(buf));
	if (n < 0)
		return (int)n;
	if (n == 0)
		return -ESRCH;
	return cs_parse_stat(buf, (size_t)n, out);
}

int cs_proc_add_ref(cs_proc *p, const cs_devref *ref)
{
	/* The capacity cs_grow reached for nrefs elements: 8, then doubled. */
	size_t cap = 0;
	if (p->nrefs)
		for (cap = 8; cap < p->nrefs; cap *= 2)
			;
	if (cs_grow(&p->refs, &cap, p->nrefs + 1, sizeof(*ref)) < 0)
		return -ENOMEM;
	p->refs[p->nrefs++] = *ref;
	if (ref->kind == CS_REF_FD)
		p->device_fds++;
	else
		p->device_maps++;
	return 0;
}

void cs_proc_clear(cs_proc *p)
{
	free(p->refs);
	p->refs = NULL;
	p->nrefs = 0;
}

int cs_proc_scan_fds(int pdir, const char *devdir, cs_proc *p)
{
	_cleanup_closedir_ DIR *dir = cs_opendir_at(pdir, "fd");
	if (!dir)
		return -errno;
	int fdd = dirfd(dir);
	for (;;) {
		errno = 0; /* readdir leaves errno alone at the end; readlinkat may not */
		struct dirent *de = readdir(dir);
		if (!de)
			break;
		long fd;
		if (cs_parse_long(de->d_name, 0, INT_MAX, &fd) < 0)
			continue;
		char target[PATH_MAX];
		ssize_t n = readlinkat(fdd, de->d_name, target, sizeof(target) - 1);
		if (n < 0)
			continue; /* closed meanwhile */
		if (cs_path_is_cuda_ipc(target, (size_t)n))
			p->ipc_fds++;
		if (!cs_path_is_device(target, (size_t)n, devdir))
			continue;
		cs_devref ref = { .kind = CS_REF_FD, .fd = (int)fd };
		cs_sanitize(ref.path, sizeof(ref.path), target, (size_t)n);
		if (cs_proc_add_ref(p, &ref) < 0)
			return -ENOMEM;
	}
	return errno && !vanished(errno) ? -errno : 0;
}

static int maps_line(cs_proc *p, const char *devdir, const char *line, size_t len)
{
	cs_map_entry m;
	if (cs_parse_maps_line(line, len, &m) < 0 || m.path_len == 0 || m.path[0] != '/')
		return 0;
	/* A file of the device directory is a device reference whatever its
	 * name: /dev/nvidia-caps/libcuda.so must not pass for the library. */
	if (cs_path_is_device(m.path, m.path_len, devdir)) {
		cs_devref ref = { .kind = CS_REF_MAP, .fd = -1, .start = m.start, .end = m.end };
		cs_sanitize(ref.path, sizeof(ref.path), m.path, m.path_len);
		return cs_proc_add_ref(p, &ref);
	}
	if (park_find_is_lib(m.path, m.path_len))
		p->maps_park = true;
	if (cs_path_is_cuda_ipc(m.path, m.path_len))
		p->ipc_maps++;
	else if (cs_path_is_libcuda(m.path, m.path_len))
		p->maps_libcuda = true;
	else if (cs_path_is_nvml(m.path, m.path_len))
		p->maps_nvml = true;
	return 0;
}

int cs_proc_scan_maps(int pdir, const char *devdir, cs_proc *p)
{
	_cleanup_close_ int fd = openat(pdir, "maps", O_RDONLY | O_CLOEXEC);
	if (fd < 0)
		return -errno;
	/* Streams the file: a process may have hundreds of thousands of mappings. */
	enum { BUF = 64 * 1024 };
	_cleanup_free_ char *buf = malloc(BUF);
	if (!buf)
		return -ENOMEM;
	size_t have = 0;
	bool skipping = false; /* inside a line longer than the buffer */
	for (;;) {
		ssize_t r = read(fd, buf + have, BUF - have);
		if (r < 0 && errno == EINTR)
			continue;
		if (r < 0)
			return vanished(errno) ? 0 : -errno;
		if (r == 0 && have == 0)
			return 0;
		size_t len = have + (size_t)r, start = 0;
		for (size_t i = have; i < len; i++) {
			if (buf[i] != '\n')
				continue;
			if (!skipping && maps_line(p, devdir, buf + start, i - start) < 0)
				return -ENOMEM;
			skipping = false;
			start = i + 1;
		}
		if (r == 0) { /* last line without newline */
			if (!skipping && start < len && maps_line(p, devdir, buf + start, len - start) < 0)
				return -ENOMEM;
			return 0;
		}
		have = len - start;
		if (have == BUF) {
			skipping = true;
			have = 0;
		} else {
			memmove(buf, buf + start, have);
		}
	}
}

int cs_tid_to_tgid(const char *procdir, pid_t tid, pid_t *tgid)
{
	char path[64], buf[4096];
	if (tid <= 0)
		return -ESRCH;
	snprintf(path, sizeof(path), "%d/status", (int)tid);
	_cleanup_close_ int dfd = open(procdir, O_RDONLY | O_DIRECTORY | O_CLOEXEC);
	if (dfd < 0)
		return -errno;
	ssize_t n = cs_read_at(dfd, path, buf, sizeof(buf));
	if (n < 0)
		return (int)n;
	long v;
	int r = cs_parse_status_field(buf, "Tgid", &v);
	if (r < 0)
		return r == -ENOENT ? -EINVAL : r;
	if (v <= 0 || v > INT_MAX)
		return -EINVAL;
	*tgid = (pid_t)v;
	return 0;
}

int cs_proc_open(const char *procdir, pid_t pid)
{
	char name[16];
	snprintf(name, sizeof(name), "%d", (int)pid);
	_cleanup_close_ int dfd = open(procdir, O_RDONLY | O_DIRECTORY | O_CLOEXEC);
	if (dfd < 0)
		return -errno;
	int pdir = openat(dfd, name, O_RDONLY | O_DIRECTORY | O_CLOEXEC);
	return pdir < 0 ? -errno : pdir;
}

int cs_proc_read_ident(int pdir, pid_t pid, cs_proc_ident *out)
{
	char buf[4096];
	*out = (cs_proc_ident){ .nspid = pid };
	ssize_t n = cs_read_at(pdir, "status", buf, sizeof(buf));
	if (n < 0)
		return (int)n;
	long v;
	/* Kernels before 4.1 have no NSpid line: the pid is the only one known. */
	if (cs_parse_status_last(buf, "NSpid", &v) == 0 && v > 0 && v <= INT_MAX)
		out->nspid = (pid_t)v;
	struct stat st;
	if (fstatat(pdir, "ns/pid", &st, 0) == 0)
		out->ns_ino = (unsigned long long)st.st_ino;
	return 0;
}

pid_t cs_proc_thread_here(const char *procdir, pid_t pid, pid_t tid)
{
	char path[64];
	snprintf(path, sizeof(path), "%d/task", (int)pid);
	_cleanup_close_ int procfd = open(procdir, O_RDONLY | O_DIRECTORY | O_CLOEXEC);
	_cleanup_closedir_ DIR *d = procfd >= 0 && tid > 0 ? cs_opendir_at(procfd, path) : NULL;
	char name[16];
	snprintf(name, sizeof(name), "%d", (int)tid);
	if (!d)
		return 0;
	if (faccessat(dirfd(d), name, F_OK, 0) == 0)
		return tid;
	for (struct dirent *de; (de = readdir(d));) {
		long id, ns;
		char buf[4096];
		if (cs_parse_long(de->d_name, 1, INT_MAX, &id) < 0)
			continue;
		_cleanup_close_ int tdir = openat(dirfd(d), de->d_name, O_RDONLY | O_DIRECTORY | O_CLOEXEC);
		if (tdir >= 0 && cs_read_at(tdir, "status", buf, sizeof(buf)) > 0 &&
		    cs_parse_status_last(buf, "NSpid", &ns) == 0 && ns == tid)
			return (pid_t)id;
	}
	return 0;
}

int cs_proc_scan_gpu(int pdir, const char *devdir, cs_proc *p)
{
	int rf = cs_proc_scan_fds(pdir, devdir, p);
	int rm = cs_proc_scan_maps(pdir, devdir, p);
	return rf < 0 ? rf : rm;
}

static int read_pid_stat(const char *procdir, pid_t pid, cs_stat *st)
{
	memset(st, 0, sizeof(*st));
	_cleanup_close_ int pdir = cs_proc_open(procdir, pid);
	if (pdir < 0)
		return pdir;
	return cs_proc_read_stat(pdir, st);
}

int cs_proc_start_time(const char *procdir, pid_t pid, unsigned long long *start)
{
	cs_stat st;
	int r = read_pid_stat(procdir, pid, &st);
	if (r < 0)
		return r;
	*start = st.start_time;
	return 0;
}

bool cs_proc_alive(const char *procdir, pid_t pid, unsigned long long start)
{
	cs_stat st;
	return read_pid_stat(procdir, pid, &st) == 0 && st.start_time == start && st.state != 'Z' && st.state != 'X' &&
		!(st.flags & CS_PF_EXITING);
}
