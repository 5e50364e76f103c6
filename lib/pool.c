#include "pool.h"

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

int cs_pool_run(unsigned jobs, size_t n, cs_pool_fn fn, void *ctx)
{
	pool p = { .fn = fn, .ctx = ctx, .n = n };
	atomic_init(&p.next, 0);
	if (jobs < 1)
		jobs = 1;
	if (jobs > n)
		jobs = (unsigned)n;
	pthread_t *th = jobs > 1 ? calloc(jobs - 1, sizeof(*th)) : NULL;
	unsigned started = 0;
	for (; th && started < jobs - 1; started++)
		if (pthread_create(&th[started], NULL, worker, &p) != 0)
			break; /* fewer threads still finish the work */
	worker(&p);
	for (unsigned i = 0; i < started; i++)
		pthread_join(th[i], NULL);
	free(th);
	return 0;
}
