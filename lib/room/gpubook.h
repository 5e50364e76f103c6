/* GPU memory booked by the restores in flight on this node.
 *
 * A restore that runs out of GPU memory destroys the process's checkpointed
 * state for good (driver 580), and two restores that each fit alone may not
 * fit together: both would read the same free memory and both ask the
 * driver. So the check of a GPU's room and the driver's restore are made
 * one step across every cudasnap of the node (the command line, the gVisor
 * hook, the cuda-checkpoint drop-in, the CRIU plugin of every engine,
 * whatever their state directories): under the book's lock a restore reads
 * the GPU's free memory, takes off what the restores in flight booked, and
 * books its own need when it fits.
 *
 * The book is one directory of the node, CS_GPUBOOK_NODE (CUDASNAP_GPU_BOOK
 * moves it, for tests; CUDASNAP_STATE_DIR does not), one file per booking.
 * Its owner holds an flock on it while it lives. A booking ends when its
 * restore is over, not when its cudasnap is: the driver carries out a
 * restore it was asked for even after its caller died or gave up, and
 * allocates when the target admits it. So a booking whose owner is gone
 * (the kernel released its lock: SIGKILL included) and whose owner had let
 * the driver be asked is an orphan, and counts until a reader sees its
 * target restored, failed or gone (gpuorphan.h), or until its bound.
 * flock is per open file description, so two threads of one process hold
 * their bookings, and the book's lock, against each other too. Waiters are
 * served in the order they came (their ticket), one at a time, as far as
 * they can be served: a waiter that came earlier goes first when the room
 * there could take it now, and holds no one back while it could not. A
 * waiter says it is still there at every look (its beat); one that said
 * nothing for CS_GPUBOOK_STALE_S (stopped, say) holds no one back. A file
 * that is not a booking of this version counts as the whole of every GPU,
 * never as nothing: it may be another cudasnap's restore in flight.
 *
 * A process whose memory is parked (park/) gets its context back from the
 * driver's restore and the bulk from its unpark afterwards: its booking
 * goes on as an UNPARK booking until that is over (gpuledger.h). */
#ifndef CS_GPUBOOK_H
#define CS_GPUBOOK_H

#include "cudasnap.h"

#include <stdbool.h>
#include <stdint.h>
#include <sys/types.h>

/* The node's book. A directory of root's, 01777 (sticky, as /tmp), so that
 * the restores of every user are counted and none can remove another's
 * booking. */
#define CS_GPUBOOK_NODE "/run/cudasnap-gpu-book"

#define CS_GPUBOOK_HINT \
	"Every restore of the node is booked in " CS_GPUBOOK_NODE " (CUDASNAP_GPU_BOOK moves it): let root " \
	"create it (any restore as root, or the package's tmpfiles.d entry), owned by root with mode 1777, " \
	"or accept the risk of a restore that runs out of GPU memory with --ignore-gpu-memory " \
	"(CUDASNAP_IGNORE_GPU_MEMORY=1)."

/* A waiter that has not looked again for this long holds no one back. */
#define CS_GPUBOOK_STALE_S 5
/* The longest an orphan, or a file of another version whose owner is gone,
 * counts without a reader seeing its restore end: past it the file goes. */
#define CS_GPUBOOK_ORPHAN_MAX_S 900

typedef enum cs_booking_state {
	CS_BOOKING_WAITING = 1, /* in line: books nothing yet, but keeps its place */
	CS_BOOKING_HELD = 2, /* its restore is in flight: the memory is taken */
	/* Its driver restore is over, and the memory its parking interposer
	 * still has to bring back (the unpark) is taken until that is done. */
	CS_BOOKING_UNPARK = 3,
} cs_booking_state;

/* Whether a booking takes memory (a restore or an unpark in flight). */
static inline bool cs_booking_takes(uint32_t state)
{
	return state == CS_BOOKING_HELD || state == CS_BOOKING_UNPARK;
}

/* One booking as its file holds it. Times are CLOCK_BOOTTIME ns: one clock
 * for every process of the node, which no one sets. */
typedef struct cs_booking_rec {
	uint32_t state; /* cs_booking_state */
	uint32_t ngpu;
	uint64_t ticket; /* its place in line: when it first asked */
	uint64_t beat; /* when it last looked */
	/* HELD, UNPARK: until when it counts at most once its owner is gone
	 * (0: it ends with its owner, as the driver was not asked). */
	uint64_t until;
	int32_t pid; /* the booking process, as its own namespace names it */
	int32_t target; /* the process restored, as target_pidns names it */
	uint64_t target_pidns; /* inode of the PID namespace of the booking's /proc */
	uint64_t target_start; /* its start time (clock ticks since boot) */
	uint64_t timens; /* inode of the booking process's time namespace (its clocks); 0 unknown */
	char who[96]; /* "cudasnap restore: pid 12 (python3)" */
	cs_gpu_use gpu[CS_TARGET_GPUS]; /* each GPU it needs, with the bytes */
	/* WAITING: bit k, gpu[k] was short of memory (or its free memory
	 * unread) at its last look. It cannot be served before that GPU frees,
	 * so it holds no one back on its other GPUs. */
	uint32_t short_gpus;
	uint32_t spare;
} cs_booking_rec;

/* A booking this process holds: its file, locked, and what it says. */
typedef struct cs_booking {
	int fd; /* -1: none */
	char name[64];
	cs_booking_rec rec;
} cs_booking;
#define CS_BOOKING_NONE ((cs_booking){ .fd = -1 })

/* What the live bookings of others take on one GPU. */
typedef struct cs_book_tally {
	unsigned long long held; /* bytes booked by restores in flight */
	unsigned nheld;
	bool whole; /* a booking that cannot be read, or whose GPUs cannot, takes all of it */
	/* The least that a waiter which came earlier (and still looks) needs
	 * here; 0: none. It goes first where the room can take that. */
	unsigned long long ahead_need;
	char first_who[160]; /* one of them, for the words */
	char ahead_who[96];
} cs_book_tally;

/* Whether an orphan still counts: its file's name, record and owner, the
 * time (boottime ns), and whether its bound has passed. true: it counts;
 * false: its restore is over, and the file goes. */
typedef struct cs_orphan_judge {
	bool (*counts)(void *ctx, const char *name, const cs_booking_rec *rec, uid_t owner, uint64_t now, bool expired);
	void *ctx;
} cs_orphan_judge;

/* The node's book: $CUDASNAP_GPU_BOOK, or CS_GPUBOOK_NODE. */
const char *cs_gpubook_path(void);

/* Opens the book at path (cs_gpubook_path() when NULL), creating it when
 * missing (root: 01777; another user only where CUDASNAP_GPU_BOOK names
 * it, 0700): an O_DIRECTORY fd, or <0 with err filled (a symlink, a
 * directory owned by another user than root or the caller, or writable by
 * others without the sticky bit, are refused). */
int cs_gpubook_open(const char *path, cs_error *err);
/* The same checks of an open book, without creating anything: 0, or <0
 * with err filled. */
int cs_gpubook_check(int fd, const char *path, cs_error *err);

/* Takes the book's lock (an flock of the directory, through an open of its
 * own), waiting at most until deadline (cs_now's clock): the lock's fd, or
 * <0 with err filled (the holder named). interrupted, when set, ends the
 * wait. */
int cs_gpubook_lock(int bookfd, double deadline, const volatile int *interrupted, cs_error *err);

/* With the lock held: the tally of the live bookings other than self's
 * file (self may be NULL) on each GPU of uuids[0..n), out[i] for uuids[i];
 * the dead ones removed. A waiter is ahead when its ticket is lower than
 * ticket (0: every waiter) and it looked within CS_GPUBOOK_STALE_S. An
 * orphan counts while judge (may be NULL: every orphan counts) says so.
 * Returns how many live bookings hold memory (held, orphans, unreadable
 * ones) on any GPU. */
size_t cs_gpubook_tally(int bookfd, const cs_booking *self, uint64_t ticket, const char (*uuids)[48], size_t n,
			const cs_orphan_judge *judge, cs_book_tally *out);

/* With the lock held: writes b->rec into b's file, creating it (and
 * taking its flock) the first time. 0, or -errno. */
int cs_gpubook_write(int bookfd, cs_booking *b);

/* Ends b: its file removed, its lock released (no book lock needed). */
void cs_gpubook_drop(int bookfd, cs_booking *b);
/* Leaves b held for as long as this process lives: its descriptor stays
 * open, never closed, so that its file stays locked while a driver call
 * given up on may still send its request; when the process ends, the
 * kernel releases the lock and b counts as an orphan until its restore is
 * seen over (b->rec.until set). */
void cs_gpubook_keep(cs_booking *b);

/* With the lock held: ends the UNPARK bookings of the target pid (started
 * at start, in the PID namespace of inode pidns) whose owners are gone:
 * its unpark, which they were left to, is over. */
void cs_gpubook_settle(int bookfd, pid_t target, uint64_t start, uint64_t pidns);

/* Reads one booking's file into rec: 0, or -EINVAL for anything that is not
 * a booking of this version. For the fuzzer too. */
int cs_booking_parse(const void *buf, size_t len, cs_booking_rec *rec);

/* A new ticket: CLOCK_BOOTTIME now, in ns. */
uint64_t cs_gpubook_ticket(void);

#endif
