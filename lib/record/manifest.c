#include "manifest.h"
#include "park_find.h"
#include "json.h"
#include "nvml.h"
#include "state.h"
#include "proc.h"
#include "util.h"

#include <limits.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>
#include <time.h>

#define HINT_CORRUPT \
	"Remove the manifest (restore then discovers checkpointed processes itself), " \
	"or pass --ignore-manifest."

static int by_ckpt_seq(const void *a, const void *b)
{
	const cs_target *x = *(const cs_target *const *)a, *y = *(const cs_target *const *)b;
	unsigned long p = x->seq[CS_STEP_CHECKPOINT], q = y->seq[CS_STEP_CHECKPOINT];
	return (p > q) - (p < q);
}

static json_object *entry_json(const cs_target *t, int order)
{
	json_object *o = json_object_new_object();
	json_object_object_add(o, "pid", json_object_new_int(t->pid));
	if (t->nspid)
		json_object_object_add(o, "nspid", json_object_new_int(t->nspid));
	json_object_object_add(o, "start_time", json_object_new_uint64(t->start_time));
	json_object_object_add(o, "comm", json_object_new_string(t->comm));
	json_object_object_add(o, "order", json_object_new_int(order));
	cs_json_add_str_or_null(o, "cuda_visible_devices", t->visible_devices[0] ? t->visible_devices : NULL);
	json_object *gpus = t->gpus[0] ? json_object_new_array() : NULL;
	for (const char *g = t->gpus; gpus && *g;) {
		size_t len = strcspn(g, ",");
		json_object_array_add(gpus, json_object_new_string_len(g, (int)len));
		g += len + (g[len] == ',');
	}
	json_object_object_add(o, "gpus", gpus);
	/* Nothing moved where the resident size after could not be read is
	 * nothing measured: null. */
	json_object_object_add(o, "bytes", t->bytes || t->rss_after ? json_object_new_uint64(t->bytes) : NULL);
	json_object *used = t->use_known ? json_object_new_array() : NULL;
	for (unsigned k = 0; used && k < t->nuse; k++) {
		json_object *u = json_object_new_object();
		json_object_object_add(u, "uuid", json_object_new_string(t->use[k].uuid));
		json_object_object_add(u, "bytes", t->use[k].bytes ? json_object_new_uint64(t->use[k].bytes) : NULL);
		json_object_array_add(used, u);
	}
	json_object_object_add(o, "used_gpus", used);
	json_object *tm = json_object_new_object();
	for (int s = 0; s < CS_STEP_COUNT; s++)
		if (t->done[s])
			json_object_object_add(tm, cs_step_name((cs_step)s), json_object_new_double(t->seconds[s]));
	json_object_object_add(o, "seconds", tm);
	json_object *pf = t->park_nfiles ? json_object_new_object() : NULL;
	if (pf) {
		/* none: the images directory the record is in */
		cs_json_add_str_or_null(pf, "dir", t->park_dir[0] ? t->park_dir : NULL);
		json_object_object_add(pf, "name", json_object_new_string(t->park_name));
		json_object_object_add(pf, "count", json_object_new_int((int)t->park_nfiles));
		json_object_object_add(pf, "bytes", json_object_new_uint64(t->park_bytes));
		json_object_object_add(pf, "direct", json_object_new_int((int)t->park_direct));
	}
	json_object_object_add(o, "park_files", pf);
	return o;
}

/* Whether t saw or used the GPU uuid. */
static bool names_gpu(const cs_target *t, const char *uuid)
{
	size_t len = strlen(uuid);
	for (const char *g = t->gpus; *g;) {
		size_t k = strcspn(g, ",");
		if (k == len && strncasecmp(g, uuid, len) == 0)
			return true;
		g += k + (g[k] == ',');
	}
	for (unsigned k = 0; t->use_known && k < t->nuse; k++)
		if (strcasecmp(t->use[k].uuid, uuid) == 0)
			return true;
	return false;
}

static bool listed(json_object *arr, const char *uuid)
{
	for (size_t i = 0; i < json_object_array_length(arr); i++) {
		json_object *u;
		const char *s = json_object_object_get_ex(json_object_array_get_idx(arr, i), "uuid", &u) ?
			json_object_get_string(u) :
			NULL;
		if (s && strcasecmp(s, uuid) == 0)
			return true;
	}
	return false;
}

static void add_gpu(json_object *arr, const char *uuid, const cs_nvml_gpu *g)
{
	json_object *o = json_object_new_object();
	json_object_object_add(o, "uuid", json_object_new_string(uuid));
	cs_json_add_str_or_null(o, "name", g && g->name[0] ? g->name : NULL);
	cs_json_add_int_or_null(o, "memory_total", g ? (long long)g->memory_total : 0,
				g && g->memory_known && g->memory_total);
	json_object_array_add(arr, o);
}

/* The GPUs the targets v[0..m) saw or used: this machine's in NVML's order,
 * then any other UUID they name (a GPU NVML did not list), unnamed. */
static json_object *gpus_json(const cs_target *const *v, size_t m, const cs_nvml_gpu *gpus, size_t ngpus)
{
	json_object *arr = json_object_new_array();
	for (size_t k = 0; k < ngpus; k++)
		for (size_t i = 0; i < m; i++)
			if (names_gpu(v[i], gpus[k].uuid)) {
				add_gpu(arr, gpus[k].uuid, &gpus[k]);
				break;
			}
	for (size_t i = 0; i < m; i++) {
		for (const char *g = v[i]->gpus; *g;) {
			size_t k = strcspn(g, ",");
			char uuid[48];
			snprintf(uuid, sizeof(uuid), "%.*s", (int)(k < sizeof(uuid) ? k : sizeof(uuid) - 1), g);
			if (!listed(arr, uuid))
				add_gpu(arr, uuid, NULL);
			g += k + (g[k] == ',');
		}
		for (unsigned k = 0; v[i]->use_known && k < v[i]->nuse; k++)
			if (!listed(arr, v[i]->use[k].uuid))
				add_gpu(arr, v[i]->use[k].uuid, NULL);
	}
	return arr;
}

char *cs_manifest_render(const cs_target *t, size_t n, const cs_driver *d, double wall, const cs_nvml_gpu *gpus,
			 size_t ngpus)
{
	/* v holds pointers: sizeof(*v) is one pointer's size, as meant. */
	_cleanup_free_ const cs_target **v = calloc(n ? n : 1, sizeof(*v)); // NOLINT(bugprone-sizeof-expression)
	if (!v)
		return NULL;
	size_t m = 0;
	for (size_t i = 0; i < n; i++)
		/* and one left running, parked into files that only this names */
		if ((t[i].done[CS_STEP_CHECKPOINT] && t[i].state == CS_STATE_CHECKPOINTED) ||
		    (t[i].parked && t[i].park_nfiles && t[i].state == CS_STATE_RUNNING))
			v[m++] = &t[i];
	qsort(v, m, sizeof(*v), by_ckpt_seq); // NOLINT(bugprone-sizeof-expression): see above
	_cleanup_(json_object_putp) json_object *o = json_object_new_object();
	json_object_object_add(o, "version", json_object_new_int(1));
	json_object_object_add(o, "cudasnap_version", json_object_new_string(CUDASNAP_VERSION));
	char when[40];
	time_t now = time(NULL);
	strftime(when, sizeof(when), "%Y-%m-%dT%H:%M:%SZ", gmtime(&now));
	json_object_object_add(o, "created", json_object_new_string(when));
	json_object_object_add(o, "driver_version", json_object_new_int(cs_driver_version(d)));
	json_object_object_add(o, "wall_seconds", json_object_new_double(wall));
	json_object_object_add(o, "gpus", gpus_json(v, m, gpus, gpus ? ngpus : 0));
	json_object *arr = json_object_new_array();
	for (size_t i = 0; i < m; i++)
		json_object_array_add(arr, entry_json(v[i], (int)i));
	json_object_object_add(o, "processes", arr);
	return strdup(json_object_to_json_string_ext(o, JSON_C_TO_STRING_PRETTY));
}

static bool get_int(json_object *o, const char *key, long long min, long long max, long long *out)
{
	json_object *v;
	if (!json_object_object_get_ex(o, key, &v) || !json_object_is_type(v, json_type_int))
		return false;
	errno = 0;
	long long x = json_object_get_int64(v);
	if (errno || x < min || x > max)
		return false;
	*out = x;
	return true;
}

static bool get_str(json_object *o, const char *key, char *dst, size_t n, bool optional)
{
	json_object *v;
	if (!json_object_object_get_ex(o, key, &v) || json_object_is_type(v, json_type_null)) {
		dst[0] = '\0';
		return optional;
	}
	if (!json_object_is_type(v, json_type_string))
		return false;
	const char *s = json_object_get_string(v);
	cs_sanitize(dst, n, s, (size_t)json_object_get_string_len(v));
	return true;
}

/* "gpus": absent, null, or an array of GPU UUIDs, kept comma-separated;
 * anything else makes the entry malformed. */
static int get_gpus(json_object *o, char *dst, size_t size)
{
	json_object *arr;
	dst[0] = '\0';
	if (!json_object_object_get_ex(o, "gpus", &arr) || json_object_is_type(arr, json_type_null))
		return 0;
	if (!json_object_is_type(arr, json_type_array))
		return -1;
	size_t used = 0;
	for (size_t i = 0; i < json_object_array_length(arr); i++) {
		json_object *g = json_object_array_get_idx(arr, i);
		uint8_t uuid[16];
		if (!json_object_is_type(g, json_type_string) || cs_gpu_uuid_parse(json_object_get_string(g), uuid) < 0)
			return -1;
		char text[CS_GPU_UUID_STRLEN];
		cs_gpu_uuid_format(uuid, text);
		int w = snprintf(dst + used, size - used, "%s%s", used ? "," : "", text);
		if (w < 0 || (size_t)w >= size - used)
			return -1;
		used += (size_t)w;
	}
	return 0;
}

/* "used_gpus": absent or null (not recorded), or an array of {"uuid": a GPU
 * UUID, "bytes": a size or null}; anything else makes the entry malformed. */
static int get_used(json_object *o, cs_manifest_entry *e)
{
	json_object *arr;
	e->nuse = 0;
	e->use_known = false;
	if (!json_object_object_get_ex(o, "used_gpus", &arr) || json_object_is_type(arr, json_type_null))
		return 0;
	if (!json_object_is_type(arr, json_type_array) || json_object_array_length(arr) > CS_TARGET_GPUS)
		return -1;
	for (size_t i = 0; i < json_object_array_length(arr); i++) {
		json_object *u = json_object_array_get_idx(arr, i), *b;
		uint8_t uuid[16];
		char text[CS_GPU_UUID_STRLEN];
		if (!get_str(u, "uuid", text, sizeof(text), false) || cs_gpu_uuid_parse(text, uuid) < 0)
			return -1;
		long long bytes = 0;
		bool null = !json_object_object_get_ex(u, "bytes", &b) || json_object_is_type(b, json_type_null);
		if (!null && !get_int(u, "bytes", 0, (long long)CS_GPU_BYTES_MAX, &bytes))
			bytes = 0; /* a size no GPU holds: unknown, as an absent one */
		cs_gpu_uuid_format(uuid, e->use[e->nuse].uuid);
		e->use[e->nuse++].bytes = (unsigned long long)bytes;
	}
	e->use_known = true;
	return 0;
}

/* "cudasnap-gpumem.PID.START", as cs_park_files_name makes it: nothing a
 * path could be made of. */
static bool park_files_named(const char *name)
{
	const char *p = name + strlen("cudasnap-gpumem.");
	if (strncmp(name, "cudasnap-gpumem.", strlen("cudasnap-gpumem.")) != 0)
		return false;
	for (int part = 0; part < 2; part++) {
		size_t digits = strspn(p, "0123456789");
		if (digits == 0 || digits > 20 || p[digits] != (part == 0 ? '.' : 0))
			return false;
		p += digits + 1;
	}
	return true;
}

/* "park_files": absent or null, or {"dir": an absolute path, "name": the
 * files' base name (cudasnap-gpumem.PID.START), "count": 1 to
 * PARK_FILES_MAX, "bytes"}; anything else makes the record malformed. */
static int get_park_files(json_object *o, cs_manifest_entry *e)
{
	json_object *pf;
	if (!json_object_object_get_ex(o, "park_files", &pf) || json_object_is_type(pf, json_type_null))
		return 0;
	long long count, bytes;
	if (!json_object_is_type(pf, json_type_object) || !get_str(pf, "dir", e->park_dir, sizeof(e->park_dir), true) ||
	    (e->park_dir[0] && e->park_dir[0] != '/') ||
	    !get_str(pf, "name", e->park_name, sizeof(e->park_name), false) || !park_files_named(e->park_name) ||
	    !get_int(pf, "count", 1, PARK_FILES_MAX, &count) ||
	    !get_int(pf, "bytes", 0, (long long)CS_GPU_BYTES_MAX, &bytes))
		return -1;
	e->park_nfiles = (unsigned)count;
	e->park_bytes = (unsigned long long)bytes;
	return 0;
}

static int parse_entry(json_object *o, cs_manifest_entry *e)
{
	long long pid, order, start;
	if (!json_object_is_type(o, json_type_object) || !get_int(o, "pid", 1, INT_MAX, &pid) ||
	    !get_int(o, "order", 0, INT_MAX, &order) || !get_int(o, "start_time", 0, LLONG_MAX, &start) ||
	    !get_str(o, "comm", e->comm, sizeof(e->comm), false) ||
	    !get_str(o, "cuda_visible_devices", e->visible_devices, sizeof(e->visible_devices), true))
		return -1;
	e->pid = (pid_t)pid;
	e->order = (int)order;
	e->start_time = (unsigned long long)start;
	long long bytes, nspid;
	/* Records travel between machines: a size no process can have is unknown. */
	e->bytes_known = get_int(o, "bytes", 0, (long long)CS_GPU_BYTES_MAX, &bytes);
	e->bytes = e->bytes_known ? (unsigned long long)bytes : 0;
	e->nspid = get_int(o, "nspid", 1, INT_MAX, &nspid) ? (pid_t)nspid : 0;
	if (get_used(o, e) < 0 || get_park_files(o, e) < 0)
		return -1;
	return get_gpus(o, e->gpus, sizeof(e->gpus));
}

/* The top-level "gpus": absent or null (not recorded), or an array of
 * {"uuid": a GPU UUID, "name": a string or null, "memory_total": a size or
 * null}; anything else makes the record malformed. */
static int get_record_gpus(json_object *root, cs_manifest *m)
{
	json_object *arr;
	if (!json_object_object_get_ex(root, "gpus", &arr) || json_object_is_type(arr, json_type_null))
		return 0;
	size_t n = json_object_is_type(arr, json_type_array) ? json_object_array_length(arr) : SIZE_MAX;
	if (n > CS_MANIFEST_GPUS_MAX)
		return -1;
	m->gpus = calloc(n ? n : 1, sizeof(*m->gpus));
	if (!m->gpus)
		return -ENOMEM;
	for (size_t i = 0; i < n; i++) {
		json_object *g = json_object_array_get_idx(arr, i);
		cs_manifest_gpu *x = &m->gpus[i];
		char text[CS_GPU_UUID_STRLEN];
		uint8_t uuid[16];
		long long total = 0;
		if (!json_object_is_type(g, json_type_object) || !get_str(g, "uuid", text, sizeof(text), false) ||
		    cs_gpu_uuid_parse(text, uuid) < 0 || !get_str(g, "name", x->name, sizeof(x->name), true))
			return -1;
		cs_gpu_uuid_format(uuid, x->uuid);
		/* a size no GPU has: not recorded, as an absent one */
		x->memory_total = get_int(g, "memory_total", 0, (long long)CS_GPU_BYTES_MAX, &total) ?
			(unsigned long long)total :
			0;
		m->ngpus++;
	}
	m->gpus_known = true;
	return 0;
}

static int parse_root(json_object *root, cs_manifest *m, const char *what, const char *hint, cs_error *err)
{
	long long version, dv;
	json_object *arr;
	if (!json_object_is_type(root, json_type_object) || !get_int(root, "version", 1, 1, &version) ||
	    !json_object_object_get_ex(root, "processes", &arr) || !json_object_is_type(arr, json_type_array))
		return cs_error_set(err, CS_ESTATE, hint, "%s is not a cudasnap manifest of version 1", what);
	m->version = 1;
	m->driver_version = get_int(root, "driver_version", 0, INT_MAX, &dv) ? (int)dv : 0;
	get_str(root, "created", m->created, sizeof(m->created), true);
	if (!get_str(root, "cudasnap_version", m->cudasnap_version, sizeof(m->cudasnap_version), true))
		m->cudasnap_version[0] = '\0'; /* not a string: not recorded */
	int r = get_record_gpus(root, m);
	if (r == -ENOMEM)
		return cs_error_set(err, CS_ESYS, NULL, "out of memory");
	if (r < 0)
		return cs_error_set(err, CS_ESTATE, hint, "%s has a malformed list of GPUs (\"gpus\")", what);
	size_t n = json_object_array_length(arr);
	if (n > CS_MANIFEST_PROCS_MAX)
		return cs_error_set(err, CS_ESTATE, hint, "%s lists %zu processes, more than the %u a record holds",
				    what, n, CS_MANIFEST_PROCS_MAX);
	m->e = calloc(n ? n : 1, sizeof(*m->e));
	if (!m->e)
		return cs_error_set(err, CS_ESYS, NULL, "out of memory");
	for (size_t i = 0; i < n; i++, m->n++)
		if (parse_entry(json_object_array_get_idx(arr, i), &m->e[i]) < 0)
			return cs_error_set(err, CS_ESTATE, hint, "%s has a malformed entry (#%zu)", what, i);
	return 0;
}

/* The most a record of CS_MANIFEST_PROCS_MAX processes holds: per process
 * its object, its "seconds" and one object per GPU used; its arrays "gpus"
 * and "used_gpus"; fewer than 96 values; and the GPUs' list. */
static const cs_json_shape manifest_shape_max = {
	.objects = CS_MANIFEST_PROCS_MAX * (2 + CS_TARGET_GPUS) + CS_MANIFEST_GPUS_MAX + 16,
	.arrays = CS_MANIFEST_PROCS_MAX * 2 + 16,
	.commas = CS_MANIFEST_PROCS_MAX * 96 + CS_MANIFEST_GPUS_MAX * 4 + 64,
};

int cs_manifest_parse_as(const char *buf, size_t len, const char *what, const char *hint, cs_manifest *m, cs_error *err)
{
	memset(m, 0, sizeof(*m));
	if (len > CS_MANIFEST_MAX || len > INT_MAX)
		return cs_error_set(err, CS_ESTATE, hint, "%s is too large", what);
	/* JSON is UTF-8; json-c's own check lets overlong forms and surrogates by. */
	if (!cs_utf8_valid(buf, len))
		return cs_error_set(err, CS_ESTATE, hint, "%s is corrupt or truncated (not UTF-8)", what);
	cs_json_shape shape;
	cs_json_shape_of(buf, len, &shape);
	if (!cs_json_shape_within(&shape, &manifest_shape_max))
		return cs_error_set(err, CS_ESTATE, hint,
				    "%s holds %zu JSON objects, %zu arrays and %zu values, more than a record of %u "
				    "processes has",
				    what, shape.objects, shape.arrays, shape.commas + 1, CS_MANIFEST_PROCS_MAX);
	_cleanup_(json_tokener_freep) json_tokener *tok = json_tokener_new_ex(16);
	if (!tok)
		return cs_error_set(err, CS_ESYS, NULL, "out of memory");
	/* JSON and nothing else: by default json-c also takes comments and
	 * single quotes, which no manifest cudasnap writes contains. */
	json_tokener_set_flags(tok, JSON_TOKENER_STRICT);
	_cleanup_(json_object_putp) json_object *root = json_tokener_parse_ex(tok, buf, (int)len);
	enum json_tokener_error je = json_tokener_get_error(tok);
	size_t end = json_tokener_get_parse_end(tok);
	bool trailing = root && end < len && strspn(buf + end, " \t\r\n") != len - end;
	if (!root || je != json_tokener_success || trailing)
		return cs_error_set(err, CS_ESTATE, hint, "%s is corrupt or truncated (%s)", what,
				    je != json_tokener_success ? json_tokener_error_desc(je) : "trailing bytes");
	_cleanup_(cs_manifest_freep) cs_manifest parsed = { 0 };
	int r = parse_root(root, &parsed, what, hint, err);
	if (r < 0)
		return r;
	*m = TAKE_STRUCT(parsed);
	return 0;
}

int cs_manifest_parse(const char *buf, size_t len, cs_manifest *m, cs_error *err)
{
	char what[PATH_MAX + 32];
	snprintf(what, sizeof(what), "the manifest %s/%s", cs_state_dir(), CS_MANIFEST_NAME);
	return cs_manifest_parse_as(buf, len, what, HINT_CORRUPT, m, err);
}

void cs_manifest_free(cs_manifest *m)
{
	free(m->e);
	free(m->gpus);
	memset(m, 0, sizeof(*m));
}

typedef struct targets {
	const cs_target *t;
	size_t n;
} targets;

static bool restored(json_object *e, const void *ctx)
{
	const targets *x = ctx;
	const cs_target *t = x->t;
	size_t n = x->n;
	long long pid, start;
	if (!get_int(e, "pid", 1, INT_MAX, &pid) || !get_int(e, "start_time", 0, LLONG_MAX, &start))
		return false;
	for (size_t i = 0; i < n; i++)
		if (t[i].pid == pid && t[i].start_time == (unsigned long long)start && t[i].done[CS_STEP_RESTORE] &&
		    t[i].state == CS_STATE_RUNNING)
			return true;
	return false;
}

/* The manifest text without the entries for which gone() holds. */
static char *without(const char *buf, size_t len, bool (*gone)(json_object *e, const void *ctx), const void *ctx,
		     size_t *left)
{
	_cleanup_(cs_manifest_freep) cs_manifest check = { 0 };
	if (cs_manifest_parse(buf, len, &check, NULL) < 0)
		return NULL;
	_cleanup_(json_object_putp) json_object *root = json_tokener_parse(buf);
	json_object *arr;
	if (!root || !json_object_object_get_ex(root, "processes", &arr))
		return NULL;
	json_object *keep = json_object_new_array();
	for (size_t i = 0; i < json_object_array_length(arr); i++) {
		json_object *e = json_object_array_get_idx(arr, i);
		if (!gone(e, ctx))
			json_object_array_add(keep, json_object_get(e));
	}
	*left = json_object_array_length(keep);
	json_object_object_add(root, "processes", keep);
	return strdup(json_object_to_json_string_ext(root, JSON_C_TO_STRING_PRETTY));
}

char *cs_manifest_prune(const char *buf, size_t len, const cs_target *t, size_t n, size_t *left)
{
	targets x = { .t = t, .n = n };
	return without(buf, len, restored, &x, left);
}

static bool is_target(json_object *e, const void *ctx)
{
	const cs_target *t = ctx;
	long long pid, start;
	return get_int(e, "pid", 1, INT_MAX, &pid) && get_int(e, "start_time", 0, LLONG_MAX, &start) && pid == t->pid &&
		(unsigned long long)start == t->start_time;
}

char *cs_manifest_forget(const char *buf, size_t len, const cs_target *t, size_t *left)
{
	return without(buf, len, is_target, t, left);
}

/* Whether an entry of an older manifest still describes a checkpointed
 * process of someone else's: not one of this checkpoint's, and alive. */
static bool keep_entry(json_object *e, const cs_target *t, size_t n)
{
	long long pid, start;
	if (!get_int(e, "pid", 1, INT_MAX, &pid) || !get_int(e, "start_time", 0, LLONG_MAX, &start))
		return false;
	for (size_t i = 0; i < n; i++)
		if (t[i].pid == pid)
			return false;
	return cs_proc_alive(cs_proc_dir(), (pid_t)pid, (unsigned long long)start);
}

/* Whether an entry of a manifest saw or used the GPU uuid. */
static bool entry_names_gpu(json_object *e, const char *uuid)
{
	json_object *a;
	if (json_object_object_get_ex(e, "gpus", &a) && json_object_is_type(a, json_type_array))
		for (size_t i = 0; i < json_object_array_length(a); i++) {
			const char *s = json_object_get_string(json_object_array_get_idx(a, i));
			if (s && strcasecmp(s, uuid) == 0)
				return true;
		}
	return json_object_object_get_ex(e, "used_gpus", &a) && json_object_is_type(a, json_type_array) &&
		listed(a, uuid);
}

/* The older manifest's GPUs that its kept entries (those of all) name and
 * the fresh list lacks join that list. */
static void merge_gpus(json_object *root, json_object *prev, json_object *all)
{
	json_object *mine, *theirs;
	if (!json_object_object_get_ex(root, "gpus", &mine) || !json_object_is_type(mine, json_type_array) ||
	    !json_object_object_get_ex(prev, "gpus", &theirs) || !json_object_is_type(theirs, json_type_array))
		return;
	for (size_t k = 0; k < json_object_array_length(theirs); k++) {
		json_object *g = json_object_array_get_idx(theirs, k), *u;
		const char *uuid = json_object_object_get_ex(g, "uuid", &u) ? json_object_get_string(u) : NULL;
		if (!uuid || listed(mine, uuid))
			continue;
		for (size_t i = 0; i < json_object_array_length(all); i++)
			if (entry_names_gpu(json_object_array_get_idx(all, i), uuid)) {
				json_object_array_add(mine, json_object_get(g));
				break;
			}
	}
}

char *cs_manifest_merge(const char *old, size_t len, const char *fresh, const cs_target *t, size_t n)
{
	_cleanup_(json_object_putp) json_object *root = json_tokener_parse(fresh);
	json_object *arr, *oarr;
	if (!root || !json_object_object_get_ex(root, "processes", &arr))
		return NULL;
	_cleanup_(cs_manifest_freep) cs_manifest check = { 0 };
	_cleanup_(json_object_putp) json_object *prev =
		old && cs_manifest_parse(old, len, &check, NULL) == 0 ? json_tokener_parse(old) : NULL;
	if (!prev || !json_object_object_get_ex(prev, "processes", &oarr))
		return strdup(fresh);
	/* Older checkpoints first, in their order; this one's after them. */
	json_object *all = json_object_new_array();
	int order = 0;
	for (size_t i = 0; i < json_object_array_length(oarr); i++) {
		json_object *e = json_object_array_get_idx(oarr, i);
		if (keep_entry(e, t, n)) {
			json_object_object_add(e, "order", json_object_new_int(order++));
			json_object_array_add(all, json_object_get(e));
		}
	}
	for (size_t i = 0; i < json_object_array_length(arr); i++) {
		json_object *e = json_object_array_get_idx(arr, i);
		json_object_object_add(e, "order", json_object_new_int(order++));
		json_object_array_add(all, json_object_get(e));
	}
	merge_gpus(root, prev, all);
	json_object_object_add(root, "processes", all);
	return strdup(json_object_to_json_string_ext(root, JSON_C_TO_STRING_PRETTY));
}
