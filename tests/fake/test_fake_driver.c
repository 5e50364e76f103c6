/* Self-test of the driver double: loads libcuda.so.1 as a checkpoint tool
 * does and drives real fakecuda-app processes through the measured
 * behaviours of the real driver. */
#include <dlfcn.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#include "test_util.h"
#include "test_vmm.h"

static int make_dirs(struct env *e)
{
	const char *tmp = getenv("TMPDIR");
	char tmpl[512], real[PATH_MAX];
	snprintf(tmpl, sizeof(tmpl), "%s/fakecuda-test.XXXXXX", tmp && *tmp ? tmp : "/tmp");
	if (mkdtemp(tmpl) == NULL || realpath(tmpl, real) == NULL || strlen(real) >= sizeof(e->root))
		return -1;
	snprintf(e->root, sizeof(e->root), "%s", real);
	snprintf(e->dev, sizeof(e->dev), "%s/dev", e->root);
	snprintf(e->ready, sizeof(e->ready), "%s/ready", e->root);
	snprintf(e->faults, sizeof(e->faults), "%s/faults", e->root);
	if (mkdir(e->dev, 0755) != 0 || mkdir(e->ready, 0755) != 0)
		return -1;
	setenv("CUDASNAP_DEV_DIR", e->dev, 1);
	setenv("FAKECUDA_FAULTS", e->faults, 1);
	unsetenv("FAKECUDA_GPUS");
	unsetenv("FAKECUDA_PERSISTENCE");
	unsetenv("FAKECUDA_DRIVER_VERSION");
	unsetenv("FAKECUDA_SHM_DIR");
	unsetenv("FAKECUDA_GPU_USED_MIB");
	unsetenv("FAKECUDA_CONTEXT_MIB");
	unsetenv("FAKECUDA_HOST_PIDNS");
	unsetenv("FAKECUDA_GPU_TOTAL_MIB");
	unsetenv("FAKECUDA_OTHER_USED_MIB");
	unsetenv("FAKECUDA_RESTORE_EXTRA_MIB");
	unsetenv("FAKECUDA_NVML_PROC_NA");
	return 0;
}

static void check_texts(const struct drv *d)
{
	const char *s = NULL;
	int v = 0;
	check(d->error_string(304, &s) == 0 && s &&
		      strcmp(s, "OS call failed or operation not supported on this OS") == 0,
	      "cuGetErrorString(304) is the driver's text");
	check(d->error_string(3, &s) == 0 && s && strcmp(s, "initialization error") == 0,
	      "cuGetErrorString(3) = \"initialization error\"");
	check(d->error_name(401, &s) == 0 && s && strcmp(s, "CUDA_ERROR_ILLEGAL_STATE") == 0,
	      "cuGetErrorName(401) = CUDA_ERROR_ILLEGAL_STATE");
	check(d->error_string(12345, &s) == CUDA_ERROR_INVALID_VALUE,
	      "cuGetErrorString of an unknown code -> 1");
	CUresult rc = d->driver_version(&v);
	check(rc == 0 && v == 13000, "cuDriverGetVersion = 13000 (got %d)", v);
}

static void check_six(const struct drv *d, int pid, CUresult want, const char *what)
{
	CUprocessState st;
	int tid;
	CUresult r[6] = { d->get_state(pid, &st), d->get_tid(pid, &tid), d->lock(pid, NULL),
			  d->checkpoint(pid, NULL), d->restore(pid, NULL), d->unlock(pid, NULL) };
	int ok = 1;
	for (int i = 0; i < 6; i++)
		ok &= r[i] == want;
	check(ok, "%s: all six calls -> %d (got %d %d %d %d %d %d)", what, want, r[0], r[1], r[2],
	      r[3], r[4], r[5]);
}

static void check_bad_args(const struct drv *d, int pid)
{
	CUcheckpointLockArgs la = { .timeoutMs = 10, .reserved0 = 1 };
	CUcheckpointCheckpointArgs ca = { .reserved = { 0, 0, 0, 0, 0, 0, 0, 1 } };
	CUcheckpointRestoreArgs ra = { .reserved1 = 1 };
	CUcheckpointUnlockArgs ua = { .reserved = { 1 } };
	check(d->lock(pid, &la) == 1 && d->checkpoint(pid, &ca) == 1 && d->restore(pid, &ra) == 1 &&
		      d->unlock(pid, &ua) == 1,
	      "nonzero reserved fields -> CUDA_ERROR_INVALID_VALUE");
}

void test_codes(const struct env *e, const struct drv *d)
{
	(void)e;
	check_texts(d);
	check_six(d, 0, 304, "pid 0");
	check_six(d, -5, 304, "negative pid");
	check_six(d, 99999999, 304, "pid that does not exist");
	pid_t sleeper = fork();
	if (sleeper == 0) {
		execl("/bin/sleep", "sleep", "30", (char *)NULL);
		_exit(127);
	}
	if (sleeper < 0) {
		check(0, "fork a sleep process");
		return;
	}
	sleep_ms(20);
	check_six(d, sleeper, 3, "live process that never loaded the driver");
	check_bad_args(d, sleeper);
	kill(sleeper, SIGKILL);
	waitpid(sleeper, NULL, 0);
}

void test_legacy(const struct env *e)
{
	void *h = dlopen(e->legacy, RTLD_NOW | RTLD_LOCAL);
	check(h != NULL, "legacy driver loads");
	if (h == NULL)
		return;
	check(dlsym(h, "cuInit") != NULL && dlsym(h, "cuCheckpointProcessLock") == NULL &&
		      dlsym(h, "cuCheckpointProcessGetState") == NULL,
	      "legacy driver has cuInit but no cuCheckpointProcess* symbols");
	dlclose(h);
}

/* test-fake-driver --restore LIB PID: a caller process of its own, with
 * nothing of the test's memory; prints the result. */
static int restore_once(const char *lib, const char *pid)
{
	struct drv d;
	if (drv_load(&d, lib) != 0)
		return 2;
	printf("%d\n", d.restore(atoi(pid), NULL));
	return 0;
}

int main(int argc, char **argv)
{
	struct env e;
	struct drv d;
	memset(&e, 0, sizeof(e));
	if (argc == 4 && strcmp(argv[1], "--restore") == 0)
		return restore_once(argv[2], argv[3]);
	/* --peer ROLE LIB SOCKET_FD ARG: a process of the VMM checks */
	if (argc == 6 && strcmp(argv[1], "--peer") == 0)
		return test_vmm_peer(argv[2], argv[3], atoi(argv[4]), argv[5]);
	if (argc != 4) {
		fprintf(stderr, "usage: %s LIBCUDA LEGACY_LIBCUDA FAKECUDA_APP\n", argv[0]);
		return 2;
	}
	e.lib = argv[1];
	e.legacy = argv[2];
	e.app = argv[3];
	if (make_dirs(&e) != 0) {
		perror("scratch directory");
		return 2;
	}
	if (drv_load(&d, e.lib) != 0) {
		fprintf(stderr, "cannot load %s: %s\n", e.lib, dlerror());
		return 2;
	}
	uint64_t t0 = now_ms();
	/* first: its children need a driver that this process never initialized */
	test_settings(&e, &d);
	test_codes(&e, &d);
	test_cycle(&e, &d);
	test_remap(&e, &d);
	test_lock_timeout(&e, &d);
	test_faults(&e, &d);
	test_roles(&e, &d);
	test_spawn(&e, &d);
	test_concurrency(&e, &d);
	test_stopped(&e, &d);
	test_netns(&e, &d);
	test_ipc(&e, &d);
	test_legacy(&e);
	test_persistence(&e, &d);
	test_nvml(&e, &d);
	test_gpu_memory(&e, &d);
	test_vmm(&e, &d);
	test_vmm_share(&e, &d);
	test_vmm_cycle(&e, &d);
	test_event(&e, &d);
	apps_cleanup();
	remove_tree(e.root);
	dlclose(d.handle);
	printf("%s: %d failure(s) in %.1f s\n", t_failures ? "FAILED" : "PASSED", t_failures,
	       (double)(now_ms() - t0) / 1000.0);
	return t_failures ? 1 : 0;
}
