/* Driver calls with a deadline: each runs in a worker thread that the caller
 * stops waiting for when the deadline passes or a signal asks the command to
 * end. The driver may never answer (a stopped or frozen target), so the
 * worker is detached and owns its own copy of the call. */
#ifndef CS_BOUNDED_H
#define CS_BOUNDED_H

#include "cudasnap.h"

#include <stddef.h>

/* Runs the call held in the size bytes at arg: fn(copy) returns its result
 * and may write into the copy, which is copied back into arg when the call
 * ends in time. seconds <= 0: no deadline (signals still end the wait).
 * Returns the call's result, CS_CU_TIMED_OUT or CS_CU_INTERRUPTED. */
int cs_bounded_call(int (*fn)(void *copy), void *arg, size_t size, double seconds, const volatile int *interrupted,
		    double stop_grace_s);

/* Whether the command is ending after a signal and its grace has passed:
 * no new driver call should start. */
bool cs_bounded_stopping(const volatile int *interrupted, double stop_grace_s);

unsigned cs_bounded_abandoned(void);

/* After a signal, calls in flight get the grace; the rollback that follows
 * gets seconds more (given once, whoever asks first). */
void cs_bounded_extend(double seconds);

#endif
