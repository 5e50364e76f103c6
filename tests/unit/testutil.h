/* Scratch directories laid out like /proc and /dev for the unit tests. */
#ifndef CS_TESTUTIL_H
#define CS_TESTUTIL_H

#include <stddef.h>
#include <sys/types.h>

/* A fresh directory under $TMPDIR (or /tmp), resolved with realpath so that
 * symlink targets built from it compare equal to what readlink returns. */
char *tu_mkdtemp(void);
void tu_rmrf(const char *dir);

/* dir/rel; parent directories of rel are created as needed. */
char *tu_path(const char *dir, const char *rel);
void tu_mkdirs(const char *dir, const char *rel);
void tu_write(const char *dir, const char *rel, const void *data, size_t len);
void tu_write_str(const char *dir, const char *rel, const char *s);
void tu_symlink(const char *target, const char *dir, const char *rel);

/* A stat line in the kernel's format, with every field up to 52. */
char *tu_stat_line(pid_t pid, const char *comm, char state, pid_t ppid, unsigned long long start);

/* procdir/PID/{stat,maps,fd/}; maps may be NULL for "no maps file". */
void tu_fake_proc(const char *procdir, pid_t pid, pid_t ppid, const char *comm,
		  unsigned long long start, const char *maps);
/* procdir/PID/fd/FD -> target */
void tu_fake_fd(const char *procdir, pid_t pid, int fd, const char *target);

/* Device files nvidia0, nvidiactl, nvidia-uvm under a fresh dev dir. */
char *tu_fake_devdir(void);

/* A maps line mapping path (or an anonymous one when path is NULL). */
char *tu_maps_line(unsigned long start, unsigned long end, const char *path);

/* Memory of exactly len bytes with no terminator, so that the sanitizers
 * catch a parser that reads past the length it was given. */
char *tu_exact(const char *s, size_t len);

#endif
