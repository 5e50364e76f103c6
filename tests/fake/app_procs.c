#include <dirent.h>
#include <errno.h>
#include <limits.h>
#include <stdbool.h>
#include <stdio.h>
#include <string.h>
#include <signal.h>
#include <stdlib.h>
#include <sys/prctl.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#include "app.h"
#include "settings.h"

/* Workers of a real framework die with it; leftovers would hold device
 * files and spoil later tests. */
static void die_with_parent(pid_t parent)
{
	prctl(PR_SET_PDEATHSIG, SIGTERM);
	if (getppid() != parent)
		_exit(0);
}

void app_spawn(struct app *a)
{
	char mem[16], kms[16];
	char *argv[10];
	int n = 0;
	snprintf(mem, sizeof(mem), "%u", a->o.mem_mib);
	snprintf(kms, sizeof(kms), "%u", a->o.kernel_ms);
	argv[n++] = "fakecuda-app";
	argv[n++] = "--child";
	argv[n++] = "--mem";
	argv[n++] = mem;
	if (a->o.kernel_ms) {
		argv[n++] = "--kernel-loop";
		argv[n++] = kms;
	}
	if (a->o.ready_dir) {
		argv[n++] = "--ready-dir";
		argv[n++] = (char *)a->o.ready_dir;
	}
	argv[n] = NULL;
	pid_t parent = getpid();
	for (unsigned int i = 0; i < a->o.spawn && a->nkids < APP_MAX_KIDS; i++) {
		pid_t pid = fork();
		if (pid == 0) {
			die_with_parent(parent);
			execv("/proc/self/exe", argv);
			_exit(127);
		}
		if (pid > 0)
			a->kids[a->nkids++] = pid;
	}
}

/* Closes every inherited fd of a device file, leaving the mappings. */
static void close_device_fds(void)
{
	char dir[PATH_MAX], prefix[PATH_MAX + 16];
	const char *dev = fc_setting("CUDASNAP_DEV_DIR", dir, sizeof(dir));
	snprintf(prefix, sizeof(prefix), "%s/nvidia", dev && *dev ? dev : "/dev");
	DIR *d = opendir("/proc/self/fd");
	if (!d)
		return;
	int skip = dirfd(d);
	for (struct dirent *e; (e = readdir(d));) {
		char path[PATH_MAX], target[PATH_MAX];
		int fd = atoi(e->d_name);
		snprintf(path, sizeof(path), "/proc/self/fd/%s", e->d_name);
		ssize_t n = readlink(path, target, sizeof(target) - 1);
		if (e->d_name[0] == '.' || fd == skip || n <= 0)
			continue;
		target[n] = '\0';
		if (strncmp(target, prefix, strlen(prefix)) == 0)
			close(fd);
	}
	closedir(d);
}

/* The child inherits other threads' heap objects but not the threads, so a
 * leak check at its exit would report them: it leaves with _exit. */
static void forked_child_main(struct app *a, pid_t parent, bool close_fds)
{
	sigset_t set;
	die_with_parent(parent);
	if (close_fds)
		close_device_fds();
	a->role = ROLE_FORKED;
	a->nkids = 0;
	app_write_ready(a, 0);
	sigemptyset(&set);
	sigaddset(&set, SIGUSR1);
	sigaddset(&set, SIGTERM);
	sigaddset(&set, SIGINT);
	for (;;) {
		int sig = sigwaitinfo(&set, NULL);
		if (sig == SIGUSR1)
			app_write_verify(a, "fail forked child has no CUDA context");
		else if (sig == SIGTERM || sig == SIGINT)
			_exit(0);
	}
}

void app_fork_children(struct app *a)
{
	pid_t parent = getpid();
	for (unsigned int i = 0; i < a->o.fork_after_init && a->nkids < APP_MAX_KIDS; i++) {
		pid_t pid = fork();
		if (pid == 0)
			forked_child_main(a, parent, i < a->o.forked_close_fds);
		if (pid > 0)
			a->kids[a->nkids++] = pid;
	}
}

static void forget_kid(struct app *a, pid_t pid)
{
	for (int i = 0; i < a->nkids; i++) {
		if (a->kids[i] == pid) {
			a->kids[i] = a->kids[--a->nkids];
			return;
		}
	}
}

void app_reap(struct app *a)
{
	pid_t pid;
	while ((pid = waitpid(-1, NULL, WNOHANG)) > 0)
		forget_kid(a, pid);
}

void app_stop_children(struct app *a)
{
	struct timespec tick = { 0, 10 * 1000 * 1000 };
	for (int i = 0; i < a->nkids; i++)
		kill(a->kids[i], SIGTERM);
	for (int waited = 0; a->nkids > 0 && waited < 300; waited++) {
		app_reap(a);
		if (a->nkids > 0)
			nanosleep(&tick, NULL);
	}
	/* a child that is stopped or blocked does not get to exit cleanly */
	for (int i = 0; i < a->nkids; i++) {
		kill(a->kids[i], SIGKILL);
		waitpid(a->kids[i], NULL, 0);
	}
	a->nkids = 0;
}
