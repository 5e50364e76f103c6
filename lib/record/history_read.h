/* Reading the history (lib/record/history.h). */
#ifndef CS_HISTORY_READ_H
#define CS_HISTORY_READ_H

#include "cudasnap.h"
#include "util.h"

#include <json-c/json.h>
#include <stdbool.h>
#include <stddef.h>

/* The entries of the history, newest first: the stored objects. */
typedef struct cs_history_log {
	json_object **e;
	bool *unread; /* e[i] is an alert no one has read (history.seen lacks it) */
	size_t n, cap;
	size_t skipped; /* lines that are not well-formed entries (corrupt, truncated, too long) */
	bool cut; /* a file was longer than CS_HISTORY_READ_MAX: only its end was read */
	bool found; /* a history file exists */
} cs_history_log;

void cs_history_log_free(cs_history_log *l);
CS_DEFINE_CLEANUP_STRUCT(cs_history_log, cs_history_log_free)

/* Reads both files of the state directory's history (statefd < 0: opens
 * it; none is no history, not an error), newest first by their time (the
 * alerts a rotation carried lie among newer entries), and which alerts are
 * unread. Fills err and returns <0 when a file exists but cannot be read
 * (permissions, not a regular file, a link). */
int cs_history_read(int statefd, cs_history_log *out, cs_error *err);
/* Reads one file's text (len bytes, untrusted) into l, oldest first. */
void cs_history_read_text(const char *buf, size_t len, cs_history_log *l);

#endif
