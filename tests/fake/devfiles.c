#include <fcntl.h>
#include <limits.h>
#include <stdio.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>

#include "internal.h"

struct fd_slot {
	const char *name;
	int level;
	int fd;
};

struct map_slot {
	int fd_slot;
	void *addr;
};

/* A CUDA process's GPU file is the one of the GPU it uses (CUDA's device 0):
 * /dev/nvidia<minor>, the minor being the GPU's index in the machine's list,
 * as the fake NVML numbers them. */
#define GPU_FILE NULL
static char gpu_file[16] = "nvidia0";

void fc_devfiles_set_gpu(int index)
{
	snprintf(gpu_file, sizeof(gpu_file), "nvidia%d", index);
}

/* Far fewer than the real driver's 23 fds and 31 mappings, but the same three
 * files and the same mix: some fds mapped, some mapped more than once, some
 * never mapped. NVML clients only hold fds. */
static struct fd_slot fds[] = {
	{ "nvidiactl", FC_LEVEL_CUDA, -1 },  { "nvidiactl", FC_LEVEL_CUDA, -1 },
	{ GPU_FILE, FC_LEVEL_CUDA, -1 },     { GPU_FILE, FC_LEVEL_CUDA, -1 },
	{ GPU_FILE, FC_LEVEL_CUDA, -1 },     { "nvidia-uvm", FC_LEVEL_CUDA, -1 },
	{ "nvidia-uvm", FC_LEVEL_CUDA, -1 }, { "nvidiactl", FC_LEVEL_NVML, -1 },
	{ "nvidiactl", FC_LEVEL_NVML, -1 },  { "nvidiactl", FC_LEVEL_NVML, -1 },
	{ "nvidia0", FC_LEVEL_NVML, -1 },    { "nvidia0", FC_LEVEL_NVML, -1 },
	{ "nvidia0", FC_LEVEL_NVML, -1 },
};

static struct map_slot maps[] = {
	{ 0, NULL }, { 0, NULL }, { 2, NULL }, { 2, NULL }, { 3, NULL },
};

#define N_FDS (int)(sizeof(fds) / sizeof(fds[0]))
#define N_MAPS (int)(sizeof(maps) / sizeof(maps[0]))

static int opened_levels;

/* Only in a directory that CUDASNAP_DEV_DIR names: a test's own directory,
 * or the tmpfs /dev of a container. A double that filled the machine's /dev
 * with regular files would pass them off as a GPU to every later program. */
static void create_missing(const char *devdir, const char *name)
{
	char path[PATH_MAX];
	snprintf(path, sizeof(path), "%s/%s", devdir, name);
	int fd = open(path, O_WRONLY | O_CREAT | O_EXCL | O_CLOEXEC, 0666);
	if (fd >= 0) {
		/* other users' processes must be able to open it too, whatever our umask */
		fchmod(fd, 0666);
		close(fd);
	}
}

static const char *slot_name(const struct fd_slot *s)
{
	return s->name ? s->name : gpu_file;
}

static int open_slot(const char *devdir, int create, struct fd_slot *s)
{
	char path[PATH_MAX];
	snprintf(path, sizeof(path), "%s/%s", devdir, slot_name(s));
	if (create)
		create_missing(devdir, slot_name(s));
	s->fd = open(path, O_RDWR | O_CLOEXEC);
	return s->fd < 0 ? -1 : 0;
}

/* Mapped beyond the end of an empty file: legal as long as nobody touches
 * it, and nobody does; what matters is the line in /proc/PID/maps. */
static int map_slot(struct map_slot *m)
{
	int fd = fds[m->fd_slot].fd;
	if (fd < 0 || m->addr != NULL)
		return 0;
	void *p = mmap(NULL, (size_t)sysconf(_SC_PAGESIZE), PROT_READ, MAP_SHARED, fd, 0);
	if (p == MAP_FAILED)
		return -1;
	m->addr = p;
	return 0;
}

/* Whether every file that level opens is there, as on a machine with a GPU. */
int fc_devfiles_present(const char *devdir, int level)
{
	char path[PATH_MAX];
	for (int i = 0; i < N_FDS; i++) {
		snprintf(path, sizeof(path), "%s/%s", devdir, slot_name(&fds[i]));
		if (fds[i].level == level && access(path, R_OK | W_OK) != 0)
			return 0;
	}
	return 1;
}

int fc_devfiles_open(const char *devdir, int create, int level)
{
	for (int i = 0; i < N_FDS; i++)
		if (fds[i].level == level && fds[i].fd < 0 && open_slot(devdir, create, &fds[i]) != 0)
			return -1;
	for (int i = 0; i < N_MAPS; i++)
		if (map_slot(&maps[i]) != 0)
			return -1;
	opened_levels |= level;
	return 0;
}

int fc_devfiles_reopen(const char *devdir, int create)
{
	int levels = opened_levels;
	if ((levels & FC_LEVEL_NVML) && fc_devfiles_open(devdir, create, FC_LEVEL_NVML) != 0)
		return -1;
	if ((levels & FC_LEVEL_CUDA) && fc_devfiles_open(devdir, create, FC_LEVEL_CUDA) != 0)
		return -1;
	return 0;
}

static int mapped_slot(int slot)
{
	for (int i = 0; i < N_MAPS; i++)
		if (maps[i].fd_slot == slot && maps[i].addr != NULL)
			return 1;
	return 0;
}

/* A leaked fd or mapping is dropped from the tables so that neither this
 * close nor a later one releases it: the process keeps it until it exits. */
static void leak_one(int leak_fd, int leak_map)
{
	for (int i = 0; leak_map && i < N_MAPS; i++) {
		if (maps[i].addr != NULL) {
			maps[i].addr = NULL;
			break;
		}
	}
	for (int i = N_FDS - 1; leak_fd && i >= 0; i--) {
		if (fds[i].fd >= 0 && !mapped_slot(i)) {
			fds[i].fd = -1;
			break;
		}
	}
}

void fc_devfiles_close(int leak_fd, int leak_map)
{
	long page = sysconf(_SC_PAGESIZE);
	leak_one(leak_fd, leak_map);
	for (int i = 0; i < N_MAPS; i++) {
		if (maps[i].addr != NULL)
			munmap(maps[i].addr, (size_t)page);
		maps[i].addr = NULL;
	}
	for (int i = 0; i < N_FDS; i++) {
		if (fds[i].fd >= 0)
			close(fds[i].fd);
		fds[i].fd = -1;
	}
}
