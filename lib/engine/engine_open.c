/* A staged session's life (lib/engine/engine.h): opened for one dump or restore,
 * ended at the engine's exit hook by the stage's own ending. */
#include "engine_int.h"
#include "env.h"
#include "util.h"

#include <fcntl.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

/* A warning of the claims (a lock they ignore), in the engine's log. */
static void claims_warn(void *ctx, const char *line)
{
	eng_log(ctx, CS_LOG_WARN, "%s", line);
}

cs_engine *cs_engine_open(const cs_engine_opts *opts)
{
	cs_engine *e = calloc(1, sizeof(*e));
	if (!e)
		return NULL;
	e->o = *opts;
	e->state_fd = -1;
	/* CUDASNAP_PARK_FILES=0: parks stay in host memory, CRIU dumps them */
	const char *files = cs_env("CUDASNAP_PARK_FILES");
	bool off = files && strcmp(files, "0") == 0;
	e->images = opts->op == CS_OP_CHECKPOINT && !off ? opts->images : -1;
	cs_claims_init(&e->claims);
	e->claims.warn = claims_warn;
	e->claims.warn_ctx = e;
	eng_op_begin(e);
	return e;
}

void cs_engine_free(cs_engine *e)
{
	if (!e)
		return;
	cs_claims_release(&e->claims);
	if (e->state_fd >= 0)
		close(e->state_fd);
	if (e->own_images && e->images >= 0)
		close(e->images);
	free(e->tasks);
	for (size_t i = 0; e->tree_fd && i < e->ntree; i++)
		if (e->tree_fd[i] >= 0)
			close(e->tree_fd[i]);
	free(e->tree_fd);
	free(e->tree);
	cs_manifest_free(&e->record);
	cs_history_free(&e->op.h);
	free(e);
}

const cs_history *cs_engine_end(cs_engine *e, int ret)
{
	if (e->enabled && e->o.op == CS_OP_CHECKPOINT)
		eng_give_back_or_name(e, ret);
	if (e->enabled && e->o.op == CS_OP_RESTORE)
		eng_restore_end(e, ret);
	return eng_op_end(e, ret);
}

bool cs_engine_killed(const cs_engine *e)
{
	return e && e->killed;
}
