#include <fcntl.h>
#include <limits.h>
#include <stdio.h>
#include <string.h>
#include <unistd.h>

#include "app.h"

/* Written to a temporary name and renamed, so that a test polling for the
 * file never reads half of it. */
static void write_atomically(const char *dir, const char *suffix, const char *text)
{
	char tmp[PATH_MAX], path[PATH_MAX];
	snprintf(tmp, sizeof(tmp), "%s/.%d.%s.tmp", dir, (int)getpid(), suffix);
	snprintf(path, sizeof(path), "%s/%d.%s", dir, (int)getpid(), suffix);
	int fd = open(tmp, O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0644);
	if (fd < 0) {
		perror(tmp);
		return;
	}
	ssize_t n = write(fd, text, strlen(text));
	close(fd);
	if (n != (ssize_t)strlen(text) || rename(tmp, path) != 0)
		perror(path);
}

void app_write_ready(const struct app *a, int tid)
{
	char line[160];
	if (a->o.ready_dir == NULL)
		return;
	snprintf(line, sizeof(line), "pid=%d ppid=%d role=%s tid=%d\n", (int)getpid(),
		 (int)getppid(), app_role_name(a->role), tid);
	write_atomically(a->o.ready_dir, "ready", line);
}

void app_write_verify(const struct app *a, const char *line)
{
	char text[512];
	snprintf(text, sizeof(text), "%s\n", line);
	if (a->o.ready_dir == NULL)
		fprintf(stderr, "fakecuda-app %d: %s", (int)getpid(), text);
	else
		write_atomically(a->o.ready_dir, "verify", text);
}
