/* One libcudasnap session over the tasks the plugin tracks: the same
 * transaction, state lock and checks as 'cudasnap checkpoint' and 'restore',
 * asking the driver about these processes only. */
#include "plugin.h"
#include "env.h"
#include "util.h"

#include <stdlib.h>
#include <string.h>

static void warn_line(void *ctx, const char *line)
{
	(void)ctx;
	plog(strncmp(line, "error", 5) == 0 ? CS_CRIU_LOG_ERROR : CS_CRIU_LOG_WARN, "%s", line);
}

static void progress(void *ctx, const cs_target *t, cs_step s, bool undo, int res, double secs)
{
	(void)ctx;
	plog(res == CS_CU_SUCCESS ? CS_CRIU_LOG_INFO : CS_CRIU_LOG_ERROR, "%d (%s) %s%s: %s in %.3f s", (int)t->pid,
	     t->comm, undo ? "rollback " : "", cs_step_name(s), cs_cu_name(cs_plugin.d, res), secs);
}

int run_session(cs_op op, bool (*include)(const plugin_task *t), cs_target **out, size_t *n, cs_txn_result *res,
		cs_error *err)
{
	*out = NULL;
	*n = 0;
	memset(res, 0, sizeof(*res));
	_cleanup_free_ pid_t *pids = calloc(cs_plugin.ntasks + 1, sizeof(*pids));
	if (!pids)
		return cs_error_set(err, CS_ESYS, NULL, "out of memory");
	size_t np = 0;
	for (size_t i = 0; i < cs_plugin.ntasks; i++)
		if (include(&cs_plugin.tasks[i]))
			pids[np++] = cs_plugin.tasks[i].pid;
	if (np == 0)
		return 0;
	cs_session_opts o = {
		.op = op,
		.command = op == CS_OP_CHECKPOINT ? "criu dump" : "criu restore",
		.sel = { .pids = pids, .npids = np },
		.timeout_ms = criu_timeout_s() * 1000,
		.strict = true,
		.ignore_manifest = true,
		.reuse_warns = true,
		.device_map = cs_env("CUDASNAP_DEVICE_MAP"),
		.only_selected = true,
		.progress = progress,
		.warn = warn_line,
	};
	cs_session *s = NULL;
	int r = cs_session_open(&s, cs_plugin.d, &o, err);
	if (r == 0)
		r = cs_session_select(s, err);
	if (r == 0) {
		r = cs_session_run(s, res, err);
		if (res->ran && r < 0)
			*err = res->error;
		size_t k;
		cs_target *t = cs_session_targets(s, &k);
		*out = calloc(k ? k : 1, sizeof(**out));
		if (*out) {
			memcpy(*out, t, k * sizeof(*t));
			*n = k;
		}
	}
	cs_session_free(s);
	return r;
}
