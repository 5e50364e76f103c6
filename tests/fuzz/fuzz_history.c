/* The history of operations read back (lib/record/history_read.c) over arbitrary
 * bytes, exactly the input: every line is an entry that the checks accept
 * or a skipped one, none is lost or counted twice; what is described of an
 * entry is printable UTF-8, one header line and then indented lines; and
 * the writer's round trip: an entry accepted, rebuilt with the writer's
 * fixed fields (where long text is cut, maybe inside a UTF-8 sequence) and
 * rendered, is one line the reader accepts again, with its processes. */
#include "fuzz.h"
#include "history.h"
#include "json.h"
#include "utf8check.h"

static const char *str(json_object *o, const char *key)
{
	json_object *v = NULL;
	return json_object_object_get_ex(o, key, &v) && json_object_is_type(v, json_type_string) ?
		       json_object_get_string(v) :
		       "";
}

static long long num(json_object *o, const char *key)
{
	json_object *v = NULL;
	return json_object_object_get_ex(o, key, &v) && json_object_is_type(v, json_type_int) ? json_object_get_int64(v) :
												  0;
}

static void check_description(json_object *e)
{
	char *text = cs_history_describe(e);
	FUZZ_CHECK(text != NULL);
	size_t len = strlen(text);
	FUZZ_CHECK(len > 0 && text[len - 1] == '\n');
	bool first = true;
	for (char *line = text, *nl; *line; line = nl + 1) {
		nl = strchr(line, '\n');
		FUZZ_CHECK(nl != NULL);
		FUZZ_CHECK(cs_check_utf8(line, (size_t)(nl - line), false));
		FUZZ_CHECK(first || strncmp(line, "    ", 4) == 0);
		first = false;
	}
	free(text);
}

static int outcome_of(const char *name)
{
	for (int o = 0; o < CS_HIST_COUNT; o++)
		if (strcmp(cs_hist_outcome_name(o), name) == 0)
			return o;
	return CS_HIST_FAILED;
}

static void round_trip(json_object *e)
{
	_cleanup_(cs_history_freep) cs_history h = { 0 };
	cs_history_begin(&h, str(e, "front"), str(e, "op"));
	json_object *procs = NULL, *caller = NULL;
	json_object_object_get_ex(e, "processes", &procs);
	if (json_object_object_get_ex(e, "caller", &caller))
		snprintf(h.cmdline, sizeof(h.cmdline), "%s", str(caller, "cmdline"));
	snprintf(h.note, sizeof(h.note), "%s", str(e, "note"));
	size_t n = json_object_array_length(procs);
	for (size_t i = 0; i < n; i++) {
		json_object *p = json_object_array_get_idx(procs, i);
		cs_history_proc *x = cs_history_proc_of(&h, 0, str(p, "comm"));
		FUZZ_CHECK(x != NULL);
		x->pid = (pid_t)num(p, "pid");
		x->nspid = (pid_t)num(p, "nspid");
		x->outcome = outcome_of(str(p, "outcome"));
		x->bytes = (unsigned long long)num(p, "bytes");
		snprintf(x->code, sizeof(x->code), "%s", str(p, "code"));
		snprintf(x->why, sizeof(x->why), "%s", str(p, "why"));
		snprintf(x->recovery, sizeof(x->recovery), "%s", str(p, "recovery"));
	}
	cs_error err = { .status = CS_EPROC };
	snprintf(err.message, sizeof(err.message), "%s", str(e, "outcome"));
	cs_history_finish(&h, str(e, "outcome"), (int)num(e, "exit_status"), &err);
	char *line = cs_history_render(&h);
	FUZZ_CHECK(line != NULL);
	size_t len = strlen(line);
	FUZZ_CHECK(len > 0 && line[len - 1] == '\n' && memchr(line, '\n', len - 1) == NULL);
	json_object *back = cs_history_parse_line(line, len - 1);
	if (!back)
		fprintf(stderr, "not read back: %s", line);
	FUZZ_CHECK(back != NULL);
	json_object *bp = NULL;
	json_object_object_get_ex(back, "processes", &bp);
	size_t kept = json_object_array_length(bp) + (size_t)num(back, "processes_omitted");
	FUZZ_CHECK(kept == n);
	json_object_put(back);
	free(line);
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
	char *buf = fuzz_copy(data, size, 0);
	cs_history_log l = { 0 };
	cs_history_read_text(buf, size, &l);
	size_t lines = 0;
	for (size_t at = 0; at < size;) {
		const char *nl = memchr(buf + at, '\n', size - at);
		size_t end = nl ? (size_t)(nl - buf) : size;
		lines += end > at;
		at = end + 1;
	}
	FUZZ_CHECK(l.n + l.skipped == lines);
	for (size_t i = 0; i < l.n; i++) {
		FUZZ_CHECK(cs_history_time(l.e[i]) >= 0);
		check_description(l.e[i]);
		char head[512];
		cs_history_headline(l.e[i], head, sizeof(head));
		FUZZ_CHECK(strchr(head, '\n') == NULL);
		(void)cs_history_failed(l.e[i]);
		round_trip(l.e[i]);
	}
	cs_history_log_free(&l);
	free(buf);
	return 0;
}
