/* Whether a checkpoint's GPU part would restore on this node: the checks of
 * the CRIU plugin's restore, made from here without a process. The driver
 * must load with the checkpoint API (the plugin's init refuses a restore
 * without it) and not be older than the one that checkpointed; the GPUs the
 * processes saw must be here, or stand-ins chosen as the plugin chooses them
 * (CUDASNAP_DEVICE_MAP, else absent GPUs onto others), and then the driver
 * must remap (R580) and the map cover every GPU each process saw (the
 * restore's session refuses it otherwise); and each GPU must have room for
 * the processes restored onto it, judged by cs_record_judge as the
 * plugin's init judges it. */
#include "inspect.h"
#include "gpunode.h"
#include "park_find.h"
#include "devmap.h"
#include "env.h"
#include "sandbox.h"
#include "util.h"

#include <errno.h>
#include <limits.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>

#define FIX_MAP \
	"Set CUDASNAP_DEVICE_MAP=OLD=NEW,... in /etc/cudasnap/cudasnap.conf, one pair for every GPU the " \
	"checkpoint's processes saw (their UUIDs above), onto GPUs of this node ('cudasnap doctor' lists them), or " \
	"restore on a node with those GPUs."

void cs_cuda_version_text(int version, char *buf, size_t size)
{
	if (version > 0)
		snprintf(buf, size, "%d.%d", version / 1000, version % 1000 / 10);
	else
		snprintf(buf, size, "unknown");
}

__attribute__((format(printf, 5, 6))) static cs_verdict_reason *add(cs_verdict *v, const char *code, bool blocks,
								    long entry, const char *fmt, ...)
{
	static cs_verdict_reason spare;
	cs_verdict_reason *r = v->nreasons < CS_VERDICT_REASONS ? &v->reason[v->nreasons++] : &spare;
	*r = (cs_verdict_reason){ .code = code, .blocks = blocks, .entry = entry };
	va_list ap;
	va_start(ap, fmt);
	vsnprintf(r->text, sizeof(r->text), fmt, ap);
	va_end(ap);
	if (blocks)
		v->go = false;
	return r;
}

static void fix(cs_verdict_reason *r, const char *text)
{
	snprintf(r->fix, sizeof(r->fix), "%s", text ? text : "");
}

static bool regular_file(const char *dir, const char *name)
{
	char path[PATH_MAX];
	struct stat st;
	return snprintf(path, sizeof(path), "%s/%s", dir, name) < (int)sizeof(path) && stat(path, &st) == 0 &&
		S_ISREG(st.st_mode);
}

/* CRIU loads every plugin of its plugin directory: cudasnap's must be
 * there, and CRIU's own cuda_plugin.so must not, since cudasnap's refuses
 * to run beside it (both would act on the same processes). */
static void judge_plugins(const cs_inspect *c, cs_verdict *v)
{
	const char *set = cs_env("CUDASNAP_CRIU_PLUGIN_DIR");
	snprintf(v->criu_plugin_dir, sizeof(v->criu_plugin_dir), "%s", set ? set : CS_CRIU_PLUGIN_DIR);
	const char *dir = v->criu_plugin_dir;
	v->criu_plugin = regular_file(dir, CS_CRIU_PLUGIN_FILE);
	v->criu_cuda_plugin = regular_file(dir, CS_CRIU_CUDA_PLUGIN_FILE);
	char fix_text[768];
	if (!v->criu_plugin) {
		snprintf(fix_text, sizeof(fix_text),
			 "Install %s in %.400s (the cudasnap package does), or set CUDASNAP_CRIU_PLUGIN_DIR to the "
			 "directory CRIU loads plugins from on this node (criu --libdir).",
			 CS_CRIU_PLUGIN_FILE, dir);
		fix(add(v, "criu-plugin", true, -1, "cudasnap's CRIU plugin is not in CRIU's plugin directory %s: %s",
			dir,
			c->inventory.plugins_listed ?
				"CRIU refuses the restore (\"Missing required plugin: cudasnap\")" :
				"CRIU would restore the processes without their GPU state, which stays in the images"),
		    fix_text);
	}
	if (v->criu_cuda_plugin) {
		snprintf(fix_text, sizeof(fix_text),
			 "Remove %.400s/%s: these images need cudasnap's plugin, which restores every process of the "
			 "tree as one transaction.",
			 dir, CS_CRIU_CUDA_PLUGIN_FILE);
		fix(add(v, "criu-plugin-conflict", true, -1,
			"CRIU's own CUDA plugin %s/%s sits beside cudasnap's: two GPU plugins would act on the same "
			"processes, so cudasnap's plugin refuses to run and CRIU fails the restore at its start",
			dir, CS_CRIU_CUDA_PLUGIN_FILE),
		    fix_text);
	}
}

/* The driver the restore needs: loaded, with the checkpoint API, and not
 * older than the one that checkpointed. */
static void judge_driver(const cs_manifest *m, cs_verdict *v, cs_driver **d)
{
	if (cs_driver_open(d, &v->driver_error) < 0) {
		cs_verdict_reason *r =
			add(v, "driver", true, -1, "no driver here can restore it: %s", v->driver_error.message);
		fix(r, v->driver_error.hint);
		return;
	}
	v->driver_loaded = true;
	v->driver_version = cs_driver_version(*d);
	v->can_remap = cs_driver_can_remap(*d);
	char here[16], then[16];
	cs_cuda_version_text(v->driver_version, here, sizeof(here));
	cs_cuda_version_text(m->driver_version, then, sizeof(then));
	if (!v->driver_version || !m->driver_version)
		add(v, "driver-version-unknown", false, -1,
		    "the driver version %s is not known, so it is not compared (here: CUDA %s, at the checkpoint: CUDA %s)",
		    v->driver_version ? "of the checkpoint" : "here", here, then);
	else if (v->driver_version < m->driver_version)
		fix(add(v, "driver-version", true, -1,
			"the driver here (CUDA %s, %d) is older than the one that checkpointed the processes (CUDA %s, "
			"%d): a restore needs a driver at least as new as the one that checkpointed",
			here, v->driver_version, then, m->driver_version),
		    "Restore on a node whose NVIDIA driver is as new as the checkpointing node's, or update this "
		    "node's driver.");
}

/* The map the plugin restores onto: CUDASNAP_DEVICE_MAP, else the one that
 * puts absent GPUs onto this node's (at the restore's start, before any
 * process exists: any GPU of this node). Fills pairs; false when none can be
 * made (a reason says why). */
static bool judge_map(const cs_manifest *m, cs_verdict *v, cs_gpu_pair **pairs, unsigned *npairs)
{
	const char *set = cs_env("CUDASNAP_DEVICE_MAP");
	if (set) {
		v->map_from_settings = true;
		v->device_map = strdup(set);
	} else {
		int r = cs_automap_make(m, v->gpus, v->ngpus, 0, &v->automap);
		if (r == -ENOSPC) {
			fix(add(v, "gpu-absent", true, -1,
				"%zu of the %zu GPUs the checkpoint's processes saw %s not on this node (%s first), and "
				"this node has too few other GPUs to stand in for them",
				v->automap.nabsent, v->automap.nrecorded, v->automap.nabsent == 1 ? "is" : "are",
				v->automap.stand_in[v->automap.nstand_in - 1].absent),
			    FIX_MAP);
			return false;
		}
		if (r < 0) {
			add(v, "gpu-absent", true, -1, "out of memory");
			return false;
		}
		v->device_map = v->automap.map ? strdup(v->automap.map) : NULL;
	}
	cs_error err = { 0 };
	if (v->device_map && cs_devmap_parse(v->device_map, v->gpus, v->ngpus, pairs, npairs, &err) < 0) {
		fix(add(v, "device-map", true, -1, "CUDASNAP_DEVICE_MAP does not name GPUs of this node: %s",
			err.message),
		    FIX_MAP);
		return false;
	}
	return true;
}

/* Where a map applies, the restore's session needs a driver that remaps,
 * and a map that covers every GPU each process saw. */
static void judge_remap(const cs_manifest *m, cs_verdict *v, const cs_gpu_pair *pairs, unsigned npairs)
{
	if (!v->device_map)
		return;
	if (v->driver_loaded && !v->can_remap)
		fix(add(v, "driver-remap", true, -1,
			"the processes would be restored onto other GPUs (%s), and this driver (version %d) cannot remap "
			"GPUs",
			v->device_map, v->driver_version),
		    "Remapping GPUs at restore needs NVIDIA driver R580 (CUDA 13.0) or newer; or restore on a node with "
		    "the checkpoint's GPUs.");
	for (size_t i = 0; i < m->n; i++) {
		cs_target t = v->t[i];
		t.pid = t.nspid; /* named as the process was, in its namespace */
		cs_error err = { 0 };
		if (cs_devmap_covers_recorded(pairs, npairs, v->gpus, v->ngpus, &t, &err) < 0)
			fix(add(v, "device-map", true, (long)i, "%s", err.message), FIX_MAP);
	}
}

static void judge_room(const cs_manifest *m, cs_verdict *v, cs_nvml *nv, const cs_gpu_pair *pairs, unsigned npairs)
{
	cs_sandbox sb;
	cs_sandbox_detect(NULL, &sb);
	v->ignore_gpu_memory = cs_env_on("CUDASNAP_IGNORE_GPU_MEMORY");
	cs_record_judge(m, pairs, npairs, v->gpus, v->ngpus, nv, sb.pid_ns == CS_PIDNS_HOST, v->room);
	v->judged = true;
	/* The setting makes the plugin ask the driver anyway: the restore then
	 * fails all the same, and destroys the state of what does not fit. */
	const char *set = v->ignore_gpu_memory ? " (CUDASNAP_IGNORE_GPU_MEMORY=1 is set: the plugin would not refuse "
						 "it, and the driver would destroy the process's checkpointed state)" :
						 "";
	for (size_t i = 0; i < m->n; i++) {
		const cs_gpu_room *r = &v->room[i];
		const char *comm = m->e[i].comm;
		int pid = (int)(m->e[i].nspid ? m->e[i].nspid : m->e[i].pid);
		if (r->verdict == CS_GPU_SHORT)
			fix(add(v, "gpu-memory", true, (long)i, "process %s (pid %d in its namespace): %s%s", comm, pid,
				r->why, set),
			    r->fix);
		else if (r->verdict == CS_GPU_ABSENT)
			fix(add(v, "gpu-absent", true, (long)i, "process %s (pid %d in its namespace): %s", comm, pid,
				r->why),
			    FIX_MAP);
		else if (r->verdict == CS_GPU_ROOM_UNKNOWN)
			fix(add(v, "gpu-memory-unknown", !v->ignore_gpu_memory, (long)i,
				"process %s (pid %d in its namespace): whether its restore fits in GPU memory cannot be "
				"known: %s, and the plugin refuses what it cannot judge%s",
				comm, pid, r->why, set),
			    r->fix);
	}
}

/* The files each park into files wrote: the restore refuses, before any
 * process exists, images where one is missing or of another size (what
 * each holds is checked against its MACs at its unpark). */
static void judge_park_files(const cs_inspect *c, cs_verdict *v)
{
	if (c->npark && !c->park_checked) {
		add(v, "park-files-unchecked", false, -1,
		    "%zu file%s of GPU memory parked into the images could not be looked at here (an archive read "
		    "from a pipe is read once)",
		    c->npark, c->npark == 1 ? "" : "s");
		return;
	}
	size_t k = 0;
	for (size_t i = 0; i < c->record.n; i++) {
		const cs_manifest_entry *e = &c->record.e[i];
		for (unsigned f = 0; f < e->park_nfiles && k < c->npark; f++, k++) {
			unsigned long long want = park_file_size(e->park_bytes, e->park_nfiles, f);
			if (c->park_sizes[k] >= 0 && (unsigned long long)c->park_sizes[k] == want)
				continue;
			cs_verdict_reason *r =
				add(v, "park-files", true, (long)i,
				    "process %s (pid %d at the dump) parked its GPU memory into %s%s.%u, which %s",
				    e->comm, (int)e->pid, c->images, e->park_name, f,
				    c->park_sizes[k] < 0 ? "is not there (or is not a regular file)" :
							   "is of another size");
			if (c->park_sizes[k] >= 0)
				snprintf(r->text + strlen(r->text), sizeof(r->text) - strlen(r->text),
					 " (%lld bytes, %llu expected)", c->park_sizes[k], want);
			fix(r, "The checkpoint is incomplete: copy it again whole from where it was made.");
		}
	}
}

void cs_inspect_judge(const cs_inspect *c, cs_verdict *v)
{
	memset(v, 0, sizeof(*v));
	v->go = true;
	const cs_manifest *m = &c->record;
	judge_plugins(c, v);
	judge_park_files(c, v);
	_cleanup_(cs_driver_freep) cs_driver *d = NULL;
	judge_driver(m, v, &d);
	_cleanup_(cs_nvml_closep) cs_nvml *nv = NULL;
	/* NVML's GPUs, else the driver's, as the plugin's check reads them. */
	cs_room_gpus_booked(NULL, NULL, &nv, &v->gpus, &v->ngpus, NULL, 0);
	v->nvml = cs_nvml_present(nv);
	snprintf(v->nvidia_driver, sizeof(v->nvidia_driver), "%s", cs_nvml_driver_version(nv));
	v->t = calloc(m->n + 1, sizeof(*v->t));
	v->room = calloc(m->n + 1, sizeof(*v->room));
	if (!v->t || !v->room) {
		add(v, "gpu-memory-unknown", true, -1, "out of memory");
		return;
	}
	_cleanup_free_ cs_gpu_pair *pairs = NULL;
	unsigned npairs = 0;
	bool mapped = judge_map(m, v, &pairs, &npairs);
	cs_record_targets(m, pairs, npairs, v->gpus, v->ngpus, v->t);
	if (!mapped)
		return; /* the plugin's init refuses the restore there, before judging room */
	judge_remap(m, v, pairs, npairs);
	judge_room(m, v, nv, pairs, npairs);
}

void cs_verdict_free(cs_verdict *v)
{
	free(v->gpus);
	free(v->device_map);
	cs_automap_free(&v->automap);
	free(v->t);
	free(v->room);
	memset(v, 0, sizeof(*v));
}
