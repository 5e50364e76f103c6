/* The restore's GPU memory, from CRIU's side: refused at init, before any
 * process exists, where the GPUs lack room for the record's processes; and
 * after a GPU restore that failed, the restored processes killed (unless
 * the settings file says CUDASNAP_KEEP_FAILED_RESTORE=1), so that CRIU fails
 * the restore and no engine believes it succeeded. */
#ifndef CS_CRIU_RESTORE_ROOM_H
#define CS_CRIU_RESTORE_ROOM_H

#include <stdbool.h>

/* 0 to go on, -1 (logged) to fail the restore. */
int restore_room_check(void);
/* After a GPU restore that failed for why: kills the restored processes
 * CRIU handed over and the tree's root, or keeps them as the settings say;
 * seized: CRIU still traces them (RESUME_DEVICES_LATE), and this process,
 * CRIU's, waits for what it killed. */
void restore_give_up(const char *why, bool seized);

#endif
