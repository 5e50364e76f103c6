/* Right before each driver restore: room on the GPUs it restores onto,
 * booked across every cudasnap of the node (gpubook.h), so that the check
 * and the driver's restore are one step. A restore waits, with a bound,
 * while restores in flight (its own command's or another's) hold the room
 * it needs or came before it, and until its deadline while other processes
 * do; a GPU whose free memory cannot be read is no room. */
#ifndef CS_GPULEDGER_H
#define CS_GPULEDGER_H

#include "gpubook.h"
#include "gpuorphan.h"
#include "gpunode.h"
#include "gpuroom.h"

#include <pthread.h>

/* How long a restore waits at most for restores in flight that hold the
 * room it needs (they end by themselves: a 64 GiB driver restore took
 * 12-13 s on the H200), beyond its own deadline. */
#define CS_GPU_INFLIGHT_WAIT_S 120.0

struct ledger_held;

typedef struct cs_gpu_ledger {
	pthread_mutex_t mu; /* the GPU list; one attempt of this process at a time */
	pthread_mutex_t held_mu; /* the bookings held */
	cs_nvml *nv;
	cs_driver *d; /* the restores' driver: deadlines, and the state of orphans' targets (may be NULL) */
	cs_orphans orphans; /* what this ledger saw of other cudasnaps' orphans */
	cs_nvml_gpu *gpus; /* this machine's, with their memory as last read */
	size_t ngpus;
	struct ledger_held *held; /* the bookings this ledger holds, by target */
	size_t nheld, capheld;
	double deadline; /* monotonic seconds: waiting for room that other processes hold ends then */
	volatile int *interrupted;
	const char *command; /* names the booking: "cudasnap restore" */
	cs_warn_fn warn;
	void *warn_ctx;
	cs_error book_err; /* why the book could not be opened */
	char why_none[400]; /* why there is no GPU list */
	char book_path[256]; /* the book it uses */
	int bookfd; /* the book, -1 until opened, or when it could not be */
	bool opened; /* the GPUs are read at the first restore, not before */
	bool probed; /* the GPU list is the driver's (NVML lists none) */
	bool host_pidns;
	bool warned;
	/* --ignore-gpu-memory: no room is checked, but every restore is still
	 * booked, so that the restores that do check count it. */
	bool ignore;
} cs_gpu_ledger;

/* d: the driver the restores are asked of (may be NULL). deadline
 * (cs_now's clock): until when a restore may wait for room that other
 * processes hold. Never fails. Set ->ignore after it for
 * --ignore-gpu-memory. */
void cs_gpu_ledger_init(cs_gpu_ledger *l, cs_driver *d, const char *command, double deadline, volatile int *interrupted,
			bool host_pidns, cs_warn_fn warn, void *warn_ctx);
void cs_gpu_ledger_fini(cs_gpu_ledger *l);
CS_DEFINE_CLEANUP_STRUCT(cs_gpu_ledger, cs_gpu_ledger_fini)
/* Right before the driver restores t (t->need filled): books its room on
 * every GPU it restores onto, waiting as above. <0 (err filled, CS_EPROC)
 * when there is no room, or it cannot be known (no need listed for a
 * process that may have one: not t->need_none): the driver must not be
 * asked. rollback: a checkpoint's rollback, which waits only for restores
 * in flight. With ->ignore, books without a look at the room. */
int cs_gpu_ledger_take(cs_gpu_ledger *l, const cs_target *t, bool rollback, cs_error *err);
/* A checkpoint's rollback: t's needs from what its checkpoint just moved
 * (t->bytes, measured where t->rss_after was read), on the GPUs this
 * ledger reads (the driver's where NVML is absent). */
void cs_gpu_ledger_rollback_needs(cs_gpu_ledger *l, cs_target *t);
/* After the driver's call: res, its result. Answered, t's booking ends
 * and the GPUs' own figures count. Not answered (CS_CU_TIMED_OUT,
 * CS_CU_INTERRUPTED), the call given up on may still send its request:
 * the booking stays held, its file locked, for as long as this process
 * lives (past cs_gpu_ledger_fini), and is left to its target when it
 * ends, an orphan that counts until its restore is seen over
 * (gpuorphan.h). */
void cs_gpu_ledger_give(cs_gpu_ledger *l, const cs_target *t, int res);

/* A parked process's memory comes back after its driver restore, by its
 * interposer's unpark (park/): its room stays booked until that is over.
 *
 * After the driver restored t (its booking held): the booking goes on for
 * what the unpark brings back, bytes on each GPU at most (0: not known,
 * the whole need). left: another (the process itself, once its engine
 * lets it run, or the engine's exit hook) unparks it after this ledger is
 * gone: the booking is left to its target, held while this process lives
 * and then an orphan until its interposer says it is not parked
 * (gpuorphan.h), or its bound. */
void cs_gpu_ledger_to_unpark(cs_gpu_ledger *l, const cs_target *t, unsigned long long bytes, bool left);
/* Right before an unpark: nothing when t's restore booked it already;
 * else (a process left parked, a checkpoint's rollback) books bytes on the
 * GPUs of t->need (at most each need; fills t->need) as a restore would,
 * waiting as above. <0 (err filled): the unpark must not start; the
 * process stays parked, its memory where its park put it. */
int cs_gpu_ledger_take_unpark(cs_gpu_ledger *l, cs_target *t, unsigned long long bytes, bool rollback, cs_error *err);
/* After the unpark: its booking ends; pending (not answered: it may still
 * go on), kept while this process lives, then an orphan. */
void cs_gpu_ledger_unparked(cs_gpu_ledger *l, const cs_target *t, bool pending);
/* The engine after it unparked target (pid, started at start, as this
 * process's /proc names it) itself: the bookings left to that unpark end. */
void cs_gpu_ledger_settle(pid_t target, unsigned long long start);

#endif
