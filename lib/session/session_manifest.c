/* The manifest around a session: the GPUs each target sees and the bytes
 * it holds before a checkpoint, the file after it, and its pruning after a
 * restore. */
#include "session_int.h"
#include "devmap.h"
#include "manifest.h"
#include "nvml.h"
#include "proc.h"
#include "state.h"
#include "util.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

/* Which GPUs t sees, by UUID, for the manifest (a restore onto other GPUs
 * must map every one of them). */
void cs_target_note_gpus(cs_target *t, const cs_nvml_gpu *gpus, size_t ngpus)
{
	const cs_nvml_gpu *seen[64];
	size_t k = cs_visible_gpus(t->visible_devices, gpus, ngpus, seen, CS_ARRAY_SIZE(seen));
	size_t used = 0;
	for (size_t j = 0; j < k && used < sizeof(t->gpus); j++)
		used += (size_t)snprintf(t->gpus + used, sizeof(t->gpus) - used, "%s%s", j ? "," : "", seen[j]->uuid);
}

void cs_session_note_gpus(cs_session *s)
{
	_cleanup_free_ cs_nvml_gpu *gpus = NULL;
	size_t ngpus = 0;
	cs_nvml_list(&gpus, &ngpus);
	for (size_t i = 0; ngpus && i < s->n; i++)
		cs_target_note_gpus(&s->t[i], gpus, ngpus);
}

/* Its memory on GPU g as NVML lists it: 1 with *bytes (0: NVML does not
 * say how much), 0 when NVML answered and lists it not (it holds nothing
 * there), -1 when NVML did not answer. */
static int memory_on(cs_nvml *nv, const cs_nvml_gpu *g, pid_t pid, unsigned long long *bytes)
{
	_cleanup_free_ cs_nvml_proc *h = NULL;
	size_t n = 0;
	if (cs_nvml_holders(nv, g->index, &h, &n) < 0)
		return -1;
	*bytes = 0;
	bool listed = false;
	for (size_t i = 0; i < n; i++)
		if (h[i].pid == pid) {
			listed = true;
			*bytes += h[i].bytes == CS_NVML_NOT_AVAILABLE ? 0 : h[i].bytes;
			if (h[i].bytes == CS_NVML_NOT_AVAILABLE) {
				*bytes = 0;
				break;
			}
		}
	return listed;
}

void cs_target_note_use(cs_target *t, const cs_proc *p, cs_nvml *nv, const cs_nvml_gpu *gpus, size_t ngpus, bool exact)
{
	t->nuse = 0;
	t->use_known = ngpus > 0;
	for (size_t g = 0; g < ngpus && t->nuse < CS_TARGET_GPUS; g++) {
		bool held = false;
		for (size_t r = 0; p && r < p->nrefs && !held; r++)
			held = gpus[g].minor >= 0 && cs_path_gpu_minor(p->refs[r].path) == gpus[g].minor;
		unsigned long long bytes = 0;
		int on = held && exact ? memory_on(nv, &gpus[g], t->pid, &bytes) : -1;
		if (!held || on == 0)
			continue;
		snprintf(t->use[t->nuse].uuid, sizeof(t->use[0].uuid), "%s", gpus[g].uuid);
		t->use[t->nuse++].bytes = bytes;
	}
	/* No device file of a GPU seen: which it uses is not known here. */
	if (t->nuse == 0 && (!p || p->nrefs == 0))
		t->use_known = false;
	/* A GPU's device file that no GPU of the list owns (NVML gave no minor
	 * number, or a GPU it does not list): the list would be short. */
	for (size_t r = 0; p && r < p->nrefs && t->use_known; r++) {
		int minor = cs_path_gpu_minor(p->refs[r].path);
		bool owned = minor < 0;
		for (size_t g = 0; g < ngpus && !owned; g++)
			owned = gpus[g].minor == minor;
		if (!owned)
			t->use_known = false;
	}
}

void cs_session_note_use(cs_session *s)
{
	_cleanup_(cs_nvml_closep) cs_nvml *nv = NULL;
	_cleanup_free_ cs_nvml_gpu *gpus = NULL;
	size_t ngpus = 0;
	if (cs_nvml_open(&nv, NULL) < 0 || cs_nvml_gpus(nv, &gpus, &ngpus, NULL) < 0)
		ngpus = 0;
	bool exact = s->sandbox.pid_ns == CS_PIDNS_HOST;
	for (size_t i = 0; i < s->n; i++)
		cs_target_note_use(&s->t[i], cs_ptable_find(&s->table, s->t[i].pid), nv, gpus, ngpus, exact);
}

/* The manifest's read-modify-write, under the state directory's lock:
 * operations on other processes may update it at the same time. fn returns
 * the new text (NULL: remove the file), or sets *keep to leave it. */
typedef char *(*manifest_fn)(void *ctx, const char *old, ssize_t len, bool *keep);

static int update_manifest(int statefd, const char *command, manifest_fn fn, void *ctx, cs_error *err)
{
	_cleanup_close_ int lock = cs_state_lock(statefd, command, 5, err);
	if (lock < 0)
		return -CS_ESTATE;
	_cleanup_free_ char *buf = NULL;
	ssize_t len = cs_state_read(statefd, CS_MANIFEST_NAME, CS_MANIFEST_MAX, &buf, err);
	bool keep = false;
	_cleanup_free_ char *text = fn(ctx, buf, len, &keep);
	if (keep)
		return 0;
	if (!text) {
		unlinkat(statefd, CS_MANIFEST_NAME, 0);
		return 0;
	}
	return cs_state_write(statefd, CS_MANIFEST_NAME, text, strlen(text), err) < 0 ? -CS_ESTATE : 0;
}

typedef struct merge_ctx {
	const cs_target *t;
	size_t n;
	const cs_driver *d;
	double wall;
	const cs_nvml_gpu *gpus;
	size_t ngpus;
} merge_ctx;

static char *merged(void *ctx, const char *old, ssize_t len, bool *keep)
{
	const merge_ctx *m = ctx;
	(void)keep;
	_cleanup_free_ char *fresh = cs_manifest_render(m->t, m->n, m->d, m->wall, m->gpus, m->ngpus);
	return fresh ? cs_manifest_merge(len > 0 ? old : NULL, len > 0 ? (size_t)len : 0, fresh, m->t, m->n) : NULL;
}

int cs_manifest_record(int statefd, const char *command, const cs_target *t, size_t n, const cs_driver *d, double wall,
		       cs_error *err)
{
	/* The GPUs' names and sizes, read before the manifest's lock is taken. */
	_cleanup_free_ cs_nvml_gpu *gpus = NULL;
	size_t ngpus = 0;
	cs_nvml_list(&gpus, &ngpus);
	merge_ctx m = { .t = t, .n = n, .d = d, .wall = wall, .gpus = gpus, .ngpus = ngpus };
	return update_manifest(statefd, command, merged, &m, err);
}

static char *forgotten(void *ctx, const char *old, ssize_t len, bool *keep)
{
	size_t left = 0;
	if (len <= 0) {
		*keep = true;
		return NULL;
	}
	char *rest = cs_manifest_forget(old, (size_t)len, ctx, &left);
	if (rest && left == 0) {
		free(rest);
		return NULL;
	}
	return rest;
}

int cs_manifest_drop(int statefd, const char *command, const cs_target *t, cs_error *err)
{
	return update_manifest(statefd, command, forgotten, (void *)t, err);
}

static void warn_not_updated(cs_session *s, const cs_error *e)
{
	cs_session_warn(s,
			"warning: the manifest was not updated: %s; restore will discover the checkpointed "
			"processes instead of following the manifest",
			e->message);
}

void cs_session_save_manifest(cs_session *s, const cs_txn_result *r)
{
	cs_error e = { 0 };
	s->wall = r->wall_seconds;
	if (cs_manifest_record(s->state_fd, s->o->command, s->t, s->n, s->d, s->wall, &e) < 0)
		warn_not_updated(s, &e);
}

/* The manifest keeps the processes this restore did not bring back (left
 * out by --pid, say), so that a later restore still has their order. One
 * that cannot be read (a symlink, corrupt) was not used: it goes (the link,
 * not its target). */
static char *pruned(void *ctx, const char *old, ssize_t len, bool *keep)
{
	const cs_session *s = ctx;
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
	cs_error e = { 0 };
	if (update_manifest(s->state_fd, s->o->command, pruned, s, &e) < 0)
		warn_not_updated(s, &e);
}
