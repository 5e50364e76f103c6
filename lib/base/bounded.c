#include "bounded.h"
#include "util.h"

#include <pthread.h>
#include <signal.h>
#include <stdatomic.h>
#include <stdbool.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

typedef struct pending {
	pthread_mutex_t mu;
	pthread_cond_t cv;
	int refs; /* the waiter and the worker */
	bool done;
	int result;
	int (*fn)(void *copy);
	size_t size;
	unsigned char copy[];
} pending;

static atomic_uint abandoned;
/* When the first signal was seen, as monotonic nanoseconds (0: none). */
static atomic_llong interrupted_at;
/* Time added to the grace once the rollback begins (nanoseconds). */
static atomic_llong extra_ns;

unsigned cs_bounded_abandoned(void)
{
	return atomic_load(&abandoned);
}

static void unref(pending *p)
{
	pthread_mutex_lock(&p->mu);
	bool last = --p->refs == 0;
	pthread_mutex_unlock(&p->mu);
	if (!last)
		return;
	pthread_mutex_destroy(&p->mu);
	pthread_cond_destroy(&p->cv);
	free(p);
}

/* Worker threads are kept for reuse: a command makes thousands of calls,
 * and one thread each doubled its time. A worker blocked in a call given up
 * on is simply not idle; idle ones end after a few seconds. */
typedef struct job {
	pending *p;
	struct job *next;
} job;

static pthread_mutex_t queue_mu = PTHREAD_MUTEX_INITIALIZER;
static pthread_cond_t queue_cv = PTHREAD_COND_INITIALIZER;
static job *queue_head, *queue_tail;
static size_t queued, idle;

static void run_one(pending *p)
{
	int r = p->fn(p->copy);
	pthread_mutex_lock(&p->mu);
	p->result = r;
	p->done = true;
	pthread_cond_broadcast(&p->cv);
	pthread_mutex_unlock(&p->mu);
	unref(p);
}

static pending *take_job(void)
{
	pthread_mutex_lock(&queue_mu);
	while (!queue_head) {
		struct timespec ts;
		clock_gettime(CLOCK_REALTIME, &ts);
		ts.tv_sec += 5;
		idle++;
		int r = pthread_cond_timedwait(&queue_cv, &queue_mu, &ts);
		idle--;
		if (r != 0 && !queue_head) {
			pthread_mutex_unlock(&queue_mu);
			return NULL;
		}
	}
	_cleanup_free_ job *j = queue_head;
	queue_head = j->next;
	if (!queue_head)
		queue_tail = NULL;
	queued--;
	pthread_mutex_unlock(&queue_mu);
	return j->p;
}

static void *worker(void *arg)
{
	(void)arg;
	for (pending *p; (p = take_job());)
		run_one(p);
	return NULL;
}

static bool spawn_worker(void)
{
	pthread_attr_t a;
	pthread_t t;
	pthread_attr_init(&a);
	pthread_attr_setdetachstate(&a, PTHREAD_CREATE_DETACHED);
	/* Signals are the main thread's business, never a worker's. */
	sigset_t all, old;
	sigfillset(&all);
	pthread_sigmask(SIG_SETMASK, &all, &old);
	bool ok = pthread_create(&t, &a, worker, NULL) == 0;
	pthread_sigmask(SIG_SETMASK, &old, NULL);
	pthread_attr_destroy(&a);
	return ok;
}

/* Queues the call for an idle worker, or a new one. */
static bool start(pending *p)
{
	_cleanup_free_ job *j = malloc(sizeof(*j));
	if (!j)
		return false;
	*j = (job){ .p = p };
	pthread_mutex_lock(&queue_mu);
	bool need = queued + 1 > idle;
	if (need && !spawn_worker()) {
		pthread_mutex_unlock(&queue_mu);
		/* cppcheck-suppress memleak ; j is _cleanup_free_, which cppcheck does not model */
		return false;
	}
	job *queued_job = TAKE_PTR(j); /* the queue's now */
	if (queue_tail)
		queue_tail->next = queued_job;
	else
		queue_head = queued_job;
	queue_tail = queued_job;
	queued++;
	pthread_cond_signal(&queue_cv);
	pthread_mutex_unlock(&queue_mu);
	return true;
}

static long long now_ns(void)
{
	struct timespec ts;
	clock_gettime(CLOCK_MONOTONIC, &ts);
	return (long long)ts.tv_sec * 1000000000LL + ts.tv_nsec;
}

/* The moment waits must end because of a signal, or 0. */
static long long stop_deadline(const volatile int *interrupted, double grace)
{
	if (!interrupted || !*interrupted)
		return 0;
	long long zero = 0, now = now_ns();
	atomic_compare_exchange_strong(&interrupted_at, &zero, now);
	return atomic_load(&interrupted_at) + (long long)(grace * 1e9) + atomic_load(&extra_ns);
}

void cs_bounded_extend(double seconds)
{
	long long zero = 0;
	atomic_compare_exchange_strong(&extra_ns, &zero, (long long)(seconds * 1e9));
}

bool cs_bounded_stopping(const volatile int *interrupted, double grace)
{
	long long stop = stop_deadline(interrupted, grace);
	return stop && now_ns() >= stop;
}

static pending *new_pending(int (*fn)(void *), const void *arg, size_t size)
{
	pending *p = calloc(1, sizeof(*p) + size);
	if (!p)
		return NULL;
	pthread_condattr_t ca;
	pthread_condattr_init(&ca);
	pthread_condattr_setclock(&ca, CLOCK_MONOTONIC);
	pthread_cond_init(&p->cv, &ca);
	pthread_condattr_destroy(&ca);
	pthread_mutex_init(&p->mu, NULL);
	p->refs = 2;
	p->fn = fn;
	p->size = size;
	memcpy(p->copy, arg, size);
	return p;
}

/* Waits in short slices so that a signal is noticed while the driver is
 * silent. Returns the result, or a pseudo-result when giving up. */
static int wait_for(pending *p, long long deadline, const volatile int *interrupted, double grace)
{
	for (;;) {
		long long stop = stop_deadline(interrupted, grace);
		long long until = now_ns() + 50000000LL, now;
		if (deadline && deadline < until)
			until = deadline;
		if (stop && stop < until)
			until = stop;
		struct timespec ts = { .tv_sec = until / 1000000000LL, .tv_nsec = until % 1000000000LL };
		pthread_mutex_lock(&p->mu);
		while (!p->done && pthread_cond_timedwait(&p->cv, &p->mu, &ts) == 0)
			;
		bool done = p->done;
		pthread_mutex_unlock(&p->mu);
		if (done)
			return p->result;
		now = now_ns();
		if (stop && now >= stop)
			return CS_CU_INTERRUPTED;
		if (deadline && now >= deadline)
			return CS_CU_TIMED_OUT;
	}
}

int cs_bounded_call(int (*fn)(void *copy), void *arg, size_t size, double seconds, const volatile int *interrupted,
		    double grace)
{
	if (cs_bounded_stopping(interrupted, grace))
		return CS_CU_INTERRUPTED;
	pending *p = new_pending(fn, arg, size);
	if (!p)
		return CS_CU_OUT_OF_MEMORY;
	if (!start(p)) {
		/* No thread to spare: call in place rather than not at all. */
		int r = fn(arg);
		p->refs = 1;
		unref(p);
		return r;
	}
	long long deadline = seconds > 0 ? now_ns() + (long long)(seconds * 1e9) : 0;
	int r = wait_for(p, deadline, interrupted, grace);
	if (r == CS_CU_TIMED_OUT || r == CS_CU_INTERRUPTED)
		atomic_fetch_add(&abandoned, 1);
	else
		memcpy(arg, p->copy, size);
	unref(p);
	return r;
}
