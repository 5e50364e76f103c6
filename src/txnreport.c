/* The report of checkpoint, restore, lock and unlock: lines on stderr,
 * and with --json one object on stdout. */
#include "txncli.h"
#include "json.h"
#include "plan.h"
#include "verify.h"

#include <stdlib.h>

static double gib(unsigned long long b)
{
	return (double)b / (1024.0 * 1024 * 1024);
}

void txn_progress(void *ctx, const cs_target *t, cs_step s, bool undo, int res, double secs)
{
	txn_ctx *x = ctx;
	const char *what = undo ? "rollback " : "";
	if (res != CS_CU_SUCCESS) {
		cli_msg("%d (%s) %s%s FAILED after %.3f s: %s", (int)t->pid, t->comm, what, cs_step_name(s), secs,
			cs_cu_name(x->d, res));
		return;
	}
	if ((s == CS_STEP_CHECKPOINT || s == CS_STEP_RESTORE) && !undo)
		cli_msg("%d (%s) %s: %.2f GiB in %.3f s", (int)t->pid, t->comm, cs_step_name(s), gib(t->bytes), secs);
	else
		cli_msg("%d (%s) %s%s: ok in %.3f s", (int)t->pid, t->comm, what, cs_step_name(s), secs);
}

static size_t txn_leftovers(const txn_ctx *x)
{
	size_t n = 0;
	if (x->s)
		cs_session_leftovers(x->s, &n, NULL);
	return n;
}

static const char *state_word(const cs_target *t)
{
	if (t->exited)
		return "exited";
	if (t->abandoned)
		return "unknown";
	if (t->state == CS_STATE_RUNNING && t->parked)
		return "running, parked"; /* its memory in host memory, its GPU work held */
	return cs_state_name(t->state) ? cs_state_name(t->state) : t->halted ? "stopped" : "unknown";
}

static const char *outcome_word(const cs_txn_result *r, size_t n)
{
	if (n == 0)
		return "nothing-to-do";
	switch (r->outcome) {
	case CS_OUTCOME_DONE: return "done";
	case CS_OUTCOME_ROLLED_BACK: return "rolled-back";
	case CS_OUTCOME_REFUSED: return "refused";
	default: return "incomplete";
	}
}

static void print_refused(const char *cmd, const cs_target *t, size_t n)
{
	size_t halted = 0;
	for (size_t i = 0; i < n; i++)
		halted += t[i].halted;
	cli_msg("%s refused; nothing was changed%s", cmd,
		halted > 1 ? ". Processes that cannot answer the driver now:" : "");
	for (size_t i = 0; halted > 1 && i < n; i++)
		if (t[i].halted)
			cli_msg("  %s", t[i].error.message);
}

/* The line of one process in a failure's list, with what happened to it. */
static void print_target_outcome(const cs_target *t)
{
	bool behind = t->rollback_failed || t->abandoned;
	const char *mark = t->lost ? "  <- LOST" : t->exited ? "  <- EXITED" : behind ? "  <- LEFT BEHIND" : "";
	cli_msg("  %d (%s): %s (was %s)%s", (int)t->pid, t->comm, state_word(t),
		cs_state_name(t->initial_state) ? cs_state_name(t->initial_state) : "unknown", mark);
	if (t->lost) {
		cli_msg("      %s: its GPU state is gone with it; restart it",
			t->lost_why[0] ? t->lost_why : "it exited");
		return;
	}
	if (t->exited) {
		cli_msg("      %s, by itself: none of its GPU state was in cudasnap's hands",
			t->lost_why[0] ? t->lost_why : "it exited");
		return;
	}
	if (behind && t->error.message[0])
		cli_msg("      %s", t->error.message);
	if (behind && t->unrestorable) {
		cli_msg("      the driver cannot restore it: its GPU state is lost; restart it");
	} else if (behind) {
		char cmdline[256];
		cs_target_recovery(t, cmdline, sizeof(cmdline));
		cli_msg("      to recover: %s", cmdline);
	}
}

/* The command that restores the targets a restore returned to checkpointed
 * because of one the driver can never restore, with the caller's device map. */
static bool restore_others(const txn_ctx *x, const cs_target *t, size_t n, char *buf, size_t size)
{
	if (x->c->op != CS_OP_RESTORE || !cs_txn_restore_others(t, n, buf, size))
		return false;
	size_t len = strlen(buf);
	if (x->c->device_map && len < size)
		snprintf(buf + len, size - len, " --device-map %s", x->c->device_map);
	return true;
}

static const char *failure_headline(const cs_txn_result *r, const cs_target *t, size_t n)
{
	size_t exited = 0;
	for (size_t i = 0; i < n; i++)
		exited += t[i].exited && !t[i].vanished;
	if (r->outcome == CS_OUTCOME_ROLLED_BACK && exited)
		return "every process that is still there is back in its state before the command:";
	if (r->outcome == CS_OUTCOME_ROLLED_BACK)
		return "every process is back in its state before the command:";
	if (r->lost)
		return "processes were LOST; where each process stands:";
	return "rollback INCOMPLETE:";
}

void txn_print_human(const txn_ctx *x, const cs_target *t, size_t n, const cs_txn_result *r)
{
	const char *cmd = x->c->cmd;
	for (size_t i = 0; i < n; i++)
		if (t[i].skipped && !t[i].vanished)
			cli_msg("%d (%s) left as it was: %s", (int)t[i].pid, t[i].comm, state_word(&t[i]));
	for (size_t i = 0; i < n; i++)
		if (t[i].vanished)
			cli_msg("%d (%s) exited before it was touched: left out", (int)t[i].pid, t[i].comm);
	if (r->outcome == CS_OUTCOME_DONE) {
		double gbps = r->wall_seconds > 0 ? (double)r->bytes / r->wall_seconds / 1e9 : 0;
		char gone[64] = "";
		if (r->vanished)
			snprintf(gone, sizeof(gone), "; %zu exited before they were touched", r->vanished);
		cli_msg("%s done: %zu process%s, %.2f GiB in %.3f s (%.2f GB/s)%s%s", cmd, r->acted,
			r->acted == 1 ? "" : "es", gib(r->bytes), r->wall_seconds, gbps, gone,
			txn_leftovers(x) ? "; device references remain (see warnings)" : "");
		return;
	}
	cli_error(&r->error);
	if (r->outcome == CS_OUTCOME_REFUSED) {
		print_refused(cmd, t, n);
		return;
	}
	cli_msg("%s FAILED; %s", cmd, failure_headline(r, t, n));
	for (size_t i = 0; i < n; i++)
		if (!t[i].skipped && !t[i].vanished)
			print_target_outcome(&t[i]);
	char others[1024];
	if (restore_others(x, t, n, others, sizeof(others)))
		cli_msg("to restore the others, without what the driver cannot restore: %s", others);
}

static json_object *target_json(const cs_target *t)
{
	json_object *o = json_object_new_object();
	json_object_object_add(o, "pid", json_object_new_int(t->pid));
	json_object_object_add(o, "comm", json_object_new_string(t->comm));
	cs_json_add_str_or_null(o, "initial_state", cs_state_name(t->initial_state));
	json_object_object_add(o, "final_state", json_object_new_string(state_word(t)));
	json_object_object_add(o, "skipped", json_object_new_boolean(t->skipped));
	json_object_object_add(o, "failed", json_object_new_boolean(t->failed));
	json_object_object_add(o, "rollback_failed", json_object_new_boolean(t->rollback_failed));
	json_object_object_add(o, "halted", json_object_new_boolean(t->halted));
	json_object_object_add(o, "abandoned", json_object_new_boolean(t->abandoned));
	json_object_object_add(o, "vanished", json_object_new_boolean(t->vanished));
	json_object_object_add(o, "lost", json_object_new_boolean(t->lost));
	cs_json_add_str_or_null(o, "lost_why", t->lost && t->lost_why[0] ? t->lost_why : NULL);
	json_object_object_add(o, "unrestorable", json_object_new_boolean(t->unrestorable));
	if ((t->rollback_failed || t->abandoned) && !t->lost && !t->unrestorable) {
		char cmdline[256];
		cs_target_recovery(t, cmdline, sizeof(cmdline));
		json_object_object_add(o, "recovery", json_object_new_string(cmdline));
	}
	json_object_object_add(o, "bytes", json_object_new_uint64(t->bytes));
	json_object *secs = json_object_new_object();
	for (int s = 0; s < CS_STEP_COUNT; s++)
		if (t->done[s])
			json_object_object_add(secs, cs_step_name((cs_step)s), json_object_new_double(t->seconds[s]));
	json_object_object_add(o, "seconds", secs);
	if (t->park_seen) {
		json_object *pk = json_object_new_object();
		json_object_object_add(pk, "parkable", json_object_new_boolean(t->parkable));
		json_object_object_add(pk, "parked", json_object_new_boolean(t->parked));
		json_object_object_add(pk, "bytes", json_object_new_uint64(t->park_bytes));
		json_object_object_add(pk, "copy_seconds", json_object_new_double(t->park_copy_s));
		json_object_object_add(pk, "copy_gbps", json_object_new_double(t->park_gbps));
		cs_json_add_str_or_null(pk, "why_not", t->park_why[0] ? t->park_why : NULL);
		/* a park into files: where its memory is, or was until this restore */
		json_object *pf = t->park_name[0] ? json_object_new_object() : NULL;
		if (pf) {
			json_object_object_add(pf, "dir", json_object_new_string(t->park_dir));
			json_object_object_add(pf, "name", json_object_new_string(t->park_name));
			json_object_object_add(pf, "count", json_object_new_int((int)t->park_nfiles));
			json_object_object_add(pf, "direct", json_object_new_int((int)t->park_direct));
		}
		json_object_object_add(pk, "files", pf);
		json_object_object_add(o, "park", pk);
	}
	json_object_object_add(o, "error", t->error.message[0] ? cs_json_error(&t->error) : NULL);
	return o;
}

static json_object *leftovers_json(const txn_ctx *x)
{
	json_object *a = json_object_new_array();
	size_t n = 0;
	const cs_leftover *left = x->s ? cs_session_leftovers(x->s, &n, NULL) : NULL;
	for (size_t i = 0; i < n; i++) {
		const cs_leftover *l = &left[i];
		json_object *o = json_object_new_object();
		json_object_object_add(o, "pid", json_object_new_int(l->proc->pid));
		json_object_object_add(o, "comm", json_object_new_string(l->proc->comm));
		json_object_object_add(o, "class", json_object_new_string(cs_class_name(l->proc->cls)));
		json_object_object_add(o, "kind", json_object_new_string(l->ref->kind == CS_REF_FD ? "fd" : "mapping"));
		json_object_object_add(o, "file", json_object_new_string(l->ref->path));
		json_object_object_add(o, "reason", json_object_new_string(l->reason));
		json_object_array_add(a, o);
	}
	return a;
}

void txn_print_json(const txn_ctx *x, const cs_target *t, size_t n, const cs_txn_result *r, int status)
{
	json_object *o = json_object_new_object();
	json_object_object_add(o, "command", json_object_new_string(x->c->cmd));
	json_object_object_add(o, "outcome", json_object_new_string(outcome_word(r, n)));
	json_object_object_add(o, "exit_status", json_object_new_int(status));
	json_object_object_add(o, "wall_seconds", json_object_new_double(r->wall_seconds));
	json_object_object_add(o, "bytes", json_object_new_uint64(r->bytes));
	json_object_object_add(o, "lost", json_object_new_uint64(r->lost));
	json_object_object_add(o, "vanished", json_object_new_uint64(r->vanished));
	json_object_object_add(o, "gb_per_s",
			       json_object_new_double(r->wall_seconds > 0 ? (double)r->bytes / r->wall_seconds / 1e9 :
									    0));
	json_object *arr = json_object_new_array();
	for (size_t i = 0; i < n; i++)
		json_object_array_add(arr, target_json(&t[i]));
	json_object_object_add(o, "processes", arr);
	json_object_object_add(o, "leftovers", leftovers_json(x));
	char others[1024];
	cs_json_add_str_or_null(o, "restore_others", restore_others(x, t, n, others, sizeof(others)) ? others : NULL);
	json_object_object_add(o, "error", r->error.message[0] ? cs_json_error(&r->error) : NULL);
	cs_json_print(o);
}

/* Every process refused before anything changed (host memory, CUDA IPC),
 * where the error names the first: [{pid, comm, code, text, fix}]. */
static json_object *refused_json(const txn_ctx *x)
{
	json_object *a = json_object_new_array();
	size_t n = 0;
	const cs_refusal *v = x->s ? cs_session_refusals(x->s, &n) : NULL;
	for (size_t i = 0; i < n; i++) {
		json_object *o = json_object_new_object();
		json_object_object_add(o, "pid", json_object_new_int(v[i].pid));
		json_object_object_add(o, "comm", json_object_new_string(v[i].comm));
		json_object_object_add(o, "code", json_object_new_string(v[i].reason.code));
		json_object_object_add(o, "text", json_object_new_string(v[i].reason.text));
		cs_json_add_str_or_null(o, "fix", v[i].reason.fix[0] ? v[i].reason.fix : NULL);
		json_object_array_add(a, o);
	}
	return a;
}

/* An error before the transaction began: nothing was changed. */
int txn_early_error(const txn_ctx *x, const cs_error *e)
{
	int status = cli_exit_for(e); /* nothing was changed */
	cli_error(e);
	if (x->c->json) {
		json_object *o = json_object_new_object();
		json_object_object_add(o, "command", json_object_new_string(x->c->cmd));
		json_object_object_add(o, "outcome", json_object_new_string("error"));
		json_object_object_add(o, "exit_status", json_object_new_int(status));
		if (x->c->dry_run) /* the real command fails there too */
			json_object_object_add(o, "real_exit_status", json_object_new_int(status));
		json_object_object_add(o, "processes", json_object_new_array());
		json_object_object_add(o, "refused", refused_json(x));
		json_object_object_add(o, "error", cs_json_error(e));
		cs_json_print(o);
	}
	return status;
}
