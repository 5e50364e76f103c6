/* The gate in front of the driver. Every entry point the program obtains
 * (by name, by dlsym, by cuGetProcAddress) is handed out as a stub of
 * gate_x86_64.S, so that a park can hold the program's GPU work back and
 * know that none of it is running inside the driver, whatever function it
 * is. The cost while open: two atomic operations per driver call. */
#include <errno.h>
#include <stdatomic.h>
#include <time.h>

#include "park.h"

#define PARK_SLOTS 4096 /* as gate_x86_64.S */
#define SHADOW_DEPTH 64

extern char park_tramp_base[];
extern char park_tramp_leave[];
void *park_tramp_enter(unsigned slot, void **ret);
void *park_tramp_exit(void);

static void *slot_real[PARK_SLOTS];
static unsigned nslots;
static pthread_mutex_t slot_mu = PTHREAD_MUTEX_INITIALIZER;

static atomic_int closed;
static atomic_long inside;
static pthread_mutex_t gate_mu = PTHREAD_MUTEX_INITIALIZER;
static pthread_cond_t gate_cv = PTHREAD_COND_INITIALIZER;

/* The return addresses the stubs replaced, per thread (calls nest when a
 * signal handler calls the driver). initial-exec: the library is loaded at
 * start (LD_PRELOAD), and a stub must not allocate. */
static __thread void *shadow[SHADOW_DEPTH] __attribute__((tls_model("initial-exec")));
static __thread int depth __attribute__((tls_model("initial-exec")));

void *park_gate_wrap(void *real)
{
	if (real == NULL)
		return NULL;
	void *stub = real;
	pthread_mutex_lock(&slot_mu);
	for (unsigned i = 0; i < nslots; i++)
		if (slot_real[i] == real) {
			stub = park_tramp_base + 16 * i;
			goto out;
		}
	if (nslots < PARK_SLOTS) {
		slot_real[nslots] = real;
		stub = park_tramp_base + 16 * nslots++;
	} else {
		/* An entry point that no stub covers could run during a park. */
		park_mark_unparkable("more driver entry points than the interposer can gate");
	}
out:
	pthread_mutex_unlock(&slot_mu);
	return stub;
}

void park_gate_enter(void)
{
	for (;;) {
		atomic_fetch_add(&inside, 1);
		if (!atomic_load(&closed))
			return;
		/* Closed: step back out, let the park see it, wait for the open. */
		atomic_fetch_sub(&inside, 1);
		pthread_mutex_lock(&gate_mu);
		pthread_cond_broadcast(&gate_cv);
		while (atomic_load(&closed))
			pthread_cond_wait(&gate_cv, &gate_mu);
		pthread_mutex_unlock(&gate_mu);
	}
}

void park_gate_leave(void)
{
	if (atomic_fetch_sub(&inside, 1) == 1 && atomic_load(&closed)) {
		pthread_mutex_lock(&gate_mu);
		pthread_cond_broadcast(&gate_cv);
		pthread_mutex_unlock(&gate_mu);
	}
}

void *park_tramp_enter(unsigned slot, void **ret)
{
	void *real = __atomic_load_n(&slot_real[slot], __ATOMIC_ACQUIRE);
	if (depth >= SHADOW_DEPTH)
		return real; /* too deep to count: passes, as before the gate */
	park_gate_enter();
	shadow[depth++] = *ret;
	*ret = park_tramp_leave;
	return real;
}

void *park_tramp_exit(void)
{
	void *back = shadow[--depth];
	park_gate_leave();
	return back;
}

static void deadline_after(struct timespec *ts, unsigned ms)
{
	clock_gettime(CLOCK_REALTIME, ts);
	ts->tv_sec += ms / 1000;
	ts->tv_nsec += (long)(ms % 1000) * 1000000L;
	if (ts->tv_nsec >= 1000000000L) {
		ts->tv_sec++;
		ts->tv_nsec -= 1000000000L;
	}
}

int park_gate_close(unsigned timeout_ms, long *left)
{
	struct timespec until;
	deadline_after(&until, timeout_ms);
	pthread_mutex_lock(&gate_mu);
	atomic_store(&closed, 1);
	int rc = 0;
	while (atomic_load(&inside) > 0 && rc != ETIMEDOUT)
		rc = pthread_cond_timedwait(&gate_cv, &gate_mu, &until);
	long n = atomic_load(&inside);
	pthread_mutex_unlock(&gate_mu);
	if (left)
		*left = n;
	if (n > 0) {
		park_gate_open();
		return -1;
	}
	return 0;
}

void park_gate_open(void)
{
	pthread_mutex_lock(&gate_mu);
	atomic_store(&closed, 0);
	pthread_cond_broadcast(&gate_cv);
	pthread_mutex_unlock(&gate_mu);
}

bool park_gate_closed(void)
{
	return atomic_load(&closed) != 0;
}
