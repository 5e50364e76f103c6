/* Whether a booking whose cudasnap is gone still counts (gpubook.h).
 *
 * A cudasnap that asked the driver to restore a process and died, gave up
 * at its deadline or was told to stop leaves the request with the driver,
 * which carries it out inside the target and allocates when the target
 * admits it. Its booking counts until a reader sees the restore over: the
 * target gone, dead or replaced (another start time), or the driver
 * answering its state. The target's restore thread answers one call after
 * another, so a state read while a restore is pending waits behind it
 * (measured on an H100, driver 580.159.04: a read sent 0.35 s into an
 * 8 GiB restore answered LOCKED after 1.0 s, when the restore was done): a
 * read that does not answer within a second is a restore in flight. A
 * target that is stopped or frozen (its request waits for it) counts for
 * as long as it lives so. A target this reader cannot name (another PID or
 * time namespace), one whose booking another user wrote (the driver is not
 * asked about a process on someone else's word), or one on GPUs the
 * restore does not use counts until the booking's bound.
 *
 * An UNPARK booking is the memory a parked process's interposer still has
 * to bring back once its driver restore is over (the CRIU plugin leaves it
 * to the process: its unpark runs once the engine lets the tree go). Its
 * parking interposer, asked with the same bound, says when that is over:
 * not parked any more. One still parked, or that does not answer (its
 * interposer answers no status during an unpark), counts until the bound:
 * an unpark that failed leaves the memory in host memory or files, but
 * one not yet begun looks the same. */
#ifndef CS_GPUORPHAN_H
#define CS_GPUORPHAN_H

#include "gpubook.h"

/* How long a reader waits for the state of an orphan's target. */
#define CS_ORPHAN_STATE_S 1.0
/* A target that counts is asked again after this long at the earliest. */
#define CS_ORPHAN_RECHECK_S 1
/* At most this many state reads in one look at the book: the others count. */
#define CS_ORPHAN_ASKS 2

typedef struct cs_orphan_seen {
	char name[64];
	uint64_t next; /* boottime ns: asked again from then on */
} cs_orphan_seen;

/* Whether pid's parking interposer says its memory is parked (1), not
 * parked (0), or cannot tell within about CS_ORPHAN_STATE_S (<0). */
typedef int (*cs_parked_fn)(pid_t pid);

typedef struct cs_orphans {
	cs_driver *d; /* NULL: no state is read, every orphan counts until its bound */
	cs_parked_fn parked; /* NULL: an UNPARK orphan counts until its bound */
	uint64_t pidns; /* inode of the PID namespace of cs_proc_dir(); 0 unknown */
	uint64_t timens; /* inode of this process's time namespace; 0 unknown */
	/* The GPUs of the restore judged now (set before each look): an
	 * orphan on none of them is not asked about. NULL: every GPU. */
	const char (*uuids)[48];
	size_t nuuids;
	unsigned asks; /* state reads left in this look */
	cs_orphan_seen seen[16];
	size_t nseen;
} cs_orphans;

void cs_orphans_init(cs_orphans *o, cs_driver *d);
/* Before each look at the book: the GPUs it is about, and a fresh budget
 * of state reads. */
void cs_orphans_look(cs_orphans *o, const char (*uuids)[48], size_t n);
/* The judge of cs_gpubook_tally, ctx a cs_orphans (one caller at a time). */
bool cs_orphan_counts(void *ctx, const char *name, const cs_booking_rec *rec, uid_t owner, uint64_t now, bool expired);

/* The inode of the PID namespace whose pids cs_proc_dir() shows; 0 unknown. */
uint64_t cs_proc_pidns(void);
/* The inode of this process's time namespace (/proc/self/ns/time); 0 where
 * the kernel has none or it cannot be read. */
uint64_t cs_proc_timens(void);

#endif
