#include "session.h"
#include "host.h"
#include "util.h"

#include <stdlib.h>
#include <string.h>

static cs_driver *driver;

static void warn_line(void *ctx, const char *line)
{
	(void)ctx;
	plog(strncmp(line, "error", 5) == 0 ? CS_CRIU_LOG_ERROR : CS_CRIU_LOG_WARN, "%s", line);
}

static void progress(void *ctx, const cs_target *t, cs_step s, bool undo, int res, double secs)
{
	(void)ctx;
	plog(res == CS_CU_SUCCESS ? CS_CRIU_LOG_INFO : CS_CRIU_LOG_ERROR, "%d (%s) %s%s: %s in %.3f s", (int)t->pid,
	     t->comm, undo ? "rollback " : "", cs_step_name(s), cs_cu_name(driver, res), secs);
}

size_t run_outcome_size(size_t n)
{
	return sizeof(run_outcome) + n * sizeof(task_outcome);
}

static int goal(cs_op op)
{
	return op == CS_OP_CHECKPOINT || op == CS_OP_CHECKPOINT_LOCKED ? CS_STATE_CHECKPOINTED :
		op == CS_OP_LOCK                                       ? CS_STATE_LOCKED :
									 CS_STATE_RUNNING;
}

/* What the session's entry says of pid; a process it does not name was
 * left untouched. */
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

static run_outcome *outcome(const plugin_run *r, int rc, const cs_txn_result *res, const cs_error *err,
			    const cs_target *t, size_t n, const cs_history *h)
{
	run_outcome *o = calloc(1, run_outcome_size(n));
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

run_outcome *run_session(const plugin_run *r, cs_driver **d, cs_target **targets, size_t *n)
{
	*targets = NULL;
	*n = 0;
	cs_txn_result res = { 0 };
	cs_error err = { 0 };
	if (cs_driver_open(d, &err) < 0)
		return outcome(r, -err.status, &res, &err, NULL, 0, NULL);
	driver = *d;
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
		.no_manifest = true,
		.scope = r->scope,
		.nscope = r->nscope,
		.manifest = r->manifest,
		.progress = progress,
		.warn = warn_line,
		/* the plugin's entry covers the whole dump or restore (criu/oplog.c) */
		.no_history = true,
	};
	_cleanup_(cs_session_freep) cs_session *s = NULL;
	int rc = cs_session_open(&s, *d, &o, &err);
	if (rc == 0)
		rc = cs_session_select(s, &err);
	if (rc == 0) {
		rc = cs_session_run(s, &res, &err);
		if (res.ran && rc < 0)
			err = res.error;
	}
	size_t k = 0;
	cs_target *t = s ? cs_session_targets(s, &k) : NULL;
	*targets = calloc(k ? k : 1, sizeof(**targets));
	if (*targets && k) {
		memcpy(*targets, t, k * sizeof(*t));
		*n = k;
	}
	return outcome(r, rc, &res, &err, t, k, s ? cs_session_history(s) : NULL);
}

const run_outcome *run_outcome_check(const void *buf, size_t len, const char *what)
{
	const run_outcome *o = buf;
	if (!buf || len < sizeof(*o) || o->n > (len - sizeof(*o)) / sizeof(task_outcome) ||
	    len != run_outcome_size(o->n)) {
		plog(CS_CRIU_LOG_ERROR, "%s: the helper process's answer is malformed", what);
		return NULL;
	}
	return o;
}
