/* The state directory: the manifest of the checkpointed processes, the lock
 * that serializes its updates, and the claims (claim.h) that keep two
 * operations off one process. */
#ifndef CS_STATE_H
#define CS_STATE_H

#include "cudasnap.h"

#include <stdbool.h>
#include <sys/types.h>

/* $CUDASNAP_STATE_DIR or /run/cudasnap. */
const char *cs_state_dir(void);
/* Creates the directory (0700) if needed and refuses one that is a symlink,
 * group- or world-writable, or owned by another user than root or us.
 * Returns an O_DIRECTORY fd or <0 with err filled. */
int cs_state_open(cs_error *err);
/* The same, but only when the directory exists already (nothing is created). */
int cs_state_open_existing(cs_error *err);
/* Opens the state file name of the state directory dirfd (flags: its
 * access mode and O_CREAT, O_APPEND, O_EXCL; O_NOFOLLOW, O_NONBLOCK and
 * O_CLOEXEC are added, so that neither a symbolic link nor a FIFO planted
 * there is followed or waited on) and checks, on the descriptor, that it is
 * a regular file with one name, owned by root or the caller: a state file
 * cudasnap writes, truncates or chmods must not be a hard link to a file
 * elsewhere, and one someone else made is not cudasnap's. Returns the fd,
 * or -errno with *why (may be NULL) set to what was refused, a few words
 * for a message ("it is a hard link, which is refused"), or to "" for a
 * failure of open(2) itself, and for -ESTALE: the file was removed since
 * it was opened (no name left), and may be opened again. */
int cs_state_open_file(int dirfd, const char *name, int flags, mode_t mode, const char **why);

/* Takes the exclusive lock of the manifest, waiting at most wait_s seconds
 * for its holder. On success returns the lock fd, which holds the lock
 * until closed. When another cudasnap keeps it longer, fails naming that
 * process and its command. */
int cs_state_lock(int dirfd, const char *command, double wait_s, cs_error *err);
/* flock(LOCK_EX | LOCK_NB) of fd: 0, or -errno (-EWOULDBLOCK when held). */
int cs_state_take_lock(int fd);
/* Writes "pid N, 'command'" into a lock file this process holds. */
void cs_state_write_owner(int fd, const char *command);
/* The pid holding an flock on fd's file, from /proc/locks; 0 when not
 * found (no /proc/locks, or a holder outside this PID namespace). */
pid_t cs_state_lock_holder(int fd);
/* Every pid /proc/locks names as holding an flock on fd's file (shared
 * locks have several), at most max; how many. A holder this namespace
 * cannot see is left out; in the initial PID namespace a locker that
 * exited is named by its old pid (a child it forked may keep the lock). */
size_t cs_state_lock_holders(int fd, pid_t *out, size_t max);
/* Names the holder of fd's flock: its command line (from /proc/locks),
 * else the owner line it wrote, else its pid or "unknown process". */
void cs_state_describe_holder(int fd, char *who, size_t size);
/* "pid N, 'prog args...'" from its command line (argv[0] without its
 * directory, cut short, control bytes replaced); false when that cannot
 * be read or is empty (a zombie). */
bool cs_state_describe_pid(pid_t pid, char *who, size_t size);
/* Writes data to name inside dirfd atomically (temp file, fsync, rename), mode 0600. */
int cs_state_write(int dirfd, const char *name, const char *data, size_t len, cs_error *err);
/* Reads the state file name (at most max bytes) into a malloc'd
 * NUL-terminated buffer, opened by cs_state_open_file. Returns its length;
 * 0 with *out NULL when the file is absent; -cs_status with err filled
 * otherwise. */
ssize_t cs_state_read(int dirfd, const char *name, size_t max, char **out, cs_error *err);
/* The same for a file of CRIU's images directory dirfd, which is no state
 * file (images travel between machines and owners): refused when it is a
 * symlink or not a regular file. */
ssize_t cs_images_read(int dirfd, const char *name, size_t max, char **out, cs_error *err);

#endif
