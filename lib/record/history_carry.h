/* What the history keeps across its rotation, and which of its alerts were
 * read (lib/record/history_carry.c). */
#ifndef CS_HISTORY_CARRY_H
#define CS_HISTORY_CARRY_H

#include "cudasnap.h"
#include "util.h"

#include <json-c/json.h>
#include <stdbool.h>
#include <stddef.h>

/* The most alerts, and bytes of them, a rotation carries into the new file. */
#define CS_HISTORY_CARRY_MAX 64
#define CS_HISTORY_CARRY_BYTES (256u << 10)

/* Under the lock, before a rotation: the lines of history.1.jsonl (the file
 * that goes) to carry into the new file, judged with the file that stays
 * too (history.jsonl, whose later entries may bring a process back):
 * malloc'd, *len bytes; NULL when none. */
char *cs_history_carry(int statefd, size_t *len);
/* Whether the seen file's text (len bytes) holds key. */
bool cs_history_seen_has(const char *text, size_t len, const char *key);
/* Notes that the alerts among e[0..n) were read (shown to a user, or to a
 * program): history.seen of the state directory statefd keeps their keys
 * (the newest 256). 0, or <0 when it cannot be written (nothing else
 * changes). */
int cs_history_mark_seen(int statefd, json_object *const *e, size_t n);

#endif
