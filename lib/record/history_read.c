/* Reading the history of operations (lib/record/history.h): both files, bounded,
 * each line checked (lib/record/history_entry.c) before it is believed,
 * and which alerts no one has read. */
#include "history_carry.h"
#include "history_entry.h"
#include "history_file.h"
#include "json.h"
#include "history_read.h"
#include "proc.h"
#include "state.h"
#include "util.h"

#include <fcntl.h>
#include <limits.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/file.h>
#include <sys/stat.h>
#include <time.h>

void cs_history_log_free(cs_history_log *l)
{
	for (size_t i = 0; i < l->n; i++)
		json_object_put(l->e[i]);
	free(l->e);
	free(l->unread);
	memset(l, 0, sizeof(*l));
}

static void add_line(cs_history_log *l, const char *s, size_t len)
{
	if (len == 0)
		return;
	json_object *o = cs_history_parse_line(s, len);
	/* e holds pointers: sizeof(*l->e) is one pointer's size, as meant. */
	if (o && cs_grow(&l->e, &l->cap, l->n + 1, sizeof(*l->e)) == 0) // NOLINT(bugprone-sizeof-expression)
		l->e[l->n++] = o;
	else if (o)
		json_object_put(o);
	else
		l->skipped++;
}

void cs_history_read_text(const char *buf, size_t len, cs_history_log *l)
{
	for (size_t at = 0; at < len;) {
		const char *nl = memchr(buf + at, '\n', len - at);
		size_t end = nl ? (size_t)(nl - buf) : len;
		add_line(l, buf + at, end - at);
		at = end + 1;
	}
}

static int open_read(int statefd, const char **why)
{
	return cs_state_open_file(statefd, CS_HISTORY_NAME, O_RDONLY, 0, why);
}

/* The end of one file, at most CS_HISTORY_READ_MAX bytes of it, into l;
 * absent: nothing. fd: the file, opened already (-1: open name). */
static int read_file(int statefd, const char *name, int fd, cs_history_log *l, cs_error *err)
{
	const char *why = "";
	_cleanup_close_ int own = fd >= 0 ? -1 : cs_state_open_file(statefd, name, O_RDONLY, 0, &why);
	if (fd < 0 && own == -ENOENT)
		return 0;
	if (fd < 0 && own == -EINVAL)
		return cs_error_set(err, CS_ESTATE, "Remove it; cudasnap writes a regular file there.",
				    "%s/%s is not a regular file", cs_state_dir(), name);
	if (fd < 0 && own < 0)
		return cs_error_errno(err, CS_ESTATE, -own,
				      why[0] ? "Remove it; cudasnap writes a regular file of its own there." :
					       "Run it as root: the history is root's alone.",
				      "cannot read %s/%s%s%s%s", cs_state_dir(), name, why[0] ? " (" : "", why,
				      why[0] ? ")" : "");
	if (fd < 0)
		fd = own;
	l->found = true;
	size_t len;
	bool cut;
	_cleanup_free_ char *buf = cs_history_tail(fd, &len, &cut);
	if (!buf)
		return cs_error_errno(err, CS_ESTATE, errno, NULL, "cannot read %s/%s", cs_state_dir(), name);
	l->cut = l->cut || cut;
	cs_history_read_text(buf, len, l);
	return 0;
}

/* Both files of the state directory statefd, oldest entry first: the
 * current one opened first and held under the history's lock, shared, for
 * a moment at most, so that no writer rotates the files between the two
 * reads (without it, read anyway). */
static int read_both(int statefd, cs_history_log *out, cs_error *err)
{
	const char *why = "";
	_cleanup_close_ int cur = open_read(statefd, &why);
	if (cur < 0 && cur != -ENOENT)
		return read_file(statefd, CS_HISTORY_NAME, -1, out, err); /* says why */
	if (cur >= 0)
		cs_history_lock(statefd, &cur, LOCK_SH, open_read);
	int r = read_file(statefd, CS_HISTORY_OLD_NAME, -1, out, err);
	return r < 0 || cur < 0 ? r : read_file(statefd, CS_HISTORY_NAME, cur, out, err);
}

static int read_dir(cs_history_log *out, cs_error *err, int *statefd)
{
	cs_error e = { 0 };
	_cleanup_close_ int fd = cs_state_open_existing(&e);
	if (fd >= 0) {
		int r = read_both(fd, out, err);
		*statefd = TAKE_FD(fd);
		return r;
	}
	if (e.sys == ENOENT)
		return 0; /* no state directory: no history */
	*err = e;
	if (e.sys == EACCES)
		snprintf(err->hint, sizeof(err->hint), "Run it as root: the history is root's alone.");
	return -(e.status ? e.status : CS_ESTATE);
}

typedef struct dated {
	double t;
	size_t i;
} dated;

static int newest_first(const void *a, const void *b)
{
	const dated *x = a, *y = b;
	if (x->t != y->t)
		return x->t < y->t ? 1 : -1;
	return x->i < y->i ? 1 : x->i > y->i ? -1 : 0; /* the later line first */
}

/* Newest first by time: a rotation puts the alerts it carries before newer
 * entries of the older file. */
static int sort_newest_first(cs_history_log *l)
{
	if (l->n == 0)
		return 0;
	_cleanup_free_ dated *d = calloc(l->n + 1, sizeof(*d));
	_cleanup_free_ json_object **e = calloc(l->n + 1, sizeof(*e)); // NOLINT(bugprone-sizeof-expression)
	if (!d || !e)
		return -ENOMEM;
	for (size_t i = 0; i < l->n; i++)
		d[i] = (dated){ cs_history_time(l->e[i]), i };
	qsort(d, l->n, sizeof(*d), newest_first);
	for (size_t i = 0; i < l->n; i++)
		e[i] = l->e[d[i].i];
	memcpy(l->e, e, l->n * sizeof(*e)); // NOLINT(bugprone-sizeof-expression)
	return 0;
}

/* Which alerts no one has read. */
static int note_unread(int statefd, cs_history_log *l)
{
	l->unread = calloc(l->n + 1, sizeof(*l->unread));
	if (!l->unread)
		return -ENOMEM;
	_cleanup_free_ char *seen = NULL;
	ssize_t len = statefd >= 0 ? cs_state_read(statefd, CS_HISTORY_SEEN_NAME, 64u << 10, &seen, NULL) : 0;
	for (size_t i = 0; i < l->n; i++) {
		char key[64];
		cs_history_key(l->e[i], key, sizeof(key));
		l->unread[i] =
			cs_history_alert(l->e[i]) && !cs_history_seen_has(seen, len > 0 && seen ? (size_t)len : 0, key);
	}
	return 0;
}

int cs_history_read(int statefd, cs_history_log *out, cs_error *err)
{
	memset(out, 0, sizeof(*out));
	_cleanup_(cs_history_log_freep) cs_history_log l = { 0 };
	_cleanup_close_ int own = -1;
	int r = statefd >= 0 ? read_both(statefd, &l, err) : read_dir(&l, err, &own);
	if (r < 0)
		return r;
	if (sort_newest_first(&l) < 0 || note_unread(statefd >= 0 ? statefd : own, &l) < 0)
		return cs_error_set(err, CS_ESYS, NULL, "out of memory");
	*out = TAKE_STRUCT(l);
	return 0;
}
