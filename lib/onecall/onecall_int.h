/* The inside of a single call (onecall.h), shared by its files. */
#ifndef CS_ONECALL_INT_H
#define CS_ONECALL_INT_H

#include "onecall.h"
#include "claim.h"
#include "gpuledger.h"
#include "history.h"
#include "nvml.h"

/* What the entry of the history needs to know of the driver calls made. */
typedef struct cs_onecall_rec {
	bool on; /* an action or a toggle: the entry is kept */
	cs_history h;
	cs_history_proc *p; /* the process; NULL when out of memory */
	bool failed, lost, refused;
	bool undone, undo_failed; /* a step undone after a failure (toggle's unlock) */
	int undo_step;
	int failed_res;
	char why[512]; /* the first failure, in words */
} cs_onecall_rec;

struct cs_onecall {
	cs_driver *d;
	cs_onecall_opts o;
	pid_t tgid; /* the process of o.pid as /proc shows it; 0 when it does not */
	cs_claims claims;
	/* Restore: the GPUs (NVML's list, empty without NVML) and the device map. */
	bool listed, mapped;
	cs_nvml_gpu *gpus;
	size_t ngpus;
	cs_gpu_pair *pairs;
	unsigned npairs;
	/* Restore: the process as its check judged it (its needs on the GPUs),
	 * and its booking of that room, held until the driver answers. */
	cs_target room;
	bool room_known;
	cs_gpu_ledger *ledger;
	bool booked;
	cs_onecall_rec rec;
};

/* Restore's GPU list and device map, read once (cs_onecall_check_restore
 * refuses a map that does not parse; here it is only -cs_status). */
int cs_onecall_restore_pairs(cs_onecall *oc);

/* Refuses the call for code: fills why (err's message and hint, code) and
 * keeps the refusal in the entry, for history_why (NULL: err's message).
 * Returns -err->status. */
int cs_onecall_refuse(cs_onecall *oc, cs_onecall_refusal *why, const char *code, const cs_error *err,
		      const char *history_why);

/* The entry of the history (lib/onecall/onecall_history.c): begun before the claim,
 * its process once known, each driver call that changes the process (step,
 * answer, how long), a step undone after a failure, the bytes a checkpoint
 * moved, a refusal, another failure's reason. */
void cs_onecall_history_begin(cs_onecall *oc);
void cs_onecall_history_target(cs_onecall *oc);
void cs_onecall_history_step(cs_onecall *oc, cs_step s, int res, double seconds);
void cs_onecall_history_undo(cs_onecall *oc, cs_step s, int res);
void cs_onecall_history_bytes(cs_onecall *oc, unsigned long long bytes);
void cs_onecall_history_refused(cs_onecall *oc, const char *code, const char *why);
void cs_onecall_history_failed(cs_onecall *oc, const char *why);

#endif
