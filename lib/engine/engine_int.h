/* The inside of a staged session (lib/engine/engine.h), shared by its files:
 * engine.c (tasks, calls, log), engine_oplog.c (the operation's entry),
 * engine_run.c (a session inside a call), engine_dump.c, engine_back.c,
 * engine_restore.c and engine_room.c. */
#ifndef CS_ENGINE_INT_H
#define CS_ENGINE_INT_H

#include "engine.h"
#include "claim.h"
#include "history.h"
#include "manifest.h"
#include "park.h"

#include <stdbool.h>
#include <stdint.h>

/* A process the engine met. */
typedef struct eng_task {
	pid_t pid; /* as the engine names it (its PID namespace) */
	pid_t nspid; /* inside its own PID namespace: what survives a restore */
	pid_t tid; /* the driver's restore thread, as the engine names it; 0 unknown */
	char comm[64];
	int result; /* what the hook answers for it */
	bool locked; /* dump: locked at its meeting */
	bool checkpointed; /* dump: left checkpointed by the transaction */
	bool parked; /* dump: its interposer parked its memory before the lock */
	unsigned long long park_bytes;
	char park_name[64]; /* dump: parked into files of the images (park_nfiles of them) */
	unsigned park_nfiles, park_direct;
	size_t entry; /* restore: its entry in the record */
} eng_task;

/* dump: what the first process that maps the driver or NVML found; until
 * then the session has touched neither the driver nor the state directory. */
typedef enum eng_gpu {
	ENG_GPU_UNASKED,
	ENG_GPU_READY, /* the driver can checkpoint and the state directory takes claims */
	ENG_GPU_NO_DRIVER, /* no driver here can checkpoint: only device files matter */
	ENG_GPU_FAILED, /* the state directory cannot be used: the dump fails */
} eng_gpu;

struct cs_engine {
	cs_engine_opts o;
	eng_task *tasks;
	size_t ntasks, cap;
	/* dump: every process met, the leftover check's scope; restore: every
	 * process adopted, with a pidfd each (-1 none) opened while the engine
	 * held it, so that a failed restore kills the tree and no other */
	pid_t *tree;
	int *tree_fd;
	size_t ntree, treecap, tree_fdcap;
	int state_fd;
	/* where parks go into files (the images directory), -1 none; owned:
	 * a copy this session closes (a restore's) */
	int images;
	bool own_images;
	eng_gpu gpu;
	char no_driver[256]; /* why the driver cannot checkpoint (ENG_GPU_NO_DRIVER) */
	cs_claims claims; /* dump: held from the meeting until the end */
	bool enabled; /* dump: a process met the driver; restore: the record was imported */
	bool dumped, restored; /* the transaction ran */
	cs_manifest record; /* restore: what the dump recorded */
	pid_t root; /* restore: the first process adopted, the tree's root */
	size_t matched; /* restore: entries of the record met */
	bool killed; /* restore: the GPU restore failed and the restored processes were killed */
	/* The operation's entry of the history (engine_oplog.c). */
	struct {
		bool gpu; /* it met the GPU */
		bool failed; /* error is the operation's own summary */
		cs_history h;
		char error[512]; /* the first error line */
	} op;
};

/* ---- engine.c ---- */
void eng_log(cs_engine *e, int level, const char *fmt, ...) __attribute__((format(printf, 3, 4)));
eng_task *eng_find(cs_engine *e, pid_t pid);
eng_task *eng_add(cs_engine *e, pid_t pid);
/* The pids of the tasks for which which(t) holds (malloc'd, *n). */
pid_t *eng_pids(const cs_engine *e, bool (*which)(const eng_task *t), size_t *n);
/* Its pid inside its own PID namespace and its command name, from /proc. */
int eng_identity(pid_t pid, pid_t *nspid, char *comm, size_t size);
/* opts.run, while the restore threads of the tasks for which which(t)
 * holds run (which NULL: none). */
int eng_call(cs_engine *e, const char *what, double seconds, int (*fn)(void *, void **, size_t *), void *arg,
	     bool (*which)(const eng_task *t), void **reply, size_t *len);
/* Whether the driver can be used (asked through a call): 0 and its version,
 * or <0 with err filled. */
int eng_probe(cs_engine *e, int *version, cs_error *err);
/* How long a call may take: quick ones, a lock of lock_s seconds, and those
 * that move memory (each driver call bounded inside; this is the net). */
double eng_bound_quick(void);
double eng_bound_lock(unsigned lock_s);
double eng_bound_park_lock(unsigned lock_s, unsigned long long bytes, const unsigned long long *first, size_t nfirst);
double eng_bound_moves(void);
unsigned eng_lock_timeout_s(const cs_engine *e);

/* ---- engine_run.c: one session inside a call ---- */
typedef struct eng_run {
	cs_op op;
	const char *command;
	const pid_t *pids;
	size_t npids;
	bool claimed; /* the engine's process holds their claims */
	const pid_t *scope; /* the dumped tree, for the leftover check */
	size_t nscope;
	const cs_manifest *manifest; /* restore: the record, with today's pids */
	const char *device_map; /* restore: OLD=NEW,... or NULL */
	unsigned timeout_s;
	int images; /* checkpoint: the record goes there (-1: none) */
} eng_run;

typedef struct task_outcome {
	pid_t pid;
	int state; /* cs_state after the session */
	bool done; /* reached the goal of the session's operation */
	bool failed, rollback_failed;
	bool lost;
	bool unrestorable;
	char lost_why[200];
	unsigned long long bytes;
	char comm[64];
	char message[512]; /* why it failed */
	cs_history_proc hist; /* what the session's entry says of it */
} task_outcome;

#define RUN_REFUSED_MAX 4

/* What a session in a call sends back: flat, it crosses a pipe. */
typedef struct run_outcome {
	int rc; /* 0 done, <0 failed */
	size_t acted;
	unsigned long long bytes;
	double wall;
	char message[512], hint[512];
	cs_history_proc refused[RUN_REFUSED_MAX]; /* refused processes that are not its targets */
	size_t nrefused;
	size_t n;
	task_outcome t[];
} run_outcome;

size_t eng_outcome_size(size_t n);
/* In a call: loads the driver and runs r (and writes the record into
 * r->images after a checkpoint). The outcome is malloc'd, NULL only when
 * out of memory. */
run_outcome *eng_run_session(const cs_engine *e, const eng_run *r);
/* An outcome of rc with message, of no process. */
run_outcome *eng_outcome_error(int rc, const char *message);
/* The outcome received, or NULL (logged) when len does not fit. */
const run_outcome *eng_outcome_check(cs_engine *e, const void *buf, size_t len, const char *what);
/* What o says of the process pid, or NULL (o NULL, or pid not in it). */
const task_outcome *eng_outcome_of(const run_outcome *o, pid_t pid);

/* ---- engine_oplog.c: the operation's entry ---- */
void eng_op_begin(cs_engine *e);
void eng_op_gpu(cs_engine *e);
void eng_op_fail(cs_engine *e, const char *message);
cs_history_proc *eng_op_proc(cs_engine *e, pid_t pid, pid_t nspid, const char *comm);
void eng_op_record(cs_engine *e);
cs_history_proc *eng_op_entry(cs_engine *e, size_t k);
void eng_op_refused(cs_engine *e, pid_t pid, const char *comm, const char *code, const char *why);
/* What a session said of each of its processes; back: the way back of a
 * failed dump (one brought back is rolled back, not done). */
void eng_op_session(cs_engine *e, const run_outcome *o, bool back);
/* Completes and writes the entry; NULL when not an operation of the GPU's. */
const cs_history *eng_op_end(cs_engine *e, int ret);

/* ---- engine_park.c: parking at a dump's meetings ---- */
#define ENG_EARLY_MAX 16

/* An importer parked before its exporter, at the exporter's meeting. */
typedef struct eng_early {
	pid_t pid;
	cs_park_answer park;
	char park_name[64]; /* parked into park.files files of the images, named so */
} eng_early;

/* What a call did about parking one process: parked, its memory is in its
 * host memory now and stays there through the dump; park_failed, it is not
 * parked (park_err says why), and the driver checkpoints all its memory
 * unless refused (CUDA IPC that only parking carries: the dump fails);
 * unparked, the lock failed after the park and the unpark answered. */
typedef struct eng_park_reply {
	bool parked, park_failed, refused, unparked;
	cs_park_answer park;
	char park_name[64]; /* parked into park.files files of the images, named so */
	cs_error park_err;
	size_t nearly;
	eng_early early[ENG_EARLY_MAX];
} eng_park_reply;

/* Main side: the tree's importers, not met yet and still running, that
 * must park before exporter does (at most max into out, with the bytes each
 * parks in bytes); info is what the exporter's interposer answered at its
 * meeting. */
size_t eng_park_importers(cs_engine *e, pid_t exporter, const cs_park_info *info, pid_t *out, unsigned long long *bytes,
			  size_t max);
/* Whether the host copies of pids' parks fit in their memory cgroups and
 * in MemAvailable, judged together as a checkpoint's are (a park copies
 * device memory into the process's own memory, as the driver's checkpoint
 * does, and is checked before it in the same way); why says which does
 * not and what to do. CUDASNAP_IGNORE_MEMORY=1 skips it. */
/* files: the parks go into files, which take only their staging in host
 * memory (and the driver's checkpoint then copies what is left). */
bool eng_park_fits(const pid_t *pids, size_t n, bool files, char *why, size_t size);
/* In the call: the importers first (committed), then t's own park, held
 * on *conn until eng_park_after_lock. */
/* images: the directory its park goes into files of (-1: host memory). */
void eng_park_before_lock(cs_driver *d, const cs_target *t, unsigned timeout_s, const pid_t *first, size_t nfirst,
			  int images, int *conn, eng_park_reply *r);
void eng_park_after_lock(cs_driver *d, const cs_target *t, unsigned timeout_s, int lock_rc, int images, int *conn,
			 eng_park_reply *r);
/* Main side: the files of t's park in the images (none: 0), open for its
 * unpark; -1 with err when they cannot be. */
int eng_park_files_open(const cs_engine *e, const char *name, unsigned n, unsigned long long bytes,
			struct cs_park_files *f, cs_error *err);
/* Main side: pid's unpark (with its files of the images, n of them, none:
 * 0) left in its control socket, answered once the engine lets it run: 0,
 * or -1 with err. */
int eng_queue_unpark(cs_engine *e, pid_t pid, const char *name, unsigned n, unsigned long long bytes, cs_error *err);
/* Main side: the log and the tasks of what the call did. */
void eng_park_note_early(cs_engine *e, pid_t exporter, const char *comm, const eng_park_reply *r);
void eng_park_note(cs_engine *e, eng_task *t, cs_history_proc *h, const eng_park_reply *r);
/* Its lock failed and so did the unpark after it: the process runs with its
 * memory still in host memory and its GPU work held. Nothing is lost. */
void eng_park_left(cs_engine *e, const eng_task *t, cs_history_proc *h);
/* The command that brings t back: with --park-from its files in the
 * images where its record says its memory is in them. */
void eng_restore_cmd(const cs_engine *e, const eng_task *t, char *buf, size_t size);

/* ---- dump, restore ---- */
void eng_give_back_or_name(cs_engine *e, int ret); /* engine_back.c */
void eng_restore_end(cs_engine *e, int ret); /* engine_restore.c */
/* The GPUs' room for the record's processes, before any exists. */
int eng_room_check(cs_engine *e); /* engine_room.c */
/* After a GPU restore that failed: kill the restored processes (or keep
 * them, as the settings say); seized: the engine traces them. */
void eng_give_up(cs_engine *e, const char *why, bool seized);
/* The map (OLD=NEW,...) onto this machine's GPUs for the record, or NULL
 * when none is needed; -1 (logged) when none fits. In a call (NVML). */
int eng_auto_map(cs_engine *e, const cs_manifest *m, pid_t sample, char **map);

#endif
