#include <pthread.h>
#include <signal.h>
#include <stdio.h>
#include <string.h>
#include <sys/wait.h>
#include <unistd.h>

#include "test_util.h"

static pid_t start(const struct env *e, const char *opt, struct ready *r)
{
	const char *args[] = { opt, NULL };
	return app_start_ready(e, args, NULL, r);
}

/* The real driver answers 304 when it may not ptrace the target. */
static void check_unprivileged(const struct drv *d, pid_t target)
{
	int status = -1;
	pid_t pid = fork();
	if (pid == 0) {
		CUprocessState st;
		if (geteuid() == 0 && (setresgid(65534, 65534, 65534) || setresuid(65534, 65534, 65534)))
			_exit(2);
		_exit(d->get_state(target, &st) == 304 ? 0 : 1);
	}
	waitpid(pid, &status, 0);
	if (geteuid() != 0)
		return;
	check(WIFEXITED(status) && WEXITSTATUS(status) == 0,
	      "a non-root caller on a root target -> 304");
}

static void check_nvml(const struct env *e, const struct drv *d)
{
	struct ready r;
	int tid = 0;
	pid_t pid = start(e, "--nvml-only", &r);
	if (pid < 0)
		return;
	CUresult rc = d->get_tid(pid, &tid);
	check(strcmp(r.role, "nvml") == 0 && r.tid > 0 && rc == 0 && tid == r.tid,
	      "NVML-only process has a restore thread (%d)", tid);
	check(dev_fds(e, pid) == 6 && dev_maps(e, pid) == 0, "NVML-only: 6 device fds, no mapping");
	check(d->lock(pid, NULL) == 0 && d->checkpoint(pid, NULL) == 0 && dev_fds(e, pid) == 0,
	      "NVML-only: checkpoint releases its fds");
	check(d->restore(pid, NULL) == 0 && d->unlock(pid, NULL) == 0 && dev_fds(e, pid) == 6,
	      "NVML-only: restore reopens them");
	check_unprivileged(d, pid);
	check(app_stop(pid) == 0, "NVML-only app exits cleanly");
}

void test_roles(const struct env *e, const struct drv *d)
{
	struct ready r;
	CUprocessState st;
	pid_t plain = start(e, "--no-init", &r);
	if (plain > 0) {
		check(d->get_state(plain, &st) == 3 && r.tid == 0, "--no-init: state -> 3");
		check(app_stop(plain) == 0, "--no-init app exits cleanly");
	}
	pid_t dev = start(e, "--open-device", &r);
	if (dev > 0) {
		check(d->get_state(dev, &st) == 3 && dev_fds(e, dev) == 1 && dev_maps(e, dev) == 1,
		      "--open-device: state -> 3, holds 1 device fd and 1 mapping");
		check(app_stop(dev) == 0, "--open-device app exits cleanly");
	}
	check_nvml(e, d);
}

static void check_spawned(const struct env *e, const struct drv *d, const struct ready *kids,
			  int parent_tid)
{
	char line[256];
	int tid = 0;
	check(kids[0].tid != parent_tid && kids[1].tid != kids[0].tid &&
		      d->get_tid(kids[1].pid, &tid) == 0 && tid == kids[1].tid,
	      "spawned children have their own restore threads");
	check(d->lock(kids[0].pid, NULL) == 0 && d->checkpoint(kids[0].pid, NULL) == 0 &&
		      state_of(d, kids[0].ppid) == CU_PROCESS_STATE_RUNNING &&
		      dev_fds(e, kids[0].pid) == 0 && dev_fds(e, kids[1].pid) > 0,
	      "checkpointing one child leaves parent and sibling alone");
	check(d->restore(kids[0].pid, NULL) == 0 && d->unlock(kids[0].pid, NULL) == 0,
	      "restore + unlock the child");
	ask_verify(e, kids[0].pid, line, sizeof(line), 3000);
	check(strncmp(line, "ok bytes=1048576 ", 17) == 0, "child verifies its memory: '%s'", line);
}

void test_spawn(const struct env *e, const struct drv *d)
{
	static const char *const args[] = { "--spawn", "2", NULL };
	struct ready r, kids[2];
	pid_t pid = app_start_ready(e, args, NULL, &r);
	if (pid < 0)
		return;
	if (find_ready(e, pid, "spawned", kids, 2) != 2) {
		check(0, "fakecuda-app --spawn 2: both children are ready");
		return;
	}
	check_spawned(e, d, kids, r.tid);
	check(app_stop(pid) == 0, "--spawn app exits cleanly");
	sleep_ms(50);
	check(kill(kids[0].pid, 0) != 0 && kill(kids[1].pid, 0) != 0, "its children are gone");
}

struct worker {
	const struct drv *d;
	pid_t pid;
	CUresult rc;
	int step; /* lock, checkpoint, restore, unlock */
};

static void *cycle_thread(void *arg)
{
	struct worker *w = arg;
	const struct drv *d = w->d;
	CUresult rc = CUDA_SUCCESS;
	for (int i = 0; i < 5 && rc == CUDA_SUCCESS; i++) {
		w->step = 0;
		rc = d->lock(w->pid, NULL);
		if (rc == CUDA_SUCCESS && ++w->step)
			rc = d->checkpoint(w->pid, NULL);
		if (rc == CUDA_SUCCESS && ++w->step)
			rc = d->restore(w->pid, NULL);
		if (rc == CUDA_SUCCESS && ++w->step)
			rc = d->unlock(w->pid, NULL);
	}
	w->rc = rc;
	return NULL;
}

void test_concurrency(const struct env *e, const struct drv *d)
{
	struct worker w[4];
	pthread_t t[4];
	struct ready r;
	for (int i = 0; i < 4; i++)
		w[i] = (struct worker){ d, start(e, "--mem=4", &r), 0, 0 };
	for (int i = 0; i < 4; i++)
		pthread_create(&t[i], NULL, cycle_thread, &w[i]);
	int ok = 1;
	for (int i = 0; i < 4; i++) {
		pthread_join(t[i], NULL);
		ok &= w[i].rc == CUDA_SUCCESS;
		if (w[i].rc != CUDA_SUCCESS)
			printf("# pid %d: step %d -> %d\n", w[i].pid, w[i].step, w[i].rc);
	}
	check(ok, "4 threads cycle 4 processes 5 times concurrently");
	for (int i = 0; i < 4; i++) {
		char line[256];
		ask_verify(e, w[i].pid, line, sizeof(line), 3000);
		int st = app_stop(w[i].pid);
		if (strncmp(line, "ok bytes=4194304 ", 17) != 0 || st != 0)
			printf("# pid %d: verify '%s', exit %d\n", w[i].pid, line, st);
		ok &= strncmp(line, "ok bytes=4194304 ", 17) == 0 && st == 0;
	}
	check(ok, "their memory verifies and they exit cleanly");
}
