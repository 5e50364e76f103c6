/* One entry of the history as stored (lib/record/history.h): one JSON
 * object per line, checked before it is believed, and what it says. */
#ifndef CS_HISTORY_ENTRY_H
#define CS_HISTORY_ENTRY_H

#include "cudasnap.h"
#include "util.h"

#include <json-c/json.h>
#include <stdbool.h>
#include <stddef.h>

/* The longest line written or read; an entry with more processes than fit
 * keeps the first ones and says how many it left out. */
#define CS_HISTORY_LINE_MAX (256u << 10)
/* The version of the entries written ("v"). */
#define CS_HISTORY_VERSION 1

/* One line (without its newline): the entry, or NULL when it is not a
 * well-formed one of a version this reader knows. */
json_object *cs_history_parse_line(const char *line, size_t len);
/* The entry's time as seconds since the epoch, -1 when it has none that
 * reads (the parser checked it). */
double cs_history_time(json_object *e);
/* Whether the entry is a failure: its outcome is not "done", or a process
 * of it was lost, left behind or cannot be restored. */
bool cs_history_failed(json_object *e);

/* The human lines of an entry: a header line, then one per process (and
 * the error), each starting with four spaces; control bytes of the stored
 * text shown as '?'. malloc'd, each line ending in a newline; NULL when out
 * of memory. */
char *cs_history_describe(json_object *e);
/* The header line alone (no newline), into buf. */
void cs_history_headline(json_object *e, char *buf, size_t size);
/* Whether the entry is an alert: a process of it LOST, UNRESTORABLE or LEFT
 * BEHIND. */
bool cs_history_alert(json_object *e);
/* The key that names the entry in history.seen: its time and its caller's pid. */
void cs_history_key(json_object *e, char *buf, size_t size);

/* What the readers of entries share: a member's text or integer (none when
 * it is absent or of another type), the processes (NULL: none), whether a
 * process's outcome is what. */
const char *cs_history_str(json_object *o, const char *key);
long long cs_history_int(json_object *o, const char *key, long long none);
json_object *cs_history_procs(json_object *e);
bool cs_history_outcome_is(json_object *p, const char *what);

#endif
