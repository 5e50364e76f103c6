/* cudasnap doctor's "history" check: the last failure among the operations
 * of the last 24 hours (lib/record/history.h), with what to read about it. */
#include "doctor.h"
#include "history.h"
#include "json.h"
#include "proc.h"
#include "state.h"
#include "util.h"

#include <stdio.h>
#include <string.h>
#include <time.h>

#define DAY_S 86400.0

static const char *str(json_object *o, const char *key)
{
	json_object *v = NULL;
	return json_object_object_get_ex(o, key, &v) && json_object_is_type(v, json_type_string) ?
		json_object_get_string(v) :
		NULL;
}

/* What went wrong in e, in a few words: its first process that is not done
 * (pid, command, what became of it, why), else its error. */
static void what_failed(json_object *e, char *buf, size_t size)
{
	json_object *procs = NULL, *err = NULL;
	buf[0] = '\0';
	json_object_object_get_ex(e, "processes", &procs);
	for (size_t i = 0; json_object_is_type(procs, json_type_array) && i < json_object_array_length(procs); i++) {
		json_object *p = json_object_array_get_idx(procs, i), *pid = NULL;
		const char *o = str(p, "outcome");
		if (!o || strcmp(o, "done") == 0 || strcmp(o, "left") == 0 || strcmp(o, "untouched") == 0)
			continue;
		json_object_object_get_ex(p, "pid", &pid);
		char pidtext[24] = "-";
		if (json_object_is_type(pid, json_type_int))
			snprintf(pidtext, sizeof(pidtext), "%lld", (long long)json_object_get_int64(pid));
		snprintf(buf, size, "process %s (%s) %s%s%s", pidtext, str(p, "comm") ? str(p, "comm") : "?", o,
			 str(p, "why") ? ": " : "", str(p, "why") ? str(p, "why") : "");
		return;
	}
	if (json_object_object_get_ex(e, "error", &err) && str(err, "message"))
		snprintf(buf, size, "%s", str(err, "message"));
}

static void age(double seconds, char *buf, size_t size)
{
	if (seconds < 120)
		snprintf(buf, size, "%.0f s", seconds < 0 ? 0 : seconds);
	else if (seconds < 7200)
		snprintf(buf, size, "%.0f min", seconds / 60);
	else
		snprintf(buf, size, "%.1f h", seconds / 3600);
}

static void report_failure(cs_doctor_report *r, json_object *e, double now)
{
	char when[48], ago[32], outcome[32], what[700], text[1024];
	snprintf(when, sizeof(when), "%s", str(e, "time") ? str(e, "time") : "?");
	snprintf(outcome, sizeof(outcome), "%s", str(e, "outcome") ? str(e, "outcome") : "?");
	for (char *c = outcome; *c; c++)
		*c = (char)(*c >= 'a' && *c <= 'z' ? *c - 'a' + 'A' : *c);
	age(now - cs_history_time(e), ago, sizeof(ago));
	what_failed(e, what, sizeof(what));
	snprintf(text, sizeof(text), "%s %s %s%s%s", str(e, "front") ? str(e, "front") : "?",
		 str(e, "op") ? str(e, "op") : "?", outcome, what[0] ? ": " : "", what);
	char safe[1024];
	cs_sanitize(safe, sizeof(safe), text, strlen(text));
	cs_doctor_add(r, "history", CS_CHECK_WARN, 0,
		      "Read 'cudasnap history -n 5': what each process of the last operations went through, the step "
		      "and the driver's code that failed, and the command that recovers a process left behind "
		      "('cudasnap ps' shows where each stands now).",
		      "%zu of the %zu operations of the last 24 h failed; the last at %s (%s ago): %s",
		      r->history_failures, r->history_recent, when, ago, safe);
}

/* The alerts (a process LOST, UNRESTORABLE or LEFT BEHIND) no one has
 * marked read, whatever their age: the history carries them across its
 * rotation until then. The newest is named; doctor marks nothing (a
 * monitor running it must not hide them from people). */
static void report_unread(cs_doctor_report *r, cs_history_log *l, double now)
{
	json_object *newest = NULL;
	for (size_t i = 0; i < l->n; i++)
		if (l->unread[i]) {
			r->history_unread++;
			newest = newest ? newest : l->e[i];
		}
	if (!newest)
		return;
	char what[700], ago[32], safe[1024];
	what_failed(newest, what, sizeof(what));
	age(now - cs_history_time(newest), ago, sizeof(ago));
	cs_sanitize(safe, sizeof(safe), what, strlen(what));
	cs_doctor_add(r, "history-unread", CS_CHECK_WARN, 0,
		      "Read 'cudasnap history': it shows each of them, and what recovers a process left behind; then "
		      "'cudasnap history --mark-read' marks them read. The history keeps them across its rotation "
		      "until then.",
		      "%zu operation%s left a process LOST, UNRESTORABLE or LEFT BEHIND, and no one has marked %s read "
		      "yet; the last at %s (%s ago): %s",
		      r->history_unread, r->history_unread == 1 ? "" : "s", r->history_unread == 1 ? "it" : "them",
		      str(newest, "time") ? str(newest, "time") : "?", ago, safe);
}

void cs_doctor_check_history(cs_doctor_report *r)
{
	_cleanup_(cs_history_log_freep) cs_history_log l = { 0 };
	cs_error err = { 0 };
	if (cs_history_read(-1, &l, &err) < 0) {
		if (err.sys == EACCES)
			cs_doctor_add(r, "history", CS_CHECK_PASS, 0, NULL,
				      "the history of operations in %s is root's alone: run doctor as root to see the "
				      "last failures",
				      cs_state_dir());
		else
			cs_doctor_add(r, "history", CS_CHECK_WARN, 0, err.hint, "the history of operations: %s",
				      err.message);
		return;
	}
	double now = (double)time(NULL);
	json_object *last = NULL;
	for (size_t i = 0; i < l.n; i++) {
		double t = cs_history_time(l.e[i]);
		if (t < now - DAY_S)
			continue;
		r->history_recent++;
		if (!cs_history_failed(l.e[i]))
			continue;
		r->history_failures++;
		if (!last)
			last = l.e[i]; /* newest first */
	}
	report_unread(r, &l, now);
	if (last) {
		const char *text = json_object_to_json_string_ext(last, JSON_C_TO_STRING_PLAIN);
		r->history_last = text ? strdup(text) : NULL;
		report_failure(r, last, now);
	} else if (r->history_recent) {
		cs_doctor_add(r, "history", CS_CHECK_PASS, 0, NULL,
			      "no failure among the %zu operations of the last 24 h", r->history_recent);
	} else {
		cs_doctor_add(r, "history", CS_CHECK_PASS, 0, NULL, "no operation in the last 24 h (%s/%s holds %zu)",
			      cs_state_dir(), CS_HISTORY_NAME, l.n);
	}
}
