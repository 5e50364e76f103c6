#include "archive.h"
#include "env.h"
#include "util.h"

#include <dlfcn.h>
#include <errno.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/types.h>

/* libarchive's stable ABI (archive.h, archive_entry.h of libarchive 3). */
struct archive;
struct archive_entry;
enum {
	ARCHIVE_EOF = 1,
	ARCHIVE_OK = 0,
	ARCHIVE_RETRY = -10,
	ARCHIVE_WARN = -20,
	ARCHIVE_FAILED = -25,
	ARCHIVE_FATAL = -30,
};
#define AE_IFMT 0170000u
#define AE_IFREG 0100000u

typedef int (*filter_fn)(struct archive *);

struct cs_archive {
	void *handle;
	char path[256];
	struct archive *(*read_new)(void);
	int (*support_format_tar)(struct archive *);
	int (*open_fd)(struct archive *, int, size_t);
	int (*next_header)(struct archive *, struct archive_entry **);
	ssize_t (*read_data)(struct archive *, void *, size_t);
	int (*data_skip)(struct archive *);
	const char *(*error_string)(struct archive *);
	int (*read_free)(struct archive *);
	const char *(*entry_pathname)(struct archive_entry *);
	mode_t (*entry_filetype)(struct archive_entry *);
	int64_t (*entry_size)(struct archive_entry *);
	int (*entry_size_is_set)(struct archive_entry *);
	const char *(*entry_hardlink)(struct archive_entry *);
	/* optional */
	const char *(*format_name)(struct archive *);
	int (*filter_count)(struct archive *);
	const char *(*filter_name)(struct archive *, int);
	filter_fn filters[6]; /* gzip, bzip2, xz, lzma, zstd, lz4: those present */
};

static const char *const filter_syms[] = {
	"archive_read_support_filter_gzip", "archive_read_support_filter_bzip2", "archive_read_support_filter_xz",
	"archive_read_support_filter_lzma", "archive_read_support_filter_zstd",  "archive_read_support_filter_lz4",
};
_Static_assert(CS_ARRAY_SIZE(filter_syms) == 6, "one slot per filter");

#define HINT_LIBARCHIVE \
	"Install libarchive (Debian, Ubuntu: apt install libarchive13; Fedora, RHEL: dnf install libarchive), " \
	"set CUDASNAP_LIBARCHIVE to its path if it lives elsewhere, or unpack the archive (tar -xf ARCHIVE -C DIR) " \
	"and run 'cudasnap inspect DIR'."

static int load_symbols(cs_archive *a, cs_error *err)
{
	struct {
		const char *name;
		void **slot;
		bool required;
	} syms[] = {
		{ "archive_read_new", (void **)&a->read_new, true },
		{ "archive_read_support_format_tar", (void **)&a->support_format_tar, true },
		{ "archive_read_open_fd", (void **)&a->open_fd, true },
		{ "archive_read_next_header", (void **)&a->next_header, true },
		{ "archive_read_data", (void **)&a->read_data, true },
		{ "archive_read_data_skip", (void **)&a->data_skip, true },
		{ "archive_error_string", (void **)&a->error_string, true },
		{ "archive_read_free", (void **)&a->read_free, true },
		{ "archive_entry_pathname", (void **)&a->entry_pathname, true },
		{ "archive_entry_filetype", (void **)&a->entry_filetype, true },
		{ "archive_entry_size", (void **)&a->entry_size, true },
		{ "archive_entry_size_is_set", (void **)&a->entry_size_is_set, true },
		{ "archive_entry_hardlink", (void **)&a->entry_hardlink, true },
		{ "archive_format_name", (void **)&a->format_name, false },
		{ "archive_filter_count", (void **)&a->filter_count, false },
		{ "archive_filter_name", (void **)&a->filter_name, false },
	};
	for (size_t i = 0; i < CS_ARRAY_SIZE(syms); i++) {
		*syms[i].slot = dlsym(a->handle, syms[i].name);
		if (!*syms[i].slot && syms[i].required)
			return cs_error_set(err, CS_EENV, HINT_LIBARCHIVE,
					    "%s has no function %s: not libarchive 3, which reading a checkpoint archive "
					    "needs",
					    a->path, syms[i].name);
	}
	for (size_t i = 0; i < CS_ARRAY_SIZE(filter_syms); i++)
		a->filters[i] = (filter_fn)dlsym(a->handle, filter_syms[i]);
	return 0;
}

int cs_archive_load(cs_archive **out, cs_error *err)
{
	*out = NULL;
	_cleanup_(cs_archive_freep) cs_archive *a = calloc(1, sizeof(*a));
	if (!a)
		return cs_error_set(err, CS_ESYS, NULL, "out of memory");
	const char *env = cs_env("CUDASNAP_LIBARCHIVE");
	snprintf(a->path, sizeof(a->path), "%s", env ? env : CS_LIBARCHIVE);
	a->handle = dlopen(a->path, RTLD_NOW | RTLD_LOCAL);
	if (!a->handle)
		/* cppcheck-suppress memleak ; a is a cleanup variable, which cppcheck does not model */
		return cs_error_set(err, CS_EENV, HINT_LIBARCHIVE,
				    "reading a checkpoint archive needs libarchive, which cannot be loaded: %s",
				    dlerror());
	int r = load_symbols(a, err);
	if (r < 0)
		return r;
	*out = TAKE_PTR(a);
	return 0;
}

void cs_archive_free(cs_archive *a)
{
	/* Not unloaded: the libraries libarchive loads may keep exit handlers. */
	free(a);
}

const char *cs_archive_name(const char *path)
{
	for (;;) {
		if (path[0] == '/')
			path++;
		else if (path[0] == '.' && path[1] == '/')
			path += 2;
		else
			return path;
	}
}

/* Registers the decompressors this libarchive runs itself: one that would
 * run an external program (libarchive built without its library answers
 * ARCHIVE_WARN) is left out, since cudasnap starts no program. */
static void add_filters(const cs_archive *a, struct archive *ar)
{
	for (size_t i = 0; i < CS_ARRAY_SIZE(a->filters); i++) {
		if (!a->filters[i])
			continue;
		struct archive *probe = a->read_new();
		int r = probe ? a->filters[i](probe) : ARCHIVE_FATAL;
		if (probe)
			a->read_free(probe);
		if (r == ARCHIVE_OK)
			a->filters[i](ar);
	}
}

static void note_info(const cs_archive *a, struct archive *ar, cs_archive_info *info)
{
	const char *f = a->format_name ? a->format_name(ar) : NULL;
	snprintf(info->format, sizeof(info->format), "%s", f ? f : "");
	info->filters[0] = '\0';
	int n = a->filter_count && a->filter_name ? a->filter_count(ar) : 0;
	size_t used = 0;
	/* Filter 0 is the outermost; the last is the file itself ("none"). */
	for (int i = 0; i < n && used < sizeof(info->filters); i++) {
		const char *name = a->filter_name(ar, i);
		if (name && strcmp(name, "none") != 0)
			used += (size_t)snprintf(info->filters + used, sizeof(info->filters) - used, "%s%s",
						 used ? "+" : "", name);
	}
}

static const char *errtext(const cs_archive *a, struct archive *ar)
{
	const char *s = a->error_string(ar);
	return s && *s ? s : "unknown libarchive error";
}

/* The member under the reader, read whole into m (at most m->max bytes). */
static int read_member(const cs_archive *a, struct archive *ar, struct archive_entry *e, const char *what,
		       cs_archive_member *m, cs_error *err)
{
	/* The header's size when it gives one (wanted() bounded it), else the
	 * most; one byte more shows a member longer than it says. */
	size_t cap = (a->entry_size_is_set(e) ? (size_t)a->entry_size(e) : m->max) + 1;
	_cleanup_free_ char *buf = malloc(cap + 1);
	if (!buf)
		return cs_error_set(err, CS_ESYS, NULL, "out of memory");
	size_t len = 0;
	for (int retries = 0;;) {
		ssize_t r = a->read_data(ar, buf + len, cap - len);
		/* A retry may be answered again: a few, never without end. A
		 * warning (a truncated member, say) comes back at every call. */
		if (r == ARCHIVE_RETRY && ++retries < 16)
			continue;
		if (r < 0)
			return cs_error_set(err, CS_EUSAGE, NULL, "%s: cannot read its member %s: %s", what, m->name,
					    errtext(a, ar));
		if (r == 0)
			break;
		len += (size_t)r;
		if (len == cap && len <= m->max) {
			/* longer than its header said: grow up to the most */
			size_t more = cap * 2 < m->max + 1 ? cap * 2 : m->max + 1;
			char *bigger = realloc(buf, more + 1);
			if (!bigger)
				return cs_error_set(err, CS_ESYS, NULL, "out of memory");
			buf = bigger;
			cap = more;
		}
		if (len > m->max)
			return cs_error_set(err, CS_EUSAGE, NULL,
					    "%s: its member %s is larger than the %zu bytes such a file has: this is not "
					    "a checkpoint cudasnap reads",
					    what, m->name, m->max);
	}
	buf[len] = '\0';
	free(m->data);
	m->data = TAKE_PTR(buf);
	m->len = len;
	m->found = true;
	return 0;
}

/* The wanted member a header names, or NULL. A wanted name that is not a
 * regular file's (a link, a directory) fails: a checkpoint has none such. */
static cs_archive_member *wanted(const cs_archive *a, struct archive_entry *e, const char *what, cs_archive_member *m,
				 size_t n, cs_error *err, int *rc)
{
	const char *raw = a->entry_pathname(e);
	*rc = 0;
	if (!raw)
		return NULL; /* a name not in this locale's charset: none of ours */
	const char *name = cs_archive_name(raw);
	for (size_t i = 0; i < n; i++) {
		if (strcmp(name, m[i].name) != 0)
			continue;
		if ((a->entry_filetype(e) & AE_IFMT) != AE_IFREG || a->entry_hardlink(e)) {
			*rc = cs_error_set(err, CS_EUSAGE, NULL,
					   "%s: its member %s is not a regular file: this is not a checkpoint cudasnap "
					   "reads",
					   what, m[i].name);
			return NULL;
		}
		if (a->entry_size_is_set(e) && (uint64_t)a->entry_size(e) > m[i].max) {
			*rc = cs_error_set(err, CS_EUSAGE, NULL,
					   "%s: its member %s has %lld bytes, more than the %zu such a file has: this is "
					   "not a checkpoint cudasnap reads",
					   what, m[i].name, (long long)a->entry_size(e), m[i].max);
			return NULL;
		}
		return &m[i];
	}
	return NULL;
}

static int next(const cs_archive *a, struct archive *ar, struct archive_entry **e)
{
	int r;
	for (int tries = 0; (r = a->next_header(ar, e)) == ARCHIVE_RETRY && tries < 16; tries++)
		;
	return r == ARCHIVE_WARN ? ARCHIVE_OK : r;
}

static int walk(const cs_archive *a, struct archive *ar, const char *what, cs_archive_member *m, size_t n,
		bool (*done)(void *ctx, const cs_archive_member *m, size_t n), void *ctx, cs_archive_info *info,
		cs_error *err)
{
	for (;;) {
		struct archive_entry *e = NULL;
		int r = next(a, ar, &e);
		if (r == ARCHIVE_EOF)
			return 0;
		if (r != ARCHIVE_OK)
			return info->members ?
				cs_error_set(err, CS_EUSAGE, NULL, "%s is corrupt or truncated after %zu members: %s",
					     what, info->members, errtext(a, ar)) :
				cs_error_set(err, CS_EUSAGE, NULL, "%s is not a tar archive (libarchive: %s)", what,
					     errtext(a, ar));
		if (++info->members > CS_ARCHIVE_MEMBERS_MAX)
			return cs_error_set(err, CS_EUSAGE, NULL,
					    "%s has more than %u members: this is not a checkpoint cudasnap reads",
					    what, CS_ARCHIVE_MEMBERS_MAX);
		if (info->members == 1)
			note_info(a, ar, info);
		int rc;
		cs_archive_member *w = wanted(a, e, what, m, n, err, &rc);
		if (rc < 0)
			return rc;
		if (!w) {
			/* Skipped unread: a file's offset moves on, a stream is read and dropped. */
			if (a->data_skip(ar) < ARCHIVE_WARN)
				return cs_error_set(err, CS_EUSAGE, NULL, "%s is corrupt or truncated: %s", what,
						    errtext(a, ar));
			continue;
		}
		rc = read_member(a, ar, e, what, w, err);
		if (rc < 0)
			return rc;
		if (done && done(ctx, m, n)) {
			info->stopped_early = true;
			return 0;
		}
	}
}

int cs_archive_read(cs_archive *a, int fd, const char *what, cs_archive_member *m, size_t n,
		    bool (*done)(void *ctx, const cs_archive_member *m, size_t n), void *ctx, cs_archive_info *info,
		    cs_error *err)
{
	*info = (cs_archive_info){ 0 };
	struct archive *ar = a->read_new();
	if (!ar)
		return cs_error_set(err, CS_ESYS, NULL, "out of memory");
	add_filters(a, ar);
	a->support_format_tar(ar);
	/* Opening reads the first block and recognizes the format, or not. */
	int r = a->open_fd(ar, fd, (size_t)64 << 10) == ARCHIVE_OK ?
		0 :
		cs_error_set(err, CS_EUSAGE, NULL, "%s is not a tar archive (libarchive: %s)", what, errtext(a, ar));
	if (r == 0)
		r = walk(a, ar, what, m, n, done, ctx, info, err);
	a->read_free(ar);
	return r;
}

void cs_archive_members_free(cs_archive_member *m, size_t n)
{
	for (size_t i = 0; i < n; i++) {
		free(m[i].data);
		m[i].data = NULL;
		m[i].found = false;
		m[i].len = 0;
	}
}
