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
	char file[64], text[4096], path[PATH_MAX];
	snprintf(file, sizeof(file), "%s/%d/cgroup", cs_proc_dir(), (int)pid);
	ssize_t n = cs_read_at(AT_FDCWD, file, text, sizeof(text));
	int version = n > 0 ? cs_cgroup_parse_controller(text, (size_t)n, "pids", path, sizeof(path)) : 0;
	_cleanup_free_ cs_cgroup_mounts *m = calloc(1, sizeof(*m));
	if (size)
		where[0] = '\0';
	if (version == 0 || !m || cs_cgroup_mounts_read(cs_proc_dir(), m) < 0)
		return -1;
	const char *mnt = version == 1 ? m->v1pids : m->v2, *root = version == 1 ? m->v1pids_root : m->v2_root;
	size_t plen = strlen(path);
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
