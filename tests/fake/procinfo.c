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
 * /proc link reaches the memfd itself, and its size is the memory's. */
static int check_fd(const char *dir, const char *name, struct fc_devmem_info *out)
{
	char link[320], target[256];
	struct stat st;
	snprintf(link, sizeof(link), "%s/%s", dir, name);
	ssize_t len = readlink(link, target, sizeof(target) - 1);
	if (len <= 0)
		return -1;
	target[len] = '\0';
	if (devmem_gpu(target, out->uuid, sizeof(out->uuid)) != 0 || stat(link, &st) != 0)
		return -1;
	out->fd = atoi(name);
	out->bytes = st.st_size;
	out->dev = st.st_dev;
	out->ino = st.st_ino;
	return 0;
}

int fc_proc_devmem(int pid, struct fc_devmem_info *out)
{
	char dir[64];
	snprintf(dir, sizeof(dir), "/proc/%d/fd", pid);
	DIR *d = opendir(dir);
	if (d == NULL)
		return -1;
	int found = -1;
	struct dirent *de;
	while (found != 0 && (de = readdir(d)) != NULL)
		if (de->d_name[0] != '.')
			found = check_fd(dir, de->d_name, out);
	closedir(d);
	return found;
}
