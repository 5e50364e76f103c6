/* CUDA IPC seen from /proc. The driver shares device memory between
 * processes through files in /dev/shm: the exporter creates one, keeps it
 * open and maps it, and an importer maps it without holding it open. The
 * driver checkpoints an importer but can never restore it (measured on
 * driver 580: CUDA_ERROR_INVALID_VALUE at every restore), while the exporter
 * alone round-trips. A mapping is the process's own export when it holds a
 * descriptor of that very file: the device and inode of the maps line
 * against a stat of each /proc/PID/fd entry (names can repeat, a stale file
 * replaced under the same name, and an exporter may hold any number of
 * files). Only /proc is read here, never the driver. */
#include "proc.h"
#include "util.h"

#include <fcntl.h>
#include <limits.h>
#include <stdio.h>
#include <stdlib.h>
#include <sys/stat.h>
#include <sys/sysmacros.h>

/* A file, as a mapping's line and a stat of an fd both name it. */
typedef struct file_id {
	unsigned long major, minor;
	unsigned long long ino;
} file_id;

static int by_id(const void *a, const void *b)
{
	const file_id *x = a, *y = b;
	if (x->major != y->major)
		return x->major < y->major ? -1 : 1;
	if (x->minor != y->minor)
		return x->minor < y->minor ? -1 : 1;
	return (x->ino > y->ino) - (x->ino < y->ino);
}

/* The CUDA IPC files the process holds open, by identity, sorted: an
 * exporter holds one per interprocess event, and a process may hold any
 * number of descriptors, so this grows with what /proc shows. NULL and 0
 * when none; *failed when out of memory (then nothing is called an
 * import). */
static file_id *read_held(int pdir, size_t *n, bool *failed)
{
	*n = 0;
	*failed = false;
	size_t cap = 0;
	_cleanup_free_ file_id *v = NULL;
	_cleanup_closedir_ DIR *dir = cs_opendir_at(pdir, "fd");
	for (struct dirent *de; dir && (de = readdir(dir));) {
		char target[PATH_MAX];
		struct stat st;
		ssize_t len = readlinkat(dirfd(dir), de->d_name, target, sizeof(target) - 1);
		if (len <= 0 || !cs_path_is_cuda_ipc(target, (size_t)len) ||
		    fstatat(dirfd(dir), de->d_name, &st, 0) < 0)
			continue;
		if (cs_grow(&v, &cap, *n + 1, sizeof(*v)) < 0) {
			*failed = true;
			return NULL;
		}
		v[(*n)++] = (file_id){ .major = major(st.st_dev), .minor = minor(st.st_dev), .ino = st.st_ino };
	}
	if (*n > 1)
		qsort(v, *n, sizeof(*v), by_id);
	return TAKE_PTR(v);
}

void cs_proc_scan_ipc(int pdir, cs_proc *p)
{
	if (p->ipc_maps == 0)
		return;
	size_t n;
	bool failed;
	_cleanup_free_ file_id *held = read_held(pdir, &n, &failed);
	_cleanup_fclose_ FILE *f = failed ? NULL : cs_fopen_at(pdir, "maps");
	_cleanup_free_ char *line = NULL;
	size_t cap = 0;
	ssize_t len;
	while (f && !p->ipc_import[0] && (len = getline(&line, &cap, f)) > 0) {
		if (line[len - 1] == '\n')
			line[--len] = '\0';
		cs_map_entry m;
		if (cs_parse_maps_line(line, (size_t)len, &m) < 0 || !cs_path_is_cuda_ipc(m.path, m.path_len) ||
		    !m.has_id)
			continue;
		file_id id = { .major = m.dev_major, .minor = m.dev_minor, .ino = m.ino };
		if (!n || !bsearch(&id, held, n, sizeof(*held), by_id))
			cs_sanitize(p->ipc_import, sizeof(p->ipc_import), m.path, m.path_len);
	}
}
