/* The entry of the history of operations that a session leaves: every
 * front-end that runs sessions (the command line, the hook, the CRIU
 * plugin's helpers) passes here when its session ends, so what is said of
 * each process is decided once. */
#include "session_int.h"
#include "history.h"
#include "plan.h"

#include <string.h>

static const char *outcome_word(const cs_txn_result *res)
{
	switch (res->outcome) {
	case CS_OUTCOME_DONE: return "done";
	case CS_OUTCOME_ROLLED_BACK: return "rolled-back";
	case CS_OUTCOME_REFUSED: return "refused";
	default: return "incomplete";
	}
}

/* Each refusal of the checks before anything changed names its process;
 * a process refused for two reasons keeps the first, the second is added
 * to its why. */
static void add_refusals(cs_session *s)
{
	size_t n = 0;
	const cs_refusal *v = cs_session_refusals(s, &n);
	for (size_t i = 0; i < n; i++) {
		cs_history_proc *p = cs_history_proc_of(&s->hist, v[i].pid, v[i].comm);
		if (p && p->outcome != CS_HIST_REFUSED) {
			cs_history_refused(p, v[i].reason.code, v[i].reason.text);
		} else if (p) {
			size_t len = strlen(p->why);
			snprintf(p->why + len, sizeof(p->why) - len, "; and (%s) %s", v[i].reason.code,
				 v[i].reason.text);
		}
	}
	if (s->busy_pid) {
		cs_history_proc *p = cs_history_proc_of(&s->hist, s->busy_pid, s->busy_comm);
		if (p)
			cs_history_refused(p, "busy", NULL);
	}
}

void cs_session_record(cs_session *s, int rc, const cs_txn_result *res, const cs_error *err)
{
	if (s->o->dry_run || s->recorded)
		return;
	s->recorded = true;
	cs_txn_result none = { 0 };
	bool ran = res && res->ran;
	if (!ran)
		res = &none;
	for (size_t i = 0; i < s->n; i++) {
		cs_history_proc *p = cs_history_proc_of(&s->hist, s->t[i].pid, s->t[i].comm);
		if (p)
			cs_history_target(p, s->o->op, &s->t[i], res, rc);
	}
	add_refusals(s);
	const cs_error *why = ran ? (rc < 0 ? &res->error : NULL) : err;
	/* A busy process is refused by the claims, whose error says by whom. */
	for (size_t i = 0; !ran && why && i < s->hist.n; i++)
		if (s->hist.p[i].pid == s->busy_pid && !s->hist.p[i].why[0])
			snprintf(s->hist.p[i].why, sizeof(s->hist.p[i].why), "%s", why->message);
	cs_history_finish(&s->hist, ran ? outcome_word(res) : "refused", cs_history_exit_status(ran, res, rc), why);
	if (!s->o->no_history)
		cs_history_write(&s->hist, s->state_fd, false, s->o->warn, s->o->warn_ctx);
}

const cs_history *cs_session_history(const cs_session *s)
{
	return s->recorded ? &s->hist : NULL;
}
