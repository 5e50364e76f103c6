/* Progress of a checkpoint or restore step, and processes that stall. */
#ifndef CS_PROGRESS_H
#define CS_PROGRESS_H

#include "cudasnap.h"

#include <stdbool.h>
#include <sys/types.h>

typedef struct txn_watch_state {
	const char *cmd;
	int tty; /* -1 until known: stderr is a terminal */
	double last_plain; /* elapsed seconds at the last plain line */
	pid_t stalled[64]; /* processes already named as stalled */
	size_t nstalled;
} txn_watch_state;

/* cs_txn_opts.watch: one updating line on a terminal, a plain line every
 * few seconds elsewhere, and one line for each process that stops moving. */
void txn_watch(void *ctx, const cs_target *t, size_t n, cs_step step, double elapsed);
/* Wipes the updating line, if any. */
void txn_watch_end(txn_watch_state *w);

#endif
