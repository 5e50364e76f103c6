#include "procinfo.h"

#include <dirent.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

int fc_proc_tgid(int pid, int *own, int *local)
{
	char path[64], line[256];
	int nstgid = -1, tgid = -1;
	snprintf(path, sizeof(path), "/proc/%d/status", pid);
	FILE *f = fopen(path, "re");
	if (f == NULL)
		return -1;
	while (fgets(line, sizeof(line), f)) {
		if (strncmp(line, "Tgid:", 5) == 0)
			tgid = atoi(line + 5);
		if (strncmp(line, "NStgid:", 7) != 0)
			continue;
		char *last = strrchr(line, '\t');
		nstgid = last ? atoi(last + 1) : -1;
	}
	fclose(f);
	/* kernels without NStgid have no nested namespaces to tell apart */
	*own = nstgid > 0 ? nstgid : tgid;
	*local = tgid;
	return *own > 0 && *local > 0 ? 0 : -1;
}

/* "/memfd:fakecuda-devmem:<uuid> (deleted)" -> uuid */
static int devmem_gpu(const char *target, char *uuid, size_t len)
{
	static const char prefix[] = "/memfd:" FC_DEVMEM_NAME ":";
	size_t n = strlen(prefix);
	if (strncmp(target, prefix, n) != 0)
		return -1;
	const char *end = strchr(target + n, ' ');
	size_t ulen = end ? (size_t)(end - target - n) : strlen(target + n);
	if (ulen == 0 || ulen >= len)
		return -1;
	memcpy(uuid, target + n, ulen);
	uuid[ulen] = '\0';
	return 0;
}

/* One fd of the process: its device memory or not. stat through the
 * /proc link reaches the memfd itself, and its size is the memory's. Both
 * relative to the fd directory, so that the kernel does not look the
 * process up again for every fd: a scan of every process (NVML, a restore)
 * reads thousands of these. */
static int check_fd(int fddir, const char *name, struct fc_devmem_info *out)
{
	char target[256];
	struct stat st;
	ssize_t len = readlinkat(fddir, name, target, sizeof(target) - 1);
	if (len <= 0)
		return -1;
	target[len] = '\0';
	if (devmem_gpu(target, out->uuid, sizeof(out->uuid)) != 0 ||
	    fstatat(fddir, name, &st, 0) != 0)
		return -1;
	out->fd = atoi(name);
	out->bytes = st.st_size;
	out->dev = st.st_dev;
	out->ino = st.st_ino;
	return 0;
}

/* The fd numbers of the directory d, ascending; NULL when there are none
 * or no memory. */
static int *fd_numbers(DIR *d, size_t *n)
{
	size_t cap = 0;
	int *v = NULL;
	struct dirent *de;
	*n = 0;
	while ((de = readdir(d)) != NULL) {
		if (de->d_name[0] == '.')
			continue;
		if (*n == cap) {
			int *bigger = realloc(v, (cap = cap ? cap * 2 : 64) * sizeof(*v));
			if (bigger == NULL)
				break;
			v = bigger;
		}
		v[(*n)++] = atoi(de->d_name);
	}
	return v;
}

/* Device memory is allocated after the device files and the restore
 * thread's socket are opened, so the memfd is among the newest fds: looked
 * for from the highest number down, /proc listing them in ascending order. */
int fc_proc_devmem(int pid, struct fc_devmem_info *out)
{
	char dir[64], name[16];
	size_t n;
	snprintf(dir, sizeof(dir), "/proc/%d/fd", pid);
	DIR *d = opendir(dir);
	if (d == NULL)
		return -1;
	int *fds = fd_numbers(d, &n);
	int found = -1;
	for (size_t i = n; found != 0 && i > 0; i--) {
		snprintf(name, sizeof(name), "%d", fds[i - 1]);
		found = check_fd(dirfd(d), name, out);
	}
	free(fds);
	closedir(d);
	return found;
}
