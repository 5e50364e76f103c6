/* GPU memory booked by the restores in flight on this node.
 *
 * A restore that runs out of GPU memory destroys the process's checkpointed
 * state for good (driver 580), and two restores that each fit alone may not
 * fit together: both would read the same free memory and both ask the
 * driver. So the check of a GPU's room and the driver's restore are made
 * one step across every cudasnap of the node that shares the state
 * directory (the command line, the gVisor hook, the cuda-checkpoint
 * drop-in, the CRIU plugin of every engine): under the book's lock a
 * restore reads the GPU's free memory, takes off what the restores in
 * flight booked, and books its own need when it fits; the booking lives
 * until the driver answered.
 *
 * The book is a directory beside the claims (claims/.gpu-bookings of the
 * state directory: wherever a restore may claim its process, it may book),
 * one file per booking.
 * Its owner holds an flock on it for as long as the booking lives, so the
 * kernel ends the booking of a process that dies, SIGKILL included: a file
 * whose lock can be taken is a dead booking, removed by the next reader.
 * flock is per open file description, so two threads of one process hold
 * their bookings, and the book's lock, against each other too. Waiters are
 * served in the order they came (their ticket), one at a time, as far as
 * they can be served: a waiter that came earlier goes first when the room
 * there could take it now, and holds no one back while it could not. A
 * waiter says it is still there at every look (its beat); one that said
 * nothing for CS_GPUBOOK_STALE_S (stopped, say) holds no one back. */
#ifndef CS_GPUBOOK_H
#define CS_GPUBOOK_H

#include "cudasnap.h"

#include <stdbool.h>
#include <stdint.h>
#include <sys/types.h>

#define CS_GPUBOOK_HINT \
	"Restores are booked in the state directory (CUDASNAP_STATE_DIR): make it a directory owned by root " \
	"(or you) with mode 0700, or accept the risk of a restore that runs out of GPU memory with " \
	"--ignore-gpu-memory (CUDASNAP_IGNORE_GPU_MEMORY=1)."

/* The book's directory, in the claims' directory of the state directory
 * (a name with a dot, which the claims' own readers pass over). */
#define CS_GPUBOOK_DIR ".gpu-bookings"
#define CS_GPUBOOK_PATH "claims/" CS_GPUBOOK_DIR
/* A waiter that has not looked again for this long holds no one back. */
#define CS_GPUBOOK_STALE_S 5

typedef enum cs_booking_state {
	CS_BOOKING_WAITING = 1, /* in line: books nothing yet, but keeps its place */
	CS_BOOKING_HELD = 2, /* its restore is in flight: the memory is taken */
} cs_booking_state;

/* One booking as its file holds it. */
typedef struct cs_booking_rec {
	uint32_t state; /* cs_booking_state */
	uint32_t ngpu;
	uint64_t ticket; /* its place in line: when it first asked (CLOCK_REALTIME ns) */
	uint64_t beat; /* when it last looked (the same clock) */
	int32_t pid; /* the booking process, as its own namespace names it */
	char who[96]; /* "cudasnap restore: pid 12 (python3)" */
	cs_gpu_use gpu[CS_TARGET_GPUS]; /* each GPU it needs, with the bytes */
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
	/* The least that a waiter which came earlier (and still looks) needs
	 * here; 0: none. It goes first where the room can take that. */
	unsigned long long ahead_need;
	char first_who[96]; /* one of them, for the words */
	char ahead_who[96];
} cs_book_tally;

/* Opens (creating it and the claims' directory, 0700) the book in the
 * state directory statefd: an O_DIRECTORY fd, or <0 with err filled (a
 * symlink, a directory owned by another user or writable by others are
 * refused). */
int cs_gpubook_open(int statefd, cs_error *err);

/* Takes the book's lock (an flock of the directory, through an open of its
 * own), waiting at most until deadline (cs_now's clock): the lock's fd, or
 * <0 with err filled (the holder named). interrupted, when set, ends the
 * wait. */
int cs_gpubook_lock(int bookfd, double deadline, const volatile int *interrupted, cs_error *err);

/* With the lock held: the tally of the live bookings other than self's
 * file (self may be NULL) on each GPU of uuids[0..n), out[i] for uuids[i];
 * the dead ones removed. A waiter is ahead when its ticket is lower than
 * ticket (0: every waiter) and it looked within CS_GPUBOOK_STALE_S.
 * Returns how many live bookings hold memory on any GPU (held ones). */
size_t cs_gpubook_tally(int bookfd, const cs_booking *self, uint64_t ticket, const char (*uuids)[48], size_t n,
			cs_book_tally *out);

/* With the lock held: writes b->rec into b's file, creating it (and
 * taking its flock) the first time. 0, or -errno. */
int cs_gpubook_write(int bookfd, cs_booking *b);

/* Ends b: its file removed, its lock released (no book lock needed). */
void cs_gpubook_drop(int bookfd, cs_booking *b);

/* Reads one booking's file into rec: 0, or -EINVAL for anything that is not
 * one (it is then ignored). For the fuzzer too. */
int cs_booking_parse(const void *buf, size_t len, cs_booking_rec *rec);

/* A new ticket: the time now, in ns. */
uint64_t cs_gpubook_ticket(void);

#endif
