#include <fcntl.h>
#include <limits.h>
#include <signal.h>
#include <stdlib.h>
#include <sys/mman.h>
#include <unistd.h>

#include "app.h"
#include "fakecuda.h"
#include "nvml_api.h"
#include "settings.h"

static enum app_role pick_role(const struct app_opts *o)
{
	if (o->open_device)
		return ROLE_DEVICE;
	if (o->nvml_only)
		return ROLE_NVML;
	if (o->no_init)
		return ROLE_PLAIN;
	return o->child ? ROLE_SPAWNED : ROLE_PARENT;
}

/* CUDA IPC: exporting needs memory of our own; the imported memory was
 * filled by its exporter, from its pid. */
static CUresult share_memory(struct app *a)
{
	struct fakecuda_ipc_mem m;
	CUresult rc = CUDA_SUCCESS;
	if (a->o.ipc_export)
		rc = a->bytes > 0 ? fakecuda_ipc_export(a->dptr, a->bytes) : CUDA_ERROR_INVALID_VALUE;
	if (rc == CUDA_SUCCESS && a->o.ipc_import)
		rc = fakecuda_ipc_import((int)a->o.ipc_import, &m);
	if (rc == CUDA_SUCCESS && a->o.ipc_import) {
		a->imp_dptr = m.dptr;
		a->imp_bytes = m.bytes;
		a->imp_seed = (uint64_t)m.owner_pid;
	}
	return rc;
}

static int init_cuda(struct app *a)
{
	CUdevice dev;
	if (a->o.set_visible && setenv("CUDA_VISIBLE_DEVICES", a->o.set_visible, 1) != 0)
		return -1;
	CUresult rc = cuInit(0);
	if (rc == CUDA_SUCCESS)
		rc = cuDeviceGet(&dev, 0);
	a->bytes = (size_t)a->o.mem_mib << 20;
	a->seed = (uint64_t)getpid();
	if (rc == CUDA_SUCCESS && a->bytes > 0)
		rc = fakecuda_mem_alloc(&a->dptr, a->bytes);
	if (rc == CUDA_SUCCESS && a->bytes > 0)
		rc = fakecuda_fill(a->dptr, a->bytes, a->seed);
	if (rc == CUDA_SUCCESS)
		rc = share_memory(a);
	if (rc != CUDA_SUCCESS) {
		const char *s = NULL;
		cuGetErrorString(rc, &s);
		fprintf(stderr, "fakecuda-app: CUDA setup failed: %d %s\n", rc, s ? s : "");
		return -1;
	}
	return app_start_workers(a);
}

/* Some programs open the device files themselves; the driver cannot release
 * those, which is what a checkpoint tool has to notice. */
static int open_device(struct app *a)
{
	char dir[PATH_MAX], path[PATH_MAX + 16];
	const char *set = fc_setting("CUDASNAP_DEV_DIR", dir, sizeof(dir));
	snprintf(path, sizeof(path), "%s/nvidia0", set && *set ? set : "/dev");
	/* created only where CUDASNAP_DEV_DIR says, never in the machine's /dev */
	a->dev_fd = open(path, O_RDWR | O_CLOEXEC | (set && *set ? O_CREAT : 0), 0666);
	if (a->dev_fd < 0) {
		perror(path);
		return -1;
	}
	a->dev_map = mmap(NULL, (size_t)sysconf(_SC_PAGESIZE), PROT_READ, MAP_SHARED, a->dev_fd, 0);
	if (a->dev_map == MAP_FAILED) {
		a->dev_map = NULL;
		perror("mmap");
		return -1;
	}
	return 0;
}

static int init_role(struct app *a)
{
	switch (a->role) {
	case ROLE_DEVICE:
		return open_device(a);
	case ROLE_NVML:
		return nvmlInit_v2() == NVML_SUCCESS ? 0 : -1;
	case ROLE_PLAIN:
	case ROLE_FORKED:
		return 0;
	case ROLE_PARENT:
	case ROLE_SPAWNED:
		break;
	}
	return init_cuda(a);
}

static int has_cuda(const struct app *a)
{
	return a->role == ROLE_PARENT || a->role == ROLE_SPAWNED;
}

static void main_loop(struct app *a, const sigset_t *set)
{
	for (;;) {
		int sig = sigwaitinfo(set, NULL);
		if (sig == SIGUSR1 && has_cuda(a))
			app_request_verify(a);
		else if (sig == SIGUSR1)
			app_write_verify(a, "fail no device memory");
		else if (sig == SIGCHLD)
			app_reap(a);
		else if (sig == SIGTERM || sig == SIGINT)
			return;
	}
}

static void cleanup(struct app *a)
{
	app_stop_children(a);
	app_stop_workers(a);
	if (a->dev_map)
		munmap(a->dev_map, (size_t)sysconf(_SC_PAGESIZE));
	if (a->dev_fd >= 0)
		close(a->dev_fd);
	if (a->role == ROLE_NVML)
		nvmlShutdown();
}

int main(int argc, char **argv)
{
	static struct app a = { .dev_fd = -1, .mu = PTHREAD_MUTEX_INITIALIZER,
				.cv = PTHREAD_COND_INITIALIZER };
	sigset_t set;
	sigemptyset(&set);
	sigaddset(&set, SIGUSR1);
	sigaddset(&set, SIGTERM);
	sigaddset(&set, SIGINT);
	sigaddset(&set, SIGCHLD);
	/* before any thread exists, so that every thread inherits the mask */
	pthread_sigmask(SIG_BLOCK, &set, NULL);
	int rc = app_parse(argc, argv, &a.o);
	if (rc != 0)
		return rc > 0 ? 0 : 2;
	a.role = pick_role(&a.o);
	if (init_role(&a) != 0) {
		cleanup(&a);
		return 2;
	}
	if (a.role == ROLE_PARENT) {
		app_spawn(&a);
		app_fork_children(&a);
	}
	int tid = has_cuda(&a) || a.role == ROLE_NVML ? fakecuda_restore_tid() : 0;
	app_write_ready(&a, tid);
	main_loop(&a, &set);
	cleanup(&a);
	return 0;
}
