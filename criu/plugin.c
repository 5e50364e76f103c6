/* cudasnap_plugin.so: CRIU's GPU plugin on libcudasnap. Dropped into CRIU's
 * plugin directory, every 'criu dump' and 'criu restore' of a tree with CUDA
 * processes, however CRIU is driven (its command line, or runc, crun,
 * Podman and containerd over its RPC), checkpoints and restores them all as
 * one transaction. This file is the descriptor CRIU reads and the
 * translation of CRIU's hooks into the stages of a staged session
 * (lib/engine/engine.h), where every rule lives; what stays here is CRIU's: its
 * options, log, images and inventory (host.c), the helper processes
 * (helper.c) and the restore threads CRIU holds (restore_thread.c). */
#include "engine.h"
#include "gpuprobe.h"
#include "host.h"
#include "manifest.h"
#include "restore_thread.h"
#include "journal.h"

#include <errno.h>
#include <sys/time.h>
#include <unistd.h>

static struct {
	cs_engine *engine;
	int stage;
	bool enabled; /* the hooks of stage act */
	bool coexistence_checked;
	criu_options criu;
} plugin = { .stage = -1 };

static void error_line(const char *line)
{
	cs_engine_error_line(plugin.engine, line);
}

static void log_line(void *ctx, int level, const char *line)
{
	(void)ctx;
	plog((unsigned)level, "%s", line);
}

/* The record is in the images: a restore without the plugin fails. */
static int recorded(void *ctx)
{
	(void)ctx;
	return criu_require_plugin();
}

static cs_engine_final final_of(criu_final f)
{
	return f == CRIU_FINAL_ALIVE ? CS_FINAL_ALIVE : f == CRIU_FINAL_STOPPED ? CS_FINAL_STOPPED : CS_FINAL_DEAD;
}

static cs_engine *open_engine(int stage)
{
	bool dump = stage != CS_CRIU_STAGE_RESTORE;
	cs_engine_opts o = { .op = dump ? CS_OP_CHECKPOINT : CS_OP_RESTORE,
			     .engine = "CRIU",
			     .command = dump ? "criu dump" : "criu restore",
			     .front = dump ? "criu-dump" : "criu-restore",
			     .timeout_s = plugin.criu.timeout_s,
			     .final = final_of(plugin.criu.final),
			     .options_from = plugin.criu.from_options ? "CRIU's options" : "CRIU's command line",
			     .run = run_call,
			     .log = log_line,
			     .recorded = recorded,
			     .reap = reap_killed,
			     .restore_waits = !dump && criu_restore_waits(),
			     .images = dump ? criu_images_dir() : -1 };
	return cs_engine_open(&o);
}

/* CRIU calls the exit hook after it let the restored tree run and before
 * it answers (its exit status, or its reply to runc, Podman or containerd
 * over RPC), and takes no result from it. A GPU step that fails there (an
 * unpark from the images' files) killed the tree; CRIU would still answer
 * that the restore succeeded. Ending CRIU now is the one way left to make
 * the engine see the failure: criu exits 1, and an engine that drives
 * `criu swrk` reads the end of its connection where the answer would be. */
static void fail_criu(void)
{
	plog(CS_CRIU_LOG_ERROR,
	     "the restore failed on the GPU after CRIU had restored the tree (see the lines above): "
	     "CRIU ends now with exit status 1 so that it does not answer that the restore succeeded");
	_exit(1);
}

/* The operation's end: its entry in the history and in syslog. */
static void end_engine(int ret)
{
	const cs_history *h = plugin.engine ? cs_engine_end(plugin.engine, ret) : NULL;
	if (h)
		plugin_syslog(h);
	bool failed_late = ret == 0 && plugin.stage == CS_CRIU_STAGE_RESTORE && cs_engine_killed(plugin.engine);
	cs_engine_free(plugin.engine);
	plugin.engine = NULL;
	if (failed_late)
		fail_criu();
}

/* Nothing here can fail a dump of a tree without CUDA: CRIU loads the
 * plugin for every dump of the node. */
static int dump_init(void)
{
	if (criu_check_coexistence(false) < 0)
		return -1;
	/* CRIU chooses how to seize before its first PAUSE_DEVICES (and under
	 * the cgroup freezer would call it for the root task alone), so this
	 * cannot wait for a CUDA task; it cannot fail, and is how CRIU seizes
	 * without --freeze-cgroup. */
	criu_interrupt_only();
	plugin.enabled = true;
	return 0;
}

/* A restore of images without a GPU part goes on as if the plugin were
 * not here: CRIU's list of required plugins does not name it, or (images
 * of a CRIU before 4.0, which lists none and asks every plugin) they hold
 * no record. */
static int restore_init(void)
{
	if (!criu_images_need_plugin())
		return 0; /* no GPU process in these images */
	int images = criu_images_dir();
	if (!cs_engine_images_gpu_part(images)) {
		plog(CS_CRIU_LOG_INFO,
		     "these images list no plugins (a CRIU before 4.0) and hold no %s: no GPU "
		     "process to restore",
		     CS_PLUGIN_RECORD);
		return 0;
	}
	if (criu_check_coexistence(false) < 0)
		return -1;
	int r = cs_engine_import(plugin.engine, images);
	plugin.enabled = r == 0;
	return r;
}

static int plugin_init(int stage)
{
	cs_engine_free(plugin.engine); /* an operation CRIU did not end: not one of the GPU's */
	plugin.engine = NULL;
	plugin.stage = stage;
	plugin.enabled = plugin.coexistence_checked = false;
	/* Where NVML is absent, the GPUs' free memory comes from the driver,
	 * asked by the installed cudasnap in a process of its own. */
	cs_gpu_probe_set_exec(CUDASNAP_BIN, CS_GPU_PROBE_ARG);
	if (stage == CS_CRIU_STAGE_PRE_DUMP)
		return 0; /* GPU memory is not in pre-dumps */
	if (stage != CS_CRIU_STAGE_RESTORE)
		criu_read_options(&plugin.criu);
	plog_on_error = error_line;
	plugin.engine = open_engine(stage);
	if (!plugin.engine) {
		plog(CS_CRIU_LOG_ERROR, "out of memory");
		return -1;
	}
	int r = stage == CS_CRIU_STAGE_RESTORE ? restore_init() : dump_init();
	if (r < 0) /* whether CRIU calls the exit hook then or not, the refusal is recorded */
		end_engine(r);
	return r;
}

static void plugin_exit(int stage, int ret)
{
	(void)stage;
	end_engine(ret);
	plugin.enabled = false;
}

/* CRIU calls this under the alarm that bounds its seize (--timeout, 10 s
 * by default), and aborts the dump when the alarm has rung six times. A
 * park writes a process's whole device memory at the storage's rate (25
 * GiB to a disk: 14 s) and has its own deadline: the alarm is held while
 * the process is met, and what was left of it runs on after. */
static int hook_pause(int pid)
{
	if (!plugin.enabled || plugin.stage != CS_CRIU_STAGE_DUMP)
		return -ENOTSUP;
	if (!plugin.coexistence_checked) {
		plugin.coexistence_checked = true;
		if (criu_check_coexistence(true) < 0)
			return -1;
	}
	/* to the microsecond: alarm() rounds, and this runs for every task */
	struct itimerval held, off = { 0 };
	bool armed = setitimer(ITIMER_REAL, &off, &held) == 0 && (held.it_value.tv_sec || held.it_value.tv_usec);
	int rc = cs_engine_meet(plugin.engine, pid);
	if (armed)
		setitimer(ITIMER_REAL, &held, NULL);
	return rc;
}

static int hook_checkpoint(int pid)
{
	if (!plugin.enabled || plugin.stage != CS_CRIU_STAGE_DUMP)
		return -ENOTSUP;
	return cs_engine_checkpoint(plugin.engine, criu_images_dir(), pid);
}

static int hook_resume_late(int pid)
{
	if (!plugin.enabled || plugin.stage != CS_CRIU_STAGE_RESTORE)
		return -ENOTSUP;
	return cs_engine_adopt(plugin.engine, pid);
}

__attribute__((visibility("default"))) cs_criu_plugin_desc CR_PLUGIN_DESC = {
	.name = CS_PLUGIN_NAME,
	.init = plugin_init,
	.exit = plugin_exit,
	.version = CS_CRIU_PLUGIN_VERSION,
	.max_hooks = CS_CRIU_HOOK_MAX,
	.hooks = {
		[CS_CRIU_HOOK_RESUME_DEVICES_LATE] = (void *)hook_resume_late,
		[CS_CRIU_HOOK_PAUSE_DEVICES] = (void *)hook_pause,
		[CS_CRIU_HOOK_CHECKPOINT_DEVICES] = (void *)hook_checkpoint,
	},
};
