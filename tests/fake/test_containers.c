/* What a container changes for the double: a target in a network namespace
 * of its own, a caller without the test's environment (CRIU under Podman),
 * and a machine whose /dev has no GPU. */
#include <dirent.h>
#include <errno.h>
#include <sched.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mount.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/un.h>
#include <sys/wait.h>
#include <unistd.h>

#include "proto.h"
#include "settings.h"
#include "test_util.h"

#define GPU_A "GPU-aaaaaaaa-0000-4000-8000-00000000000a"
#define GPU_B "GPU-bbbbbbbb-0000-4000-8000-00000000000b"

static int write_file(const char *path, const char *text)
{
	FILE *f = fopen(path, "we");
	if (f == NULL)
		return -1;
	fputs(text, f);
	return fclose(f);
}

static int entries(const char *dir)
{
	DIR *d = opendir(dir);
	int n = 0;
	struct dirent *de;
	while (d && (de = readdir(d)) != NULL)
		n += de->d_name[0] != '.';
	if (d)
		closedir(d);
	return d ? n : -1;
}

/* In a child with a private mount namespace whose /dev and /etc are empty
 * tmpfs: nothing the checks write reaches the machine. The child reports
 * through check() and exits with the count of its failures (77: no mount
 * namespace, not root). */
static void in_private_root(const char *what, void (*fn)(const struct env *, const struct drv *),
			    const struct env *e, const struct drv *d)
{
	fflush(stdout);
	pid_t pid = fork();
	if (pid == 0) {
		if (unshare(CLONE_NEWNS) != 0 || mount(NULL, "/", NULL, MS_REC | MS_PRIVATE, NULL) != 0 ||
		    mount("fakecuda-dev", "/dev", "tmpfs", 0, "mode=0755") != 0 ||
		    mount("fakecuda-etc", "/etc", "tmpfs", 0, "mode=0755") != 0)
			_exit(77);
		t_failures = 0;
		fn(e, d);
		fflush(stdout);
		_exit(t_failures > 0 ? 1 : 0);
	}
	int status = -1;
	waitpid(pid, &status, 0);
	if (WIFEXITED(status) && WEXITSTATUS(status) == 77) {
		printf("skip - %s: no private mount namespace (not root?)\n", what);
		return;
	}
	check(WIFEXITED(status) && WEXITSTATUS(status) == 0, "%s (checked in a child)", what);
}

/* Without CUDASNAP_DEV_DIR the double only opens what /dev has. */
static void machine_dev(const struct env *e, const struct drv *d)
{
	struct nvml n;
	unsetenv("CUDASNAP_DEV_DIR");
	if (nvml_open(e, &n) == NULL) {
		check(0, "NVML double loads");
		return;
	}
	check(d->init(0) == CUDA_ERROR_NO_DEVICE && n.init() == NVML_ERROR_DRIVER_NOT_LOADED,
	      "no CUDASNAP_DEV_DIR, no /dev/nvidia*: cuInit -> 100, nvmlInit_v2 -> 9, as without a GPU");
	check(entries("/dev") == 0, "... and /dev is left empty (%d entries)", entries("/dev"));
	write_file("/dev/nvidiactl", "");
	write_file("/dev/nvidia0", "");
	write_file("/dev/nvidia-uvm", "");
	check(d->init(0) == CUDA_SUCCESS,
	      "with /dev/nvidiactl, nvidia0, nvidia-uvm there: cuInit succeeds");
	check(dev_fds(&(struct env){ .dev = "/dev" }, getpid()) == 7, "... and holds 7 fds of them");
}

static void settings_file(const struct env *e, const struct drv *d)
{
	struct nvml n;
	char dev[PATH_MAX + 16], text[PATH_MAX + 512], path[PATH_MAX + 32], uuid[96];
	int v = 0;
	unsigned int count = 0, m0 = 9, m1 = 9;
	nvmlDevice_t d0 = NULL, d1 = NULL;
	snprintf(dev, sizeof(dev), "%s/conf-dev", e->root);
	mkdir(dev, 0755);
	snprintf(text, sizeof(text),
		 "# what the environment of a caller under Podman lacks\n\n"
		 "FAKECUDA_DRIVER_VERSION=12345\n  CUDASNAP_DEV_DIR = %s  \nFAKECUDA_GPUS=%s,%s\n"
		 "FAKECUDA_DRIVER_VERSIONX=1\n",
		 dev, GPU_A, GPU_B);
	unsetenv("CUDASNAP_DEV_DIR");
	unsetenv("FAKECUDA_DRIVER_VERSION");
	CUresult rc = d->driver_version(&v);
	check(rc == 0 && v == 13000, "no " FC_SETTINGS_FILE ": the defaults (%d)", v);
	write_file(FC_SETTINGS_FILE, text);
	rc = d->driver_version(&v);
	check(rc == 0 && v == 12345, FC_SETTINGS_FILE " sets what the environment does not (%d)", v);
	setenv("FAKECUDA_DRIVER_VERSION", "13010", 1);
	rc = d->driver_version(&v);
	check(rc == 0 && v == 13010, "the environment wins over the file (%d)", v);
	if (nvml_open(e, &n) == NULL) {
		check(0, "NVML double loads");
		return;
	}
	int ok = n.init() == NVML_SUCCESS && n.count(&count) == 0;
	check(ok && count == 2, "NVML: the file's FAKECUDA_GPUS (%u GPUs)", count);
	snprintf(path, sizeof(path), "%s/nvidiactl", dev);
	check(access(path, F_OK) == 0 && entries("/dev") == 0,
	      "the file's CUDASNAP_DEV_DIR: device files made there, none in /dev");
	ok = n.by_index(0, &d0) == 0 && n.by_index(1, &d1) == 0 && n.minor(d0, &m0) == 0 &&
	     n.minor(d1, &m1) == 0 && n.uuid(d1, uuid, sizeof(uuid)) == 0;
	check(ok && m0 == 0 && m1 == 1 && strcmp(uuid, GPU_B) == 0,
	      "nvmlDeviceGetMinorNumber: the place in FAKECUDA_GPUS (%u, %u)", m0, m1);
	check(n.minor(d0, NULL) == NVML_ERROR_INVALID_ARGUMENT, "nvmlDeviceGetMinorNumber(NULL) -> 2");
}

void test_settings(const struct env *e, const struct drv *d)
{
	in_private_root("no device files in the machine's /dev", machine_dev, e, d);
	in_private_root(FC_SETTINGS_FILE " stands in for the environment", settings_file, e, d);
}

/* What a caller without the double's help gets: nothing listens under the
 * target's name in the caller's own network namespace. */
static int plain_connect(int pid)
{
	struct sockaddr_un sa;
	socklen_t len = fc_sockaddr(fc_pidns(pid), pid, &sa);
	int fd = socket(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0);
	int r = connect(fd, (struct sockaddr *)&sa, len);
	int err = r == 0 ? 0 : errno;
	close(fd);
	return err;
}

static int netns_differs(int pid)
{
	char path[64];
	struct stat a, b;
	snprintf(path, sizeof(path), "/proc/%d/ns/net", pid);
	return stat(path, &a) == 0 && stat("/proc/self/ns/net", &b) == 0 && a.st_ino != b.st_ino;
}

/* A target in a network namespace of its own, called from the parent's. */
void test_netns(const struct env *e, const struct drv *d)
{
	static const char *const args[] = { "--mem", "2", NULL };
	struct ready r;
	char line[256];
	int tid = 0;
	pid_t pid = app_start_ns(e, args, NULL, CLONE_NEWNET);
	if (pid < 0 || wait_ready(e, pid, &r) != 0) {
		int status = 0;
		if (pid > 0 && waitpid(pid, &status, WNOHANG) == pid && WIFEXITED(status) &&
		    WEXITSTATUS(status) == 126) {
			printf("skip - target in a network namespace of its own: unshare (not root?)\n");
			return;
		}
		check(0, "fakecuda-app in a network namespace of its own is ready");
		app_stop(pid);
		return;
	}
	check(netns_differs(pid) && plain_connect(pid) == ECONNREFUSED,
	      "target in its own network namespace: its name is unknown in the caller's");
	check(state_of(d, pid) == CU_PROCESS_STATE_RUNNING && d->get_tid(pid, &tid) == 0 && tid == r.tid,
	      "... and the caller still reaches it: RUNNING, restore thread %d", tid);
	check(d->lock(pid, NULL) == 0 && d->checkpoint(pid, NULL) == 0 &&
		      state_of(d, pid) == CU_PROCESS_STATE_CHECKPOINTED && d->restore(pid, NULL) == 0 &&
		      d->unlock(pid, NULL) == 0 && state_of(d, pid) == CU_PROCESS_STATE_RUNNING,
	      "... lock, checkpoint, restore, unlock across network namespaces");
	ask_verify(e, pid, line, sizeof(line), 3000);
	check(strncmp(line, "ok bytes=2097152 ", 17) == 0, "... its memory verifies: '%s'", line);
	check(app_stop(pid) == 0, "... and it exits cleanly");
}
