#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "fakecuda.h"
#include "internal.h"
#include "settings.h"
#include "vmm.h"

/* Initialization of the target half: what cuInit (or NVML's init) sets up
 * in a process so that it can be checkpointed from outside. */

static pthread_mutex_t init_mu = PTHREAD_MUTEX_INITIALIZER;
static int started;

/* A fork can happen while another thread holds the state lock; holding it
 * across the fork leaves the child a usable, unlocked copy. */
static void before_fork(void)
{
	pthread_mutex_lock(&fc_tgt.mu);
}

static void after_fork_parent(void)
{
	pthread_mutex_unlock(&fc_tgt.mu);
}

/* Like the real driver, a child forked without exec keeps the inherited
 * device fds and mappings but is not a CUDA process. */
static void after_fork_child(void)
{
	fc_tgt.forked_child = 1;
	fc_tgt.levels = 0;
	fc_tgt.cuda_inited = 0;
	fc_tgt.restore_tid = 0;
	fc_server_forget();
	fc_devmem_forget();
	fc_vmm_forget();
	pthread_mutex_unlock(&fc_tgt.mu);
}

/* Without CUDASNAP_DEV_DIR the double uses the device files of /dev as
 * they are, and a machine without them has no GPU: it never creates files
 * in the machine's /dev. CUDA_VISIBLE_DEVICES is CUDA's own variable, read
 * from the environment only, as CUDA reads it. */
static CUresult first_attach(int level)
{
	char dir[PATH_MAX];
	const char *set = fc_setting("CUDASNAP_DEV_DIR", dir, sizeof(dir));
	int explicit_dir = set && *set;
	struct fc_gpus g;
	int map[FC_MAX_GPUS];
	fc_gpus_load(&g);
	int ndev = fc_gpus_visible(&g, getenv("CUDA_VISIBLE_DEVICES"), map);
	if (ndev == 0 || (!explicit_dir && !fc_devfiles_present("/dev", level)))
		return CUDA_ERROR_NO_DEVICE;
	pthread_mutex_lock(&fc_tgt.mu);
	fc_tgt.gpus = g;
	fc_tgt.ndev = ndev;
	memcpy(fc_tgt.map, map, sizeof(map));
	fc_devfiles_set_gpu(map[0]);
	snprintf(fc_tgt.devdir, sizeof(fc_tgt.devdir), "%s", explicit_dir ? set : "/dev");
	fc_tgt.devdir_set = explicit_dir;
	pthread_mutex_unlock(&fc_tgt.mu);
	return CUDA_SUCCESS;
}

static CUresult start_restore_thread(void)
{
	if (fc_server_start() != 0)
		return CUDA_ERROR_OPERATING_SYSTEM;
	pthread_atfork(before_fork, after_fork_parent, after_fork_child);
	return CUDA_SUCCESS;
}

static CUresult open_level(int level)
{
	CUresult rc = CUDA_SUCCESS;
	pthread_mutex_lock(&fc_tgt.mu);
	while (fc_tgt.state != CU_PROCESS_STATE_RUNNING || fc_tgt.lock_pending)
		pthread_cond_wait(&fc_tgt.cv, &fc_tgt.mu);
	if (fc_devfiles_open(fc_tgt.devdir, fc_tgt.devdir_set, level) != 0)
		rc = CUDA_ERROR_NO_DEVICE;
	else
		fc_tgt.levels |= level;
	if (rc == CUDA_SUCCESS && level == FC_LEVEL_CUDA)
		fc_tgt.cuda_inited = 1;
	pthread_mutex_unlock(&fc_tgt.mu);
	return rc;
}

static CUresult attach(int level)
{
	if (fc_tgt.forked_child)
		return CUDA_ERROR_NOT_INITIALIZED;
	CUresult rc = CUDA_SUCCESS;
	pthread_mutex_lock(&init_mu);
	if (!started)
		rc = first_attach(level);
	if (rc == CUDA_SUCCESS && !(fc_tgt.levels & level))
		rc = open_level(level);
	/* The restore thread last: a process that the driver answers for
	 * holds its device files already, so a caller that reads /proc after
	 * the driver's answer finds them (one that read it earlier, while the
	 * process was starting, may have found none). */
	if (rc == CUDA_SUCCESS && !started && (rc = start_restore_thread()) == CUDA_SUCCESS)
		started = 1;
	pthread_mutex_unlock(&init_mu);
	return rc;
}

CUresult cuInit(unsigned int flags)
{
	return flags ? CUDA_ERROR_INVALID_VALUE : attach(FC_LEVEL_CUDA);
}

CUresult fakecuda_nvml_attach(void)
{
	return attach(FC_LEVEL_NVML);
}

int fakecuda_restore_tid(void)
{
	pthread_mutex_lock(&fc_tgt.mu);
	int tid = fc_tgt.restore_tid;
	pthread_mutex_unlock(&fc_tgt.mu);
	return tid;
}
