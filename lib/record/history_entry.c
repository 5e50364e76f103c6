/* One entry of the history as it is stored (lib/record/history_entry.h):
 * the checks a line passes before it is believed, and what an entry says:
 * its time, whether it failed or is an alert, its key, its human lines. */
#include "history_entry.h"
#include "json.h"
#include "proc.h"
#include "util.h"

#include <limits.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

/* ---- checking one line ---------------------------------------------------- */

static json_object *get(json_object *o, const char *key)
{
	json_object *v = NULL;
	return json_object_object_get_ex(o, key, &v) ? v : NULL;
}

static bool is(json_object *v, json_type t)
{
	return v && json_object_is_type(v, t);
}

/* Absent, null, or of type t. */
static bool optional(json_object *o, const char *key, json_type t)
{
	json_object *v = get(o, key);
	return !v || json_object_is_type(v, json_type_null) || json_object_is_type(v, t);
}

static bool int_in(json_object *v, long long min, long long max)
{
	if (!is(v, json_type_int))
		return false;
	errno = 0;
	long long x = json_object_get_int64(v);
	return errno == 0 && x >= min && x <= max;
}

static bool optional_int(json_object *o, const char *key, long long min, long long max)
{
	json_object *v = get(o, key);
	return !v || json_object_is_type(v, json_type_null) || int_in(v, min, max);
}

static bool number(json_object *v)
{
	if (is(v, json_type_int))
		return json_object_get_int64(v) >= 0;
	return is(v, json_type_double) && isfinite(json_object_get_double(v)) && json_object_get_double(v) >= 0;
}

/* A word of the entry: a non-empty string of at most 32 bytes. */
static bool word(json_object *o, const char *key)
{
	json_object *v = get(o, key);
	return is(v, json_type_string) && json_object_get_string_len(v) > 0 && json_object_get_string_len(v) <= 32;
}

/* n decimal digits at s; -1 when not. */
static int digits(const char *s, int n)
{
	int v = 0;
	for (int i = 0; i < n; i++) {
		if (s[i] < '0' || s[i] > '9')
			return -1;
		v = v * 10 + (s[i] - '0');
	}
	return v;
}

/* "YYYY-MM-DDTHH:MM:SS[.fff]Z" as seconds since the epoch; -1 when not. */
static double parse_time(const char *s)
{
	if (strnlen(s, 20) < 20 || s[4] != '-' || s[7] != '-' || s[10] != 'T' || s[13] != ':' || s[16] != ':')
		return -1;
	int y = digits(s, 4), mo = digits(s + 5, 2), d = digits(s + 8, 2), h = digits(s + 11, 2),
	    mi = digits(s + 14, 2), se = digits(s + 17, 2);
	const char *p = s + 19;
	double frac = 0;
	if (*p == '.') {
		size_t n = strspn(p + 1, "0123456789");
		long ns = 0;
		for (size_t i = 1; i <= 9; i++) /* nanoseconds, whatever the digits written */
			ns = ns * 10 + (i <= n ? p[i] - '0' : 0);
		if (n == 0)
			return -1;
		frac = (double)ns / 1e9;
		p += n + 1;
	}
	if (strcmp(p, "Z") != 0 || y < 1970 || mo < 1 || mo > 12 || d < 1 || d > 31 || h < 0 || h > 23 || mi < 0 ||
	    mi > 59 || se < 0 || se > 60)
		return -1;
	struct tm tm = { .tm_year = y - 1900, .tm_mon = mo - 1, .tm_mday = d, .tm_hour = h, .tm_min = mi, .tm_sec = se };
	time_t t = timegm(&tm);
	return t == (time_t)-1 ? -1 : (double)t + frac;
}

static bool valid_proc(json_object *p)
{
	json_object *secs = get(p, "seconds");
	if (!is(p, json_type_object) || !word(p, "outcome") || !optional_int(p, "pid", 1, INT_MAX) ||
	    !optional_int(p, "nspid", 1, INT_MAX) || !optional(p, "comm", json_type_string) ||
	    !optional_int(p, "bytes", 0, LLONG_MAX) || !optional(p, "code", json_type_string) ||
	    !optional(p, "why", json_type_string) || !optional(p, "step", json_type_string) ||
	    !optional_int(p, "cu", INT_MIN, INT_MAX) || !optional(p, "recovery", json_type_string) ||
	    !optional(p, "park_files", json_type_string) || !optional(p, "seconds", json_type_object))
		return false;
	if (is(secs, json_type_object)) {
		json_object_object_foreach(secs, k, v)
		{
			(void)k;
			if (!number(v))
				return false;
		}
	}
	return true;
}

static bool valid_caller(json_object *o)
{
	json_object *c = get(o, "caller");
	if (!c || json_object_is_type(c, json_type_null))
		return true;
	return is(c, json_type_object) && optional_int(c, "pid", 0, INT_MAX) &&
		optional(c, "cmdline", json_type_string) && optional_int(c, "parent_pid", 0, INT_MAX) &&
		optional(c, "parent_cmdline", json_type_string);
}

static bool valid_error(json_object *o)
{
	json_object *e = get(o, "error");
	if (!e || json_object_is_type(e, json_type_null))
		return true;
	return is(e, json_type_object) && is(get(e, "message"), json_type_string) &&
		optional(e, "kind", json_type_string) && optional(e, "hint", json_type_string) &&
		optional_int(e, "cu", INT_MIN, INT_MAX);
}

static bool valid_entry(json_object *o)
{
	json_object *t = get(o, "time"), *procs = get(o, "processes");
	if (!is(o, json_type_object) || !int_in(get(o, "v"), CS_HISTORY_VERSION, CS_HISTORY_VERSION) ||
	    !is(t, json_type_string) || parse_time(json_object_get_string(t)) < 0 || !word(o, "front") ||
	    !word(o, "op") || !word(o, "outcome") || !is(procs, json_type_array) || !number(get(o, "seconds")) ||
	    !optional_int(o, "exit_status", 0, 255) || !optional_int(o, "bytes", 0, LLONG_MAX) ||
	    !optional(o, "note", json_type_string) || !optional_int(o, "processes_omitted", 0, LLONG_MAX) ||
	    !valid_caller(o) || !valid_error(o))
		return false;
	for (size_t i = 0; i < json_object_array_length(procs); i++)
		if (!valid_proc(json_object_array_get_idx(procs, i)))
			return false;
	return true;
}

json_object *cs_history_parse_line(const char *line, size_t len)
{
	if (len == 0 || len >= CS_HISTORY_LINE_MAX || memchr(line, '\0', len) || memchr(line, '\n', len) ||
	    !cs_utf8_valid(line, len))
		return NULL;
	_cleanup_(json_tokener_freep) json_tokener *tok = json_tokener_new_ex(16);
	if (!tok)
		return NULL;
	json_tokener_set_flags(tok, JSON_TOKENER_STRICT);
	_cleanup_(json_object_putp) json_object *o = json_tokener_parse_ex(tok, line, (int)len);
	if (!o || json_tokener_get_error(tok) != json_tokener_success || json_tokener_get_parse_end(tok) != len ||
	    !valid_entry(o))
		return NULL;
	return TAKE_PTR(o);
}


/* ---- what an entry says ----------------------------------------------------- */

static const char *str(json_object *o, const char *key)
{
	json_object *v = get(o, key);
	return is(v, json_type_string) ? json_object_get_string(v) : NULL;
}

static long long num(json_object *o, const char *key, long long none)
{
	json_object *v = get(o, key);
	return is(v, json_type_int) ? json_object_get_int64(v) : none;
}

const char *cs_history_str(json_object *o, const char *key)
{
	return str(o, key);
}

long long cs_history_int(json_object *o, const char *key, long long none)
{
	return num(o, key, none);
}

json_object *cs_history_procs(json_object *e)
{
	json_object *a = get(e, "processes");
	return is(a, json_type_array) ? a : NULL;
}

bool cs_history_outcome_is(json_object *p, const char *what)
{
	const char *o = str(p, "outcome");
	return o && strcmp(o, what) == 0;
}

bool cs_history_alert(json_object *e)
{
	json_object *a = cs_history_procs(e);
	for (size_t i = 0; a && i < json_object_array_length(a); i++) {
		json_object *p = json_object_array_get_idx(a, i);
		if (cs_history_outcome_is(p, "lost") || cs_history_outcome_is(p, "unrestorable") ||
		    cs_history_outcome_is(p, "left-behind"))
			return true;
	}
	return false;
}

void cs_history_key(json_object *e, char *buf, size_t size)
{
	const char *t = str(e, "time");
	snprintf(buf, size, "%.40s %lld", t ? t : "?", num(get(e, "caller"), "pid", 0));
}

double cs_history_time(json_object *e)
{
	const char *t = str(e, "time");
	return t ? parse_time(t) : -1;
}

bool cs_history_failed(json_object *e)
{
	const char *outcome = str(e, "outcome");
	if (!outcome || strcmp(outcome, "done") != 0)
		return true;
	json_object *procs = get(e, "processes");
	for (size_t i = 0; is(procs, json_type_array) && i < json_object_array_length(procs); i++) {
		const char *o = str(json_object_array_get_idx(procs, i), "outcome");
		if (o && (strcmp(o, "lost") == 0 || strcmp(o, "left-behind") == 0 || strcmp(o, "unrestorable") == 0))
			return true;
	}
	return false;
}

/* s safe to print (control bytes as '?'), cut to size; "" for NULL. */
static const char *safe(const char *s, char *buf, size_t size)
{
	buf[0] = '\0';
	if (s)
		cs_sanitize(buf, size, s, strlen(s));
	return buf;
}

static void upper(char *s)
{
	for (; *s; s++)
		if (*s >= 'a' && *s <= 'z')
			*s = (char)(*s - 'a' + 'A');
}

void cs_history_headline(json_object *e, char *buf, size_t size)
{
	char when[40], front[40], op[40], outcome[40], note[300], cmd[300], parent[300], status[40] = "";
	json_object *procs = get(e, "processes"), *caller = get(e, "caller");
	size_t n = is(procs, json_type_array) ? json_object_array_length(procs) : 0;
	n += (size_t)num(e, "processes_omitted", 0);
	safe(str(e, "outcome"), outcome, sizeof(outcome));
	if (strcmp(outcome, "done") != 0)
		upper(outcome);
	long long st = num(e, "exit_status", -1);
	if (st >= 0)
		snprintf(status, sizeof(status), " (exit %lld)", st);
	json_object *secs = get(e, "seconds");
	double s = is(secs, json_type_double) || is(secs, json_type_int) ? json_object_get_double(secs) : 0;
	unsigned long long bytes = (unsigned long long)num(e, "bytes", 0);
	char what[96] = "";
	if (n)
		snprintf(what, sizeof(what), ": %zu process%s, %.2f GiB", n, n == 1 ? "" : "es",
			 (double)bytes / (1024.0 * 1024 * 1024));
	safe(str(e, "note"), note, sizeof(note));
	safe(str(caller, "cmdline"), cmd, sizeof(cmd));
	safe(str(caller, "parent_cmdline"), parent, sizeof(parent));
	long long ppid = num(caller, "parent_pid", 0);
	char by[700];
	int len = snprintf(by, sizeof(by), "pid %lld '%s'", num(caller, "pid", 0), cmd);
	if (ppid > 0 && len > 0 && (size_t)len < sizeof(by))
		snprintf(by + len, sizeof(by) - (size_t)len, ", parent %lld '%s'", ppid, parent);
	snprintf(buf, size, "%s %s %s %s%s in %.3f s%s%s%s%s; %s", safe(str(e, "time"), when, sizeof(when)),
		 safe(str(e, "front"), front, sizeof(front)), safe(str(e, "op"), op, sizeof(op)), outcome, status, s,
		 what, note[0] ? " (" : "", note, note[0] ? ")" : "", by);
}

static const char *proc_word(const char *outcome)
{
	static const char *const words[][2] = {
		{ "left", "left as it was" },       { "vanished", "exited before it was touched" },
		{ "rolled-back", "rolled back" },   { "lost", "LOST" },
		{ "unrestorable", "UNRESTORABLE" }, { "left-behind", "LEFT BEHIND" },
	};
	for (size_t i = 0; i < CS_ARRAY_SIZE(words); i++)
		if (strcmp(outcome, words[i][0]) == 0)
			return words[i][1];
	return NULL;
}

static void describe_proc(FILE *f, json_object *p)
{
	char comm[80], outcome[40];
	long long pid = num(p, "pid", 0), nspid = num(p, "nspid", 0), cu = num(p, "cu", 0);
	safe(str(p, "outcome"), outcome, sizeof(outcome));
	const char *w = proc_word(outcome);
	fprintf(f, "    ");
	if (pid > 0)
		fprintf(f, "%lld", pid);
	else
		fprintf(f, "-");
	fprintf(f, " (%s", safe(str(p, "comm"), comm, sizeof(comm)));
	if (nspid > 0 && nspid != pid)
		fprintf(f, ", %lld inside", nspid);
	fprintf(f, "): %s", w ? w : outcome);
	if (str(p, "code")) {
		char code[40];
		fprintf(f, " (%s)", safe(str(p, "code"), code, sizeof(code)));
	}
	unsigned long long bytes = (unsigned long long)num(p, "bytes", 0);
	if (bytes)
		fprintf(f, ", %.2f GiB", (double)bytes / (1024.0 * 1024 * 1024));
	json_object *secs = get(p, "seconds");
	if (is(secs, json_type_object)) {
		json_object_object_foreach(secs, k, v)
		{
			char key[24];
			fprintf(f, ", %s %.3f s", safe(k, key, sizeof(key)), json_object_get_double(v));
		}
	}
	if (str(p, "step")) {
		char step[24];
		fprintf(f, ", its %s failed", safe(str(p, "step"), step, sizeof(step)));
	}
	if (cu)
		fprintf(f, " (driver %lld)", cu);
	if (str(p, "why")) {
		char why[1200];
		fprintf(f, ": %s", safe(str(p, "why"), why, sizeof(why)));
	}
	if (str(p, "park_files")) {
		char where[400];
		fprintf(f, "; parked into %s", safe(str(p, "park_files"), where, sizeof(where)));
	}
	if (str(p, "recovery")) {
		char recovery[400];
		fprintf(f, "; recover with: %s", safe(str(p, "recovery"), recovery, sizeof(recovery)));
	}
	fprintf(f, "\n");
}

char *cs_history_describe(json_object *e)
{
	char *text = NULL;
	size_t size = 0;
	FILE *f = open_memstream(&text, &size);
	if (!f)
		return NULL;
	char head[2048];
	cs_history_headline(e, head, sizeof(head));
	fprintf(f, "%s\n", head);
	json_object *procs = get(e, "processes"), *err = get(e, "error");
	for (size_t i = 0; is(procs, json_type_array) && i < json_object_array_length(procs); i++)
		describe_proc(f, json_object_array_get_idx(procs, i));
	long long omitted = num(e, "processes_omitted", 0);
	if (omitted > 0)
		fprintf(f, "    and %lld more process%s\n", omitted, omitted == 1 ? "" : "es");
	if (is(err, json_type_object)) {
		char msg[1200];
		fprintf(f, "    error: %s\n", safe(str(err, "message"), msg, sizeof(msg)));
	}
	if (is(err, json_type_object) && str(err, "hint")) {
		char hint[1200];
		fprintf(f, "    hint: %s\n", safe(str(err, "hint"), hint, sizeof(hint)));
	}
	if (fclose(f) != 0) {
		free(text);
		return NULL;
	}
	return text;
}
