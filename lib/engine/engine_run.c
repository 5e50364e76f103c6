/* One session inside a staged session's call: the same transaction, claims
 * and checks as 'cudasnap checkpoint' and 'restore', asking the driver about
 * the given processes only; and the flat outcome that goes back to the
 * engine's process. */
#include "engine_int.h"
#include "nvml.h"
#include "state.h"
#include "util.h"

#include <stdlib.h>
#include <string.h>

/* The session's driver, for progress lines: one session per call. */
static cs_driver *driver;
static cs_engine *engine;

static void warn_line(void *ctx, const char *line)
{
	(void)ctx;
	eng_log(engine, strncmp(line, "error", 5) == 0 ? CS_LOG_ERROR : CS_LOG_WARN, "%s", line);
}

static void progress(void *ctx, const cs_target *t, cs_step s, bool undo, int res, double secs)
{
	(void)ctx;
	eng_log(engine, res == CS_CU_SUCCESS ? CS_LOG_INFO : CS_LOG_ERROR, "%d (%s) %s%s: %s in %.3f s", (int)t->pid,
		t->comm, undo ? "rollback " : "", cs_step_name(s), cs_cu_name(driver, res), secs);
}

size_t eng_outcome_size(size_t n)
{
	return sizeof(run_outcome) + n * sizeof(task_outcome);
}

static int goal(cs_op op)
{
	return op == CS_OP_CHECKPOINT || op == CS_OP_CHECKPOINT_LOCKED ? CS_STATE_CHECKPOINTED :
		op == CS_OP_LOCK                                       ? CS_STATE_LOCKED :
									 CS_STATE_RUNNING;
}

/* What the session's entry says of t; a process it does not name was left
 * untouched. */
static void history_of(const cs_history *h, const cs_target *t, cs_history_proc *out)
{
	for (size_t i = 0; h && i < h->n; i++)
		if (h->p[i].pid == t->pid) {
			*out = h->p[i];
			return;
		}
	*out = (cs_history_proc){ .pid = t->pid, .nspid = t->nspid, .outcome = CS_HIST_UNTOUCHED, .step = -1 };
	snprintf(out->comm, sizeof(out->comm), "%s", t->comm);
}

/* The session's refusals of processes that are not its targets. */
static void refused_others(run_outcome *o, const cs_history *h)
{
	for (size_t i = 0; h && i < h->n && o->nrefused < RUN_REFUSED_MAX; i++) {
		bool target = false;
		for (size_t k = 0; k < o->n && !target; k++)
			target = o->t[k].pid == h->p[i].pid;
		if (!target && h->p[i].outcome == CS_HIST_REFUSED)
			o->refused[o->nrefused++] = h->p[i];
	}
}

run_outcome *eng_outcome_error(int rc, const char *message)
{
	run_outcome *o = calloc(1, eng_outcome_size(0));
	if (o) {
		o->rc = rc;
		snprintf(o->message, sizeof(o->message), "%s", message);
	}
	return o;
}

static run_outcome *outcome(const eng_run *r, int rc, const cs_txn_result *res, const cs_error *err, const cs_target *t,
			    size_t n, const cs_history *h)
{
	run_outcome *o = calloc(1, eng_outcome_size(n));
	if (!o)
		return NULL;
	*o = (run_outcome){ .rc = rc, .acted = res->acted, .bytes = res->bytes, .wall = res->wall_seconds, .n = n };
	snprintf(o->message, sizeof(o->message), "%s", err->message);
	snprintf(o->hint, sizeof(o->hint), "%s", err->hint);
	for (size_t i = 0; i < n; i++) {
		task_outcome *x = &o->t[i];
		*x = (task_outcome){ .pid = t[i].pid,
				     .state = t[i].state,
				     .done = rc == 0 && t[i].state == goal(r->op) && !t[i].skipped,
				     .failed = t[i].failed,
				     .rollback_failed = t[i].rollback_failed,
				     .lost = t[i].lost,
				     .unrestorable = t[i].unrestorable,
				     .bytes = t[i].bytes };
		snprintf(x->comm, sizeof(x->comm), "%s", t[i].comm);
		snprintf(x->lost_why, sizeof(x->lost_why), "%s", t[i].lost_why);
		snprintf(x->message, sizeof(x->message), "%s", t[i].error.message);
		history_of(h, &t[i], &x->hist);
	}
	refused_others(o, h);
	return o;
}

/* After a checkpoint, the record for the restore: NVML names the GPUs for a
 * restore elsewhere (loaded here, in the call, never in the engine's
 * process). */
static void write_record(const eng_run *r, cs_driver *d, cs_target *t, size_t n, run_outcome *o)
{
	/* where each park into files of the images put its memory (its
	 * meeting's call did it, which this process's copy of the engine
	 * knows) */
	for (size_t i = 0; i < n; i++) {
		const eng_task *x = eng_find(engine, t[i].pid);
		if (x && x->park_nfiles) {
			snprintf(t[i].park_name, sizeof(t[i].park_name), "%s", x->park_name);
			t[i].park_nfiles = x->park_nfiles;
			t[i].park_direct = x->park_direct;
			t[i].park_bytes = x->park_bytes;
		}
	}
	_cleanup_free_ cs_nvml_gpu *gpus = NULL;
	size_t ngpus = 0;
	cs_nvml_list(&gpus, &ngpus);
	_cleanup_free_ char *text = cs_manifest_render(t, n, d, o->wall, gpus, ngpus);
	cs_error err = { 0 };
	if (!text || cs_state_write(r->images, CS_PLUGIN_RECORD, text, strlen(text), &err) < 0) {
		o->rc = -CS_ESTATE;
		snprintf(o->message, sizeof(o->message), "cannot write %s into the images directory: %.400s",
			 CS_PLUGIN_RECORD, text ? err.message : "out of memory");
	}
}

run_outcome *eng_run_session(const cs_engine *e, const eng_run *r)
{
	cs_txn_result res = { 0 };
	cs_error err = { 0 };
	_cleanup_(cs_driver_freep) cs_driver *d = NULL;
	engine = (cs_engine *)e; /* a copy of the engine's process's, in this call's process */
	if (cs_driver_open(&d, &err) < 0)
		return outcome(r, -err.status, &res, &err, NULL, 0, NULL);
	driver = d;
	cs_session_opts o = {
		.op = r->op,
		.command = r->command,
		.sel = { .pids = (pid_t *)r->pids, .npids = r->npids },
		.timeout_ms = r->timeout_s * 1000,
		.strict = true,
		.ignore_manifest = true,
		.reuse_warns = true,
		.device_map = r->device_map,
		.only_selected = true,
		.claimed = r->claimed,
		.ipc_judged = true,
		.no_manifest = true,
		.scope = r->scope,
		.nscope = r->nscope,
		.manifest = r->manifest,
		.progress = progress,
		.warn = warn_line,
		/* the staged session's entry covers the whole dump or restore (engine_oplog.c) */
		.no_history = true,
	};
	_cleanup_(cs_session_freep) cs_session *s = NULL;
	int rc = cs_session_open(&s, d, &o, &err);
	if (rc == 0)
		rc = cs_session_select(s, &err);
	if (rc == 0) {
		rc = cs_session_run(s, &res, &err);
		if (res.ran && rc < 0)
			err = res.error;
	}
	size_t k = 0;
	cs_target *t = s ? cs_session_targets(s, &k) : NULL;
	run_outcome *out = outcome(r, rc, &res, &err, t, k, s ? cs_session_history(s) : NULL);
	if (out && r->images >= 0 && out->rc == 0 && out->acted)
		write_record(r, d, t, k, out);
	return out;
}

const run_outcome *eng_outcome_check(cs_engine *e, const void *buf, size_t len, const char *what)
{
	const run_outcome *o = buf;
	if (!buf || len < sizeof(*o) || o->n > (len - sizeof(*o)) / sizeof(task_outcome) ||
	    len != eng_outcome_size(o->n)) {
		eng_log(e, CS_LOG_ERROR, "%s: the helper process's answer is malformed", what);
		return NULL;
	}
	return o;
}

const task_outcome *eng_outcome_of(const run_outcome *o, pid_t pid)
{
	for (size_t k = 0; o && k < o->n; k++)
		if (o->t[k].pid == pid)
			return &o->t[k];
	return NULL;
}
