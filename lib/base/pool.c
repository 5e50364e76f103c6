#include "pool.h"
#include "util.h"

#include <errno.h>
#include <pthread.h>
#include <stdatomic.h>
#include <stdlib.h>
#include <time.h>

typedef struct pool {
	cs_pool_fn fn;
	void *ctx;
	size_t n;
	atomic_size_t next;
	atomic_uint running;
} pool;

double cs_now(void)
{
	struct timespec ts;
	clock_gettime(CLOCK_MONOTONIC, &ts);
	return (double)ts.tv_sec + (double)ts.tv_nsec / 1e9;
}

static void *worker(void *arg)
{
	pool *p = arg;
	for (size_t i; (i = atomic_fetch_add(&p->next, 1)) < p->n;)
		p->fn(p->ctx, i);
	return NULL;
}

static void *watched_worker(void *arg)
{
	pool *p = arg;
	worker(p);
	atomic_fetch_sub(&p->running, 1);
	return NULL;
}

static void nap(double seconds)
{
	struct timespec ts = { .tv_sec = (time_t)seconds,
			       .tv_nsec = (long)((seconds - (double)(time_t)seconds) * 1e9) };
	while (nanosleep(&ts, &ts) != 0 && errno == EINTR)
		;
}

int cs_pool_run_watched(unsigned jobs, size_t n, cs_pool_fn fn, void *ctx, void (*tick)(void *tick_ctx, double elapsed),
			void *tick_ctx, double period)
{
	if (!tick || n == 0)
		return cs_pool_run(jobs, n, fn, ctx);
	pool p = { .fn = fn, .ctx = ctx, .n = n };
	atomic_init(&p.next, 0);
	jobs = jobs < 1 ? 1 : jobs > n ? (unsigned)n : jobs;
	_cleanup_free_ pthread_t *th = calloc(jobs, sizeof(*th));
	if (!th)
		return cs_pool_run(jobs, n, fn, ctx);
	unsigned started = 0;
	atomic_init(&p.running, jobs);
	for (; started < jobs; started++)
		if (pthread_create(&th[started], NULL, watched_worker, &p) != 0)
			break;
	atomic_fetch_sub(&p.running, jobs - started);
	if (started == 0)
		return cs_pool_run(1, n, fn, ctx); /* no thread to spare: no watching either */
	double t0 = cs_now(), next = t0 + period;
	/* Short naps: the step's end is noticed within 20 ms. */
	while (atomic_load(&p.running) > 0) {
		nap(0.02);
		if (cs_now() >= next && atomic_load(&p.running) > 0) {
			tick(tick_ctx, cs_now() - t0);
			next = cs_now() + period;
		}
	}
	for (unsigned i = 0; i < started; i++)
		pthread_join(th[i], NULL);
	return 0;
}

int cs_pool_run(unsigned jobs, size_t n, cs_pool_fn fn, void *ctx)
{
	pool p = { .fn = fn, .ctx = ctx, .n = n };
	atomic_init(&p.next, 0);
	atomic_init(&p.running, 0);
	if (jobs < 1)
		jobs = 1;
	if (jobs > n)
		jobs = (unsigned)n;
	_cleanup_free_ pthread_t *th = jobs > 1 ? calloc(jobs - 1, sizeof(*th)) : NULL;
	unsigned started = 0;
	for (; th && started < jobs - 1; started++)
		if (pthread_create(&th[started], NULL, worker, &p) != 0)
			break; /* fewer threads still finish the work */
	worker(&p);
	for (unsigned i = 0; i < started; i++)
		pthread_join(th[i], NULL);
	return 0;
}
