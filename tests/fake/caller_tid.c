#include <dirent.h>
#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "internal.h"
#include "proto.h"

/* The real driver answers GetRestoreThreadId at once even when the target is
 * stopped: it knows the process without asking it. The double does the same
 * by looking for the restore thread in /proc by its name, so this is the one
 * call that never goes through the target's socket. */

/* Read relative to the task directory, without stdio: NVML and a restore
 * ask this of every process that holds device memory. */
static int is_restore_thread(int taskfd, const char *tid)
{
	char path[300], comm[32];
	snprintf(path, sizeof(path), "%s/comm", tid);
	int fd = openat(taskfd, path, O_RDONLY | O_CLOEXEC);
	if (fd < 0)
		return 0;
	ssize_t n = read(fd, comm, sizeof(comm) - 1);
	close(fd);
	if (n <= 0)
		return 0;
	comm[n] = '\0';
	comm[strcspn(comm, "\n")] = '\0';
	return strcmp(comm, FC_RESTORE_THREAD_NAME) == 0;
}

int fc_find_restore_tid(int pid)
{
	return fc_find_restore_tid_in("/proc", pid);
}

int fc_find_restore_tid_in(const char *root, int pid)
{
	char dir[96];
	snprintf(dir, sizeof(dir), "%s/%d/task", root, pid);
	DIR *d = opendir(dir);
	if (d == NULL)
		return 0;
	int found = 0;
	struct dirent *de;
	/* The real driver (580.159.04) names the thread as the caller's pid
	 * namespace does, also for a target inside a container's: the task
	 * directory's name, not the target's own gettid(). */
	while (found == 0 && (de = readdir(d)) != NULL) {
		int tid = atoi(de->d_name);
		if (tid > 0 && is_restore_thread(dirfd(d), de->d_name))
			found = tid;
	}
	closedir(d);
	return found;
}
