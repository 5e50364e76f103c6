/* Checkpoint archives (a tar, plain or compressed, as Podman's --export and
 * the kubelet's checkpoint API write them) read through libarchive, loaded
 * with dlopen: the binary needs only glibc, and a machine without
 * libarchive still inspects image directories. Only the members asked for
 * are read, each bounded in size; every other member is skipped unread. */
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
	const char *name; /* as wanted: "checkpoint/inventory.img" */
	size_t max; /* the most bytes it may have */
	char *data; /* malloc'd, NUL-terminated; NULL until found */
	size_t len;
	bool found;
} cs_archive_member;

/* What the archive turned out to be. */
typedef struct cs_archive_info {
	char format[64]; /* libarchive's name of it: "GNU tar format", "POSIX pax interchange format" */
	char filters[64]; /* its compression: "gzip", "zstd", ... ("" when none) */
	size_t members; /* members read or skipped */
	bool stopped_early; /* done() said everything needed was read */
} cs_archive_info;

/* Reads the tar archive on fd (what names it in messages). A member's name
 * is compared with the wanted ones after cs_archive_name; one that matches is
 * read whole into its entry (a later member of the same name replaces it),
 * every other member is skipped. done (may be NULL) is asked after each
 * wanted member whether all that matters is read, which ends the reading.
 * Returns 0, or <0 with err filled: not a tar archive, corrupt or truncated,
 * a wanted member that is not a regular file or exceeds its max, more than
 * CS_ARCHIVE_MEMBERS_MAX members. Decompresses with gzip, bzip2, xz, lzma,
 * zstd and lz4 where this libarchive does so itself, never through an
 * external program. */
int cs_archive_read(cs_archive *a, int fd, const char *what, cs_archive_member *m, size_t n,
		    bool (*done)(void *ctx, const cs_archive_member *m, size_t n), void *ctx, cs_archive_info *info,
		    cs_error *err);
/* Frees what cs_archive_read read into m[0..n). */
void cs_archive_members_free(cs_archive_member *m, size_t n);

/* A member's path as compared: without leading "/" and "./" (tar writes
 * "./checkpoint/inventory.img" as well as "checkpoint/inventory.img").
 * Returns a pointer into path. */
const char *cs_archive_name(const char *path);

#endif
