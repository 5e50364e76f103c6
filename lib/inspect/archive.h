/* Checkpoint archives (a tar, plain or compressed, as Podman's --export and
 * the kubelet's checkpoint API write them) read through libarchive, loaded
 * with dlopen: the binary needs only glibc, and a machine without
 * libarchive still inspects image directories. Only the members asked for
 * are kept, each bounded in size; every other member is skipped, and the
 * work of decompressing is bounded too. */
#ifndef CS_ARCHIVE_H
#define CS_ARCHIVE_H

#include "cudasnap.h"
#include "util.h"

#include <stdbool.h>
#include <stddef.h>

/* The library's soname, the default of CUDASNAP_LIBARCHIVE. */
#define CS_LIBARCHIVE "libarchive.so.13"
/* More members than a checkpoint has (CRIU writes a few per process). */
#define CS_ARCHIVE_MEMBERS_MAX (1u << 20)

typedef struct cs_archive cs_archive;

/* Loads libarchive ($CUDASNAP_LIBARCHIVE, else libarchive.so.13). Returns 0,
 * or -CS_EENV with err filled (what to install, or to unpack the archive and
 * inspect the directory) when it cannot be loaded or lacks a function used
 * here. */
int cs_archive_load(cs_archive **out, cs_error *err);
void cs_archive_free(cs_archive *a);
CS_DEFINE_CLEANUP(cs_archive, cs_archive_free)

/* A member the caller wants, and what was read of it. */
typedef struct cs_archive_member {
	const char *name; /* as wanted, normalized: "checkpoint/inventory.img" */
	size_t max; /* the most bytes it may have */
	/* only whether it is there and its size (len; SIZE_MAX when its header
	 * gives none) are wanted: its data are skipped, max does not apply */
	bool size_only;
	char *data; /* malloc'd, NUL-terminated; NULL until found */
	size_t len;
	bool found;
} cs_archive_member;

/* The bounds on the work one reading may do: decompressing is the one
 * thing a small hostile archive can make cost without end. */
typedef struct cs_archive_limits {
	unsigned long long max_bytes; /* decompressed bytes in all; 0: none */
	unsigned max_ratio; /* decompressed bytes per compressed byte; 0: none */
	unsigned long long ratio_after; /* the ratio is judged once this many bytes are decompressed */
} cs_archive_limits;

/* What the archive turned out to be. */
typedef struct cs_archive_info {
	char format[64]; /* libarchive's name of it: "GNU tar format", "POSIX pax interchange format" */
	char filters[64]; /* its compression: "gzip", "zstd", ... ("" when none) */
	size_t members; /* members read or skipped */
	unsigned long long bytes; /* decompressed bytes read */
	unsigned long long compressed; /* bytes of the file read */
	char bound[16]; /* the bound the reading stopped at ("bytes", "ratio", "members", "memory"), "" none */
} cs_archive_info;

/* Reads the whole tar archive on fd (what names it in messages, already
 * safe to print), as an extractor would: each member's name normalized by
 * cs_archive_name, a wanted member read whole into its entry, every other
 * member skipped (seeked over in a plain tar, decompressed and dropped in a
 * compressed one, within lim). Since tar, Podman and the kubelet extract
 * the last copy of a member over the first, inspect must judge the copy a
 * restore uses, so what makes that ambiguous fails: a wanted member met
 * twice (under any name that normalizes to it: "checkpoint//x",
 * "checkpoint/./x"), a member whose name has a ".." component, and a
 * member that is not a directory where a wanted member's directory lies
 * (a link "checkpoint"). Returns 0, or <0 with err filled: not a tar
 * archive, corrupt or truncated, one of the above, a wanted member that is
 * not a regular file or exceeds its max, more than CS_ARCHIVE_MEMBERS_MAX
 * members, a bound of lim passed (info->bound names it), or out of memory
 * (info->bound "memory"). Decompresses with gzip, bzip2, xz, lzma, zstd
 * and lz4 where this libarchive does so itself, never through an external
 * program. lim may be NULL: no bounds but the members'. */
int cs_archive_read(cs_archive *a, int fd, const char *what, cs_archive_member *m, size_t n,
		    const cs_archive_limits *lim, cs_archive_info *info, cs_error *err);
/* Frees what cs_archive_read read into m[0..n). */
void cs_archive_members_free(cs_archive_member *m, size_t n);

/* The same in a child process that may grow its address space by at most
 * max_memory bytes (RLIMIT_AS) and must be done within seconds, so that
 * no archive costs this process more than its members' bounds; a child
 * that passes either is killed, and the reading fails naming the bound
 * (info->bound "memory" or "time"). */
typedef struct cs_archive_bounds {
	cs_archive_limits lim;
	unsigned long long max_memory;
	double seconds;
} cs_archive_bounds;
int cs_archive_read_bounded(cs_archive *a, int fd, const char *what, cs_archive_member *m, size_t n,
			    const cs_archive_bounds *b, cs_archive_info *info, cs_error *err);

/* A member's path as extractors resolve it, into out: repeated slashes,
 * "." components, a leading "/" and a trailing "/" dropped ("./checkpoint//
 * ./inventory.img" is "checkpoint/inventory.img"; "." and "/" are ""). 0,
 * -EINVAL when a component is ".." (extractors refuse it or resolve it
 * elsewhere), -ENAMETOOLONG when it does not fit in size. */
int cs_archive_name(const char *path, char *out, size_t size);

#endif
