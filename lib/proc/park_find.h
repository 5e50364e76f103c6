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
/* The text of file (a /proc file), malloc'd and NUL-terminated, cut at
 * about max bytes; NULL when it cannot be opened or memory cannot be had. */
char *park_find_read_text(const char *file, size_t max);
/* The path the process pid bound its control socket to (in its own mount
 * namespace), looked up among the process's own listening sockets under
 * proc (a /proc): 0, or -1 when it has none. */
int park_find_path(pid_t pid, const char *proc, char *path, size_t size);
/* A connection to it (send and receive bounded by timeout_ms), or -1. The
 * path is resolved inside the process's root (proc/PID/root) without
 * following any symbolic link, and the connection is kept only when the
 * process listening at its other end is pid itself (SO_PEERCRED, in this
 * process's PID namespace), under one of pid's uids: the process names
 * the path, and could name another's socket (a confused deputy). */
int park_find_connect(pid_t pid, const char *proc, int timeout_ms);
/* The same, to the path park_find_path gave. */
int park_find_connect_path(pid_t pid, const char *proc, const char *path, int timeout_ms);
/* Whether the listener at the other end of the connected socket conn is
 * the process pid (as this process's PID namespace names it), running as
 * one of the uids proc/PID/status gives it. */
bool park_find_listener_is(int conn, pid_t pid, const char *proc);

/* The interposer's key: PARK_KEY_LEN random bytes, after PARK_KEY_MAGIC,
 * in the one message queued in a unix socket (SOCK_SEQPACKET) it keeps
 * open, whose descriptor a memfd named PARK_KEY_NAME gives ("fd=N"). Park,
 * unpark, commit and status must carry it. It is taken with pidfd_getfd,
 * which takes ptrace attach access to the process (root with
 * CAP_SYS_PTRACE over its user namespace, or its own user while it is
 * dumpable and, under Yama, an ancestor), as reading or writing its memory
 * does: the key lets its device memory be read and written. Read access
 * (/proc/PID/fd) is not enough: a socket is not opened again there. 0 with
 * key filled, or -errno (EPERM or EACCES: no attach access; ENOSYS: a
 * kernel before 5.6, without pidfd_getfd; ENOENT: no key). */
#define PARK_KEY_LEN 32
#define PARK_KEY_NAME "cudasnap-park-key"
#define PARK_KEY_MAGIC "CSPKEY1\n"
int park_find_key(pid_t pid, const char *proc, unsigned char key[PARK_KEY_LEN]);
/* Whether pid's interposer started its control socket: it holds its key
 * from then on (and not when it runs with CUDASNAP_PARK=0, has backed no
 * memory yet, or could not listen). Such a process must answer there. */
bool park_find_started(pid_t pid, const char *proc);
/* Picks, from the text of a /proc/PID/net/unix, the path of the first
 * listening socket named like a control socket whose inode is one of
 * inodes[0..n); 0, or -1. Exposed for the fuzzer. */
int park_find_in_unix(const char *text, const unsigned long *inodes, size_t n, char *path, size_t size);

/* A VMM export's mark: the interposer of the exporting process takes a read
 * lock of one byte at PARK_TAG_BASE + serial on the exported descriptor
 * (F_OFD_SETLK: the lock belongs to the open file description, which a
 * descriptor passed on shares). The serial a /proc/PID/fdinfo/FD text's
 * lock lines carry, 0 when none does. Exposed for the fuzzer. */
#define PARK_TAG_BASE 0x4353000000000000ULL
#define PARK_TAG_MASK 0xffff000000000000ULL
/* Where the exporter tests that a claimed descriptor is its export's
 * (vmm_export.c): another range, so that a probe is never read as a mark. */
#define PARK_PROBE_BASE 0x4350000000000000ULL
unsigned long long park_tag_in_fdinfo(const char *text);

/* The start time (field 22) in LEN bytes of a /proc/.../stat line, 0 when
 * they hold none (cut, odd). Async-signal-safe: no allocation, no locale. */
unsigned long long park_stat_start(const char *text, size_t len);

/* A message of len bytes over conn and, when fd >= 0, a descriptor with it
 * (SCM_RIGHTS), sent with MSG_NOSIGNAL | flags: 0 or -1. Both ends use it:
 * cudasnap passes files to the interposer, and interposed processes pass
 * each other their memory. */
int park_send_fd(int conn, const void *msg, size_t len, int fd, int flags);

/* A park into files (cudasnap checkpoint --park-to): cudasnap makes n files
 * (at most PARK_FILES_MAX) and passes them to the interposer, which writes
 * the process's parked memory into them and reads it back at the unpark.
 * The memory, all allocations one after the other, is cut into pieces of
 * PARK_PIECE bytes (the last one shorter); piece k goes to file k % n at
 * offset (k / n) * PARK_PIECE. So each file is written and read by
 * PARK_LANES threads of its own, taking its pieces in turn, and its size
 * follows from the bytes alone. */
#define PARK_FILES_MAX 8
#define PARK_PIECE (32ull << 20)
/* Two threads for each file: one's MAC and copy to or from the device
 * overlap the other's file I/O. On an H200 with a tmpfs, one thread per
 * file unparked at 12.4-12.7 GB/s, two at 17.6-18.4 GB/s, beside a read
 * ceiling of 16.8 GB/s (docs/performance.md). cudasnap counts the staging
 * of every lane (cs_park_files_staging); the interposer is built with
 * -DPARK_LANES=1 for the comparison. */
#ifndef PARK_LANES
#define PARK_LANES 2
#endif
/* The pinned staging buffer each lane holds in the process while a park
 * of total bytes goes into files, and while it comes back. */
static inline unsigned long long park_files_stage(unsigned long long total)
{
	return total < PARK_PIECE ? (total + 4095) / 4096 * 4096 : PARK_PIECE;
}
/* How many pieces total bytes make. */
static inline unsigned long long park_pieces(unsigned long long total)
{
	return (total + PARK_PIECE - 1) / PARK_PIECE;
}
static inline unsigned long long park_file_size(unsigned long long total, unsigned n, unsigned f)
{
	unsigned long long pieces = park_pieces(total);
	if (n == 0 || f >= n || pieces <= f)
		return 0;
	unsigned long long count = (pieces - 1 - f) / n + 1, size = count * PARK_PIECE;
	if ((pieces - 1) % n == f)
		size -= pieces * PARK_PIECE - total; /* the last piece, shorter */
	return size;
}
/* Whether a file of size bytes can be file f of n of a park of total
 * bytes: exactly its part. The one rule of every check of a park's files:
 * cudasnap's before it hands them over (and of the set --park-from names),
 * and the interposer's before it reads them. */
static inline bool park_file_fits(unsigned long long size, unsigned long long total, unsigned n, unsigned f)
{
	return f < n && size == park_file_size(total, n, f);
}

#endif
