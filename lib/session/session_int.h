/* The inside of a session, shared by its files. */
#ifndef CS_SESSION_INT_H
#define CS_SESSION_INT_H

#include "cudasnap.h"
#include "capacity.h"
#include "claim.h"
#include "gpuledger.h"
#include "history.h"
#include "sandbox.h"
#include "verify.h"

struct cs_session {
	cs_driver *d;
	const cs_session_opts *o;
	cs_sandbox sandbox;
	int state_fd;
	pid_t busy_pid; /* the process whose claim another operation holds, 0 none */
	cs_claims claims; /* the selected processes, unless the caller holds them */
	cs_scan_opts scan; /* discovery's restriction (only_selected) */
	pid_t *cand; /* what the selection may act on, from /proc: the driver is asked about these only */
	size_t ncand;
	bool ignore_memory, allow_unrestorable; /* the options, or the settings */
	bool ignore_gpu_memory; /* restore: the option, or the setting */
	bool no_park; /* the option, or the setting CUDASNAP_NO_PARK */
	const char *park_to; /* checkpoint: the option, or the setting CUDASNAP_PARK_TO; NULL none */
	bool recorded; /* hist is complete (cs_session_record ran) */
	double wait_memory_s; /* restore: the option, or the setting */
	bool restore_planned; /* cs_session_plan_restore ran, with this result: */
	int restore_rc;
	cs_error restore_err;
	double wait_until; /* restore: waiting for GPU memory ends then (cs_now's clock) */
	cs_gpu_ledger ledger; /* the room restores in flight take on each GPU */
	bool ledger_used;
	cs_fit *fit; /* checkpoint: each target's memory and cgroup before it */
	size_t nfit;
	cs_fit_env fitenv;
	cs_left_behind *behind; /* processes that holders which died left locked or checkpointed */
	size_t nbehind, behind_cap;
	cs_ptable table; /* the namespace when the session selected */
	cs_target *t;
	size_t n;
	cs_gpu_pair *pairs; /* restore --device-map */
	unsigned npairs;
	cs_ptable after; /* the namespace after a checkpoint */
	double wall; /* of the transaction, for the manifest */
	cs_leftover *left;
	size_t nleft, nleft_scope;
	struct cs_refusal *refused; /* what cs_session_check refused (cs_session_refusals) */
	size_t nrefused;
	char busy_comm[64];
	cs_history hist; /* the entry of the history of operations, begun at open */
};

/* The session ended (after its run, or a failure before it; res NULL or
 * !res->ran: before the transaction, with err): its entry of the history of
 * operations is completed and, unless opts.no_history, written. Once. */
void cs_session_record(cs_session *s, int rc, const cs_txn_result *res, const cs_error *err);

/* A warning line through the session's callback (printf-style). */
void cs_session_warn(const cs_session *s, const char *fmt, ...) __attribute__((format(printf, 2, 3)));

/* Restore's preparation: order from the manifest and PID-reuse refusal,
 * the device map, cuInit when persistence mode is off. */
int cs_session_plan_restore(cs_session *s, cs_error *err);

/* The manifest: written after a checkpoint, pruned after a restore. */
void cs_session_save_manifest(cs_session *s, const cs_txn_result *r);
void cs_session_prune_manifest(cs_session *s);
/* The UUIDs of the GPUs each target sees (t->gpus), after a checkpoint. */
void cs_session_note_gpus(cs_session *s);
/* Before a checkpoint: the GPUs each target uses (the device files it
 * holds), with its memory on each where NVML names this namespace's
 * processes (t->use). */
void cs_session_note_use(cs_session *s);

#endif
