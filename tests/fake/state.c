#include <errno.h>
#include <time.h>

#include "fakecuda.h"
#include "internal.h"

struct fc_target fc_tgt = {
	.mu = PTHREAD_MUTEX_INITIALIZER,
	.state = CU_PROCESS_STATE_RUNNING,
};

/* Deadlines are monotonic so that a clock step cannot stretch a lock
 * timeout; that needs a condattr, hence a constructor, not an initializer. */
__attribute__((constructor)) static void cv_init(void)
{
	pthread_condattr_t a;
	pthread_condattr_init(&a);
	pthread_condattr_setclock(&a, CLOCK_MONOTONIC);
	pthread_cond_init(&fc_tgt.cv, &a);
	pthread_condattr_destroy(&a);
}

uint64_t fc_now_ns(void)
{
	struct timespec ts;
	clock_gettime(CLOCK_MONOTONIC, &ts);
	return (uint64_t)ts.tv_sec * 1000000000u + (uint64_t)ts.tv_nsec;
}

void fc_sleep_ms(unsigned int ms)
{
	struct timespec ts = { ms / 1000, (long)(ms % 1000) * 1000000L };
	while (nanosleep(&ts, &ts) != 0 && errno == EINTR)
		;
}

void fc_wait_until(uint64_t deadline_ns)
{
	struct timespec ts = { (time_t)(deadline_ns / 1000000000u),
			       (long)(deadline_ns % 1000000000u) };
	pthread_cond_timedwait(&fc_tgt.cv, &fc_tgt.mu, &ts);
}

static void wait_forever(void)
{
	pthread_cond_wait(&fc_tgt.cv, &fc_tgt.mu);
}

static int must_wait(void)
{
	return fc_tgt.state != CU_PROCESS_STATE_RUNNING || fc_tgt.lock_pending;
}

/* Real CUDA calls made while the process is locked or checkpointed block
 * until it runs again; so do the fake ones. */
CUresult fc_gate_enter(void)
{
	pthread_mutex_lock(&fc_tgt.mu);
	while (!fc_tgt.shutdown && must_wait())
		wait_forever();
	CUresult rc = CUDA_ERROR_DEINITIALIZED;
	if (!fc_tgt.shutdown) {
		rc = fc_tgt.levels & FC_LEVEL_CUDA ? CUDA_SUCCESS : CUDA_ERROR_NOT_INITIALIZED;
		fc_tgt.active += rc == CUDA_SUCCESS;
	}
	pthread_mutex_unlock(&fc_tgt.mu);
	return rc;
}

void fc_gate_leave(void)
{
	pthread_mutex_lock(&fc_tgt.mu);
	fc_tgt.active--;
	pthread_cond_broadcast(&fc_tgt.cv);
	pthread_mutex_unlock(&fc_tgt.mu);
}

/* The stream holds at most one queued kernel beyond the running one, as an
 * application launching back to back keeps it: whatever the moment a lock
 * arrives, at least one whole kernel is still ahead of it. Behind a stream
 * wait, kernels queue without a bound. */
CUresult fc_kernel_on(int dev, unsigned int ms)
{
	uint64_t len = (uint64_t)ms * 1000000u;
	CUresult rc = CUDA_ERROR_DEINITIALIZED;
	pthread_mutex_lock(&fc_tgt.mu);
	while (!fc_tgt.shutdown) {
		uint64_t now = fc_now_ns();
		struct fc_stream *s = &fc_tgt.streams[dev];
		if (!(fc_tgt.levels & FC_LEVEL_CUDA)) {
			rc = CUDA_ERROR_NOT_INITIALIZED;
			break;
		}
		if (must_wait()) {
			wait_forever();
			continue;
		}
		fc_streams_idle(dev, now); /* lets a satisfied wait go */
		if (s->wait_addr != NULL) {
			s->queued_ns += len;
		} else if (s->busy_until > now + len) {
			fc_wait_until(s->busy_until - len);
			continue;
		} else {
			s->busy_until = (s->busy_until > now ? s->busy_until : now) + len;
		}
		rc = CUDA_SUCCESS;
		break;
	}
	pthread_mutex_unlock(&fc_tgt.mu);
	return rc;
}

CUresult fakecuda_kernel(unsigned int ms)
{
	return fc_kernel_on(0, ms);
}

CUresult fc_stream_drain_dev(int dev)
{
	CUresult rc = CUDA_ERROR_DEINITIALIZED;
	pthread_mutex_lock(&fc_tgt.mu);
	while (!fc_tgt.shutdown) {
		uint64_t now = fc_now_ns();
		if (must_wait()) {
			wait_forever();
		} else if (!fc_streams_idle(dev, now)) {
			fc_wait_until(fc_streams_wake(dev, now));
		} else {
			rc = CUDA_SUCCESS;
			break;
		}
	}
	pthread_mutex_unlock(&fc_tgt.mu);
	return rc;
}

void fakecuda_shutdown(void)
{
	pthread_mutex_lock(&fc_tgt.mu);
	fc_tgt.shutdown = 1;
	pthread_cond_broadcast(&fc_tgt.cv);
	pthread_mutex_unlock(&fc_tgt.mu);
}
