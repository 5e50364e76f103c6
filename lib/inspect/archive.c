#include "archive.h"
#include "env.h"
#include "proc.h"
#include "util.h"

#include <dlfcn.h>
#include <errno.h>
#include <limits.h>
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
#define AE_IFDIR 0040000u

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
	int (*read_data_block)(struct archive *, const void **, size_t *, int64_t *);
	int64_t (*filter_bytes)(struct archive *, int);
	int (*errno_of)(struct archive *);
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
		{ "archive_read_data_block", (void **)&a->read_data_block, true },
		{ "archive_filter_bytes", (void **)&a->filter_bytes, true },
		{ "archive_errno", (void **)&a->errno_of, true },
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

int cs_archive_name(const char *path, char *out, size_t size)
{
	size_t used = 0;
	out[0] = '\0';
	for (const char *p = path; *p;) {
		size_t len = strcspn(p, "/");
		if (len == 2 && p[0] == '.' && p[1] == '.')
			return -EINVAL;
		if (len > 0 && !(len == 1 && p[0] == '.')) {
			if (used + (used > 0) + len + 1 > size)
				return -ENAMETOOLONG;
			if (used > 0)
				out[used++] = '/';
			memcpy(out + used, p, len);
			used += len;
			out[used] = '\0';
		}
		p += len + (p[len] == '/');
	}
	return 0;
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

static const char *errtext(const cs_archive *a, struct archive *ar, char *buf, size_t size)
{
	const char *s = a->error_string(ar);
	if (!s || !*s)
		s = "unknown libarchive error";
	/* It may quote a member's name: bytes of the archive's. */
	cs_sanitize(buf, size, s, strlen(s));
	return buf;
}

/* One reading: the archive, what is wanted of it, and its bounds. */
typedef struct reader {
	const cs_archive *a;
	struct archive *ar;
	const char *what;
	cs_archive_member *m;
	size_t n;
	bool *seen; /* n: the wanted members met so far */
	const cs_archive_limits *lim;
	cs_archive_info *info;
	cs_error *err;
	bool compressed;
} reader;

/* A failure of libarchive's: out of memory (the bound a child reading it
 * has) is named as that bound. */
static int lib_failed(reader *r, const char *doing)
{
	char text[512];
	errtext(r->a, r->ar, text, sizeof(text));
	if (r->a->errno_of(r->ar) == ENOMEM) {
		snprintf(r->info->bound, sizeof(r->info->bound), "memory");
		return cs_error_set(r->err, CS_EUSAGE, NULL,
				    "%s: reading it needs more memory than cudasnap gives it (libarchive: %s): this is "
				    "not a checkpoint cudasnap reads",
				    r->what, text);
	}
	return r->info->members > 0 ?
		cs_error_set(r->err, CS_EUSAGE, NULL, "%s is corrupt or truncated%s: %s", r->what, doing, text) :
		cs_error_set(r->err, CS_EUSAGE, NULL, "%s is not a tar archive (libarchive: %s)", r->what, text);
}

/* The work done so far against the bounds. */
static int check_bounds(reader *r)
{
	int64_t out = r->a->filter_bytes(r->ar, 0), in = r->a->filter_bytes(r->ar, -1);
	cs_archive_info *info = r->info;
	info->bytes = out > 0 ? (unsigned long long)out : 0;
	info->compressed = in > 0 ? (unsigned long long)in : 0;
	const cs_archive_limits *lim = r->lim;
	if (!lim)
		return 0;
	if (lim->max_bytes && info->bytes > lim->max_bytes) {
		snprintf(info->bound, sizeof(info->bound), "bytes");
		return cs_error_set(r->err, CS_EUSAGE,
				    "An archive of a checkpoint this large is read with a higher --max-bytes (0: no "
				    "bound).",
				    "%s: reading it decompressed more than the %llu bytes inspect decompresses (bound: "
				    "--max-bytes %llu): it is not read further",
				    r->what, lim->max_bytes, lim->max_bytes);
	}
	if (lim->max_ratio && r->compressed && info->bytes > lim->ratio_after &&
	    info->bytes / (info->compressed ? info->compressed : 1) > lim->max_ratio) {
		snprintf(info->bound, sizeof(info->bound), "ratio");
		return cs_error_set(r->err, CS_EUSAGE,
				    "A decompression bomb looks like this. An archive of yours that holds that much "
				    "zeroed memory is read with a higher --max-ratio (0: no bound).",
				    "%s: %llu bytes of it decompress into %llu, more than %u times as many (bound: "
				    "--max-ratio %u): it is not read further",
				    r->what, info->compressed, info->bytes, lim->max_ratio, lim->max_ratio);
	}
	return 0;
}

/* The member under the reader, read whole into m (at most m->max bytes). */
static int read_member(reader *r, struct archive_entry *e, cs_archive_member *m)
{
	const cs_archive *a = r->a;
	/* The header's size when it gives one (classify() bounded it), else
	 * the most; one byte more shows a member longer than it says. */
	size_t cap = (a->entry_size_is_set(e) ? (size_t)a->entry_size(e) : m->max) + 1;
	_cleanup_free_ char *buf = malloc(cap + 1);
	if (!buf)
		return cs_error_set(r->err, CS_ESYS, NULL, "out of memory");
	size_t len = 0;
	for (int retries = 0;;) {
		ssize_t got = a->read_data(r->ar, buf + len, cap - len);
		/* A retry may be answered again: a few, never without end. A
		 * warning (a truncated member, say) comes back at every call. */
		if (got == ARCHIVE_RETRY && ++retries < 16)
			continue;
		if (got < 0)
			return lib_failed(r, " in a member it reads");
		if (got == 0)
			break;
		len += (size_t)got;
		if (len == cap && len <= m->max) {
			/* longer than its header said: grow up to the most */
			size_t more = cap * 2 < m->max + 1 ? cap * 2 : m->max + 1;
			char *bigger = realloc(buf, more + 1);
			if (!bigger)
				return cs_error_set(r->err, CS_ESYS, NULL, "out of memory");
			buf = bigger;
			cap = more;
		}
		if (len > m->max)
			return cs_error_set(r->err, CS_EUSAGE, NULL,
					    "%s: its member %s is larger than the %zu bytes such a file has: this is not "
					    "a checkpoint cudasnap reads",
					    r->what, m->name, m->max);
		int rc = check_bounds(r);
		if (rc < 0)
			return rc;
	}
	buf[len] = '\0';
	m->data = TAKE_PTR(buf);
	m->len = len;
	m->found = true;
	return 0;
}

/* A member not wanted: a plain tar's is seeked over; a compressed one's is
 * decompressed a block at a time, within the bounds. */
static int skip_member(reader *r)
{
	if (!r->compressed)
		return r->a->data_skip(r->ar) < ARCHIVE_WARN ? lib_failed(r, "") : 0;
	for (;;) {
		const void *block;
		size_t size;
		int64_t offset;
		int got = r->a->read_data_block(r->ar, &block, &size, &offset);
		if (got == ARCHIVE_EOF)
			return 0;
		if (got < ARCHIVE_WARN)
			return lib_failed(r, "");
		int rc = check_bounds(r);
		if (rc < 0)
			return rc;
	}
}

static int refuse(reader *r, const char *raw, const char *why)
{
	char name[256];
	cs_sanitize(name, sizeof(name), raw, strlen(raw));
	return cs_error_set(r->err, CS_EUSAGE, NULL, "%s: its member %s %s: this is not a checkpoint cudasnap reads",
			    r->what, name, why);
}

/* What a header is to the reading: the wanted member it names (NULL none),
 * or a refusal (*rc < 0). */
static cs_archive_member *classify(reader *r, struct archive_entry *e, int *rc)
{
	const cs_archive *a = r->a;
	const char *raw = a->entry_pathname(e);
	char name[PATH_MAX];
	*rc = 0;
	if (!raw)
		return NULL; /* a name not in this locale's charset: none of ours */
	int k = cs_archive_name(raw, name, sizeof(name));
	if (k == -EINVAL) {
		*rc = refuse(r, raw, "has a \"..\" component, which extractors refuse or resolve elsewhere");
		return NULL;
	}
	if (k < 0)
		return NULL; /* longer than any path: none of ours */
	bool dir = (a->entry_filetype(e) & AE_IFMT) == AE_IFDIR && !a->entry_hardlink(e);
	size_t len = strlen(name);
	for (size_t i = 0; i < r->n; i++) {
		const char *want = r->m[i].name;
		/* "checkpoint" as a link or a file: the images would be extracted elsewhere */
		if (!dir && len > 0 && strncmp(want, name, len) == 0 && want[len] == '/') {
			*rc = refuse(r, raw, "is not a directory, and the images' files lie below it");
			return NULL;
		}
		if (strcmp(name, want) != 0)
			continue;
		if (r->seen[i]) {
			char why[256];
			snprintf(why, sizeof(why),
				 "is a second copy of %s: tar and Podman extract the last copy over the first, so what "
				 "a restore uses is ambiguous",
				 want);
			*rc = refuse(r, raw, why);
			return NULL;
		}
		r->seen[i] = true;
		if ((a->entry_filetype(e) & AE_IFMT) != AE_IFREG || a->entry_hardlink(e)) {
			*rc = refuse(r, raw, "is not a regular file");
			return NULL;
		}
		if (!r->m[i].size_only && a->entry_size_is_set(e) && (uint64_t)a->entry_size(e) > r->m[i].max) {
			*rc = cs_error_set(r->err, CS_EUSAGE, NULL,
					   "%s: its member %s has %lld bytes, more than the %zu such a file has: this is "
					   "not a checkpoint cudasnap reads",
					   r->what, want, (long long)a->entry_size(e), r->m[i].max);
			return NULL;
		}
		return &r->m[i];
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

/* A compressed archive: one filter besides the file itself ("none"). */
static bool compressed(const cs_archive *a, struct archive *ar)
{
	return !a->filter_count || a->filter_count(ar) > 1;
}

static int walk(reader *r)
{
	for (;;) {
		struct archive_entry *e = NULL;
		int got = next(r->a, r->ar, &e);
		if (got == ARCHIVE_EOF)
			return check_bounds(r);
		if (got != ARCHIVE_OK) {
			char doing[64];
			snprintf(doing, sizeof(doing), " after %zu members", r->info->members);
			return lib_failed(r, doing);
		}
		if (++r->info->members > CS_ARCHIVE_MEMBERS_MAX) {
			snprintf(r->info->bound, sizeof(r->info->bound), "members");
			return cs_error_set(r->err, CS_EUSAGE, NULL,
					    "%s has more than %u members: this is not a checkpoint cudasnap reads",
					    r->what, CS_ARCHIVE_MEMBERS_MAX);
		}
		if (r->info->members == 1) {
			note_info(r->a, r->ar, r->info);
			r->compressed = compressed(r->a, r->ar);
		}
		int rc;
		cs_archive_member *w = classify(r, e, &rc);
		if (rc == 0 && w && w->size_only) {
			w->found = true;
			w->len = r->a->entry_size_is_set(e) ? (size_t)r->a->entry_size(e) : SIZE_MAX;
			w = NULL; /* its data are skipped */
		}
		if (rc == 0)
			rc = w ? read_member(r, e, w) : skip_member(r);
		if (rc == 0)
			rc = check_bounds(r);
		if (rc < 0)
			return rc;
	}
}

int cs_archive_read(cs_archive *a, int fd, const char *what, cs_archive_member *m, size_t n,
		    const cs_archive_limits *lim, cs_archive_info *info, cs_error *err)
{
	*info = (cs_archive_info){ 0 };
	_cleanup_free_ bool *seen = calloc(n ? n : 1, sizeof(*seen));
	struct archive *ar = seen ? a->read_new() : NULL;
	if (!ar)
		/* cppcheck-suppress memleak ; seen is a cleanup variable, which cppcheck does not model */
		return cs_error_set(err, CS_ESYS, NULL, "out of memory");
	reader r = {
		.a = a, .ar = ar, .what = what, .m = m, .n = n, .seen = seen, .lim = lim, .info = info, .err = err
	};
	add_filters(a, ar);
	a->support_format_tar(ar);
	/* Opening reads the first block and recognizes the format, or not. */
	int rc = a->open_fd(ar, fd, (size_t)64 << 10) == ARCHIVE_OK ? 0 : lib_failed(&r, "");
	if (rc == 0)
		rc = walk(&r);
	a->read_free(ar);
	return rc;
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
