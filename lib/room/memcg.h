/* A process's memory cgroup chain, read before a checkpoint: the driver
 * copies each process's GPU memory into that process's own host memory,
 * which the kernel charges to its memory cgroup, and a chain without room
 * for it ends with the OOM killer. cgroup v2 and v1 (also on hybrid hosts,
 * where v1's memory controller is the one that counts). */
#ifndef CS_MEMCG_H
#define CS_MEMCG_H

#include "halt.h"

#include <limits.h>
#include <stdbool.h>
#include <stddef.h>
#include <sys/types.h>

#define CS_MEMCG_DEPTH 32

/* How much of a process's memory cgroup chain could be read. */
typedef enum cs_memcg_seen {
	CS_MEMCG_NONE = 0, /* it has no memory cgroup (no memory line in /proc/PID/cgroup): no limit to hit */
	CS_MEMCG_WHOLE, /* every node up to the hierarchy's root, or (v1) the ones above are known to have no limit */
	CS_MEMCG_PART, /* node[] up to a top below the root: the cgroups above it could not be read */
	CS_MEMCG_UNREAD, /* it has one, and none of its nodes could be read */
} cs_memcg_seen;

/* Where a chain was read from. */
typedef enum cs_memcg_route {
	CS_MEMCG_OWN = 0, /* this process's cgroup mounts and cgroup namespace */
	CS_MEMCG_INITNS, /* the initial cgroup namespace, through a helper process (paths from the real root) */
	CS_MEMCG_TARGET, /* the target's own cgroup mount, through /proc/PID/root */
} cs_memcg_route;

/* One node of a chain. Its path and directory are prefixes of the chain's,
 * so that a node is small and whole paths are kept once. */
typedef struct cs_memcg_node {
	dev_t dev; /* the cgroup directory's st_dev and st_ino: what tells two cgroups apart, */
	ino_t ino; /* however their paths read */
	unsigned short len; /* its path: the first len bytes of the chain's path ("/" for the root) */
	unsigned short dirlen; /* its directory: the first dirlen bytes of the chain's dir */
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
	int version; /* 0: no node could be read (seen and problem say why) */
	int seen; /* cs_memcg_seen */
	int route; /* cs_memcg_route: the one that showed the most of the chain */
	/* The process's memory cgroup, whole, as the route names it
	 * (sanitized): from the hierarchy's root for CS_MEMCG_INITNS, else
	 * relative to this process's cgroup namespace ("/../a" lies beside it). */
	char path[PATH_MAX];
	char dir[PATH_MAX]; /* where its directory was opened ("" when too long to keep) */
	/* The process's own cgroup first, then each ancestor up to the top the
	 * route shows; nodes with no file readable are skipped. */
	cs_memcg_node node[CS_MEMCG_DEPTH];
	size_t n;
	/* v1, CS_MEMCG_PART: the smallest limit above the top that the top's
	 * memory.stat gives away (hierarchical_memory_limit, _memsw_limit), -1 none known. */
	long long hidden_limit;
	char problem[1024]; /* "" or why less than the whole chain could be read, route by route */
} cs_memcg;

/* pid's memory cgroup chain (pid 0: the caller, <procdir>/self), read
 * through the cgroup mounts m describes, and where those do not show the
 * whole chain (a cgroup namespace, a mount of a sub-cgroup), through the
 * initial cgroup namespace (a helper process that enters it; needs
 * CAP_SYS_ADMIN, at most 2 s) and through the target's own cgroup mount:
 * the route that shows the most of it is kept. 0, or -errno: -ENOENT /
 * -ESRCH when the process vanished. A chain that cannot be read is not an
 * error: out->seen and out->problem say why. */
int cs_memcg_read(const char *procdir, pid_t pid, const cs_cgroup_mounts *m, cs_memcg *out);

/* One route: the text of /proc/PID/cgroup and the mounts of a mountinfo,
 * both read in the same cgroup namespace, and the directory the mount
 * points lie under ("" for this process's root, "/proc/7/root"). */
typedef struct cs_memcg_view {
	int route; /* cs_memcg_route, recorded in the chain */
	const char *cgroup;
	size_t cgroup_len;
	const cs_cgroup_mounts *m;
	const char *prefix;
} cs_memcg_view;

/* The chain that one view shows. Never fails: out->seen says how much. */
void cs_memcg_read_view(const cs_memcg_view *v, cs_memcg *out);

/* How many levels above the process's own cgroup the chain reaches (0 when
 * it holds no node): of two routes, the one that reaches higher shows more. */
size_t cs_memcg_reach(const cs_memcg *cg);

/* The room left in one node before a limit is hit: the smallest of
 * limit - in_use over memory.max, memory.high (v2) and
 * memory.memsw.limit_in_bytes (v1, against memsw usage), where in_use =
 * usage - inactive_file (as the kubelet counts a working set), and 0 when
 * in_use is over the limit. -1 when the node has no limit (or no usage to
 * weigh one against). Sets *which to the file name of the limit that
 * decides ("memory.max", ...; NULL when none) and *limit to its value (-1)
 * when not NULL. */
long long cs_memcg_node_room(const cs_memcg_node *n, const char **which, long long *limit);

/* The files of node k of a chain read earlier, again (its process may be
 * gone), from the same directory: 0, or -errno when the cgroup is gone
 * (another directory there now is not taken for it) or cannot be read. */
int cs_memcg_reread(const cs_memcg *cg, size_t k, cs_memcg_node *out);

/* Whether the chain holds the cgroup n (by its directory's identity);
 * its node there, or NULL. */
const cs_memcg_node *cs_memcg_find(const cs_memcg *cg, const cs_memcg_node *n);

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
/* The same for any controller ("pids"): its v1 line wins over the v2 line. */
int cs_cgroup_parse_controller(const char *text, size_t len, const char *controller, char *buf, size_t size);
/* Where below a mount whose mountinfo root is root the cgroup path lies,
 * both as one cgroup namespace names them ("/../a/b" under "/../a" is
 * "/b"): the offset in path of that part ("" for the mount's top, else
 * "/x/y" without an empty, "." or ".." component), or -1 when the mount
 * does not show the cgroup. */
ssize_t cs_memcg_below(const char *path, const char *root);

/* The helper's reply (lib/room/memcg_ns.c): "C <len>\n" and the text of
 * /proc/TARGET/cgroup, then for each process whose mounts it read
 * "M <pid> <len>\n" and the cgroup lines of its mountinfo, all read in
 * the initial cgroup namespace (pid 0: the helper's own mount namespace).
 * Numbers are decimal without leading zeros; nothing else is accepted. */
#define CS_MEMCG_REPLY_MOUNTS 4
typedef struct cs_memcg_reply {
	const char *cgroup;
	size_t cgroup_len;
	size_t n;
	struct {
		pid_t pid;
		const char *mountinfo;
		size_t len;
	} mounts[CS_MEMCG_REPLY_MOUNTS];
} cs_memcg_reply;
/* Parses a reply into pointers into text. 0, or -EINVAL (out then empty). */
int cs_memcg_parse_reply(const char *text, size_t len, cs_memcg_reply *out);

#endif
