/* Stopped, traced and frozen processes: seen in /proc and the cgroup
 * freezer, never by asking the driver (which would wait for them). */
#include "halt.h"
#include "proc.h"
#include "util.h"

#include <fcntl.h>
#include <pthread.h>
#include <stdio.h>
#include <string.h>

const char *cs_halt_name(int halt)
{
	switch (halt) {
	case CS_HALT_STOPPED:
	case CS_HALT_TRACED: return "stopped";
	case CS_HALT_FROZEN: return "frozen";
	default: return NULL;
	}
}

cs_halt cs_halt_from_state(char state)
{
	return state == 'T' ? CS_HALT_STOPPED : state == 't' ? CS_HALT_TRACED : CS_HALT_NONE;
}

/* The next whitespace-separated field of a mountinfo line. */
static size_t field(const char **p, const char *end, const char **start)
{
	while (*p < end && **p == ' ')
		(*p)++;
	*start = *p;
	while (*p < end && **p != ' ')
		(*p)++;
	return (size_t)(*p - *start);
}

/* The value of a "\ooo" escape at s (len bytes left), or -1. */
static int octal_escape(const char *s, size_t len)
{
	if (len < 4 || s[0] != '\\' || s[1] < '0' || s[1] > '3')
		return -1;
	for (int i = 2; i < 4; i++)
		if (s[i] < '0' || s[i] > '7')
			return -1;
	return (s[1] - '0') * 64 + (s[2] - '0') * 8 + (s[3] - '0');
}

/* A path field of mountinfo, where the kernel writes space, tab, newline
 * and backslash as "\ooo". False when it does not fit or holds a NUL: a
 * path cut short names another directory, so it is not used at all. */
static bool unescape(char *dst, size_t size, const char *s, size_t len)
{
	size_t n = 0;
	for (size_t i = 0; i < len; i++) {
		int c = octal_escape(s + i, len - i);
		if (c >= 0)
			i += 3;
		else
			c = (unsigned char)s[i];
		if (c == 0 || n + 1 >= size)
			return false;
		dst[n++] = (char)c;
	}
	dst[n] = '\0';
	return true;
}

/* Takes one mount: its mount point and its root, both whole, or neither. */
static void take(char *mnt, size_t msize, char *root, size_t rsize, const char *const f[5], const size_t l[5])
{
	if (!unescape(mnt, msize, f[4], l[4]) || !unescape(root, rsize, f[3], l[3]))
		mnt[0] = root[0] = '\0';
}

bool cs_cgroup_has_option(const char *opts, size_t len, const char *want)
{
	size_t wl = strlen(want);
	for (const char *p = opts, *end = opts + len; p < end;) {
		const char *comma = memchr(p, ',', (size_t)(end - p));
		size_t l = (size_t)((comma ? comma : end) - p);
		if (l == wl && memcmp(p, want, wl) == 0)
			return true;
		if (!comma)
			break;
		p = comma + 1;
	}
	return false;
}

/* One line: "ID PARENT MAJ:MIN ROOT MOUNTPOINT OPTS [OPTIONAL...] - FSTYPE SOURCE SUPEROPTS". */
static void mount_line(const char *p, const char *end, cs_cgroup_mounts *m)
{
	const char *f[5], *s;
	size_t l[5];
	for (int i = 0; i < 5; i++)
		l[i] = field(&p, end, &f[i]);
	if (!l[4])
		return;
	size_t n;
	do
		n = field(&p, end, &s);
	while (n && !(n == 1 && *s == '-'));
	const char *type, *src, *opts;
	size_t tl = field(&p, end, &type), sl = field(&p, end, &src), ol = field(&p, end, &opts);
	(void)sl;
	bool v1 = tl == 6 && memcmp(type, "cgroup", 6) == 0;
	if (tl == 7 && memcmp(type, "cgroup2", 7) == 0 && !m->v2[0])
		take(m->v2, sizeof(m->v2), m->v2_root, sizeof(m->v2_root), f, l);
	if (v1 && !m->v1[0] && cs_cgroup_has_option(opts, ol, "freezer"))
		take(m->v1, sizeof(m->v1), m->v1_root, sizeof(m->v1_root), f, l);
	/* One v1 hierarchy may hold both controllers. */
	if (v1 && !m->v1mem[0] && cs_cgroup_has_option(opts, ol, "memory"))
		take(m->v1mem, sizeof(m->v1mem), m->v1mem_root, sizeof(m->v1mem_root), f, l);
	if (v1 && !m->v1pids[0] && cs_cgroup_has_option(opts, ol, "pids"))
		take(m->v1pids, sizeof(m->v1pids), m->v1pids_root, sizeof(m->v1pids_root), f, l);
}

void cs_cgroup_mounts_parse(const char *text, size_t len, cs_cgroup_mounts *m)
{
	memset(m, 0, sizeof(*m));
	for (const char *p = text, *end = text + len; p < end;) {
		const char *nl = memchr(p, '\n', (size_t)(end - p));
		const char *le = nl ? nl : end;
		mount_line(p, le, m);
		if (!nl)
			break;
		p = nl + 1;
	}
}

bool cs_cgroup_file(const char *mnt, const char *root, const char *path, size_t plen, const char *name, char *out,
		    size_t size)
{
	size_t rl = strlen(root);
	/* The root cgroup of a hierarchy cannot be frozen or limited (neither
	 * v2 nor the v1 freezer or pids offer it): no file to read for the
	 * many processes there. */
	if (rl == 1 && plen == 1 && path[0] == '/')
		return false;
	if (rl > 1) {
		/* A cgroup outside the one the mount shows at its top is not below
		 * the mount at all: looked up there, it would name another cgroup. */
		if (plen < rl || memcmp(path, root, rl) != 0 || (plen > rl && path[rl] != '/'))
			return false;
		path += rl;
		plen -= rl;
	}
	if (memmem(path, plen, "/..", 3) || memchr(path, '\0', plen))
		return false;
	int n = snprintf(out, size, "%s%.*s/%s", mnt, (int)plen, path, name);
	return n > 0 && (size_t)n < size;
}

static bool file_says(const char *path, const char *want_line_prefix)
{
	char buf[4096];
	ssize_t n = cs_read_at(AT_FDCWD, path, buf, sizeof(buf));
	if (n <= 0)
		return false;
	size_t wl = strlen(want_line_prefix);
	for (const char *p = buf, *end = buf + n; p < end;) {
		const char *nl = memchr(p, '\n', (size_t)(end - p));
		size_t l = (size_t)((nl ? nl : end) - p);
		if (l >= wl && memcmp(p, want_line_prefix, wl) == 0)
			return true;
		if (!nl)
			break;
		p = nl + 1;
	}
	return false;
}

bool cs_cgroup_frozen(const char *text, size_t len, const cs_cgroup_mounts *m, char *where, size_t wsize)
{
	char path[768];
	for (const char *p = text, *end = text + len; p < end;) {
		const char *nl = memchr(p, '\n', (size_t)(end - p));
		const char *le = nl ? nl : end;
		const char *c1 = memchr(p, ':', (size_t)(le - p));
		const char *c2 = c1 ? memchr(c1 + 1, ':', (size_t)(le - c1 - 1)) : NULL;
		if (c2) {
			const char *ctl = c1 + 1, *cg = c2 + 1;
			size_t ctll = (size_t)(c2 - ctl), cgl = (size_t)(le - cg);
			bool v2 = ctll == 0 && c1 - p == 1 && *p == '0';
			if (v2 && m->v2[0] &&
			    cs_cgroup_file(m->v2, m->v2_root, cg, cgl, "cgroup.events", path, sizeof(path)) &&
			    file_says(path, "frozen 1")) {
				snprintf(where, wsize, "%s", path);
				return true;
			}
			if (!v2 && m->v1[0] && cs_cgroup_has_option(ctl, ctll, "freezer") &&
			    cs_cgroup_file(m->v1, m->v1_root, cg, cgl, "freezer.state", path, sizeof(path)) &&
			    (file_says(path, "FROZEN") || file_says(path, "FREEZING"))) {
				snprintf(where, wsize, "%s", path);
				return true;
			}
		}
		if (!nl)
			break;
		p = nl + 1;
	}
	return false;
}

int cs_cgroup_mounts_read(const char *procdir, cs_cgroup_mounts *out)
{
	memset(out, 0, sizeof(*out));
	char path[4096];
	if (snprintf(path, sizeof(path), "%s/self/mountinfo", procdir) >= (int)sizeof(path))
		return -ENAMETOOLONG;
	/* The cgroup mounts are made at boot, long before the many mounts of
	 * containers that can make the file larger than this. */
	size_t size = (size_t)1 << 20;
	_cleanup_free_ char *buf = malloc(size);
	if (!buf)
		return -ENOMEM;
	ssize_t n = cs_read_at(AT_FDCWD, path, buf, size);
	if (n < 0)
		return (int)n;
	cs_cgroup_mounts_parse(buf, (size_t)n, out);
	return 0;
}

static cs_cgroup_mounts mounts;
static pthread_once_t mounts_once = PTHREAD_ONCE_INIT;

static void load_mounts(void)
{
	cs_cgroup_mounts_read("/proc", &mounts);
}

static cs_halt thread_halt(int pdir, pid_t tid, pid_t *tracer)
{
	char path[64], buf[4096];
	snprintf(path, sizeof(path), "task/%d/stat", (int)tid);
	ssize_t n = cs_read_at(pdir, path, buf, sizeof(buf));
	cs_stat st;
	if (n <= 0 || cs_parse_stat(buf, (size_t)n, &st) < 0)
		return CS_HALT_NONE;
	cs_halt h = cs_halt_from_state(st.state);
	long v;
	snprintf(path, sizeof(path), "task/%d/status", (int)tid);
	if (h == CS_HALT_TRACED && cs_read_at(pdir, path, buf, sizeof(buf)) > 0 &&
	    cs_parse_status_field(buf, "TracerPid", &v) == 0)
		*tracer = (pid_t)v;
	return h;
}

cs_halt cs_proc_halt(const char *procdir, pid_t pid, pid_t tid, cs_halt_info *out)
{
	cs_halt_info tmp = { 0 };
	cs_halt_info *h = out ? out : &tmp;
	memset(h, 0, sizeof(*h));
	_cleanup_close_ int pdir = cs_proc_open(procdir, pid);
	if (pdir < 0)
		return CS_HALT_NONE;
	h->tid = tid > 0 ? tid : pid;
	h->halt = thread_halt(pdir, h->tid, &h->tracer);
	if (h->halt == CS_HALT_NONE && h->tid != pid) {
		/* A restore thread that is gone from the task list: judge the process. */
		char path[64];
		snprintf(path, sizeof(path), "task/%d", (int)h->tid);
		if (faccessat(pdir, path, F_OK, 0) != 0)
			h->halt = thread_halt(pdir, h->tid = pid, &h->tracer);
	}
	if (h->halt != CS_HALT_NONE)
		return h->halt;
	pthread_once(&mounts_once, load_mounts);
	char buf[8192];
	ssize_t n = cs_read_at(pdir, "cgroup", buf, sizeof(buf));
	if (n > 0 && cs_cgroup_frozen(buf, (size_t)n, &mounts, h->where, sizeof(h->where)))
		h->halt = CS_HALT_FROZEN;
	return h->halt;
}

void cs_halt_clause(const cs_halt_info *h, pid_t pid, char *buf, size_t size)
{
	switch (h->halt) {
	case CS_HALT_STOPPED:
		snprintf(buf, size, "stopped (SIGSTOP or job control; resume it with 'kill -CONT %d')", (int)pid);
		break;
	case CS_HALT_TRACED:
		if (h->tracer > 0)
			snprintf(buf, size,
				 "stopped by its tracer, process %d (a debugger, strace or CRIU; it runs "
				 "again when the tracer continues or detaches)",
				 (int)h->tracer);
		else
			snprintf(buf, size,
				 "stopped by a tracer (a debugger, strace or CRIU; it runs again when the "
				 "tracer continues or detaches)");
		break;
	case CS_HALT_FROZEN:
		snprintf(buf, size,
			 "frozen by its cgroup (%s: 'docker unpause', or thaw the cgroup, or wait for "
			 "the engine that froze it)",
			 h->where);
		break;
	default: snprintf(buf, size, "running");
	}
}

int cs_halt_error(cs_error *err, pid_t pid, const char *comm, const cs_halt_info *h, const char *doing)
{
	char why[400];
	cs_halt_clause(h, pid, why, sizeof(why));
	const char *hint;
	switch (h->halt) {
	case CS_HALT_STOPPED:
		hint = "The driver can only act on a process that runs: its own helper thread answers every call, "
		       "and a stopped process cannot. Resume it (kill -CONT), or leave it out of the selection "
		       "(--pid / --tree / --cgroup); nothing was changed.";
		break;
	case CS_HALT_TRACED:
		hint = "The driver can only act on a process that runs. Let the debugger, strace or snapshot "
		       "engine continue or detach, or leave the process out of the selection; nothing was changed.";
		break;
	default:
		hint = "The driver can only act on a process that runs. Thaw the cgroup ('docker unpause', "
		       "'echo 0 > cgroup.freeze' for cgroup v2, 'echo THAWED > freezer.state' for v1), or wait "
		       "for the engine that froze it; nothing was changed.";
	}
	return cs_error_set(err, CS_EPROC, hint, "cannot %s process %d (%s): it is %s", doing, (int)pid,
			    comm ? comm : "?", why);
}
