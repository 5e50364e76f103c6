#include <stdio.h>
#include <sys/wait.h>

#include "test_util.h"

static pid_t start_plain(const struct env *e)
{
	static const char *const args[] = { NULL };
	struct ready r;
	return app_start_ready(e, args, NULL, &r);
}

static void faults_error_delay(const struct env *e, const struct drv *d, pid_t pid)
{
	char text[256];
	CUprocessState st;
	snprintf(text, sizeof(text), "%d get_state error=999 1\n* get_state error=2 2\n", pid);
	write_faults(e, text);
	CUresult r1 = d->get_state(pid, &st), r2 = d->get_state(pid, &st);
	CUresult r3 = d->get_state(pid, &st);
	check(r1 == 999 && r2 == 2 && r3 == 0, "error=, counted: get_state -> %d, %d, %d", r1, r2,
	      r3);
	write_faults(e, "this line is nonsense\n* unlock error=CUDA_ERROR_UNKNOWN\n");
	check(d->lock(pid, NULL) == 0 && d->unlock(pid, NULL) == 999 &&
		      d->unlock(pid, NULL) == 999 && state_of(d, pid) == CU_PROCESS_STATE_LOCKED,
	      "error by name, always, bad line skipped: unlock -> 999 twice, still LOCKED");
	write_faults(e, "* lock delay=200 1\n");
	check(d->unlock(pid, NULL) == 0, "rewritten fault file drops the unlock fault");
	uint64_t t0 = now_ms();
	CUresult rc = d->lock(pid, NULL);
	uint64_t took = now_ms() - t0;
	check(rc == 0 && took >= 200, "delay=200: lock -> %d after %llu ms", rc,
	      (unsigned long long)took);
	check(d->unlock(pid, NULL) == 0, "unlock");
}

static void faults_leak(const struct env *e, const struct drv *d, pid_t pid, const char *action,
			int want_fds, int want_maps)
{
	char text[128];
	int fds0 = dev_fds(e, pid), maps0 = dev_maps(e, pid);
	snprintf(text, sizeof(text), "%d checkpoint %s 1\n", pid, action);
	write_faults(e, text);
	check(d->lock(pid, NULL) == 0 && d->checkpoint(pid, NULL) == 0,
	      "%s: checkpoint succeeds", action);
	int fds = dev_fds(e, pid), maps = dev_maps(e, pid);
	check(fds == want_fds && maps == want_maps, "%s: %d fd(s), %d mapping(s) remain", action,
	      fds, maps);
	check(d->restore(pid, NULL) == 0 && d->unlock(pid, NULL) == 0 &&
		      dev_fds(e, pid) == fds0 + want_fds && dev_maps(e, pid) == maps0 + want_maps,
	      "%s: restore + unlock, the leak stays", action);
}

static void faults_exit(const struct env *e, const struct drv *d, pid_t pid)
{
	char text[128];
	int status = 0;
	snprintf(text, sizeof(text), "%d checkpoint exit\n", pid);
	write_faults(e, text);
	check(d->lock(pid, NULL) == 0 && d->checkpoint(pid, NULL) == 304,
	      "exit: the target dies during checkpoint -> 304");
	check(waitpid(pid, &status, 0) == pid && WIFEXITED(status) && WEXITSTATUS(status) == 1,
	      "exit: the target exited with status 1");
}

void test_faults(const struct env *e, const struct drv *d)
{
	pid_t pids[4];
	for (int i = 0; i < 4; i++)
		pids[i] = start_plain(e);
	if (pids[0] < 0 || pids[1] < 0 || pids[2] < 0 || pids[3] < 0)
		return;
	faults_error_delay(e, d, pids[0]);
	faults_leak(e, d, pids[1], "leak-fd", 1, 0);
	faults_leak(e, d, pids[2], "leak-map", 0, 1);
	faults_exit(e, d, pids[3]);
	write_faults(e, "");
	for (int i = 0; i < 3; i++)
		check(app_stop(pids[i]) == 0, "app %d exits cleanly", pids[i]);
}
