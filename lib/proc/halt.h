/* Whether a process can answer the driver: read from /proc and the cgroup
 * freezer before any call that the target's restore thread must answer. */
#ifndef CS_HALT_H
#define CS_HALT_H

#include "cudasnap.h"

#include <limits.h>
#include <stdbool.h>
#include <stddef.h>
#include <sys/types.h>

typedef struct cs_halt_info {
	cs_halt halt;
	pid_t tid; /* the thread found stopped (the restore thread, or the process) */
	pid_t tracer; /* TracerPid when traced, 0 when unknown */
	char where[256]; /* frozen: the freezer file that says so */
} cs_halt_info;

/* Looks at tid (the restore thread; 0: the process itself) of pid and at
 * the process's cgroups. Fills out (may be NULL) and returns its halt.
 * A process that cannot be read is reported as not halted: the caller's
 * own checks (alive, visible) deal with it. */
cs_halt cs_proc_halt(const char *procdir, pid_t pid, pid_t tid, cs_halt_info *out);

/* The state letter of /proc/PID/stat as a halt (T, t; else none). */
cs_halt cs_halt_from_state(char state);

/* Where the cgroup v2 hierarchy, the v1 freezer and the v1 memory
 * controller are mounted ("" when not), and which cgroup each mount shows
 * at its top (mountinfo's root, relative to the reader's cgroup namespace:
 * "/../.." for an ancestor of it). The first mount of each kind is used.
 * Whole paths: a root cut short would name another cgroup. */
typedef struct cs_cgroup_mounts {
	char v2[PATH_MAX], v2_root[PATH_MAX];
	char v1[PATH_MAX], v1_root[PATH_MAX]; /* the v1 freezer */
	char v1mem[PATH_MAX], v1mem_root[PATH_MAX];
	char v1pids[PATH_MAX], v1pids_root[PATH_MAX];
} cs_cgroup_mounts;

/* Parses /proc/self/mountinfo text. */
void cs_cgroup_mounts_parse(const char *mountinfo, size_t len, cs_cgroup_mounts *out);

/* Whether the comma-separated list (mount options, the controllers of a
 * /proc/PID/cgroup line) holds want as a whole item. */
bool cs_cgroup_has_option(const char *list, size_t len, const char *want);

/* Parses <procdir>/self/mountinfo. 0, or -errno (out then holds no mount). */
int cs_cgroup_mounts_read(const char *procdir, cs_cgroup_mounts *out);

/* The file name of a cgroup as /proc/PID/cgroup shows it (path, plen),
 * under a mount mnt whose root is root, into out: false when the mount
 * does not show it (or it is the hierarchy's root, which has no limits). */
bool cs_cgroup_file(const char *mnt, const char *root, const char *path, size_t plen, const char *name, char *out,
		    size_t size);

/* Whether the text of a /proc/PID/cgroup file puts the process in a frozen
 * cgroup (v2 cgroup.events "frozen 1", v1 freezer.state FROZEN or FREEZING).
 * Fills where with the file that says so. */
bool cs_cgroup_frozen(const char *cgroup_text, size_t len, const cs_cgroup_mounts *m, char *where, size_t wsize);

/* Fills err (status CS_EPROC) for a halted process: who, why, how to resume
 * it. doing: what was about to happen ("checkpoint"), for the message. */
int cs_halt_error(cs_error *err, pid_t pid, const char *comm, const cs_halt_info *h, const char *doing);

/* One short clause for reports: "stopped (kill -CONT 123)", "frozen (...)". */
void cs_halt_clause(const cs_halt_info *h, pid_t pid, char *buf, size_t size);

#endif
