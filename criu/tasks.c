#include "tasks.h"
#include "host.h"
#include "proc.h"
#include "util.h"

#include <fcntl.h>
#include <string.h>

plugin_state cs_plugin = { .state_fd = -1 };

/* A warning of the claims (a lock they ignore), in CRIU's log. */
static void claims_warn(void *ctx, const char *line)
{
	(void)ctx;
	plog(CS_CRIU_LOG_WARN, "%s", line);
}

void plugin_state_reset(int stage)
{
	cs_plugin = (plugin_state){ .stage = stage, .state_fd = -1 };
	cs_claims_init(&cs_plugin.claims);
	cs_plugin.claims.warn = claims_warn;
}

void plugin_state_free(void)
{
	cs_claims_release(&cs_plugin.claims);
	if (cs_plugin.state_fd >= 0)
		close(cs_plugin.state_fd);
	free(cs_plugin.tasks);
	free(cs_plugin.tree);
	cs_manifest_free(&cs_plugin.record);
	plugin_state_reset(-1);
}

plugin_task *find_task(pid_t pid)
{
	for (size_t i = 0; i < cs_plugin.ntasks; i++)
		if (cs_plugin.tasks[i].pid == pid)
			return &cs_plugin.tasks[i];
	return NULL;
}

plugin_task *add_task(pid_t pid)
{
	plugin_task *t = find_task(pid);
	if (t)
		return t;
	if (cs_grow(&cs_plugin.tasks, &cs_plugin.cap, cs_plugin.ntasks + 1, sizeof(*t)) < 0)
		return NULL;
	t = &cs_plugin.tasks[cs_plugin.ntasks++];
	*t = (plugin_task){ .pid = pid };
	return t;
}

int note_tree_task(pid_t pid)
{
	if (cs_grow(&cs_plugin.tree, &cs_plugin.treecap, cs_plugin.ntree + 1, sizeof(pid)) < 0)
		return -1;
	cs_plugin.tree[cs_plugin.ntree++] = pid;
	return 0;
}

pid_t *task_pids(bool (*which)(const plugin_task *t), size_t *n)
{
	pid_t *v = calloc(cs_plugin.ntasks + 1, sizeof(*v));
	*n = 0;
	for (size_t i = 0; v && i < cs_plugin.ntasks; i++)
		if (which(&cs_plugin.tasks[i]))
			v[(*n)++] = cs_plugin.tasks[i].pid;
	return v;
}

int task_identity(pid_t pid, pid_t *nspid, char *comm, size_t size)
{
	_cleanup_close_ int pdir = cs_proc_open(cs_proc_dir(), pid);
	cs_stat st;
	cs_proc_ident id;
	if (pdir < 0 || cs_proc_read_stat(pdir, &st) < 0 || cs_proc_read_ident(pdir, pid, &id) < 0)
		return -1;
	*nspid = id.nspid;
	snprintf(comm, size, "%s", st.comm);
	return 0;
}
