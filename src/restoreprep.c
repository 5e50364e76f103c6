/* What restore checks and arranges before the first driver call. */
#include "txncli.h"
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
static int apply_manifest(const cs_manifest *m, cs_target *t, size_t n, bool reuse_warns, cs_error *err)
{
	for (size_t i = 0; i < n; i++)
		t[i].order = 1 << 20;
	for (size_t i = 0; i < m->n; i++) {
		const cs_manifest_entry *e = &m->e[i];
		unsigned long long st;
		/* A zombie keeps its pid and start time, but it has exited. */
		if (cs_proc_start_time(cs_proc_dir(), e->pid, &st) < 0 ||
		    (st == e->start_time && !cs_proc_alive(cs_proc_dir(), e->pid, st))) {
			cli_msg("warning: process %d (%s) of the last checkpoint has exited",
				(int)e->pid, e->comm);
			continue;
		}
		if (st != e->start_time && reuse_warns) {
			cli_msg("warning: process %d (%s) started at %llu, not %llu as at the checkpoint; restoring "
				"it in pid order", (int)e->pid, e->comm, st, e->start_time);
			continue;
		}
		if (st != e->start_time)
			return cs_error_set(err, CS_EPROC, "The process that was checkpointed exited and its PID now "
					    "names another process. Check 'cudasnap ps'; '--ignore-manifest' restores "
					    "whatever is checkpointed now.",
					    "PID %d was reused: it started at %llu, but the checkpointed process (%s) "
					    "started at %llu; refusing to restore", (int)e->pid, st, e->comm, e->start_time);
		cs_target *x = find_target(t, n, e->pid);
		if (x) {
			x->order = e->order;
			x->gpu_bytes = e->bytes; /* what it moved at the checkpoint: its deadline and progress */
		}
	}
	return 0;
}

static int load_manifest(txn_ctx *x, cs_target *t, size_t n, cs_error *err)
{
	_cleanup_free_ char *buf = NULL;
	cs_error e = { 0 };
	ssize_t len = cs_state_read(x->state_fd, CS_MANIFEST_NAME, CS_MANIFEST_MAX, &buf, &e);
	if (len == -ENOENT)
		return 0;
	cs_manifest m;
	if (len < 0 || cs_manifest_parse(buf, (size_t)len, &m, &e) < 0) {
		cli_msg("warning: %s; restoring the checkpointed processes found by discovery, by pid",
			e.message);
		return 0;
	}
	int r = apply_manifest(&m, t, n, x->c->reuse_warns, err);
	cs_manifest_free(&m);
	return r;
}

static int device_map(txn_ctx *x, cs_target *t, size_t n, cs_nvml_gpu *gpus, size_t ngpus, cs_gpu_pair **pairs,
		      unsigned *npairs, cs_error *err)
{
	if (!cs_driver_can_remap(x->d))
		return cs_error_set(err, CS_EENV, "Remapping GPUs at restore needs NVIDIA driver R580 (CUDA 13.0) "
				    "or newer.", "--device-map: this driver (version %d) cannot remap GPUs",
				    cs_driver_version(x->d));
	int r = cs_devmap_parse(x->c->device_map, gpus, ngpus, pairs, npairs, err);
	for (size_t i = 0; r == 0 && i < n; i++) {
		r = cs_devmap_covers(*pairs, *npairs, t[i].visible_devices, gpus, ngpus, &t[i], err);
		if (r == 1) {
			cli_msg("warning: no GPU list (NVML absent): cannot check that --device-map "
				"covers every GPU the processes can see");
			r = 0;
			break;
		}
	}
	return r;
}

static void init_if_needed(txn_ctx *x, const cs_nvml_gpu *gpus, size_t ngpus)
{
	if (x->c->no_init)
		return;
	int r = cs_restore_init(x->d, gpus, ngpus);
	if (r != CS_CU_SUCCESS)
		cli_msg("warning: persistence mode is off or unknown and cuInit failed (%s); restore "
			"may fail", cs_cu_name(x->d, r));
}

int txn_prepare_restore(txn_ctx *x, cs_target *t, size_t n, cs_txn_opts *o, cs_gpu_pair **pairs, cs_error *err)
{
	*pairs = NULL;
	if (!x->c->ignore_manifest && load_manifest(x, t, n, err) < 0)
		return -CS_EPROC;
	_cleanup_free_ cs_nvml_gpu *gpus = NULL;
	size_t ngpus = 0;
	cs_nvml_list(&gpus, &ngpus);
	int r = 0;
	if (x->c->device_map)
		r = device_map(x, t, n, gpus, ngpus, pairs, &o->npairs, err);
	o->pairs = *pairs;
	if (r == 0)
		init_if_needed(x, gpus, ngpus);
	return r;
}
