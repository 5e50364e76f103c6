/* cudasnap_plugin.so: CRIU's GPU plugin on libcudasnap. Dropped into CRIU's
 * plugin directory, every 'criu dump' and 'criu restore' of a tree with CUDA
 * processes, however CRIU is driven (its command line, or runc, crun and
 * Podman over its RPC), checkpoints and restores them all as one
 * transaction. This file is the descriptor CRIU reads and the dispatch to
 * the stages; everything else lies below it. */
#include "stages.h"
#include "oplog.h"
#include "tasks.h"

#include <errno.h>

static int plugin_init(int stage)
{
	plugin_state_reset(stage);
	if (stage == CS_CRIU_STAGE_PRE_DUMP)
		return 0; /* GPU memory is not in pre-dumps */
	oplog_begin(stage);
	if (stage != CS_CRIU_STAGE_RESTORE)
		return dump_init();
	int r = restore_init();
	if (r < 0) /* whether CRIU calls the exit hook then or not, the refusal is recorded */
		oplog_end(r, -1, true);
	return r;
}

static void plugin_exit(int stage, int ret)
{
	if (cs_plugin.enabled && stage == CS_CRIU_STAGE_DUMP)
		dump_exit(ret);
	if (cs_plugin.enabled && stage == CS_CRIU_STAGE_RESTORE)
		restore_exit(ret);
	/* A dump writes into the state directory it opened for its first CUDA
	 * process, and no other; a restore's session used the directory. */
	oplog_end(ret, stage == CS_CRIU_STAGE_DUMP ? cs_plugin.state_fd : -1, stage == CS_CRIU_STAGE_RESTORE);
	plugin_state_free();
}

static int hook_pause(int pid)
{
	return cs_plugin.enabled && cs_plugin.stage == CS_CRIU_STAGE_DUMP ? dump_pause(pid) : -ENOTSUP;
}
static int hook_checkpoint(int pid)
{
	return cs_plugin.enabled && cs_plugin.stage == CS_CRIU_STAGE_DUMP ? dump_checkpoint(pid) : -ENOTSUP;
}
static int hook_resume_late(int pid)
{
	return cs_plugin.enabled && cs_plugin.stage == CS_CRIU_STAGE_RESTORE ? restore_resume(pid) : -ENOTSUP;
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
