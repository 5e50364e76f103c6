/* Memory cgroup chains: the cgroup of a process from /proc/PID/cgroup,
 * found under the mount mountinfo names for its hierarchy, and each of its
 * ancestors up to the top of that mount. Every file is text from the
 * kernel, read as untrusted: a process may vanish, a cgroup may be removed
 * between two reads, and a test (or a hostile bind mount) may put anything
 * in its place. */
#include "memcg.h"
#include "proc.h"
#include "util.h"

#include <fcntl.h>
#include <limits.h>
#include <stdarg.h>
#include <stdint.h>
#include <stdio.h>
#include <string.h>

/* v1 writes "no limit" as LLONG_MAX rounded down to a page; no real amount
 * of memory comes near 2^62. */
#define UNLIMITED (1LL << 62)

/* The line at *p (up to end), its end in *le; advances *p past it. False
 * when no line is left. */
static bool next_line(const char **p, const char *end, const char **line, const char **le)
{
	if (*p >= end)
		return false;
	const char *nl = memchr(*p, '\n', (size_t)(end - *p));
	*line = *p;
	*le = nl ? nl : end;
	*p = nl ? nl + 1 : end;
	return true;
}

static bool is_blank(char c)
{
	return c == ' ' || c == '\t' || c == '\n';
}

int cs_memcg_parse_value(const char *text, size_t len, long long *out)
{
	while (len && is_blank(text[len - 1]))
		len--;
	if (len == 3 && memcmp(text, "max", 3) == 0) {
		*out = -1;
		return 0;
	}
	if (len == 0)
		return -EINVAL;
	unsigned long long v = 0;
	for (size_t i = 0; i < len; i++) {
		if (text[i] < '0' || text[i] > '9')
			return -EINVAL;
		unsigned d = (unsigned)(text[i] - '0');
		if (v > (ULLONG_MAX - d) / 10)
			return -EINVAL;
		v = v * 10 + d;
	}
	*out = v >= (unsigned long long)UNLIMITED ? -1 : (long long)v;
	return 0;
}

int cs_memcg_parse_key(const char *text, size_t len, const char *key, long long *out)
{
	size_t kl = strlen(key);
	if (kl == 0)
		return -EINVAL;
	const char *p = text, *end = text + len, *line, *le;
	while (next_line(&p, end, &line, &le)) {
		if ((size_t)(le - line) <= kl || memcmp(line, key, kl) != 0 || line[kl] != ' ')
			continue;
		const char *v = line + kl;
		while (v < le && *v == ' ')
			v++;
		return cs_memcg_parse_value(v, (size_t)(le - v), out);
	}
	return -ENOENT;
}

/* One line "ID:CONTROLLERS:PATH" of /proc/PID/cgroup: 1 for a v1 line with
 * the memory controller, 2 for the v2 line "0::PATH", else 0. */
static int cgroup_line(const char *p, const char *le, const char **path, size_t *plen)
{
	const char *c1 = memchr(p, ':', (size_t)(le - p));
	const char *c2 = c1 ? memchr(c1 + 1, ':', (size_t)(le - c1 - 1)) : NULL;
	if (!c2 || c2 + 1 >= le || c2[1] != '/' || memchr(c2, '\0', (size_t)(le - c2)))
		return 0;
	*path = c2 + 1;
	*plen = (size_t)(le - *path);
	if (c2 == c1 + 1)
		return c1 - p == 1 && *p == '0' ? 2 : 0;
	return cs_cgroup_has_option(c1 + 1, (size_t)(c2 - c1 - 1), "memory") ? 1 : 0;
}

int cs_memcg_parse_proc_cgroup(const char *text, size_t len, char *buf, size_t size)
{
	const char *p = text, *end = text + len, *line, *le, *found = NULL;
	size_t flen = 0;
	int version = 0;
	while (version != 1 && next_line(&p, end, &line, &le)) {
		const char *path;
		size_t plen;
		int v = cgroup_line(line, le, &path, &plen);
		/* On a hybrid host the v2 line names a hierarchy without the memory controller. */
		if (v == 1 || (v == 2 && !version)) {
			found = path;
			flen = plen;
			version = v;
		}
	}
	if (size)
		buf[0] = '\0';
	if (!version || flen >= size)
		return 0;
	memcpy(buf, found, flen);
	buf[flen] = '\0';
	return version;
}

long long cs_meminfo_available(const char *procdir)
{
	char path[PATH_MAX], buf[16384];
	if (snprintf(path, sizeof(path), "%s/meminfo", procdir) >= (int)sizeof(path))
		return -1;
	ssize_t n = cs_read_at(AT_FDCWD, path, buf, sizeof(buf));
	const char *p = buf, *end = buf + (n > 0 ? n : 0), *line, *le;
	static const char key[] = "MemAvailable:";
	while (next_line(&p, end, &line, &le)) {
		if ((size_t)(le - line) < sizeof(key) - 1 || memcmp(line, key, sizeof(key) - 1) != 0)
			continue;
		const char *v = line + sizeof(key) - 1;
		while (v < le && (*v == ' ' || *v == '\t'))
			v++;
		const char *unit = memmem(v, (size_t)(le - v), " kB", 3);
		long long kb;
		if (!unit || unit + 3 != le || cs_memcg_parse_value(v, (size_t)(unit - v), &kb) < 0 || kb < 0 ||
		    kb > LLONG_MAX / 1024)
			return -1;
		return kb * 1024;
	}
	return -1;
}

/* ---- the room under a node's limits ---------------------------------- */

/* What the kernel would not give back under pressure: usage less the
 * inactive page cache; -1 when the usage is unknown. */
static long long working_set(long long usage, long long inactive_file)
{
	if (usage < 0)
		return -1;
	if (inactive_file <= 0)
		return usage;
	return usage > inactive_file ? usage - inactive_file : 0;
}

long long cs_memcg_node_room(const cs_memcg_node *n, const char **which, long long *limit)
{
	long long ws = working_set(n->usage, n->inactive_file);
	const struct {
		const char *name;
		long long limit, in_use;
	} c[] = {
		{ n->version == 1 ? "memory.limit_in_bytes" : "memory.max", n->max, ws },
		{ "memory.high", n->high, ws },
		{ "memory.memsw.limit_in_bytes", n->memsw_max, working_set(n->memsw_usage, n->inactive_file) },
	};
	long long best = -1, best_limit = -1;
	const char *best_name = NULL;
	for (size_t i = 0; i < CS_ARRAY_SIZE(c); i++) {
		if (c[i].limit < 0 || c[i].in_use < 0)
			continue;
		long long room = c[i].limit > c[i].in_use ? c[i].limit - c[i].in_use : 0;
		if (best < 0 || room < best) {
			best = room;
			best_limit = c[i].limit;
			best_name = c[i].name;
		}
	}
	if (which)
		*which = best_name;
	if (limit)
		*limit = best_limit;
	return best;
}

/* ---- one node ----------------------------------------------------------- */

typedef struct memcg_file {
	const char *name;
	const char *key; /* NULL: a file of one value */
	size_t off; /* of the long long in cs_memcg_node */
} memcg_file;

#define NODE_FIELD(f) offsetof(cs_memcg_node, f)

static const memcg_file v2_files[] = {
	{ "memory.current", NULL, NODE_FIELD(usage) },
	{ "memory.stat", "inactive_file", NODE_FIELD(inactive_file) },
	{ "memory.max", NULL, NODE_FIELD(max) },
	{ "memory.high", NULL, NODE_FIELD(high) },
	{ "memory.swap.max", NULL, NODE_FIELD(swap_max) },
	{ "memory.events", "oom_kill", NODE_FIELD(oom_kills) },
};

static const memcg_file v1_files[] = {
	{ "memory.usage_in_bytes", NULL, NODE_FIELD(usage) },
	/* total_: the hierarchy below counts, as it does in usage_in_bytes. */
	{ "memory.stat", "total_inactive_file", NODE_FIELD(inactive_file) },
	{ "memory.limit_in_bytes", NULL, NODE_FIELD(max) },
	{ "memory.memsw.limit_in_bytes", NULL, NODE_FIELD(memsw_max) },
	{ "memory.memsw.usage_in_bytes", NULL, NODE_FIELD(memsw_usage) },
	{ "memory.oom_control", "oom_kill", NODE_FIELD(oom_kills) },
};

/* One file of a node into *out (left alone unless the file reads and parses). */
static bool read_file(int dfd, const memcg_file *f, long long *out)
{
	char buf[16384];
	ssize_t n = cs_read_at(dfd, f->name, buf, f->key ? sizeof(buf) : 64);
	/* A value file that fills the buffer was cut: its digits are not all there. */
	if (n <= 0 || (!f->key && n >= 63))
		return false;
	int r = f->key ? cs_memcg_parse_key(buf, (size_t)n, f->key, out) : cs_memcg_parse_value(buf, (size_t)n, out);
	return r == 0;
}

/* The files of the node open at dfd; the number of those that were read. */
static int read_node(int dfd, int version, cs_memcg_node *n)
{
	n->version = version;
	n->usage = n->max = n->high = n->swap_max = n->memsw_max = n->memsw_usage = n->oom_kills = -1;
	n->inactive_file = 0;
	const memcg_file *files = version == 2 ? v2_files : v1_files;
	size_t count = version == 2 ? CS_ARRAY_SIZE(v2_files) : CS_ARRAY_SIZE(v1_files);
	int got = 0;
	for (size_t i = 0; i < count; i++)
		got += read_file(dfd, &files[i], (long long *)((char *)n + files[i].off));
	if (n->inactive_file < 0)
		n->inactive_file = 0;
	return got;
}

/* ---- the chain ---------------------------------------------------------- */

/* Adds a reason to out->problem, after any given before, sanitized: paths
 * come from /proc and mountinfo. */
static void add_problem(cs_memcg *out, const char *fmt, ...) __attribute__((format(printf, 2, 3)));
static void add_problem(cs_memcg *out, const char *fmt, ...)
{
	char s[1024];
	size_t at = strlen(out->problem);
	int n = at ? snprintf(s, sizeof(s), "%s; ", out->problem) : 0;
	va_list ap;
	va_start(ap, fmt);
	vsnprintf(s + n, sizeof(s) - (size_t)n, fmt, ap);
	va_end(ap);
	cs_sanitize(out->problem, sizeof(out->problem), s, strlen(s));
}

/* Whether rel is "" or "/a/b" without an empty, "." or ".." component, so
 * that it names a directory below the mount and never one beside it. */
static bool plain_rel(const char *rel)
{
	if (!rel[0])
		return true;
	if (rel[0] != '/')
		return false;
	for (const char *c = rel + 1;;) {
		size_t l = strcspn(c, "/");
		if (l == 0 || (l == 1 && c[0] == '.') || (l == 2 && c[0] == '.' && c[1] == '.'))
			return false;
		if (!c[l])
			return true;
		c += l + 1;
	}
}

/* How much of path is the mount's root: 0 for "/", its length when path
 * is the root or below it; -1 when path lies outside what the mount shows. */
static ssize_t root_len(const char *path, const char *root)
{
	if (strcmp(root, "/") == 0)
		return 0;
	size_t rl = strlen(root);
	if (strncmp(path, root, rl) != 0 || (path[rl] != '\0' && path[rl] != '/'))
		return -1;
	return (ssize_t)rl;
}

/* The top of a mount whose root is "/" may still not be the hierarchy's
 * root: a cgroup namespace shows its own cgroup as "/". The real root has
 * no memory.max (v2) and takes no limit (v1), so either one gives it away. */
static bool top_is_hidden_root(int dfd, const cs_memcg_node *n, int version)
{
	return version == 2 ? faccessat(dfd, "memory.max", F_OK, 0) == 0 : n->max >= 0;
}

/* Adds the node open at dfd, the first cut bytes of path, unless none of
 * its files can be read: a v2 cgroup has memory files only where its parent
 * enables the controller, and one without them is passed over, not the end. */
static void add_node(int dfd, const char *path, size_t cut, bool top_of_root, int version, cs_memcg *out)
{
	cs_memcg_node *n = &out->node[out->n];
	if (read_node(dfd, version, n) == 0)
		return;
	cs_sanitize(n->path, sizeof(n->path), cut ? path : "/", cut ? cut : 1);
	out->n++;
	if (top_of_root && top_is_hidden_root(dfd, n, version)) {
		out->top_hidden = true;
		add_problem(out,
			    "the top cgroup here, %s, is not the hierarchy's root (a cgroup namespace): "
			    "limits above it cannot be read here",
			    n->path);
	}
}

/* Reads the nodes from the cgroup path up to the mount's top, the first rl
 * bytes of path; root_slash: the mount shows "/" at its top. */
static void walk(int mntfd, const char *path, size_t rl, bool root_slash, int version, cs_memcg *out)
{
	char rel[PATH_MAX];
	for (size_t cut = strlen(path);;) {
		if (cut > rl)
			snprintf(rel, sizeof(rel), "%.*s", (int)(cut - rl - 1), path + rl + 1);
		else
			snprintf(rel, sizeof(rel), ".");
		_cleanup_close_ int dfd = openat(mntfd, rel, O_RDONLY | O_DIRECTORY | O_CLOEXEC);
		if (dfd >= 0 && out->n == CS_MEMCG_DEPTH) {
			add_problem(out, "more than %d levels: the cgroups above %s were not read", CS_MEMCG_DEPTH,
				    out->node[out->n - 1].path);
			return;
		}
		if (dfd >= 0)
			add_node(dfd, path, cut, cut <= rl && root_slash, version, out);
		if (cut <= rl)
			return;
		cut = (size_t)((const char *)memrchr(path + rl, '/', cut - rl) - path);
	}
}

/* The memory cgroup in <procdir>/<who>/cgroup into path: 1 or 2 for its
 * version, 0 when none, or -errno. */
static int proc_memcg(const char *procdir, const char *who, char *path, size_t size)
{
	char name[PATH_MAX];
	if (snprintf(name, sizeof(name), "%s/%s/cgroup", procdir, who) >= (int)sizeof(name))
		return -ENAMETOOLONG;
	size_t cap = (size_t)64 * 1024;
	_cleanup_free_ char *buf = malloc(cap);
	if (!buf)
		return -ENOMEM;
	ssize_t n = cs_read_at(AT_FDCWD, name, buf, cap);
	if (n < 0)
		return (int)n;
	return cs_memcg_parse_proc_cgroup(buf, (size_t)n, path, size);
}

int cs_memcg_read(const char *procdir, pid_t pid, const cs_cgroup_mounts *m, cs_memcg *out)
{
	memset(out, 0, sizeof(*out));
	char who[16] = "self", path[PATH_MAX];
	if (pid > 0)
		snprintf(who, sizeof(who), "%d", (int)pid);
	int version = proc_memcg(procdir, who, path, sizeof(path));
	if (version < 0)
		return version;
	if (version == 0) {
		add_problem(out, "/proc/%s/cgroup names no memory cgroup", who);
		return 0;
	}
	const char *mnt = version == 1 ? m->v1mem : m->v2, *root = version == 1 ? m->v1mem_root : m->v2_root;
	if (!mnt[0]) {
		add_problem(out, "%s is not mounted here", version == 1 ? "the v1 memory controller" : "cgroup v2");
		return 0;
	}
	ssize_t rl = root_len(path, root);
	/* The hierarchy's root is "" below the mount, as any other cgroup "/x". */
	if (rl == 0 && strcmp(path, "/") == 0)
		path[0] = '\0';
	if (rl < 0 || !plain_rel(path + rl)) {
		add_problem(out, "cgroup %s lies outside %s, which the mount at %s shows", path, root, mnt);
		return 0;
	}
	_cleanup_close_ int mntfd = open(mnt, O_RDONLY | O_DIRECTORY | O_CLOEXEC);
	if (mntfd < 0) {
		add_problem(out, "cannot open %s: %s", mnt, strerror(errno));
		return 0;
	}
	if (rl > 0) {
		out->top_hidden = true;
		add_problem(out, "the mount at %s shows cgroup %s at its top: limits above it cannot be read here", mnt,
			    root);
	}
	walk(mntfd, path, (size_t)rl, rl == 0, version, out);
	if (out->n == 0) {
		add_problem(out, "no memory file of cgroup %s or its parents can be read under %s",
			    path[0] ? path : "/", mnt);
		return 0;
	}
	out->version = version;
	return 0;
}

int cs_memcg_reread(const cs_cgroup_mounts *m, const cs_memcg_node *was, cs_memcg_node *out)
{
	const char *mnt = was->version == 1 ? m->v1mem : m->v2, *root = was->version == 1 ? m->v1mem_root : m->v2_root;
	const char *path = strcmp(was->path, "/") == 0 ? "" : was->path;
	ssize_t rl = root_len(path, root);
	if (!mnt[0] || rl < 0 || !plain_rel(path + rl))
		return -ENOENT;
	char rel[PATH_MAX];
	snprintf(rel, sizeof(rel), "%s", path[rl] ? path + rl + 1 : ".");
	_cleanup_close_ int mntfd = open(mnt, O_RDONLY | O_DIRECTORY | O_CLOEXEC);
	_cleanup_close_ int dfd = mntfd < 0 ? -1 : openat(mntfd, rel, O_RDONLY | O_DIRECTORY | O_CLOEXEC);
	if (dfd < 0)
		return -errno;
	*out = *was;
	return read_node(dfd, was->version, out) > 0 ? 0 : -ENOENT;
}
