/* Finding and reaching the control socket of a process that runs the
 * parking interposer (park/). Shared by cudasnap and the interposer (an
 * importer reaching its exporter); needs only libc. */
#ifndef CS_PARK_FIND_H
#define CS_PARK_FIND_H

#include <stdbool.h>
#include <stddef.h>
#include <sys/types.h>

/* Whether a mapped file's path (len bytes, not terminated) is the
 * interposer's library. */
bool park_find_is_lib(const char *path, size_t len);
/* Whether pid maps it (its /proc/PID/maps under proc). */
bool park_find_mapped(pid_t pid, const char *proc);
/* The path the process pid bound its control socket to (in its own mount
 * namespace), looked up among the process's own listening sockets under
 * proc (a /proc): 0, or -1 when it has none. */
int park_find_path(pid_t pid, const char *proc, char *path, size_t size);
/* A connection to it (send and receive bounded by timeout_ms), or -1. */
int park_find_connect(pid_t pid, const char *proc, int timeout_ms);
/* The same, to the path park_find_path gave. */
int park_find_connect_path(pid_t pid, const char *proc, const char *path, int timeout_ms);
/* Picks, from the text of a /proc/PID/net/unix, the path of the first
 * listening socket named like a control socket whose inode is one of
 * inodes[0..n); 0, or -1. Exposed for the fuzzer. */
int park_find_in_unix(const char *text, const unsigned long *inodes, size_t n, char *path, size_t size);

#endif
