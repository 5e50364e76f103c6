/* Whether the driver can be used, asked in a helper process so that CRIU's
 * process never loads it; and the bounds the plugin puts on its helpers. */
#ifndef CS_CRIU_PROBE_H
#define CS_CRIU_PROBE_H

#include "cudasnap.h"

/* 0 and the driver's version, or <0 with err filled (not logged). */
int driver_probe(int *version, cs_error *err);

/* How long a helper may take: quick calls (state, restore thread, unlock),
 * a lock of lock_s seconds, and whole transactions that move memory (each
 * call bounded inside the helper; this is the net under them). */
double bound_quick(void);
double bound_lock(unsigned lock_s);
double bound_moves(void);

#endif
