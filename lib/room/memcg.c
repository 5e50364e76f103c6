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
#include <sys/stat.h>

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
 * the controller, 2 for the v2 line "0::PATH", else 0. */
static int cgroup_line(const char *p, const char *le, const char *controller, const char **path, size_t *plen)
{
	const char *c1 = memchr(p, ':', (size_t)(le - p));
	const char *c2 = c1 ? memchr(c1 + 1, ':', (size_t)(le - c1 - 1)) : NULL;
	if (!c2 || c2 + 1 >= le || c2[1] != '/' || memchr(c2, '\0', (size_t)(le - c2)))
		return 0;
	*path = c2 + 1;
	*plen = (size_t)(le - *path);
	if (c2 == c1 + 1)
		return c1 - p == 1 && *p == '0' ? 2 : 0;
	return cs_cgroup_has_option(c1 + 1, (size_t)(c2 - c1 - 1), controller) ? 1 : 0;
}

int cs_memcg_parse_proc_cgroup(const char *text, size_t len, char *buf, size_t size)
{
	return cs_cgroup_parse_controller(text, len, "memory", buf, size);
}

int cs_cgroup_parse_controller(const char *text, size_t len, const char *controller, char *buf, size_t size)
{
	const char *p = text, *end = text + len, *line, *le, *found = NULL;
	size_t flen = 0;
	int version = 0;
	while (version != 1 && next_line(&p, end, &line, &le)) {
		const char *path;
		size_t plen;
		int v = cgroup_line(line, le, controller, &path, &plen);
		/* On a hybrid host the v2 line names a hierarchy without the v1 controller. */
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
	char s[2048];
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

/* Both the path and the mount's root are written from the same cgroup
 * namespace ("/.." for each level above it, up to the ancestor they share
 * with it, then down), so a cgroup below the root begins with the root's
 * own text. The root's "/.."s stay as they are: they name the mount's top. */
ssize_t cs_memcg_below(const char *path, const char *root)
{
	if (root[0] != '/' || path[0] != '/')
		return -1;
	/* The hierarchy's root is "" below a mount of "/", as any other cgroup "/x". */
	if (strcmp(root, "/") == 0)
		return strcmp(path, "/") == 0 ? 1 : plain_rel(path) ? 0 : -1;
	size_t rl = strlen(root);
	if (strncmp(path, root, rl) != 0 || (path[rl] != '\0' && path[rl] != '/') || !plain_rel(path + rl))
		return -1;
	return (ssize_t)rl;
}

/* Path components in the first len bytes of s: "/" has none, "/a/b" two. */
static size_t components(const char *s, size_t len)
{
	size_t c = 0;
	for (size_t i = 0; i + 1 < len; i++)
		c += s[i] == '/' && s[i + 1] != '/';
	return c;
}

size_t cs_memcg_reach(const cs_memcg *cg)
{
	if (cg->n == 0)
		return 0;
	return components(cg->path, strlen(cg->path)) - components(cg->path, cg->node[cg->n - 1].len);
}

/* Adds the node open at dfd, the first cut bytes of path (the part below
 * the mount begins at at; the mount's directory is mlen bytes of out->dir),
 * unless none of its files can be read: a v2 cgroup has memory files only
 * where its parent enables the controller, and one without them is passed
 * over, not the end. */
static void add_node(int dfd, const char *path, size_t cut, size_t at, size_t mlen, int version, cs_memcg *out)
{
	cs_memcg_node *n = &out->node[out->n];
	struct stat st;
	if (fstat(dfd, &st) < 0 || read_node(dfd, version, n) == 0)
		return;
	n->dev = st.st_dev;
	n->ino = st.st_ino;
	/* The name as out->path shows it: sanitizing works character by
	 * character, so a prefix that ends before a '/' sanitizes to a prefix. */
	char shown[PATH_MAX];
	cs_sanitize(shown, sizeof(shown), path, cut);
	size_t len = strlen(shown);
	n->len = (unsigned short)(len ? len : 1);
	n->dirlen = (unsigned short)(mlen + (cut > at ? cut - at : 0));
	out->n++;
}

/* v1: the smallest of memory.stat's hierarchical limits of the top, which
 * take in every ancestor, those hidden too; -1 none, -2 unknown. */
static long long hierarchical_limit(int dfd)
{
	char buf[16384];
	ssize_t n = cs_read_at(dfd, "memory.stat", buf, sizeof(buf));
	long long mem, memsw;
	if (n <= 0 || cs_memcg_parse_key(buf, (size_t)n, "hierarchical_memory_limit", &mem) < 0)
		return -2;
	if (cs_memcg_parse_key(buf, (size_t)n, "hierarchical_memsw_limit", &memsw) < 0)
		memsw = -1;
	return mem < 0 ? memsw : memsw < 0 || mem < memsw ? mem : memsw;
}

/* Whether the cgroups above the top of the mount (open at dfd; top: its
 * node when read) may hold a limit that this chain does not show. A
 * cgroup namespace shows its own cgroup as "/", in mountinfo and in
 * /proc/PID/cgroup alike: only the files at the top give it away. The v2
 * root has neither memory.max nor cgroup.type; the v1 root takes no limit,
 * and a v1 top's memory.stat names the smallest limit above it. */
static bool limits_above(int dfd, int version, const cs_memcg_node *top, cs_memcg *out)
{
	if (version == 2)
		return faccessat(dfd, "memory.max", F_OK, 0) == 0 || faccessat(dfd, "cgroup.type", F_OK, 0) == 0;
	long long own = -1, hier = hierarchical_limit(dfd);
	if (top && top->max >= 0)
		own = top->max;
	if (top && top->memsw_max >= 0 && (own < 0 || top->memsw_max < own))
		own = top->memsw_max;
	if (hier >= 0 && (own < 0 || hier < own))
		out->hidden_limit = hier;
	/* No memory.stat to tell (not the kernel's own files): only a limit
	 * of the top's own says that it is not the root. */
	return own >= 0 || out->hidden_limit >= 0;
}

/* The end of a walk at the mount's top (open at dfd, -1 when it cannot be
 * opened): the whole chain, or part of it and why. */
static void at_top(int dfd, int version, size_t mlen, const char *why, cs_memcg *out)
{
	const cs_memcg_node *top = out->n ? &out->node[out->n - 1] : NULL;
	if (top && top->dirlen != mlen)
		top = NULL;
	if (dfd >= 0 && !limits_above(dfd, version, top, out)) {
		out->seen = CS_MEMCG_WHOLE;
		return;
	}
	out->seen = CS_MEMCG_PART;
	if (!out->n)
		return;
	const cs_memcg_node *last = &out->node[out->n - 1];
	char above[128] = "";
	if (out->hidden_limit >= 0)
		snprintf(above, sizeof(above), " (its memory.stat says one of them has a limit of %.2f GiB)",
			 (double)out->hidden_limit / (1024.0 * 1024 * 1024));
	add_problem(out, "the cgroups above %.*s cannot be read here%s: %s", (int)last->len, out->path, above,
		    dfd >= 0 ? why : "the mount's top cannot be opened");
}

/* Reads the nodes from the cgroup path up to the mount's top, where the
 * part of path below the mount begins at at; the mount's directory is
 * open at mntfd, and named by out->dir's first mlen bytes. */
static void walk(int mntfd, const char *path, size_t at, size_t mlen, int version, const char *why, cs_memcg *out)
{
	char rel[PATH_MAX];
	for (size_t cut = strlen(path);;) {
		bool top = cut <= at;
		if (top)
			snprintf(rel, sizeof(rel), ".");
		else
			snprintf(rel, sizeof(rel), "%.*s", (int)(cut - at - 1), path + at + 1);
		_cleanup_close_ int dfd = openat(mntfd, rel, O_RDONLY | O_DIRECTORY | O_CLOEXEC);
		if (dfd >= 0 && out->n == CS_MEMCG_DEPTH) {
			out->seen = CS_MEMCG_PART;
			add_problem(out, "more than %d levels: the cgroups above %.*s were not read", CS_MEMCG_DEPTH,
				    (int)out->node[out->n - 1].len, out->path);
			return;
		}
		if (dfd >= 0)
			add_node(dfd, path, cut, at, mlen, version, out);
		if (top) {
			at_top(dfd, version, mlen, why, out);
			return;
		}
		cut = (size_t)((const char *)memrchr(path + at, '/', cut - at) - path);
	}
}

void cs_memcg_read_view(const cs_memcg_view *v, cs_memcg *out)
{
	memset(out, 0, sizeof(*out));
	out->route = v->route;
	out->hidden_limit = -1;
	char path[PATH_MAX];
	int version = cs_memcg_parse_proc_cgroup(v->cgroup, v->cgroup_len, path, sizeof(path));
	if (version == 0) {
		add_problem(out, "its /proc/PID/cgroup names no memory cgroup");
		return;
	}
	out->seen = CS_MEMCG_UNREAD;
	cs_sanitize(out->path, sizeof(out->path), path, strlen(path));
	const char *mnt = version == 1 ? v->m->v1mem : v->m->v2,
		   *root = version == 1 ? v->m->v1mem_root : v->m->v2_root;
	if (!mnt[0]) {
		add_problem(out, "%s is not mounted here", version == 1 ? "the v1 memory controller" : "cgroup v2");
		return;
	}
	ssize_t at = cs_memcg_below(path, root);
	if (at < 0) {
		add_problem(out, "cgroup %s lies outside %s, which the mount at %s shows", path, root, mnt);
		return;
	}
	size_t plen = strlen(path), below = (size_t)at < plen ? plen - (size_t)at : 0;
	int mlen = snprintf(out->dir, sizeof(out->dir), "%s%s", v->prefix, mnt);
	_cleanup_close_ int mntfd = -1;
	if (mlen > 0 && (size_t)mlen < sizeof(out->dir))
		mntfd = open(out->dir, O_RDONLY | O_DIRECTORY | O_CLOEXEC);
	if (mntfd < 0) {
		add_problem(out, "cannot open %s%s: %s", v->prefix, mnt, strerror(mlen > 0 ? errno : ENAMETOOLONG));
		out->dir[0] = '\0';
		return;
	}
	/* The own cgroup's directory, kept to read its nodes again later. */
	if ((size_t)mlen + below < sizeof(out->dir))
		memcpy(out->dir + mlen, path + at, below + 1);
	else
		out->dir[0] = '\0';
	char why[1024];
	if (strcmp(root, "/") == 0)
		snprintf(why, sizeof(why), "its top is not the hierarchy's root (a cgroup namespace)");
	else
		snprintf(why, sizeof(why), "the mount at %.400s shows cgroup %.500s at its top", mnt, root);
	walk(mntfd, path, (size_t)at, (size_t)mlen, version, why, out);
	if (out->n == 0) {
		out->seen = CS_MEMCG_UNREAD;
		add_problem(out, "no memory file of cgroup %s or its parents can be read under %s", path, mnt);
		return;
	}
	out->version = version;
}

int cs_memcg_reread(const cs_memcg *cg, size_t k, cs_memcg_node *out)
{
	if (k >= cg->n || !cg->dir[0])
		return -ENOENT;
	const cs_memcg_node *was = &cg->node[k];
	char dir[PATH_MAX];
	snprintf(dir, sizeof(dir), "%.*s", (int)was->dirlen, cg->dir);
	_cleanup_close_ int dfd = open(dir, O_RDONLY | O_DIRECTORY | O_CLOEXEC);
	struct stat st;
	if (dfd < 0 || fstat(dfd, &st) < 0)
		return -errno;
	/* Removed and made again under the same name: another cgroup. */
	if (st.st_dev != was->dev || st.st_ino != was->ino)
		return -ENOENT;
	*out = *was;
	return read_node(dfd, was->version, out) > 0 ? 0 : -ENOENT;
}

const cs_memcg_node *cs_memcg_find(const cs_memcg *cg, const cs_memcg_node *n)
{
	for (size_t k = 0; k < cg->n; k++)
		if (cg->node[k].version == n->version && cg->node[k].dev == n->dev && cg->node[k].ino == n->ino)
			return &cg->node[k];
	return NULL;
}
