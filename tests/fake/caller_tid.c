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

/* The last NSpid field is the id in the target's own pid namespace, what
 * its gettid() returned (and what the app writes as tid= in its ready file),
 * whichever namespace the caller is in; 0 if the thread is gone. */
static int own_tid(int pid, int tid)
{
	char path[96], line[256];
	int own = 0;
	snprintf(path, sizeof(path), "/proc/%d/task/%d/status", pid, tid);
	FILE *f = fopen(path, "re");
	if (f == NULL)
		return 0;
	while (fgets(line, sizeof(line), f)) {
		if (strncmp(line, "NSpid:", 6) != 0)
			continue;
		char *last = strrchr(line, '\t');
		own = last ? atoi(last + 1) : 0;
	}
	fclose(f);
	return own > 0 ? own : 0;
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
	while (found == 0 && (de = readdir(d)) != NULL) {
		int tid = atoi(de->d_name);
		if (tid > 0 && is_restore_thread(pid, tid))
			found = own_tid(pid, tid);
	}
	closedir(d);
	return found;
}
