#include <dirent.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "internal.h"
#include "proto.h"

/* The real driver answers GetRestoreThreadId at once even when the target is
 * stopped: it knows the process without asking it. The double does the same
 * by looking for the restore thread in /proc by its name, so this is the one
 * call that never goes through the target's socket. */

static int is_restore_thread(int pid, int tid)
{
	char path[96], comm[32];
	snprintf(path, sizeof(path), "/proc/%d/task/%d/comm", pid, tid);
	FILE *f = fopen(path, "re");
	if (f == NULL)
		return 0;
	int ok = fgets(comm, sizeof(comm), f) != NULL;
	fclose(f);
	if (!ok)
		return 0;
	comm[strcspn(comm, "\n")] = '\0';
	return strcmp(comm, FC_RESTORE_THREAD_NAME) == 0;
}

int fc_find_restore_tid(int pid)
{
	char dir[64];
	snprintf(dir, sizeof(dir), "/proc/%d/task", pid);
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
		if (tid > 0 && is_restore_thread(pid, tid))
			found = tid;
	}
	closedir(d);
	return found;
}
