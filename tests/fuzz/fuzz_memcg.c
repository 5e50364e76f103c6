/* The parsers of lib/room/memcg.c on the same bytes, read as a value file, as
 * "key value" lines, as /proc/PID/cgroup and as the reply of the helper
 * that reads the initial cgroup namespace, in a buffer of exactly the
 * input's length; the first two lines, as a cgroup path and a mount's root,
 * go through the path arithmetic of a cgroup namespace. Each answer is
 * checked against a plain reference. The first bytes, read as a node's
 * numbers, also go through the room computation. */
#include "fuzz.h"
#include "memcg.h"

#include <errno.h>
#include <limits.h>
#include <stdbool.h>
#include <stdio.h>
#include <string.h>

/* Reference of cs_memcg_parse_value, by strtoull on a terminated copy (a
 * NUL byte in the text is no digit, and not its end either). */
static int ref_value(const char *s, size_t len, long long *out)
{
	while (len && (s[len - 1] == ' ' || s[len - 1] == '\t' || s[len - 1] == '\n'))
		len--;
	if (len == 3 && memcmp(s, "max", 3) == 0) {
		*out = -1;
		return 0;
	}
	if (len == 0)
		return -EINVAL;
	for (size_t i = 0; i < len; i++)
		if (!memchr("0123456789", s[i], 10))
			return -EINVAL;
	while (len > 1 && *s == '0')
		s++, len--;
	if (len > 20)
		return -EINVAL;
	char buf[21];
	memcpy(buf, s, len);
	buf[len] = '\0';
	errno = 0;
	unsigned long long v = strtoull(buf, NULL, 10);
	if (errno == ERANGE)
		return -EINVAL;
	*out = v >= (1ULL << 62) ? -1 : (long long)v;
	return 0;
}

static void check_value(const char *text, size_t size)
{
	long long got = 77, want = 77;
	int r = cs_memcg_parse_value(text, size, &got);
	int w = ref_value(text, size, &want);
	FUZZ_CHECK(r == w);
	FUZZ_CHECK(got == want);
	FUZZ_CHECK(got == 77 || got == -1 || (got >= 0 && got < (1LL << 62)));
}

/* The first line whose first field is key, or NULL; its value in *v, *vlen. */
static const char *ref_line(const char *text, size_t size, const char *key, const char **v, size_t *vlen)
{
	size_t kl = strlen(key);
	for (size_t at = 0; at < size;) {
		const char *line = text + at, *nl = memchr(line, '\n', size - at);
		size_t ll = nl ? (size_t)(nl - line) : size - at;
		at += ll + 1;
		if (ll > kl && memcmp(line, key, kl) == 0 && line[kl] == ' ') {
			size_t skip = kl;
			while (skip < ll && line[skip] == ' ')
				skip++;
			*v = line + skip;
			*vlen = ll - skip;
			return line;
		}
	}
	return NULL;
}

static void check_key(const char *text, size_t size, const char *key)
{
	long long got = 77, want = 77;
	const char *v;
	size_t vlen;
	int r = cs_memcg_parse_key(text, size, key, &got);
	int w = ref_line(text, size, key, &v, &vlen) ? ref_value(v, vlen, &want) : -ENOENT;
	FUZZ_CHECK(r == w);
	FUZZ_CHECK(got == want);
}

/* Whether some line "ID:CONTROLLERS:/..." lists memory among its controllers. */
static bool ref_has_v1(const char *text, size_t size)
{
	for (size_t at = 0; at < size;) {
		const char *line = text + at, *nl = memchr(line, '\n', size - at);
		size_t ll = nl ? (size_t)(nl - line) : size - at;
		at += ll + 1;
		const char *c1 = memchr(line, ':', ll);
		const char *c2 = c1 ? memchr(c1 + 1, ':', ll - (size_t)(c1 + 1 - line)) : NULL;
		if (!c2 || c2 + 1 >= line + ll || c2[1] != '/' || memchr(c2, '\0', (size_t)(line + ll - c2)))
			continue;
		for (const char *c = c1 + 1; c < c2;) {
			const char *comma = memchr(c, ',', (size_t)(c2 - c));
			const char *e = comma ? comma : c2;
			if (e - c == 6 && memcmp(c, "memory", 6) == 0)
				return true;
			c = e + 1;
		}
	}
	return false;
}

static void check_proc_cgroup(const char *text, size_t size)
{
	char big[4096], small[8];
	memset(big, 'x', sizeof(big));
	memset(small, 'x', sizeof(small));
	int v = cs_memcg_parse_proc_cgroup(text, size, big, sizeof(big));
	int vs = cs_memcg_parse_proc_cgroup(text, size, small, sizeof(small));
	FUZZ_CHECK(v >= 0 && v <= 2 && vs >= 0 && vs <= 2);
	FUZZ_CHECK(memchr(big, '\0', sizeof(big)) && memchr(small, '\0', sizeof(small)));
	if (!v) {
		FUZZ_CHECK(big[0] == '\0' && small[0] == '\0' && vs == 0);
		return;
	}
	size_t pl = strlen(big);
	FUZZ_CHECK(big[0] == '/' && !strchr(big, '\n'));
	FUZZ_CHECK(memmem(text, size, big, pl) != NULL);
	/* The memory controller's line wins wherever it is. */
	FUZZ_CHECK((v == 1) == ref_has_v1(text, size));
	/* A smaller buffer takes the same path, or none: never a cut one. */
	FUZZ_CHECK(vs == (pl < sizeof(small) ? v : 0));
	FUZZ_CHECK(vs ? strcmp(small, big) == 0 : small[0] == '\0');
}

static void check_room(const uint8_t *data, size_t size)
{
	long long f[8] = { 0 };
	memcpy(f, data, size < sizeof(f) ? size : sizeof(f));
	cs_memcg_node n = { .version = (int)(f[0] & 3),
			    .usage = f[1],
			    .inactive_file = f[2],
			    .max = f[3],
			    .high = f[4],
			    .swap_max = -1,
			    .memsw_max = f[5],
			    .memsw_usage = f[6],
			    .oom_kills = f[7] };
	const char *which = "x";
	long long limit = 77;
	long long room = cs_memcg_node_room(&n, &which, &limit);
	FUZZ_CHECK(room >= -1);
	FUZZ_CHECK((room < 0) == (which == NULL));
	FUZZ_CHECK(room < 0 ? limit == -1 : limit >= 0 && room <= limit);
	FUZZ_CHECK(room < 0 || limit == n.max || limit == n.high || limit == n.memsw_max);
}

/* Whether s is "" or "/x/y" of names that are neither empty, "." nor "..". */
static bool ref_plain(const char *s)
{
	if (!*s)
		return true;
	if (*s != '/')
		return false;
	char copy[PATH_MAX];
	snprintf(copy, sizeof(copy), "%s/", s + 1);
	for (char *c = copy, *slash; (slash = strchr(c, '/')) != NULL; c = slash + 1) {
		*slash = '\0';
		if (!*c || strcmp(c, ".") == 0 || strcmp(c, "..") == 0)
			return false;
	}
	return true;
}

/* Reference of cs_memcg_below. */
static ssize_t ref_below(const char *path, const char *root)
{
	if (*path != '/' || *root != '/')
		return -1;
	if (strcmp(root, "/") == 0)
		return strcmp(path, "/") == 0 ? 1 : ref_plain(path) ? 0 : -1;
	size_t rl = strlen(root);
	if (strlen(path) < rl || memcmp(path, root, rl) != 0)
		return -1;
	return (path[rl] == '\0' || path[rl] == '/') && ref_plain(path + rl) ? (ssize_t)rl : -1;
}

/* The first two lines as a cgroup path and a mount's root. */
static void check_below(const char *text, size_t size)
{
	char path[PATH_MAX], root[PATH_MAX];
	const char *nl = memchr(text, '\n', size);
	size_t pl = nl ? (size_t)(nl - text) : size;
	const char *r = nl ? nl + 1 : text + size, *nl2 = memchr(r, '\n', (size_t)(text + size - r));
	size_t rl = nl2 ? (size_t)(nl2 - r) : (size_t)(text + size - r);
	if (pl >= sizeof(path) || rl >= sizeof(root) || memchr(text, '\0', pl) || memchr(r, '\0', rl))
		return;
	memcpy(path, text, pl);
	path[pl] = '\0';
	memcpy(root, r, rl);
	root[rl] = '\0';
	ssize_t at = cs_memcg_below(path, root);
	FUZZ_CHECK(at == ref_below(path, root));
	/* What lies below the mount never climbs out of it. */
	size_t len = strlen(path);
	FUZZ_CHECK(at < 0 || path[at] == '\0' ||
		   (path[at] == '/' && !strstr(path + at, "/../") &&
		    !(len - (size_t)at >= 3 && strcmp(path + len - 3, "/..") == 0)));
}

/* A reply parsed is exactly its sections: written again, the same bytes. */
static void check_reply(const char *text, size_t size)
{
	cs_memcg_reply r;
	memset(&r, 0x55, sizeof(r));
	if (cs_memcg_parse_reply(text, size, &r) < 0) {
		FUZZ_CHECK(r.cgroup == NULL && r.n == 0);
		return;
	}
	FUZZ_CHECK(r.n <= CS_MEMCG_REPLY_MOUNTS && r.cgroup == text + (r.cgroup - text));
	char *again = malloc(size + 1);
	FUZZ_CHECK(again != NULL);
	size_t at = (size_t)snprintf(again, size + 1, "C %zu\n", r.cgroup_len);
	FUZZ_CHECK(at + r.cgroup_len <= size);
	memcpy(again + at, r.cgroup, r.cgroup_len);
	at += r.cgroup_len;
	for (size_t i = 0; i < r.n; i++) {
		FUZZ_CHECK(r.mounts[i].pid >= 0);
		at += (size_t)snprintf(again + at, size + 1 - at, "M %d %zu\n", (int)r.mounts[i].pid, r.mounts[i].len);
		FUZZ_CHECK(at + r.mounts[i].len <= size);
		memcpy(again + at, r.mounts[i].mountinfo, r.mounts[i].len);
		at += r.mounts[i].len;
		/* The sections are what the other parsers read next. */
		cs_cgroup_mounts m;
		cs_cgroup_mounts_parse(r.mounts[i].mountinfo, r.mounts[i].len, &m);
	}
	FUZZ_CHECK(at == size && memcmp(again, text, size) == 0);
	char path[64];
	cs_memcg_parse_proc_cgroup(r.cgroup, r.cgroup_len, path, sizeof(path));
	free(again);
}

/* Another controller's line (lib/room/pids.c asks for "pids"): a path of
 * the text, one line long, or none. */
static void check_pids_cgroup(const char *text, size_t size)
{
	char path[4096];
	memset(path, 'x', sizeof(path));
	int v = cs_cgroup_parse_controller(text, size, "pids", path, sizeof(path));
	FUZZ_CHECK(v >= 0 && v <= 2 && memchr(path, '\0', sizeof(path)));
	if (!v) {
		FUZZ_CHECK(path[0] == '\0');
		return;
	}
	FUZZ_CHECK(path[0] == '/' && !strchr(path, '\n') && memmem(text, size, path, strlen(path)) != NULL);
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
	/* Exactly size bytes: a parser that reads on finds no terminator. */
	char *text = fuzz_copy(data, size, 0);
	check_value(text, size);
	check_key(text, size, "oom_kill");
	check_key(text, size, "inactive_file");
	check_key(text, size, "total_inactive_file");
	check_proc_cgroup(text, size);
	check_pids_cgroup(text, size);
	check_below(text, size);
	check_reply(text, size);
	check_room(data, size);
	free(text);
	return 0;
}
