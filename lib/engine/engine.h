/* Staged sessions: the session API for a snapshot engine (CRIU) that meets
 * the processes of a tree one hook at a time, where 'cudasnap checkpoint'
 * selects them all at once. The rules are the session's (lib/session/session.c):
 * claims, the checks before anything changes (host memory, CUDA IPC, GPU
 * memory before a restore), one transaction over the whole tree, the
 * record, the history of operations. The engine's front-end (criu/) only
 * translates its hooks into these calls:
 *
 *   dump      PAUSE_DEVICES        cs_engine_meet      claim and lock, while the process runs
 *             CHECKPOINT_DEVICES   cs_engine_checkpoint  all at once; the record into the images
 *             exit                 cs_engine_end       give back (failed, or left running), or say
 *                                                      what stays checkpointed (left stopped)
 *   restore   init                 cs_engine_import    the record; the GPUs' room, before any
 *                                                      process exists
 *             RESUME_DEVICES_LATE  cs_engine_adopt     match each restored process to the record;
 *                                                      restore all once all are met
 *             exit                 cs_engine_end       what was not met; a failed GPU restore
 *                                                      kills the restored processes
 *
 * The engine's process never loads the driver: every driver call (and
 * NVML) runs through opts.run, which the CRIU plugin implements with a
 * child process (criu/helper.h) while it lets the restore threads that the
 * call needs run (criu/restore_thread.c). Lines for the engine's log go
 * through opts.log; nothing here prints. */
#ifndef CS_ENGINE_H
#define CS_ENGINE_H

#include "cudasnap.h"
#include "history.h"

#include <stdbool.h>
#include <stddef.h>
#include <sys/types.h>

/* Levels of opts.log: CRIU's own numbers. */
enum { CS_LOG_ERROR = 1, CS_LOG_WARN = 2, CS_LOG_INFO = 3 };

/* How the engine leaves the tree after a dump that succeeded. */
typedef enum cs_engine_final {
	CS_FINAL_DEAD, /* killed (CRIU's default) */
	CS_FINAL_ALIVE, /* left running */
	CS_FINAL_STOPPED, /* left stopped */
} cs_engine_final;

/* A thread that must run while a call is made: the driver's restore thread
 * of a process the engine holds stopped (tid as the engine names it). */
typedef struct cs_engine_thread {
	pid_t pid, tid;
} cs_engine_thread;

/* Work for opts.run: fn runs (in another process) and fills *reply
 * (malloc'd, *len bytes), which run hands back; fn returns >= 0. */
typedef struct cs_engine_call {
	const char *what; /* names the work in log lines */
	double seconds; /* the bound on the whole call */
	int (*fn)(void *arg, void **reply, size_t *len);
	void *arg;
	const cs_engine_thread *threads; /* to run during the call */
	size_t nthreads;
} cs_engine_call;

typedef struct cs_engine_opts {
	cs_op op; /* CS_OP_CHECKPOINT (a dump) or CS_OP_RESTORE */
	const char *engine; /* "CRIU", in what the log says */
	const char *command; /* holder of the claims: "criu dump" */
	const char *front; /* who ran it, in the history: "criu-dump" */
	/* dump: the engine's own timeout, the lock's bound (0: 600 s), and
	 * how it leaves the tree after a dump that succeeded */
	unsigned timeout_s;
	cs_engine_final final;
	const char *options_from; /* dump: where these came from, for the log ("CRIU's options") */
	/* Runs c; returns fn's result with its reply, or <0 (logged by run)
	 * when no answer came. */
	int (*run)(void *ctx, const cs_engine_call *c, void **reply, size_t *len);
	void (*log)(void *ctx, int level, const char *line);
	/* dump: after the record was written into the images; <0 (logged)
	 * fails the dump. NULL: nothing to do. */
	int (*recorded)(void *ctx);
	/* dump: the engine's images directory (a directory fd the engine
	 * keeps open, -1 none): processes that run the parking interposer park
	 * into files there (cudasnap-gpumem.*), which travel with the images,
	 * unless the setting CUDASNAP_PARK_FILES=0 keeps their parks in host
	 * memory. A restore reads them from the directory cs_engine_import gets. */
	int images;
	/* restore: the engine waits for the restored tree to end before its
	 * exit hook (criu restore in the foreground, without -d): what comes
	 * back parked gets its unpark at the adoption, left in its control
	 * socket and answered once the engine lets it run. */
	bool restore_waits;
	/* restore: after the restored processes were killed (a GPU restore
	 * that failed) while the engine traces them: wait for them. */
	void (*reap)(void *ctx, const pid_t *pids, size_t n);
	void *ctx;
} cs_engine_opts;

typedef struct cs_engine cs_engine;

/* A session for one dump or restore; copies opts. Touches neither the driver
 * nor the state directory. NULL when out of memory. */
cs_engine *cs_engine_open(const cs_engine_opts *opts);
void cs_engine_free(cs_engine *e);
CS_DEFINE_CLEANUP(cs_engine, cs_engine_free)

/* A line of the engine's log at error level (its own, not one of the
 * session's): the first becomes the operation's error in the history. */
void cs_engine_error_line(cs_engine *e, const char *line);

/* ---- dump ---- */

/* A process of the tree, met before the engine stops it: scanned in /proc;
 * a process that holds GPU device files the driver cannot checkpoint, or
 * that imported CUDA memory, is refused; a CUDA process is claimed and
 * locked. The first that maps the driver probes it and opens the state
 * directory. 0 to go on, -1 (logged) to fail the dump. */
int cs_engine_meet(cs_engine *e, pid_t pid);
/* Every process of the tree stopped: the first call checkpoints all the
 * locked ones as one transaction and writes the record into images (a
 * directory fd); every call answers for pid: 0, or -1 when the dump must
 * fail. */
int cs_engine_checkpoint(cs_engine *e, int images, pid_t pid);

/* ---- restore ---- */

/* Whether the images (a directory fd) have a GPU part, by the rule
 * 'cudasnap inspect' uses (cs_inventory_gpu_part): their inventory names
 * the plugin, or lists no plugins (a CRIU before 4.0, whose restore asks
 * every plugin) and they hold the record. An inventory that cannot be read
 * counts as naming it: the import then says what is wrong. */
bool cs_engine_images_gpu_part(int images);
/* The images hold the plugin's record (the inventory said so): read it,
 * probe the driver, and judge the GPUs' room for every process before any
 * exists (waiting as CUDASNAP_WAIT_MEMORY says). 0 to go on, -1 (logged)
 * to fail the restore. */
int cs_engine_import(cs_engine *e, int images);
/* A restored process (pid as the engine names it), while the engine holds
 * the tree: matched to the record; once every recorded process is met, all
 * are restored at once (their restore threads run through opts.run). The
 * result for pid: 0, or -1 when its GPU state is not back. */
int cs_engine_adopt(cs_engine *e, pid_t pid);

/* ---- both ---- */

/* The engine's exit hook (ret: its result). A dump gives every process
 * back (failed, or the tree left running) or names what stays checkpointed
 * (left stopped); a restore names the record's processes never met and
 * restores those met but not yet restored. Then the operation's entry is
 * completed and written into the history; returned (NULL when the
 * operation met no GPU) for the engine's own logs, valid until freed. */
const cs_history *cs_engine_end(cs_engine *e, int ret);
/* After cs_engine_end of a restore: whether its GPU restore failed and the
 * restored processes were killed. Where the engine's own result was a
 * success (ret 0: the GPU step failed at its exit hook, after the engine
 * had let the tree run), the engine must still be made to fail. */
bool cs_engine_killed(const cs_engine *e);

#endif
