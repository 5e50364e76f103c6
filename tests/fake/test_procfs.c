#include <dirent.h>
#include <ftw.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "test_util.h"

/* What a checkpoint tool looks at: fds and mappings of <devdir>/nvidia*. */
static int is_dev_path(const struct env *e, const char *s)
{
	size_t n = strlen(e->dev);
	return strncmp(s, e->dev, n) == 0 && strncmp(s + n, "/nvidia", 7) == 0;
}

int dev_fds(const struct env *e, int pid)
{
	char dir[64], link[PATH_MAX + 64], target[PATH_MAX];
	snprintf(dir, sizeof(dir), "/proc/%d/fd", pid);
	DIR *d = opendir(dir);
	if (d == NULL)
		return -1;
	int n = 0;
	struct dirent *de;
	while ((de = readdir(d)) != NULL) {
		snprintf(link, sizeof(link), "%s/%s", dir, de->d_name);
		ssize_t len = readlink(link, target, sizeof(target) - 1);
		if (len <= 0)
			continue;
		target[len] = '\0';
		n += is_dev_path(e, target);
	}
	closedir(d);
	return n;
}

int dev_maps(const struct env *e, int pid)
{
	char path[64], line[PATH_MAX + 256];
	snprintf(path, sizeof(path), "/proc/%d/maps", pid);
	FILE *f = fopen(path, "re");
	if (f == NULL)
		return -1;
	int n = 0;
	while (fgets(line, sizeof(line), f)) {
		char *p = strchr(line, '/');
		line[strcspn(line, "\n")] = '\0';
		n += p && is_dev_path(e, p);
	}
	fclose(f);
	return n;
}

static int fds_under(int pid, const char *prefix)
{
	char dir[64], link[PATH_MAX + 64], target[PATH_MAX];
	snprintf(dir, sizeof(dir), "/proc/%d/fd", pid);
	DIR *d = opendir(dir);
	if (d == NULL)
		return -1;
	int n = 0;
	struct dirent *de;
	while ((de = readdir(d)) != NULL) {
		snprintf(link, sizeof(link), "%s/%s", dir, de->d_name);
		ssize_t len = readlink(link, target, sizeof(target) - 1);
		if (len <= 0)
			continue;
		target[len] = '\0';
		n += strncmp(target, prefix, strlen(prefix)) == 0;
	}
	closedir(d);
	return n;
}

static int maps_under(int pid, const char *prefix)
{
	char path[64], line[PATH_MAX + 256];
	snprintf(path, sizeof(path), "/proc/%d/maps", pid);
	FILE *f = fopen(path, "re");
	if (f == NULL)
		return -1;
	int n = 0;
	while (fgets(line, sizeof(line), f)) {
		char *p = strchr(line, '/');
		n += p && strncmp(p, prefix, strlen(prefix)) == 0;
	}
	fclose(f);
	return n;
}

void path_refs(int pid, const char *prefix, int *fds, int *maps)
{
	*fds = fds_under(pid, prefix);
	*maps = maps_under(pid, prefix);
}

int other_thread(int pid, int not_tid)
{
	char dir[64];
	snprintf(dir, sizeof(dir), "/proc/%d/task", pid);
	DIR *d = opendir(dir);
	int found = -1;
	struct dirent *de;
	while (d && found < 0 && (de = readdir(d)) != NULL) {
		int tid = atoi(de->d_name);
		if (tid > 0 && tid != pid && tid != not_tid)
			found = tid;
	}
	if (d)
		closedir(d);
	return found;
}

CUprocessState state_of(const struct drv *d, int pid)
{
	CUprocessState s = CU_PROCESS_STATE_FAILED;
	if (d->get_state(pid, &s) != CUDA_SUCCESS)
		return (CUprocessState)-1;
	return s;
}

/* By rename: the targets re-read the file at every call. */
void write_faults(const struct env *e, const char *text)
{
	char tmp[PATH_MAX + 8];
	snprintf(tmp, sizeof(tmp), "%s.tmp", e->faults);
	FILE *f = fopen(tmp, "we");
	if (f == NULL)
		return;
	fputs(text, f);
	fclose(f);
	rename(tmp, e->faults);
}

static int remove_one(const char *path, const struct stat *st, int flag, struct FTW *ftw)
{
	(void)st;
	(void)flag;
	(void)ftw;
	remove(path);
	return 0;
}

void remove_tree(const char *path)
{
	nftw(path, remove_one, 16, FTW_DEPTH | FTW_PHYS);
}

long rss_kib(int pid)
{
	char path[64], line[256];
	long kib = -1;
	snprintf(path, sizeof(path), "/proc/%d/status", pid);
	FILE *f = fopen(path, "re");
	while (f && kib < 0 && fgets(line, sizeof(line), f))
		if (sscanf(line, "VmRSS: %ld", &kib) != 1)
			kib = -1;
	if (f)
		fclose(f);
	return kib;
}
