/* A process's memory cgroup chain, read whatever cgroup namespace this
 * process runs in. Both /proc/PID/cgroup and mountinfo's root name cgroups
 * relative to the reader's cgroup namespace, so a cudasnap in a namespace
 * of its own (a debug pod, a node agent, `unshare -C`) finds the target's
 * cgroup beside its own ("/../a") and its own mount showing something else.
 * Three routes, the one that shows the most kept:
 *
 *   own:    this process's mounts (the whole chain on a host);
 *   initns: a helper process enters the initial cgroup namespace, where
 *           paths start at the hierarchy's real root, reads the target's
 *           /proc/PID/cgroup and the cgroup mounts of a few mount
 *           namespaces there, and hands the text back over a pipe; the
 *           directories are then opened through /proc/PID/root;
 *   target: the target's own cgroup mount, through /proc/TARGET/root (its
 *           own cgroup and those below its namespace's top). */
#include "memcg.h"
#include "pool.h"
#include "proc.h"
#include "util.h"

#include <dirent.h>
#include <fcntl.h>
#include <poll.h>
#include <sched.h>
#include <signal.h>
#include <stdarg.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/prctl.h>
#include <sys/stat.h>
#include <sys/syscall.h>
#include <sys/wait.h>
#include <unistd.h>

#define PROC_CGROUP_INIT_INO 0xEFFFFFFBu
#define HELPER_SECONDS 2.0
#define REPLY_MAX ((size_t)1 << 20)
#define MOUNTINFO_MAX ((size_t)1 << 20)
#define CGROUP_FILE_MAX ((size_t)64 * 1024)

/* ---- the helper's reply ----------------------------------------------- */

/* A decimal without leading zeros, up to max, then stop; advances *p past it. */
static bool header_number(const char **p, const char *end, char stop, unsigned long long max, unsigned long long *out)
{
	const char *s = *p;
	unsigned long long v = 0;
	if (s >= end || *s < '0' || *s > '9' || (*s == '0' && s + 1 < end && s[1] != stop))
		return false;
	while (s < end && *s >= '0' && *s <= '9') {
		v = v * 10 + (unsigned long long)(*s - '0');
		if (v > max)
			return false;
		s++;
	}
	if (s >= end || *s != stop)
		return false;
	*p = s + 1;
	*out = v;
	return true;
}

/* The reply as the helper writes it: the cgroup text first, once. */
int cs_memcg_parse_reply(const char *text, size_t len, cs_memcg_reply *out)
{
	memset(out, 0, sizeof(*out));
	const char *p = text, *end = text + len;
	for (bool first = true; p < end; first = false) {
		unsigned long long pid = 0, n;
		if (end - p < 2 || p[1] != ' ' || (p[0] == 'C') != first || (p[0] != 'C' && p[0] != 'M'))
			goto bad;
		char kind = p[0];
		p += 2;
		if (kind == 'M' && (out->n == CS_MEMCG_REPLY_MOUNTS || !header_number(&p, end, ' ', INT32_MAX, &pid)))
			goto bad;
		if (!header_number(&p, end, '\n', REPLY_MAX, &n) || n > (size_t)(end - p))
			goto bad;
		if (kind == 'C') {
			out->cgroup = p;
			out->cgroup_len = (size_t)n;
		} else {
			out->mounts[out->n].pid = (pid_t)pid;
			out->mounts[out->n].mountinfo = p;
			out->mounts[out->n++].len = (size_t)n;
		}
		p += n;
	}
	if (out->cgroup)
		return 0;
bad:
	memset(out, 0, sizeof(*out));
	return -EINVAL;
}

/* ---- the helper process ------------------------------------------------- */

/* What the helper needs, all made before it starts: after a fork of a
 * process that may have other threads, the child makes system calls and
 * touches memory only (no malloc, no stdio). */
typedef struct helper_job {
	int nsfd; /* the initial cgroup namespace, -1 when this process is in it */
	int out; /* the pipe's write end */
	pid_t parent;
	char cgroup[PATH_MAX]; /* <procdir>/<target>/cgroup */
	size_t n;
	pid_t pid[CS_MEMCG_REPLY_MOUNTS];
	char mountinfo[CS_MEMCG_REPLY_MOUNTS][PATH_MAX];
	char *buf; /* MOUNTINFO_MAX bytes */
} helper_job;

static bool put(int fd, const char *s, size_t len)
{
	return cs_write_all(fd, s, len) == 0;
}

/* "K [pid ]len\n": written without printf, which may lock. */
static bool put_header(int fd, char kind, long pid, size_t len)
{
	char h[64], digits[24];
	size_t n = 0;
	h[n++] = kind;
	h[n++] = ' ';
	for (int part = pid >= 0 ? 0 : 1; part < 2; part++) {
		unsigned long long v = part == 0 ? (unsigned long long)pid : len;
		size_t d = 0;
		do
			digits[d++] = (char)('0' + v % 10);
		while ((v /= 10) != 0);
		while (d)
			h[n++] = digits[--d];
		h[n++] = part == 0 ? ' ' : '\n';
	}
	return put(fd, h, n);
}

/* Reads a whole file into buf (cap bytes); its length, or -1. */
static ssize_t slurp(const char *path, char *buf, size_t cap)
{
	int fd = open(path, O_RDONLY | O_CLOEXEC);
	if (fd < 0)
		return -1;
	size_t len = 0;
	while (len < cap) {
		ssize_t r = read(fd, buf + len, cap - len);
		if (r < 0 && errno == EINTR)
			continue;
		if (r <= 0)
			break;
		len += (size_t)r;
	}
	close(fd);
	return (ssize_t)len;
}

/* Keeps the whole lines of cgroup and cgroup2 mounts, moved to the front. */
static size_t cgroup_lines(char *buf, size_t len)
{
	size_t kept = 0;
	for (size_t at = 0; at < len;) {
		char *line = buf + at, *nl = memchr(line, '\n', len - at);
		if (!nl)
			break;
		size_t ll = (size_t)(nl - line) + 1;
		at += ll;
		if (memmem(line, ll, " - cgroup ", 10) || memmem(line, ll, " - cgroup2 ", 11)) {
			memmove(buf + kept, line, ll);
			kept += ll;
		}
	}
	return kept;
}

static __attribute__((noreturn)) void helper_main(const helper_job *j)
{
	/* It dies with this process; and a parent already gone leaves it nobody to answer. */
	if (prctl(PR_SET_PDEATHSIG, SIGKILL) < 0 || getppid() != j->parent)
		_exit(125);
	if (j->nsfd >= 0 && setns(j->nsfd, CLONE_NEWCGROUP) < 0)
		_exit(errno > 0 && errno < 125 ? errno : 125);
	ssize_t n = slurp(j->cgroup, j->buf, MOUNTINFO_MAX);
	if (n < 0)
		_exit(errno > 0 && errno < 125 ? errno : 125);
	if (!put_header(j->out, 'C', -1, (size_t)n) || !put(j->out, j->buf, (size_t)n))
		_exit(125);
	for (size_t i = 0; i < j->n; i++) {
		n = slurp(j->mountinfo[i], j->buf, MOUNTINFO_MAX);
		size_t kept = n > 0 ? cgroup_lines(j->buf, (size_t)n) : 0;
		if (n > 0 && (!put_header(j->out, 'M', j->pid[i], kept) || !put(j->out, j->buf, kept)))
			_exit(125);
	}
	_exit(0);
}

/* Reads what the helper writes until it ends, at most until deadline. */
static int collect(int fd, pid_t pid, double deadline, char *buf, size_t cap, size_t *len, int *status)
{
	bool ended = false;
	for (;;) {
		ssize_t r = read(fd, buf + *len, cap - *len);
		if (r > 0) {
			*len += (size_t)r;
			if (*len == cap)
				return -E2BIG;
			continue;
		}
		if (r == 0)
			return ended || waitpid(pid, status, __WALL) == pid ? 0 : -ECHILD;
		if (errno == EINTR)
			continue;
		if (errno != EAGAIN)
			return -errno;
		/* Drained after it ended: done, even if another process forked
		 * meanwhile holds a copy of the pipe's write end. */
		if (ended)
			return 0;
		double left = deadline - cs_now();
		if (left <= 0)
			return -ETIMEDOUT;
		struct pollfd p = { .fd = fd, .events = POLLIN };
		if (poll(&p, 1, left > 0.05 ? 50 : (int)(left * 1000) + 1) == 0)
			ended = waitpid(pid, status, __WALL | WNOHANG) == pid;
	}
}

/* Starts the helper: a child of this process that sends no SIGCHLD (a
 * caller's handler that reaps with wait(-1) never sees it), reaped here. */
static int run_helper(helper_job *j, char *reply, size_t cap, size_t *len)
{
	int p[2];
	if (pipe2(p, O_CLOEXEC) < 0)
		return -errno;
	/* Only this end waits with poll; the helper's writes block while the pipe is full. */
	if (fcntl(p[0], F_SETFL, O_NONBLOCK) < 0) {
		int e = errno;
		close(p[0]);
		close(p[1]);
		return -e;
	}
	j->out = p[1];
	j->parent = getpid();
	pid_t pid = (pid_t)syscall(SYS_clone, 0UL, NULL, NULL, NULL, NULL);
	if (pid == 0)
		helper_main(j);
	int e = errno;
	close(p[1]);
	_cleanup_close_ int rfd = p[0];
	if (pid < 0)
		return -e;
	int status = -1;
	*len = 0;
	int r = collect(rfd, pid, cs_now() + HELPER_SECONDS, reply, cap, len, &status);
	if (r < 0 || status == -1) {
		kill(pid, SIGKILL);
		while (waitpid(pid, &status, __WALL) < 0 && errno == EINTR)
			;
		return r < 0 ? r : -ECHILD;
	}
	if (WIFEXITED(status) && WEXITSTATUS(status) != 0)
		return WEXITSTATUS(status) == 125 ? -EIO : -WEXITSTATUS(status);
	return WIFEXITED(status) ? 0 : -EINTR;
}

/* ---- routes ------------------------------------------------------------- */

static unsigned long ns_inode(const char *procdir, const char *who)
{
	char path[PATH_MAX];
	struct stat st;
	snprintf(path, sizeof(path), "%s/%s/ns/cgroup", procdir, who);
	return stat(path, &st) == 0 ? (unsigned long)st.st_ino : 0;
}

/* A process this one can see in the initial cgroup namespace: pid 1 where
 * it is the host's, else the first /proc shows; 0 when none. */
static pid_t initns_process(const char *procdir)
{
	if (ns_inode(procdir, "1") == PROC_CGROUP_INIT_INO)
		return 1;
	_cleanup_closedir_ DIR *d = opendir(procdir);
	for (struct dirent *e; d && (e = readdir(d)) != NULL;) {
		long pid;
		if (cs_parse_long(e->d_name, 2, INT32_MAX, &pid) == 0 &&
		    ns_inode(procdir, e->d_name) == PROC_CGROUP_INIT_INO)
			return (pid_t)pid;
	}
	return 0;
}

static void note(char *notes, size_t size, const char *fmt, ...) __attribute__((format(printf, 3, 4)));
static void note(char *notes, size_t size, const char *fmt, ...)
{
	size_t at = strlen(notes);
	if (at && at + 2 < size) {
		memcpy(notes + at, "; ", 3);
		at += 2;
	}
	va_list ap;
	va_start(ap, fmt);
	vsnprintf(notes + at, size - at, fmt, ap);
	va_end(ap);
}

/* Of two readings of one chain, whether a shows more than b. */
static bool better(const cs_memcg *a, const cs_memcg *b)
{
	static const int rank[] = {
		[CS_MEMCG_NONE] = 0, [CS_MEMCG_UNREAD] = 1, [CS_MEMCG_PART] = 2, [CS_MEMCG_WHOLE] = 3
	};
	int ra = rank[a->seen % 4], rb = rank[b->seen % 4];
	return ra != rb ? ra > rb : a->seen == CS_MEMCG_PART && cs_memcg_reach(a) > cs_memcg_reach(b);
}

/* The chains the helper's reply shows, the best one in *best (kept when
 * none is better). */
static void from_reply(const char *procdir, const cs_memcg_reply *r, cs_memcg *best, cs_memcg *tmp)
{
	_cleanup_free_ cs_cgroup_mounts *m = malloc(sizeof(*m));
	for (size_t i = 0; m && i < r->n; i++) {
		cs_cgroup_mounts_parse(r->mounts[i].mountinfo, r->mounts[i].len, m);
		char prefix[PATH_MAX] = "";
		if (r->mounts[i].pid > 0)
			snprintf(prefix, sizeof(prefix), "%s/%d/root", procdir, (int)r->mounts[i].pid);
		cs_memcg_view v = { CS_MEMCG_INITNS, r->cgroup, r->cgroup_len, m, prefix };
		cs_memcg_read_view(&v, tmp);
		if (better(tmp, best))
			*best = *tmp;
	}
}

/* The helper's reading, through the namespace nsfd (-1: this one): the
 * mounts of this process's own mount namespace, of guide (the process that
 * showed the way in) and of the target, each as read there. */
static int read_initns(const char *procdir, pid_t pid, int nsfd, pid_t guide, cs_memcg *best, cs_memcg *tmp)
{
	_cleanup_free_ helper_job *j = calloc(1, sizeof(*j));
	_cleanup_free_ char *buf = malloc(MOUNTINFO_MAX), *reply = malloc(REPLY_MAX);
	int r = j && buf && reply ? 0 : -ENOMEM;
	size_t len = 0;
	if (r == 0) {
		j->buf = buf;
		j->nsfd = nsfd;
		snprintf(j->cgroup, sizeof(j->cgroup), "%s/%d/cgroup", procdir, (int)pid);
		const pid_t who[] = { 0, guide, pid };
		for (size_t i = 0; i < CS_ARRAY_SIZE(who); i++) {
			j->pid[j->n] = who[i];
			snprintf(j->mountinfo[j->n++], PATH_MAX, "%s/%d/mountinfo", procdir, (int)who[i]);
		}
		snprintf(j->mountinfo[0], PATH_MAX, "%s/self/mountinfo", procdir);
		r = run_helper(j, reply, REPLY_MAX, &len);
	}
	cs_memcg_reply rep = { 0 };
	if (r == 0 && cs_memcg_parse_reply(reply, len, &rep) < 0)
		r = -EPROTO;
	if (r == 0)
		from_reply(procdir, &rep, best, tmp);
	return r;
}

/* The route through the initial cgroup namespace, entered through the
 * /proc/PID/ns/cgroup of a process in it (no need from inside it). */
static void initns_route(const char *procdir, pid_t pid, cs_memcg *best, cs_memcg *tmp, char *notes, size_t nsize)
{
	bool inside = ns_inode(procdir, "self") == PROC_CGROUP_INIT_INO;
	pid_t guide = inside ? 1 : initns_process(procdir);
	if (!guide) {
		note(notes, nsize,
		     "no process of the initial cgroup namespace is visible here to read the rest through (a PID "
		     "namespace of its own)");
		return;
	}
	char path[PATH_MAX];
	snprintf(path, sizeof(path), "%s/%d/ns/cgroup", procdir, (int)guide);
	_cleanup_close_ int nsfd = inside ? -1 : open(path, O_RDONLY | O_CLOEXEC);
	int r = !inside && nsfd < 0 ? -errno : read_initns(procdir, pid, nsfd, guide, best, tmp);
	if (r < 0)
		note(notes, nsize, "the initial cgroup namespace could not be read: %s%s",
		     r == -ETIMEDOUT ? "its helper process did not answer within 2 s" : strerror(-r),
		     r == -EPERM ? " (entering it needs CAP_SYS_ADMIN)" : "");
}

/* The route through the target's own cgroup mount: its own cgroup, and the
 * ones below its cgroup namespace's top. */
static void target_route(const char *procdir, pid_t pid, const char *text, size_t len, cs_memcg *best, cs_memcg *tmp,
			 char *notes, size_t nsize)
{
	_cleanup_free_ char *buf = malloc(MOUNTINFO_MAX);
	_cleanup_free_ cs_cgroup_mounts *m = malloc(sizeof(*m));
	char path[PATH_MAX];
	snprintf(path, sizeof(path), "%s/%d/mountinfo", procdir, (int)pid);
	ssize_t n = buf && m ? cs_read_at(AT_FDCWD, path, buf, MOUNTINFO_MAX) : -ENOMEM;
	if (n < 0) {
		note(notes, nsize, "the target's own mounts cannot be read: %s", strerror((int)-n));
	} else {
		cs_cgroup_mounts_parse(buf, (size_t)n, m);
		char prefix[PATH_MAX];
		snprintf(prefix, sizeof(prefix), "%s/%d/root", procdir, (int)pid);
		cs_memcg_view v = { CS_MEMCG_TARGET, text, len, m, prefix };
		cs_memcg_read_view(&v, tmp);
		if (better(tmp, best))
			*best = *tmp;
	}
}

int cs_memcg_read(const char *procdir, pid_t pid, const cs_cgroup_mounts *m, cs_memcg *out)
{
	char name[PATH_MAX];
	if (pid > 0)
		snprintf(name, sizeof(name), "%s/%d/cgroup", procdir, (int)pid);
	else
		snprintf(name, sizeof(name), "%s/self/cgroup", procdir);
	_cleanup_free_ char *text = malloc(CGROUP_FILE_MAX);
	if (!text)
		return -ENOMEM;
	ssize_t n = cs_read_at(AT_FDCWD, name, text, CGROUP_FILE_MAX);
	if (n < 0)
		return (int)n;
	cs_memcg_view own = { CS_MEMCG_OWN, text, (size_t)n, m, "" };
	cs_memcg_read_view(&own, out);
	if (pid <= 0 || out->seen == CS_MEMCG_NONE || out->seen == CS_MEMCG_WHOLE)
		return 0;
	/* Less than the whole chain: the other routes, the best one kept. */
	_cleanup_free_ cs_memcg *tmp = malloc(sizeof(*tmp));
	if (!tmp)
		return 0;
	char notes[1024] = "";
	initns_route(procdir, pid, out, tmp, notes, sizeof(notes));
	if (out->seen != CS_MEMCG_WHOLE)
		target_route(procdir, pid, text, (size_t)n, out, tmp, notes, sizeof(notes));
	if (out->seen != CS_MEMCG_WHOLE && notes[0]) {
		char all[sizeof(out->problem) + sizeof(notes)];
		snprintf(all, sizeof(all), "%s%s%s", out->problem, out->problem[0] ? "; " : "", notes);
		cs_sanitize(out->problem, sizeof(out->problem), all, strlen(all));
	}
	return 0;
}
