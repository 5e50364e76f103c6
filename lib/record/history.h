/* The history of operations: what cudasnap did on this node, one JSON object
 * per line in the state directory, written by every front-end that changes
 * a process or refuses to (the command line, the gVisor hook, the
 * cuda-checkpoint drop-in, the CRIU plugin), so that what a checkpoint did
 * can be read after the engine that ran it deleted its logs (containerd
 * deletes CRIU's work directory, dump.log with it).
 *
 * One entry per operation: when it began (UTC) and how long it took, who ran
 * it (the front-end, the caller's pid and command line, its parent's), the
 * operation, each process (pid, pid inside its namespace, command, GPU
 * bytes, seconds per step, and what became of it), refusals with their
 * reason codes, failures with the step and the driver's code, and the
 * outcome and exit status. Dry runs are not operations.
 *
 * Storage: <state dir>/history.jsonl, mode 0600, each entry appended whole
 * with one write(2) (O_APPEND: concurrent writers, two CRIU processes of two
 * pods, neither tear nor lose lines) under the history's own lock, an flock
 * of history.jsonl itself waited for CS_HISTORY_LOCK_WAIT_S at most (not the
 * state directory's lock, which a stuck holder may keep): past that the
 * entry is appended without it. Before it would grow past CS_HISTORY_ROTATE
 * bytes, a writer that holds the lock renames it history.1.jsonl (the older
 * one goes), so the history never holds much more than twice that; a reader
 * reads both, under the lock shared. The alerts of the file that goes
 * (entries with a process LOST, UNRESTORABLE or LEFT BEHIND) start the new
 * one until they are read or resolved (lib/record/history_carry.c). Every file is
 * a state file (cs_state_open_file). Writing never fails an operation: the
 * caller is told once, through its warning callback.
 *
 * Reading trusts nothing: each file is read bounded (its last
 * CS_HISTORY_READ_MAX bytes), and a line that is not a well-formed entry
 * (corrupt, truncated, too long) is skipped and counted. */
#ifndef CS_HISTORY_H
#define CS_HISTORY_H

#include "cudasnap.h"
#include "history_carry.h"
#include "history_entry.h"
#include "history_file.h"
#include "history_read.h"
#include "util.h"

#include <json-c/json.h>

/* What became of one process. */
typedef enum cs_hist_outcome {
	CS_HIST_DONE, /* reached the operation's goal */
	CS_HIST_LEFT, /* left as it was: already in, or past, the goal */
	CS_HIST_UNTOUCHED, /* the operation stopped before anything was done to it */
	CS_HIST_VANISHED, /* exited before anything was done to it: left out */
	CS_HIST_REFUSED, /* refused before anything changed (code, why) */
	CS_HIST_ROLLED_BACK, /* back in its state before the operation */
	CS_HIST_FAILED, /* a single call failed (the drop-in): in the state the driver left */
	CS_HIST_EXITED, /* exited by itself after a step that lost nothing */
	CS_HIST_LOST, /* died while its GPU state lived in its host memory or moved (why) */
	CS_HIST_UNRESTORABLE, /* the driver refuses its restore for good: restart it */
	CS_HIST_LEFT_BEHIND, /* could not be returned: recovery says how */
	CS_HIST_KILLED, /* killed by the CRIU plugin so that CRIU fails the restore (images intact) */
	CS_HIST_COUNT
} cs_hist_outcome;

/* "done", "left", "untouched", "vanished", "refused", "rolled-back",
 * "failed", "exited", "lost", "unrestorable", "left-behind", "killed". */
const char *cs_hist_outcome_name(int outcome);

typedef struct cs_history_proc {
	pid_t pid; /* 0: none here (a record's process CRIU has not created) */
	unsigned long long start_time; /* of pid, 0 unknown: a process left behind is known by it */
	pid_t nspid; /* inside its own PID namespace; 0 unknown */
	char comm[64];
	int outcome; /* cs_hist_outcome */
	unsigned long long bytes; /* GPU bytes moved */
	double seconds[CS_STEP_COUNT]; /* of each step done, forward */
	bool timed[CS_STEP_COUNT];
	char code[24]; /* refused: the reason's code ("memory", "gpu-memory", "busy", ...) */
	char why[768]; /* refused: the reason; lost: why; failed: the error */
	int step; /* the step that failed (cs_step), -1 when none */
	int cu; /* the driver's answer to that step, 0 when none */
	char recovery[192]; /* left behind: the command that brings it back */
	char park_files[320]; /* a park into files: where ("/dir/cudasnap-gpumem.P.S.*"), "" none */
} cs_history_proc;

/* One operation, built while it runs. */
typedef struct cs_history {
	double started; /* wall clock (seconds since the epoch) */
	double t0; /* cs_now() at the start */
	double seconds; /* duration, set by cs_history_finish */
	char front[16]; /* "cli", "hook", "drop-in", "criu-dump", "criu-restore", "library" */
	char op[24]; /* "checkpoint", "restore", "lock", "unlock", "toggle" */
	pid_t pid, ppid; /* the caller and its parent */
	char cmdline[512], parent[256]; /* their command lines, "" unknown */
	char outcome[16]; /* "done", "refused", "rolled-back", "incomplete", "failed" */
	int exit_status; /* -1: none (the CRIU plugin) */
	unsigned long long bytes;
	cs_error error; /* what failed the operation; status 0: nothing */
	char note[256]; /* a word on the context ("mode save", "criu dump succeeded"), "" none */
	cs_history_proc *p;
	size_t n, cap;
} cs_history;

/* Starts h: the time, the front-end, the operation, this process and its
 * parent (from /proc/self). Reads no state directory. */
void cs_history_begin(cs_history *h, const char *front, const char *op);
void cs_history_free(cs_history *h);
CS_DEFINE_CLEANUP_STRUCT(cs_history, cs_history_free)

/* The entry of pid (and comm, when added), added when absent; NULL when out
 * of memory. pid 0 always adds one. */
cs_history_proc *cs_history_proc_of(cs_history *h, pid_t pid, const char *comm);

/* The rule, in one place: what became of target t of a transaction of op
 * that returned rc with res (ran: the transaction began). Fills p. */
void cs_history_target(cs_history_proc *p, cs_op op, const cs_target *t, const cs_txn_result *res, int rc);
/* A process refused before anything changed, for code and why. */
void cs_history_refused(cs_history_proc *p, const char *code, const char *why);
/* The step of op that t failed at: the first forward step it has not done;
 * -1 when it failed none. */
int cs_history_failed_step(cs_op op, const cs_target *t);

/* The exit status of the command line for a session that failed before its
 * transaction (!ran: 2), or for its transaction's result: 3 incomplete, 1
 * failed, 0 done. The same rule as src/main.c's. */
int cs_history_exit_status(bool ran, const cs_txn_result *res, int rc);
/* The outcome of an operation from its processes: "refused" when one was
 * refused, "incomplete" when one was lost, left behind or cannot be
 * restored; else "done" when it did not fail, "refused" when it failed
 * before anything ran, "rolled-back" when every process it changed is back,
 * else "failed". */
const char *cs_history_outcome(const cs_history *h, bool failed, bool ran);

/* Ends h: duration, outcome, exit status (-1: none), the error (NULL or
 * status 0: none), the bytes moved (sum of its processes). */
void cs_history_finish(cs_history *h, const char *outcome, int exit_status, const cs_error *err);

/* One line of JSON, newline included (malloc'd; NULL when out of memory). */
char *cs_history_render(const cs_history *h);

/* Appends line (len bytes, ending in a newline) to the history of the state
 * directory statefd: under the history's lock when it can be had within
 * CS_HISTORY_LOCK_WAIT_S, rotating first when it would grow past
 * CS_HISTORY_ROTATE; one write. Fills err and returns <0 when it cannot. */
int cs_history_append(int statefd, const char *line, size_t len, cs_error *err);

/* Renders h and appends it. statefd < 0: the state directory is opened
 * (created with create, else only when it exists; nothing is written
 * without one). When it cannot be written, one warning line through warn
 * (NULL: none), and fills why (if not NULL, may be 0 size) too. Never fails
 * the caller. Returns 0 written, 1 not written (no state directory and not
 * create), <0 when it could not be written. */
int cs_history_write(const cs_history *h, int statefd, bool create, cs_warn_fn warn, void *warn_ctx);

/* The entry a session made when it ended (lib/session/session_history.c); NULL
 * before, and for a plan. For a caller that records a larger operation of
 * its own (cs_session_opts.no_history): the CRIU plugin. */
const cs_history *cs_session_history(const cs_session *s);

#endif
