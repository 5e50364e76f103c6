/* One table from a driver result plus its context to a message and a hint. */
#ifndef CS_EXPLAIN_H
#define CS_EXPLAIN_H

#include "cudasnap.h"

typedef enum cs_call {
	CS_CALL_GET_STATE,
	CS_CALL_GET_TID,
	CS_CALL_LOCK,
	CS_CALL_CHECKPOINT,
	CS_CALL_RESTORE,
	CS_CALL_UNLOCK,
	CS_CALL_INIT,
} cs_call;

typedef struct cs_explain_ctx {
	cs_call call;
	pid_t pid;
	const char *comm; /* may be NULL */
	int cls; /* cs_class, CS_CLASS_NONE when unknown */
	int state; /* the process's state when known, else CS_STATE_UNKNOWN */
	bool pid_visible; /* /proc/PID exists in this PID namespace */
	bool gvisor; /* running under gVisor */
	bool forked_child; /* a device holder whose ancestor is a CUDA process */
	unsigned timeout_ms; /* lock timeout in force */
	bool mapped; /* restore: a device map was given */
} cs_explain_ctx;

const char *cs_call_name(cs_call c);
/* Fills err with status CS_EDRIVER, err->cu = res, a message naming the
 * process, the step and the driver's code, and a hint. */
int cs_explain(const cs_driver *d, const cs_explain_ctx *ctx, int res, cs_error *err);

#endif
