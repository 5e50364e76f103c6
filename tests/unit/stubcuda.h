/* Control interface of stubcuda.c, the scripted driver of the unit tests. */
#ifndef CS_STUBCUDA_H
#define CS_STUBCUDA_H

#include <stddef.h>

#define STUB_MAX_PROCS 16
#define STUB_MAX_CALLS 256

enum { STUB_GET_STATE, STUB_LOCK, STUB_CHECKPOINT, STUB_RESTORE, STUB_UNLOCK };

typedef struct stub_call {
	int op, pid;
} stub_call;

/* Runs inside the driver call, before it answers. */
typedef void (*stub_hook)(int op, int pid);

void stub_reset(void);
/* A process the driver knows, in a cs_state. */
void stub_add(int pid, int state);
/* Every call op on pid answers result. */
void stub_fail(int op, int pid, int result);
void stub_set_hook(stub_hook h);
size_t stub_log(const stub_call **calls);

#endif
