#include "jsonout.h"
#include "plan.h"

#include <stdio.h>
#include <string.h>

json_object *cs_json_unreadable(const cs_ptable *t)
{
	json_object *a = json_object_new_array();
	for (size_t i = 0; i < t->nunreadable; i++) {
		json_object *u = json_object_new_object();
		json_object_object_add(u, "pid", json_object_new_int(t->unreadable[i].pid));
		json_object_object_add(u, "error", json_object_new_string(strerror(t->unreadable[i].errnum)));
		json_object_array_add(a, u);
	}
	return a;
}

json_object *cs_json_driver(const cs_driver *d)
{
	json_object *o = json_object_new_object();
	bool loaded = cs_driver_loaded(d);
	json_object_object_add(o, "loaded", json_object_new_boolean(loaded));
	int v = cs_driver_version(d);
	cs_json_add_int_or_null(o, "version", v, v > 0);
	cs_json_add_str_or_null(o, "path", d ? cs_driver_path(d) : NULL);
	const cs_error *e = cs_driver_error(d);
	cs_json_add_str_or_null(o, "error", !loaded && e ? e->message : NULL);
	cs_json_add_str_or_null(o, "hint", !loaded && e && e->hint[0] ? e->hint : NULL);
	return o;
}

json_object *cs_json_proc(const cs_proc *p, const cs_driver *d)
{
	json_object *o = json_object_new_object();
	json_object_object_add(o, "pid", json_object_new_int(p->pid));
	json_object_object_add(o, "ppid", json_object_new_int(p->ppid));
	json_object_object_add(o, "comm", json_object_new_string(p->comm));
	json_object_object_add(o, "class", json_object_new_string(cs_class_name(p->cls)));
	/* A stopped or frozen process was not asked: its halt is its state. */
	cs_json_add_str_or_null(o, "state", p->halt ? cs_halt_name(p->halt) : cs_state_name(p->state));
	static const char *const halts[] = { NULL, "stopped", "traced", "frozen" };
	cs_json_add_str_or_null(o, "halt", (unsigned)p->halt < 4 ? halts[p->halt] : NULL);
	cs_json_add_int_or_null(o, "restore_tid", p->restore_tid, p->restore_tid > 0);
	json_object_object_add(o, "device_fds", json_object_new_int(p->device_fds));
	json_object_object_add(o, "device_maps", json_object_new_int(p->device_maps));
	json_object_object_add(o, "uid", json_object_new_int64(p->uid));
	json_object_object_add(o, "start_time", json_object_new_uint64(p->start_time));
	json_object_object_add(o, "maps_libcuda", json_object_new_boolean(p->maps_libcuda));
	json_object_object_add(o, "maps_nvml", json_object_new_boolean(p->maps_nvml));
	bool asked = p->cu_result != -1;
	cs_json_add_str_or_null(o, "driver_answer", asked ? cs_cu_name(d, p->cu_result) : NULL);
	json_object_object_add(o, "nvml_only", json_object_new_boolean(p->nvml_only));
	json_object_object_add(o, "tool", json_object_new_boolean(p->tool));
	cs_json_add_str_or_null(o, "busy", p->busy ? p->busy_holder : NULL);
	cs_json_add_str_or_null(o, "ipc_import", p->ipc_import[0] ? p->ipc_import : NULL);
	return o;
}

static const char *const known_words[] = { "unknown", "at-most", "exact" };
static const char *const seen_words[] = { "none", "whole", "part", "unread" };
static const char *const route_words[] = { "own", "initial-namespace", "target" };
static const char *const room_words[] = { "known", "part", "unknown" };

/* A node's path: a prefix of its chain's. */
static json_object *node_path(const cs_memcg *cg, const cs_memcg_node *n)
{
	return n ? json_object_new_string_len(cg->path, (int)n->len) : NULL;
}

static json_object *fit_json(const cs_fit *f)
{
	json_object *o = json_object_new_object();
	bool known = f->known != CS_GPU_UNKNOWN;
	json_object_object_add(o, "gpu_bytes_known", json_object_new_string(known_words[f->known % 3]));
	cs_json_add_int_or_null(o, "gpu_bytes", (long long)f->gpu, known);
	cs_json_add_int_or_null(o, "host_bytes_needed", (long long)f->need, known);
	long long room = -1, limit = -1;
	const char *which = NULL;
	const cs_memcg_node *n = cs_fit_tightest(f, &room, &limit, &which);
	const cs_memcg *c = &f->cg;
	json_object *cg = json_object_new_object();
	cs_json_add_str_or_null(cg, "path", c->path[0] ? c->path : NULL);
	cs_json_add_int_or_null(cg, "version", c->version, c->version > 0);
	json_object_object_add(cg, "seen", json_object_new_string(seen_words[c->seen % 4]));
	json_object_object_add(cg, "route", json_object_new_string(route_words[c->route % 3]));
	json_object_object_add(cg, "top", node_path(c, c->n ? &c->node[c->n - 1] : NULL));
	json_object_object_add(cg, "room_known", json_object_new_string(room_words[f->room % 3]));
	json_object_object_add(cg, "tightest", node_path(c, n));
	cs_json_add_str_or_null(cg, "limit_file", n ? which : NULL);
	cs_json_add_int_or_null(cg, "limit_bytes", limit, n != NULL);
	cs_json_add_int_or_null(cg, "room_bytes", room, n != NULL);
	cs_json_add_str_or_null(cg, "problem", c->problem[0] ? c->problem : NULL);
	json_object_object_add(o, "cgroup", cg);
	return o;
}

/* Restore: what each process needs on the GPUs it restores onto. */
static json_object *restore_json(const cs_plan_entry *e)
{
	json_object *o = json_object_new_object();
	bool known = e->fit.known != CS_GPU_UNKNOWN;
	json_object_object_add(o, "gpu_bytes_known", json_object_new_string(known_words[e->fit.known % 3]));
	cs_json_add_int_or_null(o, "gpu_bytes_needed", (long long)e->fit.gpu, known);
	json_object *arr = json_object_new_array();
	for (unsigned k = 0; k < e->ngpu; k++) {
		const cs_plan_gpu *g = &e->gpu[k];
		json_object *x = json_object_new_object();
		json_object_object_add(x, "uuid", json_object_new_string(g->uuid));
		cs_json_add_int_or_null(x, "index", g->index, g->index >= 0);
		cs_json_add_int_or_null(x, "bytes_needed", (long long)g->need, g->need > 0);
		cs_json_add_int_or_null(x, "free_bytes", (long long)g->free, g->free_known);
		json_object_array_add(arr, x);
	}
	json_object_object_add(o, "gpus", arr);
	return o;
}

static const char *verdict(const cs_plan_entry *e)
{
	return e->blocked ? "refused" : e->target ? "ok" : "left-alone";
}

json_object *cs_json_plan(const cs_plan *p)
{
	json_object *o = json_object_new_object();
	json_object_object_add(o, "command", json_object_new_string(cs_op_name(p->op)));
	json_object_object_add(o, "dry_run", json_object_new_boolean(true));
	json_object_object_add(o, "go", json_object_new_boolean(p->go));
	json_object *arr = json_object_new_array();
	for (size_t i = 0; i < p->n; i++) {
		const cs_plan_entry *e = &p->e[i];
		json_object *x = json_object_new_object();
		json_object_object_add(x, "pid", json_object_new_int(e->pid));
		json_object_object_add(x, "comm", json_object_new_string(e->comm));
		json_object_object_add(x, "class", json_object_new_string(cs_class_name(e->cls)));
		cs_json_add_str_or_null(x, "state", cs_state_name(e->state));
		json_object_object_add(x, "target", json_object_new_boolean(e->target));
		json_object_object_add(x, "verdict", json_object_new_string(verdict(e)));
		if (e->target && (p->op == CS_OP_CHECKPOINT || p->op == CS_OP_CHECKPOINT_LOCKED))
			json_object_object_add(x, "memory", fit_json(&e->fit));
		if (e->target && p->op == CS_OP_RESTORE)
			json_object_object_add(x, "gpu_memory", restore_json(e));
		json_object *rs = json_object_new_array();
		for (size_t k = 0; k < e->nreasons; k++) {
			json_object *r = json_object_new_object();
			json_object_object_add(r, "code", json_object_new_string(e->reason[k].code));
			json_object_object_add(r, "blocks", json_object_new_boolean(e->reason[k].blocks));
			json_object_object_add(r, "text", json_object_new_string(e->reason[k].text));
			cs_json_add_str_or_null(r, "fix", e->reason[k].fix[0] ? e->reason[k].fix : NULL);
			json_object_array_add(rs, r);
		}
		json_object_object_add(x, "reasons", rs);
		json_object_array_add(arr, x);
	}
	json_object_object_add(o, "processes", arr);
	json_object *t = json_object_new_object();
	json_object_object_add(t, "targets", json_object_new_uint64(p->targets));
	json_object_object_add(t, "refused", json_object_new_uint64(p->blocked));
	json_object_object_add(t, "memory_unknown", json_object_new_uint64(p->unknown_memory));
	json_object_object_add(t, "gpu_bytes", json_object_new_uint64(p->gpu_bytes));
	json_object_object_add(t, "host_bytes_needed", json_object_new_uint64(p->host_bytes));
	json_object_object_add(t, "expected_seconds", json_object_new_double(p->seconds));
	json_object_object_add(o, "totals", t);
	return o;
}
