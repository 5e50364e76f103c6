/* The files of the history in the state directory and their lock
 * (lib/record/history.h says how they are used). */
#ifndef CS_HISTORY_FILE_H
#define CS_HISTORY_FILE_H

#include "history_entry.h"

#include <stdbool.h>
#include <stddef.h>

#define CS_HISTORY_NAME "history.jsonl"
#define CS_HISTORY_OLD_NAME "history.1.jsonl"
/* history.jsonl is rotated before an entry would take it past this. */
#define CS_HISTORY_ROTATE (1u << 20)
/* How long a writer or a reader waits for the history's lock. */
#define CS_HISTORY_LOCK_WAIT_S 0.25
/* The keys of the alerts read (cs_history_mark_seen). */
#define CS_HISTORY_SEEN_NAME "history.seen"
/* What is read of each file, at most: its end. */
#define CS_HISTORY_READ_MAX (CS_HISTORY_ROTATE + CS_HISTORY_LINE_MAX)

/* The current file, opened for appending: a state file (cs_state_open_file:
 * no link, one name, root's or the caller's), mode 0600. An fd or -errno. */
int cs_history_open_current(int statefd, const char **why);
/* Takes the history's lock (op: LOCK_EX or LOCK_SH) on *fd, history.jsonl
 * opened by reopen, within CS_HISTORY_LOCK_WAIT_S; when a rotation renamed
 * the file meanwhile, *fd becomes the new one (reopen) and its lock is
 * taken. Whether it is held. */
bool cs_history_lock(int statefd, int *fd, int op, int (*reopen)(int statefd, const char **why));
/* The end of the regular file fd, at most CS_HISTORY_READ_MAX bytes of it
 * from a line's start (*cut: the file was longer), malloc'd and ended with
 * a NUL, *len bytes; NULL with errno when it cannot be read. */
char *cs_history_tail(int fd, size_t *len, bool *cut);

#endif
