/* What the plugin did, kept where a container engine does not delete it:
 * one entry of the history of operations (lib/history.h) per criu dump or
 * restore that met GPU processes (front "criu-dump", "criu-restore"), and
 * one line to syslog (ident "cudasnap", LOG_DAEMON), which reaches the
 * journal. containerd deletes CRIU's work directory, dump.log with it,
 * after a checkpoint that succeeded.
 *
 * The entry is built in CRIU's process across the hooks: the processes the
 * plugin met, what each session run in a helper said of each (the rule of
 * lib/session_history.c, carried back in task_outcome), the refusals, and
 * the first error line of the plugin's log. A dump writes it into the state
 * directory it opened at its first CUDA process, and no other (a dump that
 * met none reaches syslog alone); a restore of images the plugin recorded
 * opens the state directory its session uses. Nothing here fails CRIU: an
 * entry that cannot be written is one warning in CRIU's log. syslog(3)
 * starts no thread, and the socket it opens is closed again before the hook
 * returns (closelog). */
#ifndef CS_CRIU_OPLOG_H
#define CS_CRIU_OPLOG_H

#include "history.h"
#include "session.h"

/* At init: the operation begins (its time, CRIU's pid and command line,
 * its parent's). Touches no file. */
void oplog_begin(int stage);
/* The operation met the GPU: a process that maps the driver or NVML, or
 * holds device files (dump), or images the plugin recorded (restore).
 * Without it, oplog_end records nothing. */
void oplog_gpu(void);
/* The first error line of the plugin's log (host.c's plog) becomes the
 * operation's error. */
void oplog_error(const char *line);
/* The operation's own summary of its failure, which wins over that line. */
void oplog_fail(const char *message);
/* The entry of a process the plugin met (pid as CRIU names it; 0 for a
 * record's process not yet created); NULL when out of memory or not begun. */
cs_history_proc *oplog_proc(pid_t pid, pid_t nspid, const char *comm);
/* The entry of the k-th process of the restore's record (added in the
 * record's order by oplog_record). */
void oplog_record(const cs_manifest *m);
cs_history_proc *oplog_entry(size_t k);
/* A process refused: its code and why. */
void oplog_refused(pid_t pid, const char *comm, const char *code, const char *why);
/* What a session said of each of its processes. back: the session returned
 * the processes to their state before the dump (a failed dump's way back):
 * one it brought back is rolled back, not done. */
void oplog_session(const run_outcome *o, bool back);
/* A note on the operation ("criu dump succeeded; the tree killed"). */
void oplog_note(const char *fmt, ...) __attribute__((format(printf, 1, 2)));
/* The operation ended with CRIU's ret: the entry is finished, written
 * (statefd: the state directory, -1 to open it when create, else none),
 * and said to syslog. Once; later calls do nothing. */
void oplog_end(int ret, int statefd, bool create);

#endif
