#include <pthread.h>
#include <stdlib.h>
#include <time.h>

#include "cuda_api.h"
#include "fakecuda.h"
#include "internal.h"

/* A call the driver makes to one of its own exported functions, from a
 * thread of its own, through the process's symbol lookup (the double is
 * built with default visibility and semantic interposition, so its calls
 * to its own exports go through the PLT, where an interposer's names stand
 * first): cuDriverGetVersion. */

struct self_call {
	pthread_mutex_t mu;
	pthread_cond_t cv;
	int done, refs;
	CUresult rc;
};

static void drop(struct self_call *c)
{
	int last = --c->refs == 0;
	pthread_mutex_unlock(&c->mu);
	if (last) {
		pthread_mutex_destroy(&c->mu);
		pthread_cond_destroy(&c->cv);
		free(c);
	}
}

static void *caller(void *arg)
{
	struct self_call *c = arg;
	int version = 0;
	CUresult rc = cuDriverGetVersion(&version);
	pthread_mutex_lock(&c->mu);
	c->rc = rc;
	c->done = 1;
	pthread_cond_broadcast(&c->cv);
	drop(c);
	return NULL;
}

CUresult fakecuda_self_call(unsigned int wait_ms, unsigned int *took_ms)
{
	struct self_call *c = calloc(1, sizeof(*c));
	if (c == NULL)
		return CUDA_ERROR_OUT_OF_MEMORY;
	pthread_mutex_init(&c->mu, NULL);
	pthread_cond_init(&c->cv, NULL);
	c->refs = 2;
	uint64_t t0 = fc_now_ns();
	pthread_t t;
	if (pthread_create(&t, NULL, caller, c) != 0) {
		free(c);
		return CUDA_ERROR_OUT_OF_MEMORY;
	}
	pthread_detach(t);
	struct timespec until;
	clock_gettime(CLOCK_REALTIME, &until);
	until.tv_sec += wait_ms / 1000;
	until.tv_nsec += (long)(wait_ms % 1000) * 1000000L;
	if (until.tv_nsec >= 1000000000L) {
		until.tv_sec++;
		until.tv_nsec -= 1000000000L;
	}
	pthread_mutex_lock(&c->mu);
	while (!c->done && pthread_cond_timedwait(&c->cv, &c->mu, &until) == 0)
		;
	CUresult rc = c->done ? c->rc : CUDA_ERROR_NOT_READY;
	if (took_ms)
		*took_ms = (unsigned)((fc_now_ns() - t0) / 1000000u);
	drop(c);
	return rc;
}
