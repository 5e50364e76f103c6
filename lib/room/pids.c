/* The threads a process may still start (pids.h). */
#include "pids.h"
#include "halt.h"
#include "memcg.h"
#include "proc.h"
#include "util.h"

#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

long long cs_pids_parse_proc_cgroup(const char *text, size_t tlen, size_t *len, int *version)
{
	long long at = -1;
	*version = 0;
	*len = 0;
	for (const char *p = text, *end = text + tlen; p < end && *version != 1;) {
		const char *nl = memchr(p, '\n', (size_t)(end - p));
		const char *le = nl ? nl : end;
		const char *c1 = memchr(p, ':', (size_t)(le - p));
		const char *c2 = c1 ? memchr(c1 + 1, ':', (size_t)(le - c1 - 1)) : NULL;
		if (c2 && c2 + 1 < le && c2[1] == '/' && !memchr(c2, '\0', (size_t)(le - c2))) {
			bool v2 = c2 == c1 + 1 && c1 - p == 1 && *p == '0';
			bool v1 = c2 > c1 + 1 && cs_cgroup_has_option(c1 + 1, (size_t)(c2 - c1 - 1), "pids");
			/* on a hybrid host the v1 controller is the one that counts */
			if (v1 || (v2 && !*version)) {
				at = c2 + 1 - text;
				*len = (size_t)(le - c2 - 1);
				*version = v1 ? 1 : 2;
			}
		}
		p = nl ? nl + 1 : end;
	}
	return at;
}

/* A value file of the cgroup; -1 for "max" or when unreadable. */
static long long value(const char *mnt, const char *root, const char *path, size_t plen, const char *name)
{
	char file[PATH_MAX], buf[64];
	long long v;
	if (!cs_cgroup_file(mnt, root, path, plen, name, file, sizeof(file)))
		return -1;
	ssize_t n = cs_read_at(AT_FDCWD, file, buf, sizeof(buf));
	return n > 0 && cs_memcg_parse_value(buf, (size_t)n, &v) == 0 ? v : -1;
}

long long cs_pids_room(pid_t pid, char *where, size_t size)
{
	char file[64], text[4096];
	snprintf(file, sizeof(file), "%s/%d/cgroup", cs_proc_dir(), (int)pid);
	ssize_t n = cs_read_at(AT_FDCWD, file, text, sizeof(text));
	size_t plen;
	int version;
	long long at = n > 0 ? cs_pids_parse_proc_cgroup(text, (size_t)n, &plen, &version) : -1;
	_cleanup_free_ cs_cgroup_mounts *m = calloc(1, sizeof(*m));
	if (size)
		where[0] = '\0';
	if (at < 0 || !m || cs_cgroup_mounts_read(cs_proc_dir(), m) < 0)
		return -1;
	const char *mnt = version == 1 ? m->v1pids : m->v2, *root = version == 1 ? m->v1pids_root : m->v2_root;
	const char *path = text + at;
	long long best = -1;
	/* its own cgroup, then each one above it */
	while (mnt[0] && plen > 1) {
		long long max = value(mnt, root, path, plen, "pids.max");
		long long cur = value(mnt, root, path, plen, "pids.current");
		if (max >= 0 && cur >= 0 && (best < 0 || max - cur < best)) {
			best = max > cur ? max - cur : 0;
			cs_sanitize(where, size, path, plen);
		}
		while (plen > 1 && path[plen - 1] != '/')
			plen--;
		if (plen > 1)
			plen--; /* the parent's path, without its '/' */
	}
	return best;
}
