/* Bounded worker threads for per-process driver calls. */
#ifndef CS_POOL_H
#define CS_POOL_H

#include <stddef.h>

typedef void (*cs_pool_fn)(void *ctx, size_t index);

/* Calls fn(ctx, i) for every i in [0, n), in order of i, on at most jobs
 * threads (the caller's thread among them), and returns when all are done. */
int cs_pool_run(unsigned jobs, size_t n, cs_pool_fn fn, void *ctx);

/* The same on jobs threads of its own while the caller's thread calls
 * tick(tick_ctx, elapsed) about every period seconds until all are done. */
int cs_pool_run_watched(unsigned jobs, size_t n, cs_pool_fn fn, void *ctx, void (*tick)(void *tick_ctx, double elapsed),
			void *tick_ctx, double period);

double cs_now(void); /* monotonic seconds */

#endif
