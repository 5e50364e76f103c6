#include "json.h"

#include <stdio.h>
#include <string.h>

void cs_json_add_int_or_null(json_object *o, const char *key, long long v, bool valid)
{
	json_object_object_add(o, key, valid ? json_object_new_int64(v) : NULL);
}

void cs_json_add_str_or_null(json_object *o, const char *key, const char *s)
{
	json_object_object_add(o, key, s ? json_object_new_string(s) : NULL);
}

json_object *cs_json_error(const cs_error *e)
{
	json_object *o = json_object_new_object();
	json_object_object_add(o, "kind", json_object_new_string(cs_status_name(e->status)));
	json_object_object_add(o, "message", json_object_new_string(e->message));
	cs_json_add_str_or_null(o, "hint", e->hint[0] ? e->hint : NULL);
	cs_json_add_int_or_null(o, "cuda_result", e->cu, e->status == CS_EDRIVER);
	return o;
}

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
	return o;
}

int cs_json_print(json_object *o)
{
	const char *s = json_object_to_json_string_ext(o, JSON_C_TO_STRING_PRETTY | JSON_C_TO_STRING_NOSLASHESCAPE);
	int r = printf("%s\n", s) < 0 ? -1 : 0;
	json_object_put(o);
	return fflush(stdout) == 0 ? r : -1;
}
