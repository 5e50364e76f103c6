/* What restore checks and arranges before the first driver call. */
#include "session_int.h"
#include "devmap.h"
#include "manifest.h"
#include "persist.h"
#include "proc.h"
#include "state.h"
#include "util.h"

#include <stdlib.h>
#include <string.h>

static cs_target *find_target(cs_target *t, size_t n, pid_t pid)
{
	for (size_t i = 0; i < n; i++)
		if (t[i].pid == pid)
			return &t[i];
	return NULL;
}

/* Orders the targets as the manifest says and refuses reused PIDs. Targets
 * the manifest does not name come after, by pid. */
static int apply_manifest(cs_session *s, const cs_manifest *m, cs_error *err)
{
	for (size_t i = 0; i < s->n; i++)
		s->t[i].order = 1 << 20;
	for (size_t i = 0; i < m->n; i++) {
		const cs_manifest_entry *e = &m->e[i];
		unsigned long long st;
		/* A zombie keeps its pid and start time, but it has exited. */
		if (cs_proc_start_time(cs_proc_dir(), e->pid, &st) < 0 ||
		    (st == e->start_time && !cs_proc_alive(cs_proc_dir(), e->pid, st))) {
			cs_session_warn(s, "warning: process %d (%s) of the last checkpoint has exited", (int)e->pid,
					e->comm);
			continue;
		}
		if (st != e->start_time && s->o->reuse_warns) {
			cs_session_warn(s,
					"warning: process %d (%s) started at %llu, not %llu as at the checkpoint; "
					"restoring it in pid order",
					(int)e->pid, e->comm, st, e->start_time);
			continue;
		}
		if (st != e->start_time)
			return cs_error_set(err, CS_EPROC,
					    "The process that was checkpointed exited and its PID now "
					    "names another process. Check 'cudasnap ps'; '--ignore-manifest' restores "
					    "whatever is checkpointed now.",
					    "PID %d was reused: it started at %llu, but the checkpointed process (%s) "
					    "started at %llu; refusing to restore",
					    (int)e->pid, st, e->comm, e->start_time);
		cs_target *x = find_target(s->t, s->n, e->pid);
		if (x) {
			x->order = e->order;
			x->gpu_bytes = e->bytes; /* what it moved at the checkpoint: its deadline, progress and need */
			x->gpu_bytes_known = e->bytes_known;
			memcpy(x->gpus, e->gpus, sizeof(x->gpus)); /* what a device map must cover */
			memcpy(x->use, e->use, sizeof(x->use)); /* where its restore needs GPU memory */
			x->nuse = e->nuse;
			x->use_known = e->use_known;
			/* where its park into files put its memory */
			memcpy(x->park_dir, e->park_dir, sizeof(x->park_dir));
			memcpy(x->park_name, e->park_name, sizeof(x->park_name));
			x->park_nfiles = e->park_nfiles;
		}
	}
	return 0;
}

static int load_manifest(cs_session *s, cs_error *err)
{
	if (s->state_fd < 0)
		return 0; /* a plan, and no state directory yet: no manifest */
	_cleanup_free_ char *buf = NULL;
	cs_error e = { 0 };
	ssize_t len = cs_state_read(s->state_fd, CS_MANIFEST_NAME, CS_MANIFEST_MAX, &buf, &e);
	if (len == 0 && !buf)
		return 0;
	_cleanup_(cs_manifest_freep) cs_manifest m = { 0 };
	if (len < 0 || cs_manifest_parse(buf, (size_t)len, &m, &e) < 0) {
		cs_session_warn(s, "warning: %s; restoring the checkpointed processes found by discovery, by pid",
				e.message);
		return 0;
	}
	return apply_manifest(s, &m, err);
}

static int device_map(cs_session *s, const cs_nvml_gpu *gpus, size_t ngpus, cs_error *err)
{
	if (!cs_driver_can_remap(s->d))
		return cs_error_set(err, CS_EENV,
				    "Remapping GPUs at restore needs NVIDIA driver R580 (CUDA 13.0) "
				    "or newer.",
				    "--device-map: this driver (version %d) cannot remap GPUs",
				    cs_driver_version(s->d));
	int r = cs_devmap_parse(s->o->device_map, gpus, ngpus, &s->pairs, &s->npairs, err);
	for (size_t i = 0; r == 0 && i < s->n; i++) {
		cs_target *t = &s->t[i];
		r = t->gpus[0] ? cs_devmap_covers_recorded(s->pairs, s->npairs, gpus, ngpus, t, err) :
				 cs_devmap_covers(s->pairs, s->npairs, t->visible_devices, gpus, ngpus, t, err);
		if (r == 1) {
			cs_session_warn(s,
					"warning: no GPU list (NVML absent): cannot check that --device-map "
					"covers every GPU the processes can see");
			return 0;
		}
	}
	return r;
}

static void init_if_needed(cs_session *s, const cs_nvml_gpu *gpus, size_t ngpus)
{
	if (s->o->no_init)
		return;
	int r = cs_restore_init(s->d, gpus, ngpus);
	if (r != CS_CU_SUCCESS)
		cs_session_warn(s,
				"warning: persistence mode is off or unknown and cuInit failed (%s); restore "
				"may fail",
				cs_cu_name(s->d, r));
}

/* The preparation itself, once: plan_restore keeps its result. */
static int prepare(cs_session *s, cs_error *err)
{
	if (s->o->manifest) {
		int r = apply_manifest(s, s->o->manifest, err);
		if (r < 0)
			return r;
	} else if (!s->o->ignore_manifest) {
		int r = load_manifest(s, err);
		if (r < 0)
			return r;
	}
	_cleanup_free_ cs_nvml_gpu *gpus = NULL;
	size_t ngpus = 0;
	cs_nvml_list(&gpus, &ngpus);
	if (s->o->device_map) {
		int r = device_map(s, gpus, ngpus, err);
		if (r < 0)
			return r;
	}
	if (!s->o->dry_run)
		init_if_needed(s, gpus, ngpus);
	return 0;
}

int cs_session_plan_restore(cs_session *s, cs_error *err)
{
	if (!s->restore_planned) {
		s->restore_planned = true;
		s->restore_rc = prepare(s, &s->restore_err);
	}
	if (s->restore_rc < 0 && err)
		*err = s->restore_err;
	return s->restore_rc;
}
