/* What the history keeps across its rotation (lib/record/history.h): an entry that
 * says a process was LOST, cannot be restored, or was LEFT BEHIND is the
 * one a reader must not miss, and a few large operations fill the files.
 * Such an entry (an alert) is carried from the file a rotation deletes into
 * the new one until it is read (`cudasnap history` showed it, or `doctor`
 * named it: its key is then in history.seen) or, for a process left
 * behind, resolved (the process is gone, or a later entry brought it
 * back); the newest CS_HISTORY_CARRY_MAX of them, within
 * CS_HISTORY_CARRY_BYTES. */
#include "history_carry.h"
#include "history_entry.h"
#include "history_file.h"
#include "json.h"
#include "proc.h"
#include "state.h"
#include "util.h"

#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>

/* The seen file: one key per line, the newest last; at most this many. */
#define SEEN_MAX 256
#define SEEN_FILE_MAX (64u << 10)

/* ---- the seen file -------------------------------------------------------- */

typedef struct seen_set {
	char *text; /* the file's lines, each a key */
	size_t len;
} seen_set;

static void seen_read(int statefd, seen_set *s)
{
	*s = (seen_set){ 0 };
	ssize_t len = cs_state_read(statefd, CS_HISTORY_SEEN_NAME, SEEN_FILE_MAX, &s->text, NULL);
	s->len = len > 0 && s->text ? (size_t)len : 0;
}

bool cs_history_seen_has(const char *text, size_t len, const char *key)
{
	size_t k = strlen(key);
	for (const char *p = text, *end = text ? text + len : NULL; p && p < end;) {
		const char *nl = memchr(p, '\n', (size_t)(end - p));
		size_t n = nl ? (size_t)(nl - p) : (size_t)(end - p);
		if (n == k && memcmp(p, key, k) == 0)
			return true;
		p += n + 1;
	}
	return false;
}

int cs_history_mark_seen(int statefd, json_object *const *e, size_t n)
{
	seen_set s;
	seen_read(statefd, &s);
	_cleanup_free_ char *old = s.text;
	/* The older keys first, the new ones after, the newest SEEN_MAX kept. */
	char *keys[SEEN_MAX * 2];
	size_t nkeys = 0;
	_cleanup_free_ char *copy = old ? strndup(old, s.len) : NULL;
	for (char *save = NULL, *k = copy ? strtok_r(copy, "\n", &save) : NULL; k && nkeys < SEEN_MAX;
	     k = strtok_r(NULL, "\n", &save))
		keys[nkeys++] = k;
	char fresh[SEEN_MAX][64];
	size_t nfresh = 0;
	for (size_t i = 0; i < n && nfresh < SEEN_MAX; i++) {
		if (!cs_history_alert(e[i]))
			continue;
		cs_history_key(e[i], fresh[nfresh], sizeof(fresh[0]));
		if (!cs_history_seen_has(old, s.len, fresh[nfresh]))
			keys[nkeys++] = fresh[nfresh++];
	}
	if (!nfresh)
		return 0;
	_cleanup_free_ char *text = NULL;
	size_t size = 0;
	FILE *f = open_memstream(&text, &size);
	if (!f)
		return -ENOMEM;
	for (size_t i = nkeys > SEEN_MAX ? nkeys - SEEN_MAX : 0; i < nkeys; i++)
		fprintf(f, "%s\n", keys[i]);
	if (fclose(f) != 0)
		return -ENOMEM;
	return cs_state_write(statefd, CS_HISTORY_SEEN_NAME, text, size, NULL) < 0 ? -EIO : 0;
}

/* ---- carrying ------------------------------------------------------------- */

/* One well-formed line of a file, with its entry. */
typedef struct line {
	const char *text;
	size_t len;
	json_object *e;
} line;

typedef struct lines {
	line *v;
	size_t n, cap;
} lines;

static void lines_free(lines *l)
{
	for (size_t i = 0; i < l->n; i++)
		json_object_put(l->v[i].e);
	free(l->v);
	*l = (lines){ 0 };
}
CS_DEFINE_CLEANUP_STRUCT(lines, lines_free)

static void split(const char *buf, size_t len, lines *out)
{
	for (size_t at = 0; at < len;) {
		const char *nl = memchr(buf + at, '\n', len - at);
		size_t end = nl ? (size_t)(nl - buf) : len;
		json_object *e = end > at ? cs_history_parse_line(buf + at, end - at) : NULL;
		if (e && cs_grow(&out->v, &out->cap, out->n + 1, sizeof(*out->v)) == 0)
			out->v[out->n++] = (line){ buf + at, end - at, e };
		else
			json_object_put(e);
		at = end + 1;
	}
}

/* A process an entry says was done, and when: what may bring back one left
 * behind. */
typedef struct done {
	long long pid, start;
	double t;
} done;

/* What a rotation judges with: the file that goes, and (read once a
 * process left behind is still there) the processes both files say were
 * done, by pid. */
typedef struct judge {
	int statefd;
	const lines *old;
	seen_set seen;
	bool indexed;
	done *d;
	size_t n, cap;
} judge;

static void add_done(judge *j, const lines *l)
{
	for (size_t i = 0; i < l->n; i++) {
		json_object *a = cs_history_procs(l->v[i].e);
		double t = cs_history_time(l->v[i].e);
		for (size_t k = 0; a && k < json_object_array_length(a); k++) {
			json_object *q = json_object_array_get_idx(a, k);
			if (cs_history_outcome_is(q, "done") && cs_grow(&j->d, &j->cap, j->n + 1, sizeof(*j->d)) == 0)
				j->d[j->n++] =
					(done){ cs_history_int(q, "pid", 0), cs_history_int(q, "start_time", 0), t };
		}
	}
}

static int by_pid(const void *a, const void *b)
{
	long long x = ((const done *)a)->pid, y = ((const done *)b)->pid;
	return (x > y) - (x < y);
}

/* The index, made at its first use: the file that stays is read then,
 * through a descriptor of its own (the writer's is write-only), by name,
 * which the history's lock keeps in place. */
static void index_done(judge *j)
{
	j->indexed = true;
	add_done(j, j->old);
	const char *why;
	_cleanup_close_ int fd = cs_state_open_file(j->statefd, CS_HISTORY_NAME, O_RDONLY, 0, &why);
	size_t len;
	bool cut;
	_cleanup_free_ char *text = fd >= 0 ? cs_history_tail(fd, &len, &cut) : NULL;
	_cleanup_(lines_freep) lines cur = { 0 };
	if (text)
		split(text, len, &cur);
	add_done(j, &cur);
	if (j->n)
		qsort(j->d, j->n, sizeof(*j->d), by_pid);
}

/* Whether process p (left behind in an entry of time t) came back in a
 * later entry of either file: the same pid (and start time, where both
 * say) done. */
static bool brought_back(judge *j, json_object *p, double t)
{
	if (!j->indexed)
		index_done(j);
	long long pid = cs_history_int(p, "pid", 0), start = cs_history_int(p, "start_time", 0);
	size_t lo = 0, hi = j->n;
	while (lo < hi) {
		size_t mid = lo + (hi - lo) / 2;
		if (j->d[mid].pid < pid)
			lo = mid + 1;
		else
			hi = mid;
	}
	for (size_t i = lo; i < j->n && j->d[i].pid == pid; i++)
		if (j->d[i].t > t && (!start || !j->d[i].start || j->d[i].start == start))
			return true;
	return false;
}

/* Whether the process a left-behind entry names is gone: by its start time
 * where recorded, else by its pid. */
static bool gone(json_object *p)
{
	long long pid = cs_history_int(p, "pid", 0), start = cs_history_int(p, "start_time", 0);
	if (pid <= 0)
		return true;
	if (start > 0)
		return !cs_proc_alive(cs_proc_dir(), (pid_t)pid, (unsigned long long)start);
	char path[64];
	struct stat st;
	snprintf(path, sizeof(path), "%s/%lld", cs_proc_dir(), pid);
	return stat(path, &st) < 0;
}

/* Whether entry e of the file that goes is carried: an alert not read, with
 * a process that is not resolved. */
static bool carried(json_object *e, judge *j)
{
	char key[64];
	cs_history_key(e, key, sizeof(key));
	if (!cs_history_alert(e) || cs_history_seen_has(j->seen.text, j->seen.len, key))
		return false;
	json_object *a = cs_history_procs(e);
	double t = cs_history_time(e);
	for (size_t i = 0; a && i < json_object_array_length(a); i++) {
		json_object *p = json_object_array_get_idx(a, i);
		if (cs_history_outcome_is(p, "lost") || cs_history_outcome_is(p, "unrestorable"))
			return true;
		if (cs_history_outcome_is(p, "left-behind") && !gone(p) && !brought_back(j, p, t))
			return true;
	}
	return false;
}

char *cs_history_carry(int statefd, size_t *len)
{
	*len = 0;
	const char *why;
	_cleanup_close_ int oldfd = cs_state_open_file(statefd, CS_HISTORY_OLD_NAME, O_RDONLY, 0, &why);
	size_t oldlen;
	bool cut;
	_cleanup_free_ char *oldtext = oldfd >= 0 ? cs_history_tail(oldfd, &oldlen, &cut) : NULL;
	if (!oldtext)
		return NULL;
	_cleanup_(lines_freep) lines old = { 0 };
	split(oldtext, oldlen, &old);
	judge j = { .statefd = statefd, .old = &old };
	seen_read(statefd, &j.seen);
	/* cppcheck-suppress unreadVariable ; they own what j points to, freed by their cleanup */
	_cleanup_free_ __attribute__((unused)) char *seen_text = j.seen.text;
	/* The newest first, within the bounds; written back oldest first. */
	_cleanup_free_ bool *keep = calloc(old.n + 1, sizeof(*keep));
	size_t n = 0, bytes = 0;
	for (size_t i = old.n; keep && i-- > 0 && n < CS_HISTORY_CARRY_MAX;)
		if (old.v[i].len + 1 + bytes <= CS_HISTORY_CARRY_BYTES && carried(old.v[i].e, &j)) {
			keep[i] = true;
			bytes += old.v[i].len + 1;
			n++;
		}
	free(j.d);
	char *out = n ? malloc(bytes + 1) : NULL;
	for (size_t i = 0; out && i < old.n; i++)
		if (keep[i]) {
			memcpy(out + *len, old.v[i].text, old.v[i].len);
			*len += old.v[i].len;
			out[(*len)++] = '\n';
		}
	if (out)
		out[*len] = '\0';
	return out;
}
