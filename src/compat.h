/* cuda-checkpoint: NVIDIA's R580 command line, for the callers that run it by
 * name (CRIU's CUDA plugin, runsc --cuda-checkpoint-path, wrapper scripts).
 * One process per call: callers run many at once, one per target. What may
 * be done to the target, and what is kept of it, is the library's
 * (lib/onecall/onecall.h); here are NVIDIA's options, lines and exit statuses, and
 * the words of cudasnap's hints. */
#ifndef CS_COMPAT_H
#define CS_COMPAT_H

#include "cli.h"
#include "onecall.h"

typedef enum compat_op {
	COMPAT_NONE,
	COMPAT_GET_STATE,
	COMPAT_GET_TID,
	COMPAT_ACTION,
	COMPAT_TOGGLE,
} compat_op;

typedef struct compat_args {
	compat_op op;
	cs_call action; /* COMPAT_ACTION: lock, checkpoint, restore or unlock */
	pid_t pid;
	bool have_pid;
	unsigned timeout_ms; /* lock; 0 waits forever, as the driver does */
	const char *device_map; /* --action restore only */
} compat_args;

/* Parses NVIDIA's options; returns CLI_GO_ON to go on, or the exit status. */
int compat_parse(int argc, char **argv, compat_args *a);

/* The first line of a failure, in the words NVIDIA's binary uses for the
 * operation; text is the quoted part. */
void compat_fail_line(const compat_args *a, cs_call call, const char *text);

/* One error line in NVIDIA's wording; exits 1 when returned. */
int compat_fail(const char *fmt, ...) __attribute__((format(printf, 1, 2)));

/* One call being made: its options, the driver, the library's call. */
typedef struct compat_call {
	const compat_args *a;
	cs_driver *d;
	cs_onecall *oc;
} compat_call;

/* Reports a refusal of call (src/compat_hint.c): NVIDIA's line quoting its
 * reason, the checks' held lines, cudasnap's hint; --device-map's in
 * cudasnap's own lines. Returns EXIT_FAILED. */
int compat_refused(const compat_args *a, cs_call call, const cs_onecall_refusal *why);
/* Says the checks' held lines of a call they let through. */
void compat_held(const cs_onecall_refusal *why);
/* Reports a driver call that failed with res: NVIDIA's line, then one more
 * stderr line with cudasnap's hint. Returns EXIT_FAILED. */
int compat_call_failed(const compat_call *c, cs_call call, int res);
/* A warning of the library, in the drop-in's words. */
void compat_warn(void *ctx, const char *line);

#endif
