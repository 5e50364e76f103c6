/* CUDA IPC seen from /proc. The driver shares device memory between
 * processes through files in /dev/shm: the exporter creates one, keeps it
 * open and maps it, and an importer maps it without holding it open. The
 * driver checkpoints an importer but can never restore it (measured on
 * driver 580: CUDA_ERROR_INVALID_VALUE at every restore), while the exporter
 * alone round-trips. Only /proc is read here, never the driver. */
#include "proc.h"
#include "util.h"

#include <fcntl.h>
#include <limits.h>
#include <stdio.h>

/* Files held open that are looked up; a process holds one or two. */
#define HELD_MAX 16

typedef struct held {
	char path[HELD_MAX][96];
	size_t n;
} held;

static void read_held(int pdir, held *h)
{
	_cleanup_closedir_ DIR *dir = cs_opendir_at(pdir, "fd");
	for (struct dirent *de; dir && h->n < HELD_MAX && (de = readdir(dir));) {
		char target[PATH_MAX];
		ssize_t n = readlinkat(dirfd(dir), de->d_name, target, sizeof(target) - 1);
		if (n > 0 && (size_t)n < sizeof(h->path[0]) && cs_path_is_cuda_ipc(target, (size_t)n)) {
			memcpy(h->path[h->n], target, (size_t)n);
			h->path[h->n++][n] = '\0';
		}
	}
}

static bool is_held(const held *h, const char *path, size_t len)
{
	for (size_t i = 0; i < h->n; i++)
		if (strlen(h->path[i]) == len && memcmp(h->path[i], path, len) == 0)
			return true;
	return false;
}

void cs_proc_scan_ipc(int pdir, cs_proc *p)
{
	if (p->ipc_maps == 0)
		return;
	held h = { .n = 0 };
	read_held(pdir, &h);
	_cleanup_fclose_ FILE *f = cs_fopen_at(pdir, "maps");
	_cleanup_free_ char *line = NULL;
	size_t cap = 0;
	ssize_t n;
	while (f && !p->ipc_import[0] && (n = getline(&line, &cap, f)) > 0) {
		if (line[n - 1] == '\n')
			line[--n] = '\0';
		cs_map_entry m;
		if (cs_parse_maps_line(line, (size_t)n, &m) == 0 && cs_path_is_cuda_ipc(m.path, m.path_len) &&
		    !is_held(&h, m.path, m.path_len))
			cs_sanitize(p->ipc_import, sizeof(p->ipc_import), m.path, m.path_len);
	}
}
