#include "procinfo.h"

#include <dirent.h>
#include <fcntl.h>
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

/* "/memfd:fakecuda-devmem:<uuid>[:vmm] (deleted)" -> uuid, and *vmm whether
 * it is a VMM physical allocation */
static int devmem_gpu(const char *target, char *uuid, size_t len, int *vmm)
{
	static const char prefix[] = "/memfd:" FC_DEVMEM_NAME ":";
	size_t n = strlen(prefix), vlen = strlen(FC_VMM_SUFFIX);
	if (strncmp(target, prefix, n) != 0)
		return -1;
	const char *u = target + n;
	size_t ulen = strcspn(u, ": ");
	const char *rest = u + ulen;
	*vmm = strncmp(rest, FC_VMM_SUFFIX, vlen) == 0;
	if (*vmm)
		rest += vlen;
	if (ulen == 0 || ulen >= len || (*rest != '\0' && *rest != ' '))
		return -1;
	memcpy(uuid, u, ulen);
	uuid[ulen] = '\0';
	return 0;
}

/* One fd of the process: device memory (*vmm: of the VMM API) or not.
 * stat through the /proc link reaches the memfd itself, and its size is the
 * memory's. Both relative to the fd directory, so that the kernel does not
 * look the process up again for every fd: a scan of every process (NVML, a
 * restore) reads thousands of these. */
static int check_fd(int fddir, const char *name, int *vmm, struct fc_devmem_info *out)
{
	char target[256];
	struct stat st;
	ssize_t len = readlinkat(fddir, name, target, sizeof(target) - 1);
	if (len <= 0)
		return -1;
	target[len] = '\0';
	if (devmem_gpu(target, out->uuid, sizeof(out->uuid), vmm) != 0 ||
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
		int vmm;
		found = check_fd(dirfd(d), name, &vmm, out) == 0 && !vmm ? 0 : -1;
	}
	free(fds);
	closedir(d);
	return found;
}

/* The creator of a VMM allocation holds it read-write; the fds it exports
 * are read-only (fdinfo's flags, octal). */
static int read_write(int infodir, const char *name)
{
	char buf[256];
	int fd = openat(infodir, name, O_RDONLY | O_CLOEXEC);
	if (fd < 0)
		return 0;
	ssize_t n = read(fd, buf, sizeof(buf) - 1);
	close(fd);
	if (n <= 0)
		return 0;
	buf[n] = '\0';
	const char *f = strstr(buf, "flags:");
	return f != NULL && (strtoul(f + 6, NULL, 8) & O_ACCMODE) == O_RDWR;
}

static int add_use(struct fc_devmem_use *out, int n, int max, const struct fc_devmem_info *m)
{
	for (int i = 0; i < n; i++) {
		if (strcmp(out[i].uuid, m->uuid) == 0) {
			out[i].bytes += (unsigned long long)m->bytes;
			return n;
		}
	}
	if (n == max)
		return n;
	snprintf(out[n].uuid, sizeof(out[n].uuid), "%s", m->uuid);
	out[n].bytes = (unsigned long long)m->bytes;
	return n + 1;
}

int fc_proc_devmem_use(int pid, struct fc_devmem_use *out, int max)
{
	return fc_proc_devmem_use_in("/proc", pid, out, max);
}

int fc_proc_devmem_use_in(const char *root, int pid, struct fc_devmem_use *out, int max)
{
	char dir[96], info[96], name[16];
	struct fc_devmem_info m;
	size_t n;
	int count = 0;
	snprintf(dir, sizeof(dir), "%s/%d/fd", root, pid);
	snprintf(info, sizeof(info), "%s/%d/fdinfo", root, pid);
	DIR *d = opendir(dir);
	if (d == NULL)
		return 0;
	int infodir = open(info, O_RDONLY | O_DIRECTORY | O_CLOEXEC);
	int *fds = fd_numbers(d, &n);
	for (size_t i = 0; i < n; i++) {
		snprintf(name, sizeof(name), "%d", fds[i]);
		int vmm;
		if (check_fd(dirfd(d), name, &vmm, &m) == 0 && (!vmm || read_write(infodir, name)))
			count = add_use(out, count, max, &m);
	}
	free(fds);
	if (infodir >= 0)
		close(infodir);
	closedir(d);
	return count;
}
