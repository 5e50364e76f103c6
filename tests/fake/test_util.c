#include <dirent.h>
#include <dlfcn.h>
#include <errno.h>
#include <fcntl.h>
#include <sched.h>
#include <ftw.h>
#include <signal.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#include "test_util.h"

int t_failures;

static pid_t started[64];
static int nstarted;

void check(int ok, const char *fmt, ...)
{
	va_list ap;
	va_start(ap, fmt);
	printf("%s - ", ok ? "ok  " : "FAIL");
	vprintf(fmt, ap);
	printf("\n");
	fflush(stdout);
	va_end(ap);
	t_failures += !ok;
}

#define SYM(field, name)                                 \
	do {                                             \
		*(void **)&d->field = dlsym(d->handle, name); \
		if (d->field == NULL)                    \
			return -1;                       \
	} while (0)

int drv_load(struct drv *d, const char *path)
{
	d->handle = dlopen(path, RTLD_NOW | RTLD_LOCAL);
	if (d->handle == NULL)
		return -1;
	SYM(init, "cuInit");
	SYM(error_string, "cuGetErrorString");
	SYM(error_name, "cuGetErrorName");
	SYM(driver_version, "cuDriverGetVersion");
	SYM(get_state, "cuCheckpointProcessGetState");
	SYM(get_tid, "cuCheckpointProcessGetRestoreThreadId");
	SYM(lock, "cuCheckpointProcessLock");
	SYM(checkpoint, "cuCheckpointProcessCheckpoint");
	SYM(restore, "cuCheckpointProcessRestore");
	SYM(unlock, "cuCheckpointProcessUnlock");
	return 0;
}

uint64_t now_ms(void)
{
	struct timespec ts;
	clock_gettime(CLOCK_MONOTONIC, &ts);
	return (uint64_t)ts.tv_sec * 1000u + (uint64_t)ts.tv_nsec / 1000000u;
}

void sleep_ms(unsigned int ms)
{
	struct timespec ts = { ms / 1000, (long)(ms % 1000) * 1000000L };
	while (nanosleep(&ts, &ts) != 0 && errno == EINTR)
		;
}

pid_t app_start(const struct env *e, const char *const *args, const char *const *env)
{
	return app_start_ns(e, args, env, 0);
}

pid_t app_start_ns(const struct env *e, const char *const *args, const char *const *env,
		   int unshare_flags)
{
	const char *argv[16] = { e->app, "--ready-dir", e->ready };
	int n = 3;
	for (int i = 0; args[i] && n < 15; i++)
		argv[n++] = args[i];
	argv[n] = NULL;
	pid_t pid = fork();
	if (pid == 0) {
		sigset_t none;
		sigemptyset(&none);
		sigprocmask(SIG_SETMASK, &none, NULL);
		for (int i = 0; env && env[i]; i++)
			putenv((char *)env[i]);
		if (unshare_flags && unshare(unshare_flags) != 0)
			_exit(126);
		execv(e->app, (char *const *)argv);
		_exit(127);
	}
	if (pid > 0 && nstarted < (int)(sizeof(started) / sizeof(started[0])))
		started[nstarted++] = pid;
	return pid;
}

pid_t app_start_ready(const struct env *e, const char *const *args, const char *const *env,
		      struct ready *r)
{
	pid_t pid = app_start(e, args, env);
	if (pid > 0 && wait_ready(e, pid, r) == 0)
		return pid;
	check(0, "fakecuda-app %s... is ready", args[0] ? args[0] : "");
	if (pid > 0)
		app_stop(pid);
	return -1;
}

/* Whatever a failed check left running; an unreaped child's pid cannot have
 * been reused, so only those are signalled. */
void apps_cleanup(void)
{
	for (int i = 0; i < nstarted; i++) {
		if (waitpid(started[i], NULL, WNOHANG) == 0) {
			kill(started[i], SIGKILL);
			waitpid(started[i], NULL, 0);
		}
	}
	nstarted = 0;
}

static int read_ready(const char *path, struct ready *r)
{
	FILE *f = fopen(path, "re");
	if (f == NULL)
		return -1;
	int n = fscanf(f, "pid=%d ppid=%d role=%15s tid=%d", &r->pid, &r->ppid, r->role, &r->tid);
	fclose(f);
	return n == 4 ? 0 : -1;
}

int wait_ready(const struct env *e, int pid, struct ready *r)
{
	char path[PATH_MAX];
	snprintf(path, sizeof(path), "%s/%d.ready", e->ready, pid);
	for (int i = 0; i < 1000; i++) {
		if (read_ready(path, r) == 0)
			return 0;
		sleep_ms(10);
	}
	return -1;
}

static int scan_ready(const struct env *e, int ppid, const char *role, struct ready *out, int max)
{
	DIR *d = opendir(e->ready);
	int n = 0;
	struct dirent *de;
	while (d && n < max && (de = readdir(d)) != NULL) {
		char path[PATH_MAX];
		const char *dot = strchr(de->d_name, '.');
		if (de->d_name[0] == '.' || dot == NULL || strcmp(dot, ".ready") != 0)
			continue;
		snprintf(path, sizeof(path), "%s/%s", e->ready, de->d_name);
		if (read_ready(path, &out[n]) == 0 && out[n].ppid == ppid &&
		    strcmp(out[n].role, role) == 0)
			n++;
	}
	if (d)
		closedir(d);
	return n;
}

int find_ready(const struct env *e, int ppid, const char *role, struct ready *out, int max)
{
	int n = 0;
	for (int i = 0; i < 1000 && n < max; i++) {
		n = scan_ready(e, ppid, role, out, max);
		if (n < max)
			sleep_ms(10);
	}
	return n;
}

void ask_verify(const struct env *e, int pid, char *line, size_t len, unsigned int ms)
{
	char path[PATH_MAX];
	snprintf(path, sizeof(path), "%s/%d.verify", e->ready, pid);
	unlink(path);
	if (pid > 0)
		kill(pid, SIGUSR1);
	wait_verify(e, pid, line, len, ms);
}

void wait_verify(const struct env *e, int pid, char *line, size_t len, unsigned int ms)
{
	char path[PATH_MAX];
	snprintf(path, sizeof(path), "%s/%d.verify", e->ready, pid);
	line[0] = '\0';
	for (unsigned int waited = 0; waited <= ms; waited += 10) {
		FILE *f = fopen(path, "re");
		if (f) {
			if (fgets(line, (int)len, f) == NULL)
				line[0] = '\0';
			line[strcspn(line, "\n")] = '\0';
			fclose(f);
			return;
		}
		sleep_ms(10);
	}
}

/* Exit status, or -1 if it had to be killed. */
int app_stop(pid_t pid)
{
	int status;
	if (pid <= 0)
		return -1;
	kill(pid, SIGTERM);
	for (int i = 0; i < 500; i++) {
		if (waitpid(pid, &status, WNOHANG) == pid)
			return WIFEXITED(status) ? WEXITSTATUS(status) : 128 + WTERMSIG(status);
		sleep_ms(10);
	}
	kill(pid, SIGKILL);
	waitpid(pid, &status, 0);
	return -1;
}
