/* The gate in front of the driver. Every entry point the program can reach
 * (by name, by dlsym or dlvsym, by cuGetProcAddress) is a stub of
 * gate_x86_64.S or a wrapper that calls park_gate_enter and
 * park_gate_leave, so that a park can hold the program's GPU work back and
 * know that none of it is running inside the driver, whatever function it
 * is.
 *
 * Each thread counts its calls in a record of its own (no cache line is
 * shared between threads on the way in or out). A park sets park_gate_shut,
 * then waits until every record says no call is inside. The entering side
 * increments, then reads park_gate_shut; the park stores, then reads the
 * counts: for neither to miss the other, the store and the load on each
 * side must not be reordered. The entering side pays nothing for that:
 * the park runs membarrier(2), which puts a full barrier into every running
 * thread. Where membarrier cannot be used, the increments are locked
 * instead (park_gate_plain 0). */
#include <errno.h>
#include <fcntl.h>
#include <limits.h>
#include <linux/futex.h>
#include <linux/membarrier.h>
#include <signal.h>
#include <stdatomic.h>
#include <stdio.h>
#include <string.h>
#include <sys/syscall.h>
#include <time.h>
#include <unistd.h>

#include "gate_abi.h"
#include "park.h"
#include "park_find.h"

#define HIDDEN __attribute__((visibility("hidden")))
#define GATE_RECS 4096

struct gate_rec {
	long count; /* GATE_REC_COUNT */
	long held; /* GATE_REC_HELD */
	_Atomic pid_t owner; /* the thread (its tid), 0 when free */
	/* When it was taken, and by which id: the id in the high bits, the
	 * time (CLOCK_BOOTTIME, ms) in the low ones. A thread under that id
	 * that started later is another one (claim_says_gone). */
	_Atomic unsigned long long claim;
} __attribute__((aligned(64)));
_Static_assert(offsetof(struct gate_rec, count) == GATE_REC_COUNT, "as gate_x86_64.S");
_Static_assert(offsetof(struct gate_rec, held) == GATE_REC_HELD, "as gate_x86_64.S");

/* read by gate_x86_64.S */
int park_gate_shut HIDDEN;
unsigned char park_gate_plain HIDDEN;
__thread struct gate_rec *park_gate_rec HIDDEN __attribute__((tls_model("initial-exec")));

/* from gate_x86_64.S */
extern char park_name_stubs[] HIDDEN;
extern char park_dyn_stubs[] HIDDEN;
extern void *park_slot_real[] HIDDEN;
extern unsigned char park_slot_stack[] HIDDEN;
extern const char park_name_strs[] HIDDEN;
extern const unsigned park_name_offs[] HIDDEN;
extern const unsigned park_name_count HIDDEN;

static struct gate_rec recs[GATE_RECS];
static atomic_uint recs_used; /* high-water mark */
/* Threads beyond GATE_RECS share one record, with locked counts, and keep
 * their nesting in TLS. */
static struct gate_rec shared;
static __thread long shared_held __attribute__((tls_model("initial-exec")));
static bool barrier_registered;

static unsigned dyn_used;
static pthread_mutex_t dyn_mu = PTHREAD_MUTEX_INITIALIZER;

static void inc_plain(long *p)
{
	__asm__ volatile("incq %0" : "+m"(*p)::"memory");
}

static void dec_plain(long *p)
{
	__asm__ volatile("decq %0" : "+m"(*p)::"memory");
}

static void inc_count(struct gate_rec *r)
{
	if (park_gate_plain)
		inc_plain(&r->count);
	else
		__atomic_fetch_add(&r->count, 1, __ATOMIC_SEQ_CST);
}

static void dec_count(struct gate_rec *r)
{
	if (park_gate_plain)
		dec_plain(&r->count);
	else
		__atomic_fetch_sub(&r->count, 1, __ATOMIC_SEQ_CST);
}

static bool shut(void)
{
	return __atomic_load_n(&park_gate_shut, __ATOMIC_SEQ_CST) != 0;
}

void park_gate_init(bool barriers)
{
	if (barriers && syscall(SYS_membarrier, MEMBARRIER_CMD_REGISTER_PRIVATE_EXPEDITED, 0, 0) == 0)
		barrier_registered = true;
	/* From now on increments may be plain: every park runs the barrier. */
	__atomic_store_n(&park_gate_plain, barrier_registered, __ATOMIC_SEQ_CST);
}

static bool alive(pid_t tid)
{
	return syscall(SYS_tgkill, getpid(), tid, 0) == 0 || errno != ESRCH;
}

#define CLAIM_MS_BITS 40 /* ms since boot: 34 years */
#define CLAIM_MS ((1ULL << CLAIM_MS_BITS) - 1)

/* The record is tid's from now: noted with the time, read without a system
 * call a filter might forbid or a cancellation could end (the vDSO), or a
 * file (the thread's start time is read by the park's thread alone). */
static void note_claim(struct gate_rec *r, pid_t tid)
{
	struct timespec ts;
	clock_gettime(CLOCK_BOOTTIME, &ts);
	unsigned long long ms = (unsigned long long)ts.tv_sec * 1000ULL + (unsigned long long)ts.tv_nsec / 1000000ULL;
	atomic_store(&r->claim, ((unsigned long long)(unsigned)tid << CLAIM_MS_BITS) | (ms & CLAIM_MS));
}

/* When thread TID of this process started (its stat's field 22, clock
 * ticks since boot), 0 when /proc cannot say. For the park's thread only. */
static unsigned long long task_start(pid_t tid)
{
	char path[48], buf[512];
	snprintf(path, sizeof(path), "/proc/self/task/%d/stat", (int)tid);
	int fd = open(path, O_RDONLY | O_CLOEXEC);
	if (fd < 0)
		return 0;
	ssize_t got = read(fd, buf, sizeof(buf));
	close(fd);
	return got > 0 ? park_stat_start(buf, (size_t)got) : 0;
}

static struct gate_rec *take(struct gate_rec *r, pid_t expect, pid_t tid)
{
	if (!atomic_compare_exchange_strong(&r->owner, &expect, tid))
		return NULL;
	/* a thread that died inside a call (cancelled) left its count */
	r->count = 0;
	r->held = 0;
	note_claim(r, tid);
	unsigned i = (unsigned)(r - recs) + 1, seen = atomic_load(&recs_used);
	while (seen < i && !atomic_compare_exchange_weak(&recs_used, &seen, i))
		;
	park_gate_rec = r;
	return r;
}

/* The calling thread's record: one its id owns, left by an earlier thread
 * under that id that ended inside a call; else a free one, else one whose
 * thread is gone. Async-signal-safe (a signal handler may make a thread's
 * first call). */
struct gate_rec *park_gate_claim(void) HIDDEN;
struct gate_rec *park_gate_claim(void)
{
	int saved = errno;
	pid_t tid = (pid_t)syscall(SYS_gettid);
	struct gate_rec *r = NULL;
	unsigned used = atomic_load(&recs_used);
	for (unsigned i = 0; r == NULL && i < used; i++)
		if (atomic_load(&recs[i].owner) == tid)
			r = take(&recs[i], tid, tid);
	for (unsigned i = 0; r == NULL && i < GATE_RECS; i++)
		if (atomic_load(&recs[i].owner) == 0)
			r = take(&recs[i], 0, tid);
	for (unsigned i = 0; r == NULL && i < GATE_RECS; i++) {
		pid_t o = atomic_load(&recs[i].owner);
		if (o != 0 && o != tid && !alive(o))
			r = take(&recs[i], o, tid);
	}
	errno = saved;
	return r;
}

/* A child of fork() keeps its parent's record, under its own id now, and
 * no park: one under way in the parent is not the child's to wait for; nor
 * is a lock that one of the parent's threads held (table.c). */
static void child_owns(void)
{
	dyn_mu = (pthread_mutex_t)PTHREAD_MUTEX_INITIALIZER;
	if (park_gate_rec) {
		pid_t tid = (pid_t)syscall(SYS_gettid);
		note_claim(park_gate_rec, tid);
		atomic_store(&park_gate_rec->owner, tid);
	}
	__atomic_store_n(&park_gate_shut, 0, __ATOMIC_SEQ_CST);
}

/* Where the driver lies, as a park closing the gate found it: a call the
 * driver makes to one of its own exported functions (through the
 * interposer's name) is part of a call already under way, or of its own
 * work, and must not wait for the park. */
#define GATE_DRIVERS 8
static uintptr_t drv_lo[GATE_DRIVERS], drv_hi[GATE_DRIVERS];
static int ndrv;

int park_gate_from_driver(const void *ret) HIDDEN;
int park_gate_from_driver(const void *ret)
{
	uintptr_t a = (uintptr_t)ret;
	int n = __atomic_load_n(&ndrv, __ATOMIC_ACQUIRE);
	for (int i = 0; i < n; i++)
		if (a >= drv_lo[i] && a < drv_hi[i])
			return 1;
	return 0;
}

void park_gate_wait_open(void)
{
	int saved = errno;
	while (shut())
		syscall(SYS_futex, &park_gate_shut, FUTEX_WAIT_PRIVATE, 1, NULL, NULL, 0);
	errno = saved;
}

void park_gate_enter_shared(void) HIDDEN;
void park_gate_enter_shared(void)
{
	for (;;) {
		__atomic_fetch_add(&shared.count, 1, __ATOMIC_SEQ_CST);
		if (!shut() || shared_held > 0) {
			shared_held++;
			return;
		}
		__atomic_fetch_sub(&shared.count, 1, __ATOMIC_SEQ_CST);
		park_gate_wait_open();
	}
}

void park_gate_leave_shared(void) HIDDEN;
void park_gate_leave_shared(void)
{
	shared_held--;
	__atomic_fetch_sub(&shared.count, 1, __ATOMIC_SEQ_CST);
}

/* The C wrappers' way in and out: the same protocol as the stubs. */
void park_gate_enter(void)
{
	struct gate_rec *r = park_gate_rec ? park_gate_rec : park_gate_claim();
	if (r == NULL) {
		park_gate_enter_shared();
		return;
	}
	for (;;) {
		inc_count(r);
		if (!shut() || r->held > 0) {
			inc_plain(&r->held);
			return;
		}
		dec_count(r);
		park_gate_wait_open();
	}
}

void park_gate_leave(void)
{
	struct gate_rec *r = park_gate_rec;
	if (r == NULL) {
		park_gate_leave_shared();
		return;
	}
	dec_plain(&r->held);
	dec_count(r);
}

/* The interposer's own threads (a park's) pass a closed gate: a driver
 * call they make through a later interposer, which may call the driver by
 * name, must not wait for the park itself. */
static __thread bool exempt __attribute__((tls_model("initial-exec")));

void park_gate_exempt(void)
{
	if (exempt)
		return;
	exempt = true;
	struct gate_rec *r = park_gate_rec ? park_gate_rec : park_gate_claim();
	if (r)
		inc_plain(&r->held); /* for good: its calls count as nested */
	else
		shared_held++;
}

bool park_gate_exempt_now(void)
{
	return exempt;
}

PARK_EARLY const char *park_name_at(unsigned slot)
{
	return slot < park_name_count ? park_name_strs + park_name_offs[slot] : NULL;
}

int park_name_index(const char *name)
{
	unsigned lo = 0, hi = park_name_count;
	while (lo < hi) {
		unsigned mid = lo + (hi - lo) / 2;
		int c = strcmp(name, park_name_at(mid));
		if (c == 0)
			return (int)mid;
		if (c < 0)
			hi = mid;
		else
			lo = mid + 1;
	}
	return -1;
}

PARK_EARLY void *park_name_stub(unsigned slot)
{
	return park_name_stubs + GATE_STUB_SIZE * (size_t)slot;
}

bool park_gate_stub(const void *fn)
{
	const char *p = fn;
	return p >= park_name_stubs && p < park_dyn_stubs + GATE_STUB_SIZE * (size_t)GATE_DYN_SLOTS;
}

/* A named stub's first call: what the name is after this library. Where
 * nothing is (the driver lacks the name: an object bound to it before the
 * interposer could tell, or one park_ifunc handed the stub), the call fails
 * as the dynamic linker fails a lazy binding of it, never a jump to 0. */
void *park_gate_resolve(unsigned slot) HIDDEN;
void *park_gate_resolve(unsigned slot)
{
	int saved = errno;
	const char *name = park_name_at(slot);
	void *fn = name ? park_next_sym(name) : NULL;
	if (fn == NULL) {
		char msg[256];
		/* the dynamic linker's words for a lazy binding that finds nothing */
		int n = snprintf(msg, sizeof(msg),
				 "%s: symbol lookup error: undefined symbol: %s (not in the driver)\n",
				 program_invocation_name, name ? name : "?");
		if (n > 0)
			(void)!write(2, msg, (size_t)n < sizeof(msg) ? (size_t)n : sizeof(msg) - 1);
		_exit(127);
	}
	__atomic_store_n(&park_slot_real[slot], fn, __ATOMIC_RELEASE);
	errno = saved;
	return fn;
}

/* Whether name is base with a version and per-thread-stream suffix, as
 * cuGetProcAddress maps a base name to one of them (_v2, _ptsz, _v3_ptds). */
static bool of_family(const char *name, const char *base)
{
	size_t n = strlen(base);
	if (strncmp(name, base, n) != 0)
		return false;
	const char *p = name + n;
	if (p[0] == '_' && p[1] == 'v' && p[2] >= '0' && p[2] <= '9') {
		p += 2;
		while (*p >= '0' && *p <= '9')
			p++;
	}
	return *p == '\0' || strcmp(p, "_ptsz") == 0 || strcmp(p, "_ptds") == 0;
}

/* The bytes of stack arguments the function takes: by its exact name, or
 * for a base name (cuGetProcAddress, which hands out one of its versions)
 * the most any of its family takes. All the trampoline may copy where the
 * name, or a member of the family, is not known (driver_stack.inc). */
static unsigned stack_bytes(const char *name, bool base)
{
	if (name == NULL)
		return GATE_STACK_ARGS;
	if (!base) {
		int i = park_name_index(name);
		return i >= 0 ? park_slot_stack[i] : GATE_STACK_ARGS;
	}
	unsigned most = 0;
	bool any = false;
	for (unsigned i = 0; i < park_name_count; i++) {
		const char *n = park_name_at(i);
		if (n && of_family(n, name)) {
			any = true;
			most = park_slot_stack[i] > most ? park_slot_stack[i] : most;
		}
	}
	return any ? most : GATE_STACK_ARGS;
}

void *park_gate_wrap(void *real, const char *name, bool base)
{
	if (real == NULL || park_gate_stub(real))
		return real;
	void *stub = NULL;
	unsigned bytes = stack_bytes(name, base);
	pthread_mutex_lock(&dyn_mu);
	for (unsigned i = 0; i < dyn_used && stub == NULL; i++)
		if (park_slot_real[park_name_count + i] == real) {
			stub = park_dyn_stubs + GATE_STUB_SIZE * (size_t)i;
			/* one function under two names: the larger is its own */
			if (bytes > park_slot_stack[park_name_count + i])
				park_slot_stack[park_name_count + i] = (unsigned char)bytes;
		}
	if (stub == NULL && dyn_used < GATE_DYN_SLOTS) {
		/* the bytes are set before the function the stub is handed out with */
		park_slot_stack[park_name_count + dyn_used] = (unsigned char)bytes;
		__atomic_store_n(&park_slot_real[park_name_count + dyn_used], real, __ATOMIC_RELEASE);
		stub = park_dyn_stubs + GATE_STUB_SIZE * (size_t)dyn_used++;
	}
	pthread_mutex_unlock(&dyn_mu);
	if (stub == NULL) {
		/* An entry point that no stub covers could run during a park. */
		park_mark_unparkable("more driver entry points than the interposer can gate");
		return real;
	}
	return stub;
}

/* Whether the thread under the record's id o started after the record was
 * taken: then it is another thread, the record's ended inside a call, and
 * its count is left over (a thread starts before its first call, so the
 * record's own never did). Anything unknown (the claim being noted, /proc
 * unreadable, out of descriptors, the same clock tick) is the same thread:
 * the count is waited for, never dropped on a guess. */
static bool claim_says_gone(const struct gate_rec *r, pid_t o)
{
	unsigned long long c = atomic_load(&r->claim);
	if ((pid_t)(unsigned)(c >> CLAIM_MS_BITS) != o)
		return false;
	long hz = sysconf(_SC_CLK_TCK);
	unsigned long long start = task_start(o);
	if (hz <= 0 || start == 0)
		return false;
	/* the claim's tick: no later than the tick of any time after it */
	unsigned long long claim_tick = (c & CLAIM_MS) * (unsigned long long)hz / 1000ULL;
	return start > claim_tick;
}

/* Calls inside now; *tid one thread that has one. Records of threads that
 * are gone count nothing. The count is read before the claim: a claim's
 * note is stored before its thread's first increment. */
static long inside(pid_t *tid)
{
	long n = __atomic_load_n(&shared.count, __ATOMIC_SEQ_CST);
	unsigned used = atomic_load(&recs_used);
	for (unsigned i = 0; i < used; i++) {
		long c = __atomic_load_n(&recs[i].count, __ATOMIC_SEQ_CST);
		pid_t o = atomic_load(&recs[i].owner);
		if (c == 0 || o == 0 || !alive(o) || claim_says_gone(&recs[i], o))
			continue;
		n += c;
		*tid = o;
	}
	return n;
}

static void nap(unsigned us)
{
	struct timespec ts = { 0, (long)us * 1000L };
	nanosleep(&ts, NULL);
}

const char *park_gate_refuses(void)
{
	return barrier_registered && park_syscalls_changed() ?
		"the program installed a seccomp filter since it started, and the interposer cannot make sure "
		"that none of its calls is under way" :
		NULL;
}

int park_gate_close(unsigned timeout_ms, long *left, pid_t *tid, const char **why)
{
	*left = 0;
	*tid = 0;
	*why = NULL;
	__atomic_store_n(&ndrv, park_driver_ranges(drv_lo, drv_hi, GATE_DRIVERS), __ATOMIC_RELEASE);
	__atomic_store_n(&park_gate_shut, 1, __ATOMIC_SEQ_CST);
	if (barrier_registered) {
		/* A seccomp filter the program installed since it started may
		 * forbid membarrier (and kill for it); without the barrier, a
		 * thread's count may not be seen. */
		*why = park_gate_refuses();
		if (*why == NULL && syscall(SYS_membarrier, MEMBARRIER_CMD_PRIVATE_EXPEDITED, 0, 0) != 0)
			*why = "membarrier(2) failed";
		if (*why) {
			park_gate_open();
			return -1;
		}
	}
	double until = park_now() + timeout_ms / 1000.0;
	unsigned us = 50;
	while ((*left = inside(tid)) > 0 && park_now() < until) {
		nap(us);
		us = us < 2000 ? us * 2 : us;
	}
	if (*left > 0) {
		park_gate_open();
		return -1;
	}
	return 0;
}

void park_gate_open(void)
{
	__atomic_store_n(&park_gate_shut, 0, __ATOMIC_SEQ_CST);
	syscall(SYS_futex, &park_gate_shut, FUTEX_WAKE_PRIVATE, INT_MAX, NULL, NULL, 0);
}

bool park_gate_closed(void)
{
	return shut();
}

__attribute__((constructor)) static void gate_atfork(void)
{
	pthread_atfork(NULL, NULL, child_owns);
}
