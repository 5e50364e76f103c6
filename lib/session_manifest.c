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

/* Which GPUs each target sees, by UUID, for the manifest (a restore onto
 * other GPUs must map every one of them). */
void cs_session_note_gpus(cs_session *s)
{
	_cleanup_free_ cs_nvml_gpu *gpus = NULL;
	size_t ngpus = 0;
	cs_nvml_list(&gpus, &ngpus);
	for (size_t i = 0; ngpus && i < s->n; i++) {
		cs_target *t = &s->t[i];
		const cs_nvml_gpu *seen[64];
		size_t k = cs_visible_gpus(t->visible_devices, gpus, ngpus, seen, CS_ARRAY_SIZE(seen));
		size_t used = 0;
		for (size_t j = 0; j < k && used < sizeof(t->gpus); j++)
			used += (size_t)snprintf(t->gpus + used, sizeof(t->gpus) - used, "%s%s", j ? "," : "",
						 seen[j]->uuid);
	}
}

/* The manifest's read-modify-write, under the state directory's lock:
 * sessions on other processes may update it at the same time. fn returns
 * the new text (NULL: remove the file), or sets *keep to leave it. */
static void update_manifest(cs_session *s, char *(*fn)(cs_session *s, const char *old, ssize_t len, bool *keep))
{
	cs_error e = { 0 };
	_cleanup_close_ int lock = cs_state_lock(s->state_fd, s->o->command, 5, &e);
	_cleanup_free_ char *buf = NULL;
	ssize_t len = lock >= 0 ? cs_state_read(s->state_fd, CS_MANIFEST_NAME, CS_MANIFEST_MAX, &buf, &e) : -1;
	bool keep = false;
	_cleanup_free_ char *text = lock >= 0 ? fn(s, buf, len, &keep) : NULL;
	if (lock >= 0 && keep)
		return;
	if (lock >= 0 && !text) {
		unlinkat(s->state_fd, CS_MANIFEST_NAME, 0);
		return;
	}
	if (lock < 0 || cs_state_write(s->state_fd, CS_MANIFEST_NAME, text, strlen(text), &e) < 0)
		cs_session_warn(s,
				"warning: the manifest was not updated: %s; restore will discover the checkpointed "
				"processes instead of following the manifest",
				e.message);
}

static char *merged(cs_session *s, const char *old, ssize_t len, bool *keep)
{
	(void)keep;
	_cleanup_free_ char *fresh = cs_manifest_render(s->t, s->n, s->d, s->wall);
	return fresh ? cs_manifest_merge(len > 0 ? old : NULL, len > 0 ? (size_t)len : 0, fresh, s->t, s->n) : NULL;
}

void cs_session_save_manifest(cs_session *s, const cs_txn_result *r)
{
	s->wall = r->wall_seconds;
	update_manifest(s, merged);
}

/* The manifest keeps the processes this restore did not bring back (left
 * out by --pid, say), so that a later restore still has their order. One
 * that cannot be read (a symlink, corrupt) was not used: it goes (the link,
 * not its target). */
static char *pruned(cs_session *s, const char *old, ssize_t len, bool *keep)
{
	if (len == 0 && !old) {
		*keep = true;
		return NULL;
	}
	size_t left = 0;
	char *rest = len < 0 ? NULL : cs_manifest_prune(old, (size_t)len, s->t, s->n, &left);
	if (rest && left == 0) {
		free(rest);
		return NULL;
	}
	return rest;
}

void cs_session_prune_manifest(cs_session *s)
{
	update_manifest(s, pruned);
}
