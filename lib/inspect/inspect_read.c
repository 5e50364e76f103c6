/* Reading a checkpoint for 'cudasnap inspect': a directory of CRIU images
 * (or one holding them under checkpoint/), or a tar archive of them. The
 * same few files are read from either, each bounded: CRIU's inventory, the
 * plugin's record and the engine's metadata; nothing else is touched. */
#include "inspect.h"
#include "archive.h"
#include "proc.h"
#include "util.h"

#include <errno.h>
#include <fcntl.h>
#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#define CHECKPOINT_DIR "checkpoint/"

/* What is read, in this order in every member list. */
enum { M_INVENTORY, M_RECORD, M_SUB_INVENTORY, M_SUB_RECORD, M_CONFIG, M_SPEC, M_COUNT };

#define HINT_NOT_CHECKPOINT \
	"Point it at a CRIU images directory (criu dump -D DIR) or at a checkpoint archive (podman container " \
	"checkpoint --export=FILE, the kubelet's checkpoint-*.tar)."
#define HINT_DAMAGED "The GPU part of these images is damaged: they cannot be restored. Checkpoint the container again."

static void members_init(cs_archive_member *m)
{
	static const struct {
		const char *name;
		size_t max;
	} want[M_COUNT] = {
		[M_INVENTORY] = { "inventory.img", CS_INVENTORY_MAX },
		[M_RECORD] = { CS_PLUGIN_RECORD, CS_MANIFEST_MAX },
		[M_SUB_INVENTORY] = { CHECKPOINT_DIR "inventory.img", CS_INVENTORY_MAX },
		[M_SUB_RECORD] = { CHECKPOINT_DIR CS_PLUGIN_RECORD, CS_MANIFEST_MAX },
		[M_CONFIG] = { "config.dump", CS_CKPTMETA_MAX },
		[M_SPEC] = { "spec.dump", CS_CKPTMETA_MAX },
	};
	for (int i = 0; i < M_COUNT; i++)
		m[i] = (cs_archive_member){ .name = want[i].name, .max = want[i].max };
}

/* ---- a directory ------------------------------------------------------ */

/* One file of the directory, bounded as its member: absent is not an
 * error; a link (symbolic or hard), a non-regular file or one too large
 * is, as the same member of an archive would be. */
static int read_file(int dfd, const char *what, cs_archive_member *m, const char *name, cs_error *err)
{
	_cleanup_close_ int fd = openat(dfd, name, O_RDONLY | O_NOFOLLOW | O_NONBLOCK | O_CLOEXEC);
	if (fd < 0 && (errno == ENOENT || errno == ENOTDIR))
		return 0;
	if (fd < 0)
		return cs_error_errno(err, CS_EUSAGE, errno, NULL, "%s: cannot open %s%s", what, m->name,
				      errno == ELOOP ? " (a symbolic link, which a checkpoint does not hold)" : "");
	struct stat st;
	if (fstat(fd, &st) < 0 || !S_ISREG(st.st_mode))
		return cs_error_set(err, CS_EUSAGE, NULL, "%s: %s is not a regular file", what, m->name);
	/* An archive's hard link is refused: so is the directory's. */
	if (st.st_nlink != 1)
		return cs_error_set(err, CS_EUSAGE, NULL,
				    "%s: %s has %ju names (a hard link), which a checkpoint does not hold: this is not a "
				    "checkpoint cudasnap reads",
				    what, m->name, (uintmax_t)st.st_nlink);
	if ((unsigned long long)st.st_size > m->max)
		return cs_error_set(err, CS_EUSAGE, NULL,
				    "%s: %s has %lld bytes, more than the %zu such a file has: this is not a checkpoint "
				    "cudasnap reads",
				    what, m->name, (long long)st.st_size, m->max);
	_cleanup_free_ char *buf = malloc((size_t)st.st_size + 1);
	if (!buf)
		return cs_error_set(err, CS_ESYS, NULL, "out of memory");
	size_t len = 0;
	for (ssize_t r; len < (size_t)st.st_size; len += (size_t)r) {
		r = read(fd, buf + len, (size_t)st.st_size - len);
		if (r < 0 && errno == EINTR) {
			r = 0;
			continue;
		}
		if (r < 0)
			return cs_error_errno(err, CS_EUSAGE, errno, NULL, "%s: cannot read %s", what, m->name);
		if (r == 0)
			break; /* shrunk meanwhile: what is there */
	}
	buf[len] = '\0';
	m->data = TAKE_PTR(buf);
	m->len = len;
	m->found = true;
	return 0;
}

/* checkpoint/ of the directory, opened without following a link: an
 * archive whose "checkpoint" is a link is refused, and so is this. -1 with
 * *sub -1 when there is none. */
static int open_sub(int dfd, const char *what, int *sub, cs_error *err)
{
	*sub = openat(dfd, "checkpoint", O_RDONLY | O_DIRECTORY | O_NOFOLLOW | O_CLOEXEC);
	if (*sub >= 0 || errno == ENOENT)
		return 0;
	struct stat st;
	bool link = fstatat(dfd, "checkpoint", &st, AT_SYMLINK_NOFOLLOW) == 0 && S_ISLNK(st.st_mode);
	return cs_error_set(err, CS_EUSAGE, NULL,
			    "%s: its %s is %s, and the images' files lie below it: this is not a checkpoint cudasnap "
			    "reads",
			    what, CHECKPOINT_DIR, link ? "a symbolic link" : "not a directory");
}

static int read_directory(int dfd, const char *what, cs_archive_member *m, cs_error *err)
{
	_cleanup_close_ int sub = -1;
	int r = open_sub(dfd, what, &sub, err);
	for (int i = 0; r == 0 && i < M_COUNT; i++) {
		bool below = strncmp(m[i].name, CHECKPOINT_DIR, strlen(CHECKPOINT_DIR)) == 0;
		if (below && sub < 0)
			continue;
		r = read_file(below ? sub : dfd, what, &m[i], below ? m[i].name + strlen(CHECKPOINT_DIR) : m[i].name,
			      err);
	}
	return r;
}

/* ---- an archive ------------------------------------------------------- */

static int read_archive(int fd, const char *what, const cs_archive_bounds *b, cs_archive_member *m, cs_inspect *c,
			cs_error *err)
{
	_cleanup_(cs_archive_freep) cs_archive *a = NULL;
	int r = cs_archive_load(&a, err);
	if (r < 0)
		return r;
	cs_archive_info info;
	r = cs_archive_read_bounded(a, fd, what, m, M_COUNT, b, &info, err);
	c->archive = true;
	snprintf(c->format, sizeof(c->format), "%s", info.format);
	snprintf(c->filters, sizeof(c->filters), "%s", info.filters);
	snprintf(c->bound, sizeof(c->bound), "%s", info.bound);
	return r;
}

/* ---- what was read ---------------------------------------------------- */

static int digest(const char *what, cs_archive_member *m, cs_inspect *c, cs_error *err)
{
	/* An engine's layout first: images under checkpoint/ are the container's. */
	int inv = m[M_SUB_INVENTORY].found ? M_SUB_INVENTORY : m[M_INVENTORY].found ? M_INVENTORY : -1;
	if (inv < 0)
		return cs_error_set(err, CS_EUSAGE, HINT_NOT_CHECKPOINT,
				    "%s is not a checkpoint: it holds no CRIU inventory.img, at its top or under %s",
				    what, CHECKPOINT_DIR);
	int rec = inv == M_INVENTORY ? M_RECORD : M_SUB_RECORD;
	snprintf(c->images, sizeof(c->images), "%s", inv == M_INVENTORY ? "" : CHECKPOINT_DIR);
	if (cs_inventory_parse(m[inv].data, m[inv].len, &c->inventory) < 0)
		return cs_error_set(err, CS_EUSAGE, HINT_NOT_CHECKPOINT,
				    "%s is not a checkpoint: its %s is not CRIU's inventory image", what, m[inv].name);
	/* As the plugin's restore decides: a CRIU that lists no plugins (before
	 * 4.0) leaves it to the record. */
	c->gpu_part = cs_inventory_gpu_part(&c->inventory, CS_PLUGIN_NAME, m[rec].found);
	if (m[M_CONFIG].found)
		cs_ckpt_meta_config(m[M_CONFIG].data, m[M_CONFIG].len, &c->meta);
	if (m[M_SPEC].found)
		cs_ckpt_meta_spec(m[M_SPEC].data, m[M_SPEC].len, &c->meta);
	if (!c->gpu_part)
		return 0;
	if (!m[rec].found)
		return cs_error_set(err, CS_ESTATE, HINT_DAMAGED,
				    "%s: its inventory names cudasnap's CRIU plugin, but it holds no %s: CRIU's restore "
				    "fails at the plugin's start",
				    what, m[rec].name);
	char named[PATH_MAX + 64];
	snprintf(named, sizeof(named), "the record %s of %s", m[rec].name, what);
	return cs_manifest_parse_as(m[rec].data, m[rec].len, named, HINT_DAMAGED, &c->record, err);
}

/* ---- the files of parks into files ------------------------------------ */

static size_t park_files_of(const cs_manifest *m)
{
	size_t n = 0;
	for (size_t i = 0; i < m->n; i++)
		n += m->e[i].park_nfiles;
	return n;
}

/* Each one's name under the images ("checkpoint/cudasnap-gpumem.P.S.N"). */
static void park_file_name(const cs_inspect *c, size_t k, char *out, size_t size)
{
	for (size_t i = 0; i < c->record.n; k -= c->record.e[i++].park_nfiles)
		if (k < c->record.e[i].park_nfiles) {
			snprintf(out, size, "%s%s.%zu", c->images, c->record.e[i].park_name, k);
			return;
		}
	out[0] = 0;
}

static void park_sizes_in_directory(int dfd, cs_inspect *c)
{
	char name[PATH_MAX];
	for (size_t k = 0; k < c->npark; k++) {
		struct stat st;
		park_file_name(c, k, name, sizeof(name));
		bool ok = fstatat(dfd, name, &st, AT_SYMLINK_NOFOLLOW) == 0 && S_ISREG(st.st_mode) && st.st_nlink == 1;
		c->park_sizes[k] = ok ? (long long)st.st_size : -1;
	}
	c->park_checked = true;
}

/* A second reading of the archive, for the sizes of the files alone (their
 * data are skipped): a file, read again from its start; a pipe cannot be. */
static int park_sizes_in_archive(int fd, const char *what, const cs_archive_bounds *b, cs_inspect *c, cs_error *err)
{
	if (lseek(fd, 0, SEEK_SET) != 0)
		return 0;
	_cleanup_free_ cs_archive_member *m = calloc(c->npark, sizeof(*m));
	_cleanup_free_ char *names = calloc(c->npark, PATH_MAX);
	_cleanup_(cs_archive_freep) cs_archive *a = NULL;
	if (!m || !names)
		return cs_error_set(err, CS_ESYS, NULL, "out of memory");
	int r = cs_archive_load(&a, err);
	for (size_t k = 0; r == 0 && k < c->npark; k++) {
		park_file_name(c, k, names + k * PATH_MAX, PATH_MAX);
		m[k] = (cs_archive_member){ .name = names + k * PATH_MAX, .size_only = true };
	}
	cs_archive_info info;
	if (r == 0)
		r = cs_archive_read_bounded(a, fd, what, m, c->npark, b, &info, err);
	for (size_t k = 0; r == 0 && k < c->npark; k++)
		c->park_sizes[k] = m[k].found && m[k].len != SIZE_MAX ? (long long)m[k].len : -1;
	c->park_checked = r == 0;
	cs_archive_members_free(m, c->npark);
	return r;
}

static int park_sizes(int fd, bool dir, const char *what, const cs_archive_bounds *b, cs_inspect *c, cs_error *err)
{
	c->npark = c->gpu_part ? park_files_of(&c->record) : 0;
	if (c->npark == 0)
		return 0;
	c->park_sizes = calloc(c->npark, sizeof(*c->park_sizes));
	if (!c->park_sizes)
		return cs_error_set(err, CS_ESYS, NULL, "out of memory");
	if (dir)
		park_sizes_in_directory(fd, c);
	return dir ? 0 : park_sizes_in_archive(fd, what, b, c, err);
}

void cs_inspect_default_bounds(cs_archive_bounds *b)
{
	*b = (cs_archive_bounds){ .lim = { .max_bytes = CS_INSPECT_MAX_BYTES,
					   .max_ratio = CS_INSPECT_MAX_RATIO,
					   .ratio_after = CS_INSPECT_RATIO_AFTER },
				  .max_memory = CS_INSPECT_MAX_MEMORY,
				  .seconds = CS_INSPECT_SECONDS };
}

int cs_inspect_read(const char *path, const cs_archive_bounds *bounds, cs_inspect *out, cs_error *err)
{
	memset(out, 0, sizeof(*out));
	_cleanup_(cs_inspect_freep) cs_inspect c = { 0 };
	/* The path is the caller's bytes: shown, and named in messages, made safe. */
	cs_sanitize(c.path, sizeof(c.path), path, strlen(path));
	const char *what = c.path;
	cs_archive_bounds defaults;
	cs_inspect_default_bounds(&defaults);
	_cleanup_close_ int fd = open(path, O_RDONLY | O_NONBLOCK | O_CLOEXEC | O_NOCTTY);
	if (fd < 0)
		return cs_error_errno(err, CS_EUSAGE, errno, HINT_NOT_CHECKPOINT, "cannot open %s", what);
	struct stat st;
	if (fstat(fd, &st) < 0)
		return cs_error_errno(err, CS_EUSAGE, errno, NULL, "cannot read %s", what);
	if (!S_ISDIR(st.st_mode) && !S_ISREG(st.st_mode) && !S_ISFIFO(st.st_mode))
		return cs_error_set(err, CS_EUSAGE, HINT_NOT_CHECKPOINT,
				    "%s is neither a directory nor a file: not a checkpoint", what);
	/* Reads block from here on, as a pipe's must (the archive streams). */
	fcntl(fd, F_SETFL, fcntl(fd, F_GETFL) & ~O_NONBLOCK);
	cs_archive_member m[M_COUNT];
	members_init(m);
	int r = S_ISDIR(st.st_mode) ? read_directory(fd, what, m, err) :
				      read_archive(fd, what, bounds ? bounds : &defaults, m, &c, err);
	if (r == 0)
		r = digest(what, m, &c, err);
	cs_archive_members_free(m, M_COUNT);
	if (r == 0)
		r = park_sizes(fd, S_ISDIR(st.st_mode), what, bounds ? bounds : &defaults, &c, err);
	if (r < 0 && err && !err->hint[0] && err->status == CS_EUSAGE)
		snprintf(err->hint, sizeof(err->hint), "%s", HINT_NOT_CHECKPOINT);
	if (r < 0) {
		snprintf(out->path, sizeof(out->path), "%s", c.path);
		snprintf(out->bound, sizeof(out->bound), "%s", c.bound);
		return r;
	}
	*out = TAKE_STRUCT(c);
	return 0;
}

void cs_inspect_free(cs_inspect *c)
{
	cs_manifest_free(&c->record);
	free(c->park_sizes);
	memset(c, 0, sizeof(*c));
}
