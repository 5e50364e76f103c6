#include "cuda_vmm_api.h"
#include "internal.h"

/* Each device's one stream (struct fc_stream), and the stream wait that
 * makes GPU work wait on the host: cuStreamWaitValue32 holds the stream
 * until a word of registered host memory (its device address is its host
 * address, as under unified addressing) compares as asked. The word is
 * looked at every millisecond by whoever waits for the stream. */

enum {
	WAIT_GEQ = 0x0,
	WAIT_EQ = 0x1,
	WAIT_AND = 0x2,
	WAIT_NOR = 0x3,
};

static int satisfied(const struct fc_stream *s)
{
	uint32_t v = *s->wait_addr;
	switch (s->wait_flags & 0x3) {
	case WAIT_GEQ: return (int32_t)(v - s->wait_value) >= 0;
	case WAIT_EQ: return v == s->wait_value;
	case WAIT_AND: return (v & s->wait_value) != 0;
	default: return ~(v | s->wait_value) != 0;
	}
}

static int one_idle(struct fc_stream *s, uint64_t now)
{
	if (s->wait_addr != NULL && satisfied(s)) {
		s->wait_addr = NULL;
		s->busy_until = (s->busy_until > now ? s->busy_until : now) + s->queued_ns;
		s->queued_ns = 0;
	}
	return s->wait_addr == NULL && s->busy_until <= now;
}

int fc_streams_idle(int dev, uint64_t now)
{
	int idle = 1;
	for (int d = dev < 0 ? 0 : dev; d < (dev < 0 ? FC_MAX_GPUS : dev + 1); d++)
		idle &= one_idle(&fc_tgt.streams[d], now);
	return idle;
}

uint64_t fc_streams_wake(int dev, uint64_t now)
{
	uint64_t wake = UINT64_MAX / 2;
	for (int d = dev < 0 ? 0 : dev; d < (dev < 0 ? FC_MAX_GPUS : dev + 1); d++) {
		const struct fc_stream *s = &fc_tgt.streams[d];
		if (s->wait_addr != NULL)
			wake = now + 1000000u < wake ? now + 1000000u : wake;
		else if (s->busy_until > now && s->busy_until < wake)
			wake = s->busy_until;
	}
	return wake;
}

/* The stream of the current context's device waits until *addr compares
 * with value as flags say; a second wait queued behind a first one waits
 * for the first to be satisfied, in the caller. */
CUresult cuStreamWaitValue32_v2(CUstream stream, CUdeviceptr addr, uint32_t value, unsigned int flags)
{
	(void)stream;
	int dev = 0;
	CUresult rc = fc_ctx_check(&dev);
	if (rc != CUDA_SUCCESS)
		return rc;
	if (addr == 0 || addr % 4 != 0 || !fc_host_registered((const void *)(uintptr_t)addr, 4))
		return CUDA_ERROR_INVALID_VALUE;
	rc = fc_gate_enter();
	if (rc != CUDA_SUCCESS)
		return rc;
	pthread_mutex_lock(&fc_tgt.mu);
	struct fc_stream *s = &fc_tgt.streams[dev];
	while (!fc_tgt.shutdown && (fc_streams_idle(dev, fc_now_ns()), s->wait_addr != NULL))
		fc_wait_until(fc_now_ns() + 1000000u);
	s->wait_addr = (const volatile uint32_t *)(uintptr_t)addr;
	s->wait_value = value;
	s->wait_flags = flags;
	s->queued_ns = 0;
	pthread_mutex_unlock(&fc_tgt.mu);
	fc_gate_leave();
	return CUDA_SUCCESS;
}
