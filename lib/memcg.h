/* A process's memory cgroup chain, read before a checkpoint: the driver
 * copies each process's GPU memory into that process's own host memory,
 * which the kernel charges to its memory cgroup, and a chain without room
 * for it ends with the OOM killer. cgroup v2 and v1 (also on hybrid hosts,
 * where v1's memory controller is the one that counts). */
#ifndef CS_MEMCG_H
#define CS_MEMCG_H

#include "halt.h"

#include <stdbool.h>
#include <stddef.h>
#include <sys/types.h>

#define CS_MEMCG_DEPTH 32

typedef struct cs_memcg_node {
	char path[256]; /* the cgroup as /proc/PID/cgroup names it, e.g. "/kubepods/pod1/ctr" (sanitized) */
	int version; /* 1 or 2 */
	long long usage; /* v2 memory.current, v1 memory.usage_in_bytes; -1 unreadable */
	long long inactive_file; /* reclaimable page cache: v2 memory.stat inactive_file, v1 total_inactive_file; 0 unknown */
	long long max; /* v2 memory.max, v1 memory.limit_in_bytes; -1 none ("max", or v1's "unlimited" >= 2^62) or unreadable */
	long long high; /* v2 memory.high; -1 none, or v1 */
	long long swap_max; /* v2 memory.swap.max; -1 none or unknown (v1: -1) */
	long long memsw_max; /* v1 memory.memsw.limit_in_bytes; -1 none / v2 */
	long long memsw_usage; /* v1 memory.memsw.usage_in_bytes; -1 */
	long long oom_kills; /* v2 memory.events "oom_kill", v1 memory.oom_control "oom_kill"; -1 unknown */
} cs_memcg_node;

typedef struct cs_memcg {
	int version; /* 0: no memory cgroup could be read (problem says why) */
	/* The process's own cgroup first, then each ancestor up to the top the
	 * mount shows; nodes with no file readable are skipped. */
	cs_memcg_node node[CS_MEMCG_DEPTH];
	size_t n;
	/* The mount shows a cgroup below the hierarchy's root (cgroup namespace,
	 * bind mount of a sub-cgroup): limits above it exist but cannot be read here. */
	bool top_hidden;
	char problem[256]; /* "" or why less than the whole chain could be read */
} cs_memcg;

/* pid's memory cgroup chain (pid 0: the caller, <procdir>/self), read
 * through the cgroup mounts m describes. 0, or -errno: -ENOENT / -ESRCH
 * when the process vanished. A process with no memory cgroup (no controller
 * mounted, path outside what the mount shows) is not an error: out->version
 * is 0 and out->problem says why. */
int cs_memcg_read(const char *procdir, pid_t pid, const cs_cgroup_mounts *m, cs_memcg *out);

/* The room left in one node before a limit is hit: the smallest of
 * limit - in_use over memory.max, memory.high (v2) and
 * memory.memsw.limit_in_bytes (v1, against memsw usage), where in_use =
 * usage - inactive_file (as the kubelet counts a working set), and 0 when
 * in_use is over the limit. -1 when the node has no limit (or no usage to
 * weigh one against). Sets *which to the file name of the limit that
 * decides ("memory.max", ...; NULL when none) and *limit to its value (-1)
 * when not NULL. */
long long cs_memcg_node_room(const cs_memcg_node *n, const char **which, long long *limit);

/* The files of a node read earlier, again (its process may be gone): 0, or
 * -errno when the cgroup is gone or cannot be read. */
int cs_memcg_reread(const cs_cgroup_mounts *m, const cs_memcg_node *was, cs_memcg_node *out);

/* MemAvailable of <procdir>/meminfo in bytes, -1 when unknown. */
long long cs_meminfo_available(const char *procdir);

/* Parsers of untrusted text, also used by the fuzz target. */

/* One value file: "max" (v2) -> -1; a number; v1's unlimited (>= 2^62) ->
 * -1; trailing white space allowed. 0, or -EINVAL. */
int cs_memcg_parse_value(const char *text, size_t len, long long *out);
/* "key value" lines (memory.stat, memory.events, memory.oom_control): the
 * value of the first line whose key is key, as cs_memcg_parse_value reads
 * it. 0, -ENOENT, -EINVAL. */
int cs_memcg_parse_key(const char *text, size_t len, const char *key, long long *out);
/* The memory cgroup path in the text of /proc/PID/cgroup: the v1 line whose
 * controllers include "memory" wins over the v2 line "0::/path". Writes the
 * path into buf, returns 1 for v1, 2 for v2, 0 when none (buf ""). A path
 * that does not fit is not cut (it would name another cgroup): it counts
 * as none. */
int cs_memcg_parse_proc_cgroup(const char *text, size_t len, char *buf, size_t size);

#endif
