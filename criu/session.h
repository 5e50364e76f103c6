/* One libcudasnap session, run inside a helper process (helper.h): the same
 * transaction, claims and checks as 'cudasnap checkpoint' and 'restore',
 * asking the driver about the given processes only; and what it reports
 * back to CRIU's process. */
#ifndef CS_CRIU_SESSION_H
#define CS_CRIU_SESSION_H

#include "cudasnap.h"
#include "history.h"
#include "manifest.h"

#include <stdbool.h>

typedef struct plugin_run {
	cs_op op;
	const char *command; /* for claims: "criu dump" */
	const pid_t *pids;
	size_t npids;
	bool claimed; /* CRIU's process holds their claims */
	const pid_t *scope; /* the dumped tree, for the leftover check */
	size_t nscope;
	const cs_manifest *manifest; /* restore: the record, with today's pids */
	const char *device_map; /* restore: OLD=NEW,... or NULL */
	unsigned timeout_s; /* lock timeout */
} plugin_run;

typedef struct task_outcome {
	pid_t pid;
	int state; /* cs_state after the session */
	bool done; /* reached the goal of the session's operation */
	bool failed, rollback_failed;
	bool lost; /* it died while its GPU state lived in its host memory, or moved */
	bool unrestorable; /* the driver refuses its restore for good */
	char lost_why[200];
	unsigned long long bytes;
	char comm[64];
	char message[512]; /* why it failed */
	/* What the session's entry of the history of operations says of it
	 * (lib/session_history.c): the plugin's own entry is built from these. */
	cs_history_proc hist;
} task_outcome;

/* Processes the session refused that are not among its targets (one whose
 * claim another operation holds). */
#define RUN_REFUSED_MAX 4

typedef struct run_outcome {
	int rc; /* the session's: 0 done, <0 failed (and rolled back unless a task says otherwise) */
	size_t acted;
	unsigned long long bytes;
	double wall;
	char message[512], hint[512];
	cs_history_proc refused[RUN_REFUSED_MAX];
	size_t nrefused;
	size_t n;
	task_outcome t[];
} run_outcome;

/* In a helper process: loads the driver and runs r; *targets (malloc'd,
 * *n of them) are the session's, for the caller to record. Returns the
 * outcome (malloc'd; NULL only when out of memory), whose size is
 * run_outcome_size(its n). */
run_outcome *run_session(const plugin_run *r, cs_driver **d, cs_target **targets, size_t *n);
size_t run_outcome_size(size_t n);
/* The outcome received in CRIU's process, or NULL (logged) when len does
 * not fit. */
const run_outcome *run_outcome_check(const void *buf, size_t len, const char *what);

#endif
