/* The manifest around a session: the GPUs each target sees and the bytes
 * it holds before a checkpoint, the file after it, and its pruning after a
 * restore. */
#include "session_int.h"
#include "devmap.h"
#include "manifest.h"
#include "nvml.h"
#include "state.h"
#include "util.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

/* NVML names processes by their PIDs in the initial PID namespace, which
 * are this namespace's only when cudasnap runs there. */
void cs_session_note_gpu_bytes(cs_session *s)
{
	if (s->sandbox.pid_ns != CS_PIDNS_HOST)
		return;
	_cleanup_free_ cs_nvml_proc *procs = NULL;
	size_t count = 0;
	cs_nvml_proc_list(&procs, &count);
	for (size_t i = 0; i < s->n; i++)
		for (size_t k = 0; k < count; k++)
			if (procs[k].pid == s->t[i].pid)
				s->t[i].gpu_bytes = procs[k].bytes;
}

/* Which GPUs each target sees, by UUID, for the manifest (a restore onto
 * other GPUs must map every one of them). */
static void note_gpus(cs_target *t, size_t n)
{
	_cleanup_free_ cs_nvml_gpu *gpus = NULL;
	size_t ngpus = 0;
	cs_nvml_list(&gpus, &ngpus);
	for (size_t i = 0; ngpus && i < n; i++) {
		const cs_nvml_gpu *seen[64];
		size_t k = cs_visible_gpus(t[i].visible_devices, gpus, ngpus, seen, CS_ARRAY_SIZE(seen));
		size_t used = 0;
		for (size_t j = 0; j < k && used < sizeof(t[i].gpus); j++)
			used += (size_t)snprintf(t[i].gpus + used, sizeof(t[i].gpus) - used, "%s%s", j ? "," : "",
						 seen[j]->uuid);
	}
}

void cs_session_save_manifest(cs_session *s, const cs_txn_result *r)
{
	note_gpus(s->t, s->n);
	_cleanup_free_ char *text = cs_manifest_render(s->t, s->n, s->d, r->wall_seconds);
	cs_error e = { 0 };
	if (!text || cs_state_write(s->state_fd, CS_MANIFEST_NAME, text, strlen(text), &e) < 0)
		cs_session_warn(s,
				"warning: the manifest was not written%s%s; restore will discover the "
				"checkpointed processes instead",
				text ? ": " : "", text ? e.message : "");
}

/* The manifest keeps the processes this restore did not bring back (left
 * out by --pid, say), so that a later restore still has their order. */
void cs_session_prune_manifest(cs_session *s)
{
	_cleanup_free_ char *buf = NULL;
	ssize_t len = cs_state_read(s->state_fd, CS_MANIFEST_NAME, CS_MANIFEST_MAX, &buf, NULL);
	if (len == 0 && !buf)
		return;
	size_t left = 0;
	/* One that cannot be read (a symlink, corrupt) was not used: remove it (the link, not its target). */
	_cleanup_free_ char *rest = len < 0 ? NULL : cs_manifest_prune(buf, (size_t)len, s->t, s->n, &left);
	cs_error e = { 0 };
	if (!rest || left == 0)
		unlinkat(s->state_fd, CS_MANIFEST_NAME, 0);
	else if (cs_state_write(s->state_fd, CS_MANIFEST_NAME, rest, strlen(rest), &e) < 0)
		cs_session_warn(s, "warning: %s", e.message);
}
