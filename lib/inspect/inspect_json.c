/* 'cudasnap inspect --json': one object with what the checkpoint holds and
 * the verdict for this node (keys documented in cudasnap(7)). */
#include "inspect.h"
#include "util.h"

#include <stdio.h>
#include <string.h>

static json_object *str_or_null(const char *s)
{
	return s && s[0] ? json_object_new_string(s) : NULL;
}

static json_object *container_json(const cs_ckpt_meta *m)
{
	if (!cs_ckpt_meta_any(m))
		return NULL;
	json_object *o = json_object_new_object();
	json_object_object_add(o, "name", str_or_null(m->name));
	json_object_object_add(o, "id", str_or_null(m->id));
	json_object_object_add(o, "image", str_or_null(m->image));
	json_object_object_add(o, "kubernetes_container", str_or_null(m->k8s_container));
	json_object_object_add(o, "pod", str_or_null(m->pod));
	json_object_object_add(o, "namespace", str_or_null(m->pod_namespace));
	return o;
}

static json_object *uuids_json(const char *list)
{
	json_object *a = json_object_new_array();
	for (const char *g = list; *g;) {
		size_t len = strcspn(g, ",");
		json_object_array_add(a, json_object_new_string_len(g, (int)len));
		g += len + (g[len] == ',');
	}
	return a;
}

static json_object *used_json(const cs_manifest_entry *e)
{
	if (!e->use_known)
		return NULL;
	json_object *a = json_object_new_array();
	for (unsigned k = 0; k < e->nuse; k++) {
		json_object *u = json_object_new_object();
		json_object_object_add(u, "uuid", json_object_new_string(e->use[k].uuid));
		cs_json_add_int_or_null(u, "bytes", (long long)e->use[k].bytes, e->use[k].bytes > 0);
		json_object_array_add(a, u);
	}
	return a;
}

static const char *const verdict_words[] = {
	[CS_GPU_FITS] = "fits", [CS_GPU_SHORT] = "short", [CS_GPU_ABSENT] = "absent", [CS_GPU_ROOM_UNKNOWN] = "unknown",
	[CS_GPU_NONE] = "none",
};

/* Where a process restores onto here, what it needs there and the room. */
static json_object *restore_json(const cs_verdict *v, size_t i)
{
	if (!v || !v->t)
		return NULL;
	const cs_target *t = &v->t[i];
	json_object *o = json_object_new_object();
	int verdict = v->judged ? v->room[i].verdict : -1;
	cs_json_add_str_or_null(o, "verdict",
				verdict >= 0 && (size_t)verdict < CS_ARRAY_SIZE(verdict_words) ?
					verdict_words[verdict] :
					NULL);
	json_object *a = json_object_new_array();
	for (unsigned k = 0; k < t->nneed; k++) {
		const cs_nvml_gpu *g = cs_gpu_by_uuid(v->gpus, v->ngpus, t->need[k].uuid);
		json_object *x = json_object_new_object();
		json_object_object_add(x, "uuid", json_object_new_string(t->need[k].uuid));
		cs_json_add_int_or_null(x, "index", g ? (long long)g->index : 0, g != NULL);
		cs_json_add_int_or_null(x, "bytes_needed", (long long)t->need[k].bytes, t->need[k].bytes > 0);
		cs_json_add_int_or_null(x, "free_bytes", g ? (long long)g->memory_free : 0, g && g->memory_known);
		json_object_array_add(a, x);
	}
	json_object_object_add(o, "gpus", a);
	return o;
}

static json_object *process_json(const cs_manifest_entry *e, const cs_verdict *v, size_t i)
{
	json_object *o = json_object_new_object();
	json_object_object_add(o, "pid", json_object_new_int(e->nspid ? e->nspid : e->pid));
	json_object_object_add(o, "pid_at_checkpoint", json_object_new_int(e->pid));
	json_object_object_add(o, "comm", json_object_new_string(e->comm));
	cs_json_add_str_or_null(o, "cuda_visible_devices", e->visible_devices[0] ? e->visible_devices : NULL);
	json_object_object_add(o, "gpus_seen", uuids_json(e->gpus));
	json_object_object_add(o, "gpus_used", used_json(e));
	cs_json_add_int_or_null(o, "bytes", (long long)e->bytes, e->bytes_known || e->bytes > 0);
	json_object_object_add(o, "restore", restore_json(v, i));
	return o;
}

static json_object *record_json(const cs_manifest *m, const cs_verdict *v)
{
	json_object *o = json_object_new_object();
	cs_json_add_str_or_null(o, "created", m->created[0] ? m->created : NULL);
	cs_json_add_str_or_null(o, "cudasnap_version", m->cudasnap_version[0] ? m->cudasnap_version : NULL);
	cs_json_add_int_or_null(o, "driver_version", m->driver_version, m->driver_version > 0);
	json_object *gpus = m->gpus_known ? json_object_new_array() : NULL;
	for (size_t k = 0; gpus && k < m->ngpus; k++) {
		json_object *g = json_object_new_object();
		json_object_object_add(g, "uuid", json_object_new_string(m->gpus[k].uuid));
		json_object_object_add(g, "name", str_or_null(m->gpus[k].name));
		cs_json_add_int_or_null(g, "memory_total", (long long)m->gpus[k].memory_total,
					m->gpus[k].memory_total > 0);
		json_object_array_add(gpus, g);
	}
	json_object_object_add(o, "gpus", gpus);
	unsigned long long bytes = 0;
	json_object *procs = json_object_new_array();
	for (size_t i = 0; i < m->n; i++) {
		bytes += m->e[i].bytes;
		json_object_array_add(procs, process_json(&m->e[i], v, i));
	}
	json_object_object_add(o, "bytes", json_object_new_uint64(bytes));
	json_object_object_add(o, "processes", procs);
	return o;
}

static json_object *node_json(const cs_verdict *v)
{
	json_object *o = json_object_new_object(), *d = json_object_new_object();
	json_object_object_add(d, "loaded", json_object_new_boolean(v->driver_loaded));
	cs_json_add_int_or_null(d, "version", v->driver_version, v->driver_version > 0);
	json_object_object_add(d, "can_remap", json_object_new_boolean(v->can_remap));
	cs_json_add_str_or_null(d, "error", v->driver_loaded ? NULL : v->driver_error.message);
	json_object_object_add(o, "driver", d);
	cs_json_add_str_or_null(o, "nvidia_driver", v->nvidia_driver[0] ? v->nvidia_driver : NULL);
	json_object_object_add(o, "criu_plugin_dir", json_object_new_string(v->criu_plugin_dir));
	json_object_object_add(o, "criu_plugin", json_object_new_boolean(v->criu_plugin));
	json_object_object_add(o, "criu_cuda_plugin", json_object_new_boolean(v->criu_cuda_plugin));
	json_object *gpus = json_object_new_array();
	for (size_t k = 0; k < v->ngpus; k++) {
		const cs_nvml_gpu *g = &v->gpus[k];
		json_object *x = json_object_new_object();
		json_object_object_add(x, "index", json_object_new_int((int)g->index));
		json_object_object_add(x, "uuid", json_object_new_string(g->uuid));
		json_object_object_add(x, "name", str_or_null(g->name));
		cs_json_add_int_or_null(x, "memory_total", (long long)g->memory_total, g->memory_known);
		cs_json_add_int_or_null(x, "memory_free", (long long)g->memory_free, g->memory_known);
		json_object_array_add(gpus, x);
	}
	json_object_object_add(o, "gpus", gpus);
	cs_json_add_str_or_null(o, "device_map", v->device_map);
	cs_json_add_str_or_null(o, "device_map_from",
				!v->device_map               ? NULL :
					v->map_from_settings ? "settings" :
							       "automatic");
	json_object *stand = json_object_new_array();
	for (size_t k = 0; k < v->automap.nstand_in; k++) {
		const cs_stand_in *s = &v->automap.stand_in[k];
		json_object *x = json_object_new_object();
		json_object_object_add(x, "absent", json_object_new_string(s->absent));
		cs_json_add_str_or_null(x, "onto", s->onto ? s->onto->uuid : NULL);
		cs_json_add_int_or_null(x, "index", s->onto ? (long long)s->onto->index : 0, s->onto != NULL);
		json_object_array_add(stand, x);
	}
	json_object_object_add(o, "stand_ins", stand);
	return o;
}

static json_object *reasons_json(const cs_manifest *m, const cs_verdict *v)
{
	json_object *a = json_object_new_array();
	for (size_t k = 0; v && k < v->nreasons; k++) {
		const cs_verdict_reason *r = &v->reason[k];
		const cs_manifest_entry *e = r->entry >= 0 && (size_t)r->entry < m->n ? &m->e[r->entry] : NULL;
		json_object *x = json_object_new_object();
		json_object_object_add(x, "code", json_object_new_string(r->code));
		json_object_object_add(x, "blocks", json_object_new_boolean(r->blocks));
		cs_json_add_int_or_null(x, "pid", e ? (e->nspid ? e->nspid : e->pid) : 0, e != NULL);
		cs_json_add_str_or_null(x, "comm", e ? e->comm : NULL);
		json_object_object_add(x, "text", json_object_new_string(r->text));
		cs_json_add_str_or_null(x, "fix", r->fix[0] ? r->fix : NULL);
		json_object_array_add(a, x);
	}
	return a;
}

json_object *cs_json_inspect(const cs_inspect *c, const cs_verdict *v, int exit_status)
{
	json_object *o = json_object_new_object();
	json_object_object_add(o, "path", json_object_new_string(c->path));
	json_object_object_add(o, "source", json_object_new_string(c->archive ? "archive" : "directory"));
	json_object *ar = NULL;
	if (c->archive) {
		ar = json_object_new_object();
		json_object_object_add(ar, "format", str_or_null(c->format));
		json_object_object_add(ar, "compression", str_or_null(c->filters));
	}
	json_object_object_add(o, "archive", ar);
	json_object_object_add(o, "images", json_object_new_string(c->images));
	json_object_object_add(o, "container", container_json(&c->meta));
	json_object *plugins = c->inventory.plugins_listed ? json_object_new_array() : NULL;
	for (size_t k = 0; plugins && k < c->inventory.nplugins && k < CS_INVENTORY_PLUGINS; k++)
		json_object_array_add(plugins, json_object_new_string(c->inventory.plugins[k]));
	json_object_object_add(o, "criu_plugins", plugins);
	json_object_object_add(o, "gpu_part", json_object_new_boolean(c->gpu_part));
	json_object_object_add(o, "record", c->gpu_part ? record_json(&c->record, v) : NULL);
	json_object_object_add(o, "node", c->gpu_part && v ? node_json(v) : NULL);
	json_object_object_add(o, "would_restore", json_object_new_boolean(!c->gpu_part || (v && v->go)));
	json_object_object_add(o, "reasons", reasons_json(&c->record, c->gpu_part ? v : NULL));
	json_object_object_add(o, "exit_status", json_object_new_int(exit_status));
	json_object_object_add(o, "error", NULL);
	return o;
}

json_object *cs_json_inspect_error(const cs_inspect *c, const cs_error *e, int exit_status)
{
	json_object *o = json_object_new_object();
	json_object_object_add(o, "path", json_object_new_string(c->path));
	json_object_object_add(o, "bound", str_or_null(c->bound));
	json_object_object_add(o, "would_restore", json_object_new_boolean(false));
	json_object_object_add(o, "exit_status", json_object_new_int(exit_status));
	json_object_object_add(o, "error", cs_json_error(e));
	return o;
}
