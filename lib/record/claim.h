/* Claims: two operations never act on one process at once, whoever runs
 * them (the command line, the CRIU plugin of one pod and of another, the
 * gVisor hook, the cuda-checkpoint drop-in), while operations on different
 * processes run side by side.
 *
 * A claim is two exclusive flocks, both dropped by the kernel when their
 * holder dies:
 * - one on a pidfd of the process. Where the kernel keeps pidfds on pidfs
 *   (Linux 6.9 and later) every pidfd of a process is the same inode, in
 *   every mount and PID namespace, so this one excludes callers that share
 *   nothing else (a container's /run beside the host's). Older kernels give
 *   every pidfd one shared anonymous inode: there it is not taken.
 * - one on <state dir>/claims/<pidns inode>-<pid there>, a name every PID
 *   namespace agrees on, for callers that share the state directory. The
 *   file is the record of the claim: its holder and the process. A holder
 *   removes it when it lets go, so a file whose lock nobody holds was left
 *   by a holder that died in the middle of an operation (a CRIU killed by
 *   its engine): its process may be left locked or checkpointed, and
 *   cs_claims_left_behind() names it.
 *
 * Only a privileged holder of the pidfd's lock is another operation: any
 * user may pidfd_open(2) any process and flock(2) it, and must not keep
 * root's checkpoint or restore of it off. The holders are the processes of
 * this PID namespace that hold a descriptor of the process's pidfd inode
 * carrying the lock (the "lock:" lines of /proc/PID/fdinfo): the lockers
 * /proc/locks names, or, when none of those holds it (the locker exited and
 * a child it forked keeps the lock, or its pid was reused), every process of
 * /proc that does. A holder is privileged when, as /proc of this namespace
 * shows it:
 * - its effective uid is 0 (root of another user namespace shows as the uid
 *   it maps to here, or as the overflow uid 65534: not privileged); or
 * - CAP_SYS_PTRACE is in its effective set and its user namespace is this
 *   process's (a capability of another user namespace does not reach the
 *   processes of this one); or
 * - its effective uid is the real, effective and saved uid of the process:
 *   its owner, who may run cudasnap on it and can stop or kill it anyway;
 * - or its credentials cannot be read.
 * A lock whose holders are found and none of them is privileged is ignored:
 * the claim goes on without it (the record's lock still excludes callers
 * that share the state directory), and the claims' warning callback names
 * the holders. A lock no process here holds (a holder in another PID
 * namespace, which /proc/locks shows as pid 0) still blocks. A holder is
 * judged by what it is now: a set-user-ID program that inherited a locked
 * descriptor counts as privileged. */
#ifndef CS_CLAIM_H
#define CS_CLAIM_H

#include "cudasnap.h"
#include "util.h"

typedef struct cs_claim {
	pid_t pid;
	int pidfd; /* locked pidfd, -1 when the kernel has no pidfs */
	int fd; /* locked record, -1 without a state directory */
	char name[48];
	char *left; /* the record a holder that died left here, put back at release unless settled */
} cs_claim;

typedef struct cs_claims {
	int dirfd; /* <state dir>/claims, -1 until the first record */
	cs_claim *v;
	size_t n, cap;
	/* Set by the owner after cs_claims_init (kept by cs_claims_release):
	 * a line for each pidfd lock ignored because its holders are not
	 * privileged ("warning: ..."). NULL: not said. */
	cs_warn_fn warn;
	void *warn_ctx;
} cs_claims;

/* Adds the claim of pid (comm names it in messages) for command, which is
 * written into the record for whoever meets it. statefd < 0: the pidfd lock
 * alone, with no record. Fails (CS_ESTATE), with err naming the process and
 * the holder and what to do, when another operation holds it (a pidfd lock
 * held by unprivileged processes alone is none: see above); what c held
 * before stays held. When the record was left by a holder that died, left
 * (if not NULL) gets that holder's description ("pid 12, 'criu dump'"),
 * else "". c starts empty (cs_claims_init) and lets go of everything at
 * cs_claims_release. */
int cs_claims_add(cs_claims *c, int statefd, pid_t pid, const char *comm, const char *command, char *left,
		  size_t leftsize, cs_error *err);
/* Lets go of pid's claim, if c holds it. */
void cs_claims_drop(cs_claims *c, pid_t pid);
/* Whether c already holds pid's claim. */
bool cs_claims_holds(const cs_claims *c, pid_t pid);
/* pid is back in the state it had before a holder that died left it (or
 * exited): its record goes at release. Without this call, a record such a
 * holder left is put back at release, so that the process stays named. */
void cs_claims_settled(cs_claims *c, pid_t pid);
void cs_claims_init(cs_claims *c);
void cs_claims_release(cs_claims *c);
CS_DEFINE_CLEANUP_STRUCT(cs_claims, cs_claims_release)

/* Whether another operation holds pid, found without keeping anything (a
 * lock tried and let go at once: claimers retry for a moment, so a probe
 * never makes one fail). statefd may be < 0. Fills who (the holder) when
 * busy. A pidfd lock held by unprivileged processes alone does not make it
 * busy, as it does not keep cs_claims_add off. */
bool cs_claims_busy(int statefd, pid_t pid, char *who, size_t size);

/* Notes in pid's record, for whoever finds it after its holder died, that
 * a park (step "park") is about to write n files DIR/NAME.0 ... or an
 * unpark ("unpark") to read them: a holder killed then leaves them. 0, or
 * -1 when c does not hold pid's record (nothing noted). */
int cs_claims_files(cs_claims *c, pid_t pid, const char *step, const char *dir, const char *name, unsigned n);

/* A process that a holder which died left in the middle of an operation,
 * or the park files it left. */
typedef struct cs_left_behind {
	pid_t pid; /* as this namespace names it; 0 when the process is gone */
	char comm[64];
	char holder[160]; /* "pid 12, 'criu dump'" as the holder wrote it */
	/* the files its holder parked into or unparked from (cs_claims_files),
	 * still there: DIR/NAME ("" when none) */
	char files[320];
	char files_word[720]; /* files as one word of a shell's, for the commands */
	unsigned nfiles;
	char step[8]; /* "park" or "unpark" */
	/* only its files are left: the process is gone, or runs */
	bool files_only;
} cs_left_behind;

/* The records whose holder died and whose process still lives (found in t,
 * by its PID namespace, pid there and start time) not running, or whose
 * park files are still there. With tidy, the other records (processes gone
 * or running again, and no files left) are removed: nothing is left to
 * recover. *out is malloc'd (NULL when none). Never fails: what cannot be
 * read is skipped. */
void cs_claims_left_behind(int statefd, const cs_ptable *t, bool tidy, cs_left_behind **out, size_t *n);

/* What b is and what recovers it, in words: line gets "12 (python) is
 * checkpointed: HOLDER ended in the middle of an operation on it" or, for
 * files alone, what they are; fix the command that recovers it (with
 * --park-from where its files are known) or removes them ("rm ..."), ""
 * when nothing should be done yet. state: p's
 * (CS_STATE_UNKNOWN without p); parked: whether its interposer says it is
 * parked in files (1), not parked (0), or was not or could not be asked (-1). */
void cs_left_behind_say(const cs_left_behind *b, int state, int parked, char *line, size_t lsize, char *fix,
			size_t fsize);
/* Room for any fix cs_left_behind_say gives (a shorter buffer gets none). */
#define CS_LEFT_FIX_MAX 1024

#endif
