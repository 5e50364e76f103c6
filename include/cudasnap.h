/* cudasnap: checkpoint and restore every CUDA process of a container as one
 * transaction, through the NVIDIA driver's checkpoint API.
 *
 * Conventions: functions return 0 on success and a negative cs_status on
 * failure, and fill the caller's cs_error with a message and a hint. */
#ifndef CUDASNAP_H
#define CUDASNAP_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <sys/types.h>

#ifdef __cplusplus
extern "C" {
#endif

/* What libcudasnap.so exports: the functions declared here and nothing
 * else (the library is built with hidden visibility). */
#define CS_PUBLIC __attribute__((visibility("default")))

/* ---- errors ------------------------------------------------------------ */

typedef enum cs_status {
	CS_OK = 0,
	CS_EUSAGE = 1, /* bad arguments */
	CS_EENV = 2, /* environment: no driver, too old, no privileges */
	CS_EDRIVER = 3, /* the driver returned an error */
	CS_EPROC = 4, /* a process vanished, was reused, or is unreadable */
	CS_ESYS = 5, /* a system call failed */
	CS_ESTATE = 6, /* state files: manifest, lock */
	CS_EINTR = 7, /* interrupted by a signal */
} cs_status;

typedef struct cs_error {
	int status; /* cs_status */
	int cu; /* CUresult when status == CS_EDRIVER, else 0 */
	int sys; /* errno when relevant, else 0 */
	char message[512];
	char hint[512];
} cs_error;

/* Fills err (if not NULL) and returns -status. */
CS_PUBLIC int cs_error_set(cs_error *err, int status, const char *hint, const char *fmt, ...)
	__attribute__((format(printf, 4, 5)));
/* Same, with errno appended to the message as ": strerror". */
CS_PUBLIC int cs_error_errno(cs_error *err, int status, int errnum, const char *hint, const char *fmt, ...)
	__attribute__((format(printf, 5, 6)));
CS_PUBLIC void cs_error_clear(cs_error *err);
CS_PUBLIC const char *cs_status_name(int status);

/* ---- the driver -------------------------------------------------------- */

typedef enum cs_state {
	CS_STATE_RUNNING = 0,
	CS_STATE_LOCKED = 1,
	CS_STATE_CHECKPOINTED = 2,
	CS_STATE_FAILED = 3,
	CS_STATE_UNKNOWN = -1,
} cs_state;

CS_PUBLIC const char *cs_state_name(int state); /* "running", ..., or NULL if unknown */
CS_PUBLIC int cs_state_parse(const char *word); /* inverse; CS_STATE_UNKNOWN if none */

/* CUresult values cudasnap reasons about (numbers are the driver's). */
enum {
	CS_CU_SUCCESS = 0,
	CS_CU_INVALID_VALUE = 1,
	CS_CU_OUT_OF_MEMORY = 2,
	CS_CU_NOT_INITIALIZED = 3,
	CS_CU_NO_DEVICE = 100,
	CS_CU_INVALID_DEVICE = 101,
	CS_CU_OPERATING_SYSTEM = 304,
	CS_CU_ILLEGAL_STATE = 401,
	CS_CU_NOT_FOUND = 500,
	CS_CU_NOT_READY = 600,
	CS_CU_NOT_PERMITTED = 800,
	CS_CU_NOT_SUPPORTED = 801,
	CS_CU_UNKNOWN = 999,
	/* Not CUresults: what a cs_cu_* call returns when cudasnap stopped
	 * waiting for the driver. The call itself may still be running inside
	 * a worker thread, and may still complete in the target. */
	CS_CU_TIMED_OUT = -2, /* its deadline passed */
	CS_CU_INTERRUPTED = -3, /* a signal asked the command to end */
	/* Not asked at all: the GPU had no room for the process's restore,
	 * which the driver would have answered by destroying its state. */
	CS_CU_NO_ROOM = -4,
	/* The parking interposer could not park or unpark it (its error says why). */
	CS_CU_PARK_FAILED = -5,
};

/* The checkpoint API appeared in R570 (CUDA 12.8); GPU remapping in R580. */
#define CS_DRIVER_MIN_VERSION 12080
#define CS_DRIVER_REMAP_VERSION 13000

typedef struct cs_driver cs_driver;

typedef struct cs_gpu_pair {
	uint8_t old_uuid[16];
	uint8_t new_uuid[16];
} cs_gpu_pair;

/* Loads libcuda.so.1 (or $CUDASNAP_LIBCUDA) with dlopen. Always returns an
 * object in *out (free with cs_driver_free); returns <0 and fills err when the
 * driver cannot be used, and cs_driver_loaded() is then false. */
CS_PUBLIC int cs_driver_open(cs_driver **out, cs_error *err);
CS_PUBLIC void cs_driver_free(cs_driver *d);
CS_PUBLIC bool cs_driver_loaded(const cs_driver *d);
CS_PUBLIC int cs_driver_version(const cs_driver *d); /* e.g. 13000; 0 when unknown */
CS_PUBLIC const char *cs_driver_path(const cs_driver *d);
CS_PUBLIC const cs_error *cs_driver_error(const cs_driver *d); /* why it is not loaded */
CS_PUBLIC bool cs_driver_can_remap(const cs_driver *d);

/* How long cudasnap waits for each driver call. Every call but
 * GetRestoreThreadId is answered by the target's restore thread and waits
 * while the target is stopped or frozen, whatever the lock timeout: each call
 * therefore runs in a worker thread that is given up on at its deadline. */
typedef struct cs_limits {
	double quick_s; /* get-state, restore thread, unlock, cuInit (default 10) */
	double lock_grace_s; /* lock: its timeout plus this (default 5); timeout 0 has no deadline */
	double move_s; /* checkpoint and restore; 0: sized by cs_move_deadline */
	volatile int *interrupted; /* once non-zero, waits end within stop_grace_s */
	double stop_grace_s; /* calls in flight when the signal came (default 1.5) */
	double rollback_grace_s; /* then the rollback's calls (default 2.5) */
} cs_limits;

/* Replaces the driver's limits (cs_driver_open sets the defaults). */
CS_PUBLIC void cs_driver_set_limits(cs_driver *d, const cs_limits *l);
CS_PUBLIC const cs_limits *cs_driver_limits(const cs_driver *d);
/* No process holds more GPU memory than this; a record that says more is
 * wrong, and the size counts as unknown. */
#define CS_GPU_BYTES_MAX (16ULL << 40)
/* The longest wait for GPU memory before a restore, in seconds. */
#define CS_WAIT_MEMORY_MAX 86400
/* No deadline of a checkpoint or restore is longer, whatever a record or an
 * option says. */
#define CS_MOVE_DEADLINE_MAX 7200.0
/* The deadline of a checkpoint or restore of a process with about bytes of
 * GPU memory (0 or more than CS_GPU_BYTES_MAX: unknown): move_s when set,
 * else 60 s + 2 s per GiB (unknown counts as 141 GiB, one whole H200); at
 * most CS_MOVE_DEADLINE_MAX. */
CS_PUBLIC double cs_move_deadline(const cs_driver *d, unsigned long long bytes);
/* Calls given up on since the program started: they may still be blocked in
 * worker threads, so the program should end with _exit, not exit. */
CS_PUBLIC unsigned cs_driver_abandoned(void);

/* The six calls and cuInit. Return the raw CUresult, or CS_CU_TIMED_OUT /
 * CS_CU_INTERRUPTED when cudasnap stopped waiting. */
CS_PUBLIC int cs_cu_init(cs_driver *d);
CS_PUBLIC int cs_cu_get_state(cs_driver *d, pid_t pid, int *state);
/* The same with a deadline of its own (seconds > 0). */
CS_PUBLIC int cs_cu_get_state_by(cs_driver *d, pid_t pid, double seconds, int *state);
CS_PUBLIC int cs_cu_get_restore_tid(cs_driver *d, pid_t pid, pid_t *tid);
CS_PUBLIC int cs_cu_lock(cs_driver *d, pid_t pid, unsigned timeout_ms);
CS_PUBLIC int cs_cu_checkpoint(cs_driver *d, pid_t pid);
CS_PUBLIC int cs_cu_restore(cs_driver *d, pid_t pid, const cs_gpu_pair *pairs, unsigned npairs);
CS_PUBLIC int cs_cu_unlock(cs_driver *d, pid_t pid);
/* Checkpoint and restore with an explicit deadline in seconds (<= 0: none). */
CS_PUBLIC int cs_cu_checkpoint_by(cs_driver *d, pid_t pid, double seconds);
CS_PUBLIC int cs_cu_restore_by(cs_driver *d, pid_t pid, const cs_gpu_pair *pairs, unsigned npairs, double seconds);
/* cuGetErrorName / cuGetErrorString, with fallbacks when the driver is absent. */
CS_PUBLIC const char *cs_cu_name(const cs_driver *d, int res);
CS_PUBLIC const char *cs_cu_string(const cs_driver *d, int res);

/* ---- processes --------------------------------------------------------- */

typedef enum cs_class {
	CS_CLASS_NONE = 0, /* no GPU relation */
	CS_CLASS_CUDA, /* the driver knows it */
	CS_CLASS_DEVICE_HOLDER, /* holds device references; the driver does not know it */
	CS_CLASS_UNKNOWN, /* no driver to ask, maps libcuda, holds no device reference */
} cs_class;

CS_PUBLIC const char *cs_class_name(int cls);

/* Why a process cannot answer the driver now. Every driver call but
 * GetRestoreThreadId is carried out by the target's restore thread, and
 * waits (without bound, whatever the lock timeout) while that thread is
 * stopped, ptrace-stopped or in a frozen cgroup. */
typedef enum cs_halt {
	CS_HALT_NONE = 0,
	CS_HALT_STOPPED, /* SIGSTOP / job control (state T) */
	CS_HALT_TRACED, /* stopped by a tracer: a debugger, strace, CRIU's seize (state t) */
	CS_HALT_FROZEN, /* in a frozen cgroup: docker pause, the cgroup freezer */
} cs_halt;

/* "stopped" (also for traced) or "frozen"; NULL for CS_HALT_NONE. */
CS_PUBLIC const char *cs_halt_name(int halt);

typedef enum cs_ref_kind { CS_REF_FD, CS_REF_MAP } cs_ref_kind;

/* One reference to a GPU device file. */
typedef struct cs_devref {
	cs_ref_kind kind;
	int fd; /* CS_REF_FD */
	unsigned long start, end; /* CS_REF_MAP */
	bool fd_open; /* CS_REF_MAP: an fd to the same file is open */
	char path[64];
} cs_devref;

typedef struct cs_proc {
	pid_t pid, ppid;
	uid_t uid;
	unsigned long long start_time; /* clock ticks since boot (stat field 22) */
	char comm[64]; /* sanitized: non-printable bytes as '?' */
	int device_fds, device_maps;
	bool maps_libcuda;
	bool maps_nvml;
	cs_class cls;
	int state; /* cs_state, CS_STATE_UNKNOWN when not asked or not known */
	pid_t restore_tid; /* 0 when unknown */
	int cu_result; /* the driver's answer to GetState, -1 when not asked */
	int halt; /* cs_halt: found stopped or frozen, so GetState was not asked */
	cs_devref *refs; /* malloc'd; grown by the library only */
	size_t nrefs;
	/* Maps NVML but holds no device mapping, so no GPU context: a monitor
	 * (nvidia-smi, DCGM, a health probe). Never taken into a selection
	 * unless named with --pid. */
	bool nvml_only;
	/* cudasnap itself (or a cuda-checkpoint): never a target. */
	bool tool;
	/* Another operation holds it (cs_scan_opts.skip_busy): not asked. */
	bool busy;
	char busy_holder[160];
	/* CUDA IPC: mappings of the driver's shared files (/dev/shm/cuda.shm.*),
	 * fds open on them, and one such file it maps without holding it open:
	 * memory it imported from another process, which the driver checkpoints
	 * but can never restore. "" when none. */
	int ipc_maps, ipc_fds;
	char ipc_import[64];
	/* It maps the parking interposer (libcudasnap-park.so): the only
	 * processes whose control socket is looked for. */
	bool maps_park;
} cs_proc;

typedef struct cs_unreadable {
	pid_t pid;
	int errnum;
} cs_unreadable;

typedef struct cs_link {
	pid_t pid, ppid;
} cs_link;

typedef struct cs_ptable {
	cs_proc *procs; /* GPU-related processes only, sorted by pid */
	size_t n;
	cs_link *links; /* parent of every process scanned, sorted by pid */
	size_t nlinks;
	cs_unreadable *unreadable;
	size_t nunreadable;
	size_t scanned; /* processes looked at */
	pid_t self;
} cs_ptable;

typedef struct cs_scan_opts {
	const char *proc_dir; /* NULL: "/proc" (or $CUDASNAP_PROC_DIR) */
	const char *dev_dir; /* NULL: "/dev" (or $CUDASNAP_DEV_DIR) */
	bool keep_all; /* keep every process, not only GPU-related ones */
	/* When set, only these processes are asked about (the driver is never
	 * called for the others, which are classified from /proc alone). */
	const pid_t *only;
	size_t nonly;
	/* Else, when set, only the processes for which ask() holds; it is called
	 * once the parents of every process are known (cs_ptable_descends). */
	bool (*ask)(void *ctx, const cs_ptable *t, pid_t pid);
	void *ask_ctx;
	/* A process that another operation holds (a claim, see lib/record/claim.h) is
	 * not asked: the driver would make the question wait behind that
	 * operation's calls. It is marked busy, with its holder. */
	bool skip_busy;
} cs_scan_opts;

/* Scans the PID namespace and classifies every GPU-related process, asking
 * the driver (may be NULL or unloaded) for states and restore threads.
 * Processes that vanish during the scan are skipped. */
CS_PUBLIC int cs_discover(const cs_scan_opts *opts, cs_driver *d, cs_ptable *out, cs_error *err);
CS_PUBLIC void cs_ptable_free(cs_ptable *t);
CS_PUBLIC const cs_proc *cs_ptable_find(const cs_ptable *t, pid_t pid);
/* Parent of any scanned process, 0 when unknown. */
CS_PUBLIC pid_t cs_ptable_parent(const cs_ptable *t, pid_t pid);
/* Nearest ancestor of pid that is in t->procs, 0 when none. */
CS_PUBLIC pid_t cs_ptable_listed_ancestor(const cs_ptable *t, pid_t pid);
/* Whether anc is pid or one of its ancestors. */
CS_PUBLIC bool cs_ptable_descends(const cs_ptable *t, pid_t pid, pid_t anc);

/* ---- transactions ------------------------------------------------------ */

typedef enum cs_op {
	CS_OP_CHECKPOINT, /* running -> lock -> checkpoint */
	CS_OP_RESTORE, /* checkpointed -> restore -> unlock */
	CS_OP_LOCK, /* running -> lock */
	CS_OP_UNLOCK, /* locked -> unlock */
	/* locked -> checkpoint: for a snapshot engine that locked each process
	 * while it still ran (the driver's lock needs the process's own
	 * threads; the checkpoint needs only its restore thread). A rollback
	 * leaves them locked. */
	CS_OP_CHECKPOINT_LOCKED,
} cs_op;

CS_PUBLIC const char *cs_op_name(cs_op op);

/* park and unpark: the parking interposer's (park/) steps, before the lock
 * and after the unlock, for the processes that run it. */
typedef enum cs_step {
	CS_STEP_LOCK,
	CS_STEP_CHECKPOINT,
	CS_STEP_RESTORE,
	CS_STEP_UNLOCK,
	CS_STEP_PARK,
	CS_STEP_UNPARK,
	CS_STEP_COUNT
} cs_step;
CS_PUBLIC const char *cs_step_name(cs_step s);

/* Most GPUs one process's record names. */
#define CS_TARGET_GPUS 16

/* A GPU a process used when it was checkpointed, as its record keeps it. */
typedef struct cs_gpu_use {
	char uuid[48]; /* "GPU-xxxxxxxx-xxxx-xxxx-xxxx-xxxxxxxxxxxx" */
	unsigned long long bytes; /* its GPU memory there; 0: not known apart (all of cs_target.bytes may be there) */
} cs_gpu_use;

/* One process of a transaction. Fill pid, start_time, comm and order; the
 * engine fills the rest. */
typedef struct cs_target {
	pid_t pid;
	unsigned long long start_time;
	char comm[64];
	int order; /* dispatch order; ties broken by pid */
	int initial_state; /* state when the command began */
	int state; /* last known state; CS_STATE_UNKNOWN once exited */
	bool skipped; /* left as it was (already in, or past, the goal) */
	bool exited; /* vanished during the command */
	bool failed; /* a step of this process failed */
	bool rollback_failed; /* could not be returned to initial_state */
	double seconds[CS_STEP_COUNT]; /* driver time of each step done, forward */
	unsigned long long rss_before, rss_after; /* bytes, around checkpoint/restore */
	unsigned long long bytes; /* GPU bytes moved (resident-memory growth or shrink) */
	char visible_devices[128]; /* CUDA_VISIBLE_DEVICES of the target, "" when unset */
	char gpus[512]; /* UUIDs of the GPUs it sees, comma-separated; "" unknown */
	cs_error error; /* why it failed, when failed */
	pid_t restore_tid; /* the driver's helper thread, 0 when unknown */
	pid_t nspid; /* its pid in its own PID namespace (inside its container) */
	unsigned long long gpu_bytes; /* GPU memory expected to move, 0 when unknown */
	bool gpu_bytes_known; /* gpu_bytes is what a record measured moving (0: nothing) */
	bool halted; /* stopped or frozen: refused, or met during the command */
	bool abandoned; /* a call on it was given up on: its state is not known */
	unsigned long long moved; /* progress: bytes moved so far by the step in flight */
	double stalled_s; /* progress: seconds since the step in flight last moved memory */
	bool done[CS_STEP_COUNT]; /* the forward steps that succeeded */
	unsigned long seq[CS_STEP_COUNT]; /* their completion order in the transaction, from 1 */
	int stepping; /* read atomically: 1 while its checkpoint or restore call runs, 2 after */
	/* Exited before anything was done to it (or during its lock, which
	 * changes nothing that could be lost): left out, the rest went on. */
	bool vanished;
	/* Exited after a step changed it, or while its memory moved: its GPU
	 * state is gone with it, whatever the rollback did. */
	bool lost;
	char lost_why[200]; /* "killed by the OOM killer of cgroup /x (...)", or when it exited */
	/* A restore failed in a way the driver does not retry (it imported
	 * another process's device memory, say): it must be restarted. */
	bool unrestorable;
	/* The GPUs it used at its checkpoint (the device files it held), each
	 * with its memory there when that was known apart; use_known: the list
	 * is known (an empty one: it used no GPU's memory). Filled before a
	 * checkpoint, and from the record before a restore. */
	cs_gpu_use use[CS_TARGET_GPUS];
	unsigned nuse;
	bool use_known;
	/* Restore: the GPU memory its restore needs on each GPU it restores
	 * onto (after the device map), as judged before the driver is asked;
	 * need_bound: known only as a bound (its record has no size). */
	cs_gpu_use need[CS_TARGET_GPUS];
	unsigned nneed;
	bool need_bound;
	bool need_none; /* its record says it used no GPU's memory: it needs none */
	/* Parking (park/): park_seen, it runs the interposer and answered;
	 * parkable, a park can move park_bytes of its memory; parked, its
	 * memory is in its host memory now (as it said). park_why: why it is
	 * not parkable. park_conn: the connection that holds a park, -1 none
	 * (the engine sets it). */
	bool park_seen, parkable, parked, was_parked; /* was_parked: when the command began */
	bool park_wanted; /* its park has something to do (cs_park_wanted) */
	bool park_grows; /* its interposer writes files while their space is reserved (cs_park_info.version) */
	unsigned park_imports; /* other processes' memory it maps: it parks before them, unparks after */
	unsigned long long park_bytes;
	char park_why[160];
	double park_copy_s, park_gbps; /* the last park's or unpark's copy */
	int park_conn;
	/* A park into files (cs_txn_opts.park_to): the directory, the files'
	 * base name and how many there are (0: its park is in host memory);
	 * set by the park, or from the record before a restore. */
	char park_dir[256];
	char park_name[64];
	unsigned park_nfiles;
	unsigned park_direct; /* of them, written with O_DIRECT */
	/* Unparked from its files in this command: they are kept until the
	 * whole command has succeeded, and a rollback parks it back there. */
	bool park_files_back;
	/* Parked again by a rollback: its park is kept (committed) if the rest
	 * of its rollback succeeds, else it unparks itself. */
	bool park_by_rollback;
} cs_target;

typedef enum cs_outcome {
	CS_OUTCOME_DONE = 0,
	CS_OUTCOME_ROLLED_BACK = 1,
	CS_OUTCOME_REFUSED = 2, /* a selected process could not answer: nothing was changed */
	CS_OUTCOME_INCOMPLETE = 3,
} cs_outcome;

typedef void (*cs_progress_fn)(void *ctx, const cs_target *t, cs_step step, bool undo, int res, double seconds);

typedef struct cs_txn_opts {
	cs_op op;
	unsigned timeout_ms; /* lock timeout; 0 waits forever */
	unsigned jobs; /* concurrent driver calls; 0 = one per process up to 8 */
	bool sequential; /* one process at a time, in order */
	const cs_gpu_pair *pairs; /* restore only */
	unsigned npairs;
	volatile int *interrupted; /* set by a signal handler: stop and roll back */
	bool gvisor; /* running under gVisor: shapes the explanations */
	cs_progress_fn progress;
	void *progress_ctx;
	/* Called after every forward step succeeded; returning <0 (with err
	 * filled) rolls the whole transaction back, as --strict needs. */
	int (*post_check)(void *ctx, cs_target *targets, size_t n, cs_error *err);
	void *post_ctx;
	/* Called about every watch_s seconds (default 0.5) from the caller's
	 * thread while a checkpoint or restore step runs, with each target's
	 * moved and stalled_s up to date; the caller must not change targets. */
	void (*watch)(void *ctx, const cs_target *targets, size_t n, cs_step step, double elapsed);
	void *watch_ctx;
	double watch_s;
	/* Called from a worker thread right before the driver is asked to
	 * restore a target (forward, or to roll its checkpoint back): a
	 * restore that runs out of GPU memory destroys the process's state, so
	 * returning <0 (err filled) fails that target without asking the
	 * driver. restored() follows every call that before_restore let
	 * through, with the driver's answer. */
	int (*before_restore)(void *ctx, cs_target *t, bool rollback, cs_error *err);
	void (*restored)(void *ctx, cs_target *t, int res);
	/* The same around each unpark (forward, or a checkpoint's rollback):
	 * the parked memory it brings back needs the room too. Refused, the
	 * process stays parked, its memory where its park put it. */
	int (*before_unpark)(void *ctx, cs_target *t, bool rollback, cs_error *err);
	void (*unparked)(void *ctx, cs_target *t, int res);
	/* Called before a park makes t's files or an unpark opens them
	 * (t->park_dir, park_name and park_nfiles set): the caller notes where
	 * they are, for whoever finds them after this command was killed. */
	void (*park_files_at)(void *ctx, const cs_target *t, bool park);
	void *restore_ctx;
	/* Leave interposed processes' memory to the driver (no park step). */
	bool no_park;
	/* Checkpoint: park into files of this directory (parkfiles.h) instead
	 * of host memory. Restore: a target parked into files reads them back
	 * from its park_dir, and they are removed once it is back unless
	 * park_keep. */
	const char *park_to;
	/* Restore: DIR/NAME, the files of a process left parked in files that
	 * no record names (a CRIU restore's, in its images), taken only where
	 * they are a park of its size (cs_park_from_split). */
	const char *park_from;
	bool park_keep;
	/* Checkpoint: leave to the driver a process whose parking interposer
	 * does not answer (cs_park_info.unreachable), which is otherwise
	 * refused before anything changes (the caller's --allow-unrestorable). */
	bool allow_unrestorable;
} cs_txn_opts;

typedef struct cs_txn_result {
	cs_outcome outcome;
	double wall_seconds;
	unsigned long long bytes;
	size_t acted, skipped;
	cs_error error; /* the first failure */
	bool ran; /* the transaction began (cs_session_run) */
	size_t vanished; /* targets that exited before anything was done to them */
	size_t lost; /* targets whose GPU state was lost (outcome CS_OUTCOME_INCOMPLETE) */
	/* The GPU had no room for a restore (or an unpark) before anything
	 * was changed: refused as the plan's check refuses. */
	bool refused_no_room;
} cs_txn_result;

/* Runs op over targets as one transaction: every target reaches the goal, or
 * every target is returned to the state it had, newest change first. A
 * target that is stopped or frozen when the command begins makes it fail
 * before anything changes (CS_OUTCOME_REFUSED). Driver calls are bounded by
 * the driver's limits (cs_driver_set_limits); a call given up on leaves its
 * target abandoned, in an unknown state. */
CS_PUBLIC int cs_txn_run(cs_driver *d, const cs_txn_opts *opts, cs_target *targets, size_t n, cs_txn_result *res);

/* The command that returns t to initial_state when the rollback left it
 * behind ("cudasnap restore --pid 12"...), written into buf. */
CS_PUBLIC void cs_target_recovery(const cs_target *t, char *buf, size_t size);

/* After a restore that failed because the driver can never restore one of its
 * targets (unrestorable, e.g. a CUDA IPC importer) and returned the others to
 * checkpointed: the command that restores those others without it
 * ("cudasnap restore --pid 12 --pid 14"), written into buf. False, buf
 * untouched, when there is no such target or no other. */
CS_PUBLIC bool cs_txn_restore_others(const cs_target *t, size_t n, char *buf, size_t size);

/* ---- sessions: what a command does, with every guarantee ---------------- */

/* Which processes a session acts on; all empty: every CUDA process. */
typedef struct cs_selection {
	pid_t *pids; /* as given (thread ids allowed); checked against /proc */
	size_t npids;
	pid_t *trees; /* these processes and their descendants */
	size_t ntrees;
	const char *cgroup; /* a cgroup path as /proc/PID/cgroup shows it, or under /sys/fs/cgroup */
} cs_selection;

/* One warning line, without prefix or newline. */
typedef void (*cs_warn_fn)(void *ctx, const char *line);

typedef struct cs_session_opts {
	cs_op op;
	const char *command; /* names the session in the lock file ("checkpoint") */
	cs_selection sel;
	unsigned timeout_ms; /* lock timeout; 0 waits for GPU work without limit */
	unsigned jobs;
	bool sequential;
	bool strict; /* checkpoint: device references left fail and roll back */
	bool ignore_manifest; /* restore: discovery's order, no PID-reuse check */
	bool reuse_warns; /* restore: a changed start time warns instead of refusing */
	bool no_init; /* restore: never call cuInit */
	const char *device_map; /* restore: OLD=NEW,... */
	/* Ask the driver about the selected --pid processes only, never about
	 * the rest of the namespace (a snapshot engine's tree, say). */
	bool only_selected;
	/* The caller already holds the claims of the selected processes (two
	 * operations never act on one process at once; see cs_session_select):
	 * a snapshot engine that claimed each process as it met it. */
	bool claimed;
	/* Keep no manifest in the state directory: the caller keeps its own
	 * record (CRIU's images). */
	bool no_manifest;
	/* The processes the leftover check looks at and speaks of (the tree a
	 * snapshot engine dumps); NULL: every process of the namespace, of which
	 * only those in the selection's scope fail a strict checkpoint. */
	const pid_t *scope;
	size_t nscope;
	/* Restore: the order, memory sizes and GPUs of the processes from this
	 * record (cs_manifest of lib/record/manifest.h, with the pids they have now)
	 * instead of the state directory's manifest. */
	const struct cs_manifest *manifest;
	/* Checkpoint: park into files of this directory (an absolute path; the
	 * setting CUDASNAP_PARK_TO gives it when this is NULL): the processes
	 * then hold neither their GPU memory nor a host copy of it. */
	const char *park_to;
	/* Restore: the files of a process left parked in files that no record
	 * names (cs_txn_opts.park_from). */
	const char *park_from;
	/* Checkpoint: do not refuse a process whose checkpoint would not fit in
	 * its memory cgroup or in MemAvailable (swap or overcommit may make room
	 * after all); the settings CUDASNAP_IGNORE_MEMORY=1 does the same. */
	bool ignore_memory;
	/* Checkpoint: do not refuse a process that the driver could never
	 * restore (one that imported another process's device memory through
	 * CUDA IPC); the setting CUDASNAP_ALLOW_UNRESTORABLE=1 does the same. */
	bool allow_unrestorable;
	/* The caller judged CUDA IPC itself, at each process's meeting while
	 * it ran and its interposer could answer (a snapshot engine's hook,
	 * which then stops it): the session does not judge it again. */
	bool ipc_judged;
	/* Restore: how long to wait, at most, for the GPUs to have room for
	 * the processes (0: refuse at once); the setting CUDASNAP_WAIT_MEMORY
	 * gives it when this is 0. At most CS_WAIT_MEMORY_MAX. */
	double wait_memory_s;
	/* Restore: ask the driver even where the GPU has too little free memory
	 * for a process (the driver then destroys its state); the setting
	 * CUDASNAP_IGNORE_GPU_MEMORY=1 does the same. */
	bool ignore_gpu_memory;
	/* Checkpoint and restore: leave the memory of processes that run the
	 * parking interposer (park/) to the driver, as for any other; the
	 * setting CUDASNAP_NO_PARK=1 does the same. */
	bool no_park;
	/* Restore: keep the files of the processes parked into files that it
	 * brings back (park_to). */
	bool park_keep;
	/* Take no claim: a plan only (cs_session_plan); another operation's
	 * processes are found busy and not asked. A plan is not an operation:
	 * it leaves no entry in the history. */
	bool dry_run;
	/* The history of operations (<state dir>/history.jsonl): a session
	 * that selected its processes, or failed to, adds one entry when it
	 * ends (cs_session_run, or a cs_session_select that failed), naming
	 * front as who ran it ("cli", "hook"; NULL: "library"). no_history:
	 * none, for a caller that records a larger operation of its own (the
	 * CRIU plugin's dump). A history that cannot be written is said once
	 * through warn and fails nothing. */
	const char *front;
	bool no_history;
	volatile int *interrupted;
	cs_progress_fn progress;
	void *progress_ctx;
	void (*watch)(void *ctx, const cs_target *targets, size_t n, cs_step step, double elapsed);
	void *watch_ctx;
	cs_warn_fn warn;
	void *warn_ctx;
} cs_session_opts;

typedef struct cs_session cs_session;

/* The options' own checks, which need no driver: the selection, the device
 * map, the memory wait, the park directories. CS_EUSAGE and the reason in
 * err where one is wrong; cs_session_open makes them too. A front-end calls
 * it before it loads the driver, so that an argument's error is not hidden
 * behind the driver's. */
CS_PUBLIC int cs_session_check_opts(const cs_session_opts *opts, cs_error *err);

/* Checks the selection's cgroup and, for restore, the device map (CS_EUSAGE
 * before anything is done), then opens the state directory. Keeps a pointer
 * to opts (and to what it points to) until freed. Fills err and returns <0
 * when an option is wrong or the directory cannot be used. */
CS_PUBLIC int cs_session_open(cs_session **out, cs_driver *d, const cs_session_opts *opts, cs_error *err);
/* Discovery, selection (host PIDs refused), privileges, the claims of the
 * selected processes (unless opts.claimed), and for restore and unlock only
 * the processes in the starting state. Sessions on different processes run
 * side by side; one that meets a process another session holds fails
 * (CS_ESTATE) naming both, before anything changed. Nothing is changed;
 * cs_session_targets then lists what a run would act on (maybe none). */
CS_PUBLIC int cs_session_select(cs_session *s, cs_error *err);
/* Restore's preparation (manifest order, PID-reuse refusal, device map,
 * cuInit), the transaction, the leftover check, the manifest. Returns <0
 * with err filled when it failed before any process changed (res->ran is
 * then false); otherwise res describes the transaction. */
CS_PUBLIC int cs_session_run(cs_session *s, cs_txn_result *res, cs_error *err);
CS_PUBLIC cs_target *cs_session_targets(const cs_session *s, size_t *n);
/* Device references left after a checkpoint (see lib/find/verify.h), and how
 * many of them are inside the selection. */
CS_PUBLIC const struct cs_leftover *cs_session_leftovers(const cs_session *s, size_t *n, size_t *in_scope);
CS_PUBLIC void cs_session_free(cs_session *s);

/* The resolved device directory ($CUDASNAP_DEV_DIR or /dev). */
CS_PUBLIC const char *cs_dev_dir(void);
CS_PUBLIC const char *cs_proc_dir(void);

#ifdef __cplusplus
}
#endif
#endif
