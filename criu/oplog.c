#include "oplog.h"
#include "host.h"
#include "json.h"
#include "proc.h"
#include "stages.h"
#include "state.h"
#include "tasks.h"
#include "util.h"

#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <syslog.h>

/* The operation of this CRIU, from its init to its exit. */
static struct {
	bool on;
	bool gpu; /* it met the GPU */
	bool failed; /* error is the operation's own summary (oplog_fail) */
	cs_history h;
	char error[512]; /* the first error line of the plugin's log */
} op;

void oplog_begin(int stage)
{
	cs_history_free(&op.h);
	bool dump = stage != CS_CRIU_STAGE_RESTORE;
	cs_history_begin(&op.h, dump ? "criu-dump" : "criu-restore", dump ? "checkpoint" : "restore");
	op.error[0] = '\0';
	op.gpu = false;
	op.failed = false;
	op.on = true;
}

void oplog_gpu(void)
{
	op.gpu = op.on;
}

void oplog_error(const char *line)
{
	if (op.on && !op.error[0] && !op.failed)
		snprintf(op.error, sizeof(op.error), "%s", line);
}

void oplog_fail(const char *message)
{
	if (!op.on)
		return;
	snprintf(op.error, sizeof(op.error), "%s", message);
	op.failed = true;
}

cs_history_proc *oplog_proc(pid_t pid, pid_t nspid, const char *comm)
{
	if (!op.on)
		return NULL;
	cs_history_proc *p = cs_history_proc_of(&op.h, pid, comm);
	if (p && nspid > 0)
		p->nspid = nspid;
	if (p && comm && comm[0])
		snprintf(p->comm, sizeof(p->comm), "%s", comm);
	return p;
}

void oplog_record(const cs_manifest *m)
{
	for (size_t k = 0; op.on && k < m->n; k++) {
		const cs_manifest_entry *e = &m->e[k];
		cs_history_proc *p = cs_history_proc_of(&op.h, 0, e->comm);
		if (!p)
			return;
		p->nspid = e->nspid ? e->nspid : e->pid;
		p->bytes = e->bytes;
	}
}

cs_history_proc *oplog_entry(size_t k)
{
	return op.on && k < op.h.n ? &op.h.p[k] : NULL;
}

void oplog_refused(pid_t pid, const char *comm, const char *code, const char *why)
{
	cs_history_proc *p = oplog_proc(pid, 0, comm);
	oplog_gpu();
	if (p)
		cs_history_refused(p, code, why);
}

void oplog_note(const char *fmt, ...)
{
	if (!op.on)
		return;
	va_list ap;
	va_start(ap, fmt);
	vsnprintf(op.h.note, sizeof(op.h.note), fmt, ap);
	va_end(ap);
}

/* On a failed dump's way back: whether the process is running again, as
 * it was before the dump; otherwise it stays named with what recovers it. */
static void merge_back(cs_history_proc *p, const task_outcome *t)
{
	const cs_history_proc *s = &t->hist;
	if (s->outcome == CS_HIST_DONE || s->outcome == CS_HIST_LEFT) {
		if (p->outcome != CS_HIST_REFUSED)
			p->outcome = CS_HIST_ROLLED_BACK;
		return;
	}
	if (s->outcome == CS_HIST_LOST || s->outcome == CS_HIST_UNRESTORABLE || s->outcome == CS_HIST_EXITED ||
	    s->outcome == CS_HIST_VANISHED) {
		p->outcome = s->outcome == CS_HIST_VANISHED ? CS_HIST_EXITED : s->outcome;
	} else {
		p->outcome = CS_HIST_LEFT_BEHIND;
		snprintf(p->recovery, sizeof(p->recovery), "cudasnap %s --pid %d once CRIU has let it go",
			 t->state == CS_STATE_LOCKED ? "unlock" : "restore", (int)t->pid);
	}
	snprintf(p->why, sizeof(p->why), "%s", s->why[0] ? s->why : t->message);
	p->step = s->step;
	p->cu = s->cu;
}

void oplog_session(const run_outcome *o, bool back)
{
	for (size_t i = 0; op.on && o && i < o->n; i++) {
		const task_outcome *t = &o->t[i];
		const cs_history_proc *s = &t->hist;
		cs_history_proc *p = oplog_proc(t->pid, s->nspid, t->comm);
		if (!p)
			return;
		for (int k = 0; k < CS_STEP_COUNT; k++)
			if (s->timed[k]) {
				p->timed[k] = true;
				p->seconds[k] = s->seconds[k];
			}
		if (back) {
			merge_back(p, t);
			continue;
		}
		if (s->bytes)
			p->bytes = s->bytes;
		p->outcome = s->outcome;
		snprintf(p->code, sizeof(p->code), "%s", s->code);
		snprintf(p->why, sizeof(p->why), "%s", s->why);
		snprintf(p->recovery, sizeof(p->recovery), "%s", s->recovery);
		p->step = s->step;
		p->cu = s->cu;
	}
	for (size_t i = 0; op.on && o && i < o->nrefused && i < RUN_REFUSED_MAX; i++)
		oplog_refused(o->refused[i].pid, o->refused[i].comm, o->refused[i].code, o->refused[i].why);
}

/* One line for syslog: the header, then each process, " | " between them. */
static void to_syslog(const cs_history *h)
{
	_cleanup_free_ char *line = cs_history_render(h);
	_cleanup_(json_object_putp) json_object *e = line ? cs_history_parse_line(line, strlen(line) - 1) : NULL;
	_cleanup_free_ char *text = e ? cs_history_describe(e) : NULL;
	if (!text)
		return;
	/* Lines become " | " parts; the header's own line ends the first. */
	char out[2048];
	size_t n = 0;
	for (const char *s = text; *s && n + 4 < sizeof(out); s++) {
		if (*s != '\n') {
			out[n++] = *s;
			continue;
		}
		if (!s[1])
			break;
		memcpy(out + n, " |", 2);
		n += 2;
		while (s[1] == ' ' && s[2] == ' ')
			s++;
	}
	out[n] = '\0';
	char clean[sizeof(out)]; /* a cut in the middle of a character is not UTF-8 */
	cs_sanitize(clean, sizeof(clean), out, n);
	bool failed = strcmp(h->outcome, "done") != 0;
	openlog("cudasnap", LOG_PID, LOG_DAEMON);
	syslog(failed ? LOG_ERR : LOG_INFO, "%s", clean);
	closelog(); /* no socket stays open in CRIU's process */
}

static const char *final_words(int ret)
{
	if (ret)
		return "failed";
	return cs_plugin.criu.final == CRIU_FINAL_ALIVE    ? "succeeded; the tree left running" :
		cs_plugin.criu.final == CRIU_FINAL_STOPPED ? "succeeded; the tree left stopped" :
							     "succeeded; the tree killed";
}

static void warn_line(void *ctx, const char *line)
{
	(void)ctx;
	plog(CS_CRIU_LOG_WARN, "%s", line);
}

void oplog_end(int ret, int statefd, bool create)
{
	if (!op.on)
		return;
	op.on = false;
	cs_history *h = &op.h;
	/* Nothing of the GPU's was met or done: not an operation of the plugin's. */
	if (!op.gpu || (h->n == 0 && !op.error[0])) {
		cs_history_free(h);
		return;
	}
	bool failed = ret != 0;
	for (size_t i = 0; i < h->n; i++)
		failed |= h->p[i].outcome != CS_HIST_DONE && h->p[i].outcome != CS_HIST_LEFT;
	bool dump = strcmp(h->front, "criu-dump") == 0;
	const char *how = dump ? final_words(ret) : ret ? "failed" : "succeeded";
	if (!h->note[0])
		snprintf(h->note, sizeof(h->note), "criu %s %s", dump ? "dump" : "restore", how);
	cs_error err = { 0 };
	if (op.error[0])
		cs_error_set(&err, CS_EPROC, NULL, "%s", op.error);
	else if (ret && dump)
		cs_error_set(&err, CS_EPROC, NULL,
			     "CRIU failed the dump for a reason of its own (its log says which); the GPU processes were "
			     "returned to their state before it");
	else if (ret)
		cs_error_set(&err, CS_EPROC, NULL,
			     "CRIU failed the restore for a reason of its own (its log says which)");
	cs_history_finish(h, cs_history_outcome(h, failed, true), -1, &err);
	if (statefd >= 0 || create)
		cs_history_write(h, statefd, create, warn_line, NULL);
	to_syslog(h);
	cs_history_free(h);
}
